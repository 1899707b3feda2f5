"""Compile once per fleet, with real Triton AOT compiles for cuda:90 and a real redis-server.

Every "rank" is its own process (``_fleet_child``) with Triton's compile
listener counting the real compiles; "hosts" are separate cache directories.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from triton import knobs
from warmkit_triton import TritonBackend

import warmkit

from ._fleet_child import SPACE, complete_entries, registry
from ._kernels import Add
from .conftest import AOT_TARGET

pytestmark = [pytest.mark.filterwarnings("ignore:TRITON_DEFAULT_FP_FUSION"), pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
IMPORT_ROOT = Path(__file__).resolve().parents[len((__package__ or "").split("."))]
CHILD = f"{__package__}._fleet_child"
K = len(SPACE["dtype"]) * len(SPACE["n"]) * len(SPACE["block"])


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARMKIT_")}
    env["PYTHONPATH"] = os.pathsep.join([str(IMPORT_ROOT), env.get("PYTHONPATH", "")]).rstrip(
        os.pathsep
    )
    env.update(extra)
    return env


def spawn(tmp: Path, name: str, cache: Path, store: str | None, **extra) -> tuple:
    spec = {
        "cache": str(cache),
        "store": store,
        "target": AOT_TARGET,
        "ready": str(tmp / f"{name}.ready"),
        "go": str(tmp / "go"),
        "out": str(tmp / f"{name}.json"),
        **{k: v for k, v in extra.items() if k == "hang_on_lease"},
    }
    path = tmp / f"{name}.spec.json"
    path.write_text(json.dumps(spec))
    env = _env(**{k: v for k, v in extra.items() if k.startswith("WARMKIT_")})
    proc = subprocess.Popen(
        [sys.executable, "-m", CHILD, str(path)],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    return proc, spec


def run_ranks(
    tmp: Path, ranks: list[tuple[str, Path]], store: str | None, **env: str
) -> list[dict]:
    """Start every rank (with ``env``'s WARMKIT_* variables), release them at once, collect."""
    procs = [spawn(tmp, name, cache, store, **env) for name, cache in ranks]
    deadline = time.monotonic() + 240
    while not all(Path(s["ready"]).exists() for _, s in procs):
        assert time.monotonic() < deadline, "ranks did not start"
        for p, _ in procs:
            assert p.poll() is None, p.communicate()[1]
        time.sleep(0.05)
    (tmp / "go").write_text("")
    results = []
    for p, spec in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        results.append(json.loads(Path(spec["out"]).read_text()))
    return results


def test_four_processes_on_one_cache_compile_each_key_once(tmp_path):
    cache = tmp_path / "host-cache"
    results = run_ranks(tmp_path, [(f"rank{i}", cache) for i in range(4)], store=None)
    compiles = [h for r in results for h in r["compiles"]]
    assert len(compiles) == K and len(set(compiles)) == K, compiles
    for r in results:
        assert len(r["statuses"]) == K and set(r["statuses"]) <= {"compiled", "cached", "waited"}
        assert len(r["complete"]) == K
    # the report agrees with the listener: K compiled keys in all, the rest loaded
    assert sum(r["statuses"].count("compiled") for r in results) == K


def test_two_hosts_of_two_ranks_on_one_redis_compile_each_key_once(tmp_path, redis_server):
    ranks = [(f"h{h}r{r}", tmp_path / f"host{h}") for h in range(2) for r in range(2)]
    results = run_ranks(tmp_path, ranks, store=redis_server.url)
    compiles = [h for r in results for h in r["compiles"]]
    assert len(compiles) == K and len(set(compiles)) == K, compiles
    assert sum(r["statuses"].count("compiled") for r in results) == K
    for r in results:
        assert len(r["complete"]) == K  # every process ends with every key
    # the host that compiled none of a key got it from the store
    assert sum(r["statuses"].count("fetched") for r in results) >= K
    assert sorted(redis_server.client().keys("warmkit:entry:*")) == sorted(
        f"warmkit:entry:triton/{h}".encode() for h in set(compiles)
    )
    assert redis_server.client().keys("warmkit:lease:*") == []


def test_a_killed_lease_holder_is_taken_over_after_its_lease_expires(tmp_path, redis_server):
    (tmp_path / "holder").mkdir()
    (tmp_path / "taker").mkdir()
    holder, spec = spawn(
        tmp_path / "holder",
        "holder",
        tmp_path / "host0",
        redis_server.url,
        hang_on_lease=True,
        WARMKIT_LEASE_SECONDS="8",
    )
    taker, spec2 = spawn(tmp_path / "taker", "taker", tmp_path / "host1", redis_server.url)
    (tmp_path / "holder" / "go").write_text("")
    leased = Path(spec["out"] + ".leased")
    deadline = time.monotonic() + 120
    while not leased.exists() or not Path(spec2["ready"]).exists():
        assert holder.poll() is None, holder.communicate()[1]
        assert time.monotonic() < deadline, "the holder never took a lease"
        time.sleep(0.05)
    key = leased.read_text()
    client = redis_server.client()
    holder.send_signal(signal.SIGKILL)
    holder.communicate()
    remaining = client.pttl(f"warmkit:lease:{key}") / 1000
    assert remaining > 1  # still held by the dead process...
    (tmp_path / "taker" / "go").write_text("")
    _, err = taker.communicate(timeout=300)
    assert taker.returncode == 0, err
    result = json.loads(Path(spec2["out"]).read_text())
    assert result["statuses"].count("compiled") == K and len(result["complete"]) == K
    assert result["seconds"] >= remaining - 0.5  # ...so the taker waited for it to expire
    assert sorted(result["compiles"]) == sorted(set(result["compiles"]))
    assert client.exists(f"warmkit:entry:{key}")
    assert client.keys("warmkit:lease:*") == []


# -- in one process -------------------------------------------------------------------------------


def warm(cache: Path, monkeypatch, reg=None, **config) -> warmkit.WarmupReport:
    monkeypatch.setenv("TRITON_CACHE_DIR", str(cache))
    Add.clear_executors()
    return warmkit.warmup(
        warmkit.WarmupConfig(target=AOT_TARGET, jobs=1, progress="off", monitor="off", **config),
        reg or registry(),
    )


def test_entry_key_is_the_hash_triton_writes_and_compiles_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "c"))
    seen: list[bool] = []
    knobs.compilation.listener = lambda **kw: seen.append(kw["cache_hit"])
    backend, kernel = TritonBackend(), Add()
    keys = kernel.get_warmup_keys(**SPACE)
    with backend.compile_scope(AOT_TARGET, 1):
        probed = [backend.entry_key(kernel, k, AOT_TARGET) for k in keys]
        assert seen == [] and complete_entries(tmp_path / "c") == []
        hashes = [backend.compile(kernel, k, AOT_TARGET).hash for k in keys]
    assert probed == hashes and len(set(hashes)) == K
    assert all(backend.entry_files(h) is not None for h in hashes)
    monkeypatch.setenv("TRITON_DEFAULT_FP_FUSION", "1")  # known to change Triton's hash
    with backend.compile_scope(AOT_TARGET, 1):
        assert backend.entry_key(kernel, keys[0], AOT_TARGET) != hashes[0]


