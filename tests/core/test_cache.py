"""The core's cache upkeep (``warmkit cache info|prune|push|pull``) through its own backend.

``fakefleet`` (``_fleet_backend.FleetBackend``) is installed as a plugin in a
fake site, so the CLI discovers it as it discovers Triton; ``--cache-dir`` names
its directory, so no other installed backend's cache is touched. The store is a
real redis-server. The Triton backend's versions: ``tests/triton_backend/test_cache_upkeep.py``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from importlib.metadata import entry_points
from pathlib import Path

import pytest

import warmkit
from warmkit.testing import backend_override

from . import _fleet_backend
from ._fleet_backend import FleetBackend, FleetKernel

TARGET = "fake:1"
NS = [1, 2, 3]


@pytest.fixture(autouse=True)
def _fleet_plugin(plugin_site) -> Iterator[None]:
    plugin_site.add_dist(
        "fake-fleet", backends={"fakefleet": f"{_fleet_backend.__name__}:FleetBackend"}
    )
    _fleet_backend.reset()
    yield
    _fleet_backend.reset()


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict]:
    """``warmkit ARGV --json`` in this process, through the console script's own entry point."""
    (script,) = entry_points(group="console_scripts", name="warmkit")
    code = script.load()([*argv, "--json"])
    captured = capsys.readouterr()
    assert captured.out, f"warmkit {argv} printed nothing (exit {code}): {captured.err}"
    return code, json.loads(captured.out)


def warm(root: Path) -> list[str]:
    """Warm ``NS`` into ``root`` (no store); the statuses, in key order."""
    _fleet_backend.reset()
    FleetBackend.root = root
    registry = warmkit.WarmupRegistry()
    registry.add(FleetKernel, n=NS)
    with backend_override("fakefleet", FleetBackend()):
        report = warmkit.warmup(warmkit.WarmupConfig(progress="off", target=TARGET), registry)
    return [e.status for e in report.entries]


def entry_keys() -> list[str]:
    backend = FleetBackend()
    return sorted(backend.entry_key(FleetKernel(), FleetKernel.CompileKey(n), TARGET) for n in NS)


def test_push_then_pull_carries_every_entry_to_an_empty_cache(tmp_path, capsys, redis_server):
    a, b = tmp_path / "a", tmp_path / "b"
    assert warm(a) == ["compiled"] * 3
    FleetBackend.root = a
    code, out = cli(capsys, "cache", "push", redis_server.url, "--cache-dir", f"fakefleet={a}")
    assert code == 0
    assert sorted(out["fakefleet"]["pushed"]) == entry_keys() and out["fakefleet"]["skipped"] == {}
    code, out = cli(capsys, "cache", "push", redis_server.url, "--cache-dir", f"fakefleet={a}")
    assert (sorted(out["fakefleet"]["present"]), out["fakefleet"]["pushed"]) == (entry_keys(), [])

    FleetBackend.root = b
    code, out = cli(capsys, "cache", "pull", redis_server.url, "--cache-dir", f"fakefleet={b}")
    assert code == 0
    assert sorted(out["fakefleet"]["pulled"]) == entry_keys() and out["fakefleet"]["refused"] == []
    # the pulled entries are b's own: relocated, so a warmup on b loads all and compiles none
    assert warm(b) == ["cached"] * 3
    assert [hit for *_, hit in FleetBackend.log] == [True] * 3
    code, out = cli(capsys, "cache", "pull", redis_server.url, "--cache-dir", f"fakefleet={b}")
    assert sorted(out["fakefleet"]["present"]) == entry_keys() and out["fakefleet"]["pulled"] == []


def test_pull_refuses_a_corrupt_entry_and_deletes_it_from_the_store(tmp_path, capsys, redis_server):
    a, b = tmp_path / "a", tmp_path / "b"
    warm(a)
    FleetBackend.root = a
    cli(capsys, "cache", "push", redis_server.url, "--cache-dir", f"fakefleet={a}")
    client = redis_server.client()
    victim = entry_keys()[0]
    client.hset(f"warmkit:entry:fakefleet/{victim}", "file:payload.bin", b"not what was signed")
    FleetBackend.root = b
    code, out = cli(capsys, "cache", "pull", redis_server.url, "--cache-dir", f"fakefleet={b}")
    assert code == 1  # a refused entry fails the command
    assert out["fakefleet"]["refused"] == [victim]
    assert sorted(out["fakefleet"]["pulled"]) == entry_keys()[1:]
    assert not (b / victim).exists()
    assert not client.exists(f"warmkit:entry:fakefleet/{victim}")


def test_info_counts_entries_per_kernel_and_prune_stale_removes_only_the_stale_one(
    tmp_path, capsys
):
    a = tmp_path / "a"
    warm(a)
    FleetBackend.root = a
    code, out = cli(capsys, "cache", "info", "--cache-dir", f"fakefleet={a}")
    assert code == 0
    info = out["fakefleet"]
    assert info["entries"] == 3 and info["stale"] == {}
    assert info["kernels"][FleetKernel.name]["entries"] == 3
    stale = entry_keys()[1]
    (a / stale / "index.json").unlink()  # FleetBackend.entry_info: "no index.json"
    code, out = cli(capsys, "cache", "info", "--cache-dir", f"fakefleet={a}")
    assert out["fakefleet"]["stale"] == {stale: "no index.json"}
    code, out = cli(capsys, "cache", "prune", "--stale", "--cache-dir", f"fakefleet={a}")
    assert code == 0 and list(out["fakefleet"]["removed"]) == [stale]
    assert sorted(p.name for p in a.iterdir() if not p.name.startswith(".")) == [
        k for k in entry_keys() if k != stale
    ]