def test_second_host_fetches_every_key(tmp_path, monkeypatch, redis_server):
    first = warm(tmp_path / "a", monkeypatch, store=redis_server.url)
    assert first.totals()["compiled"] == K
    second = warm(tmp_path / "b", monkeypatch, store=redis_server.url)
    assert second.totals()["fetched"] == K
    assert sorted(complete_entries(tmp_path / "a")) == sorted(complete_entries(tmp_path / "b"))
    third = warm(tmp_path / "b", monkeypatch, store=redis_server.url)
    assert third.totals()["cached"] == K


def test_a_corrupted_store_entry_is_refused_deleted_and_recompiled(
    tmp_path, monkeypatch, redis_server, caplog
):
    warm(tmp_path / "a", monkeypatch, store=redis_server.url)
    client = redis_server.client()
    victim = min(client.keys("warmkit:entry:*"))
    key = victim.decode().removeprefix("warmkit:entry:")
    good = client.hget(victim, "file:add_kernel.cubin")
    bad = good[:100] + bytes([good[100] ^ 0x01]) + good[101:]  # one bit
    client.hset(victim, "file:add_kernel.cubin", bad)
    with caplog.at_level(logging.ERROR, logger="warmkit"):
        report = warm(tmp_path / "b", monkeypatch, store=redis_server.url)
    assert report.totals()["compiled"] == 1 and report.totals()["fetched"] == K - 1
    assert any(key in r.getMessage() and "refusing" in r.getMessage() for r in caplog.records)
    digest = key.removeprefix("triton/")
    local = TritonBackend()
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "b"))
    assert local.entry_files(digest)["add_kernel.cubin"].read_bytes() != bad  # never loaded
    # the bad entry was deleted, and the recompiled one republished in its place
    assert client.hget(victim, "file:add_kernel.cubin") != bad
    entry = warmkit._cache.stores.base.open_store(redis_server.url).get(key)
    assert warmkit._cache.stores.base.verify_entry(entry) == []


def test_redis_stopped_mid_warmup_completes_locally_with_one_warning(
    tmp_path, monkeypatch, redis_server, caplog
):
    compiled: list[bool] = []

    def stop_after_first(**kw):
        if not kw["cache_hit"]:
            compiled.append(True)
            if len(compiled) == 1:
                redis_server.stop()

    knobs.compilation.listener = stop_after_first
    with caplog.at_level(logging.WARNING, logger="warmkit"):
        report = warm(tmp_path / "a", monkeypatch, store=redis_server.url)
    assert report.ok and report.totals()["compiled"] == K
    warnings = [r for r in caplog.records if "unreachable" in r.getMessage()]
    assert len(warnings) == 1 and redis_server.url in warnings[0].getMessage()
    assert len(complete_entries(tmp_path / "a")) == K


def test_store_required_fails_when_the_store_is_down(tmp_path, monkeypatch, redis_server):
    url = redis_server.url
    redis_server.stop()
    with pytest.raises(warmkit.WarmupError) as info:
        warm(tmp_path / "a", monkeypatch, store=url, store_required=True)
    assert isinstance(info.value.__cause__, warmkit.StoreUnavailableError)


def test_a_kernel_whose_keys_bypass_the_store_is_named_once(
    tmp_path, monkeypatch, caplog, redis_server
):
    # A heuristic stack has no single cache entry, so its keys never go through the store;
    # with store_required that used to pass without a word (the setting silently unapplied).
    from ._docs_tuned import HeurCopy

    reg = warmkit.WarmupRegistry()
    with reg.activate():
        HeurCopy().register_warmup(n=4096)
        HeurCopy().register_warmup(n=8192)
    with caplog.at_level(logging.WARNING, logger="warmkit"):
        report = warm(tmp_path / "a", monkeypatch, reg, store=redis_server.url, store_required=True)
    assert report.ok and report.totals()["compiled"] == 2
    told = [
        r.getMessage() for r in caplog.records if "do not go through the store" in r.getMessage()
    ]
    assert len(told) == 1, told
    assert "HeurCopy'" in told[0] and redis_server.url in told[0]
    assert "whatever store_required says" in told[0]


def _snapshot(root: Path) -> dict[str, tuple[int, int, int]]:
    return {
        str(p.relative_to(root)): (p.stat().st_mode, p.stat().st_size, p.stat().st_mtime_ns)
        for p in sorted(root.rglob("*"))
    } | {".": (root.stat().st_mode, 0, root.stat().st_mtime_ns)}


def test_read_only_serving_writes_nothing_and_a_miss_is_an_error(tmp_path, monkeypatch):
    manifest = tmp_path / "warmup.json"
    registry().save(manifest)
    Add.clear_executors()
    warmkit.build_bundle(
        warmkit.WarmupRegistry.load(manifest), tmp_path / "k.wkb", target=AOT_TARGET, progress="off"
    )
    baked = tmp_path / "image-cache"
    monkeypatch.setenv("TRITON_CACHE_DIR", str(baked))
    warmkit.install_bundle(tmp_path / "k.wkb")
    subprocess.run(["chmod", "-R", "a-w", str(baked)], check=True)
    try:
        before = _snapshot(baked)
        report = warm(baked, monkeypatch, read_only=True)
        assert report.totals()["cached"] == K
        assert _snapshot(baked) == before  # zero writes (root ignores the mode bits: compare)
        reg = registry()
        with reg.activate():
            Add().register_warmup(dtype="float32", n=4096, block=256)  # not in the bundle
        with pytest.raises(warmkit.WarmupError) as info:
            warm(baked, monkeypatch, reg, read_only=True)
        assert info.value.kernel == Add.name and "block=256" in str(info.value)
        miss = info.value.__cause__
        assert isinstance(miss, warmkit.CacheMissError) and miss.directory == str(baked)
        assert "read_only" in str(miss) and _snapshot(baked) == before
        # the same one-line reason `warmkit explain` gives: the nearest entry's differing factor
        assert miss.reason.startswith("nearest entry ") and miss.reason.endswith(
            " there, Add.CompileKey(dtype='float32', n=16, block=256) here"
        )
        assert " differs in key: Add.CompileKey(" in miss.reason
        assert str(miss).endswith(f"; why: {miss.reason}")
    finally:
        subprocess.run(["chmod", "-R", "u+w", str(baked)], check=True)
