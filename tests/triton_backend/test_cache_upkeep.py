"""``warmkit cache info|prune|push|pull`` on real Triton caches (AOT compiles for cuda:90)."""

from __future__ import annotations

import json
import os
import time

import pytest
from warmkit_triton import TritonBackend

import warmkit
from warmkit._cache import upkeep as _cache
from warmkit._cache.integrity import iter_entries
from warmkit._cli import commands as _cli
from warmkit._warmup.explain import manifest_entries

from ._fleet_child import SPACE, complete_entries, registry
from ._kernels import Add
from .conftest import AOT_TARGET

pytestmark = pytest.mark.filterwarnings("ignore:TRITON_DEFAULT_FP_FUSION")

K = len(SPACE["dtype"]) * len(SPACE["n"]) * len(SPACE["block"])


@pytest.fixture
def cache(tmp_path, monkeypatch):
    c = tmp_path / "cache"
    monkeypatch.setenv("TRITON_CACHE_DIR", str(c))
    Add.clear_executors()
    warmkit.warmup(
        warmkit.WarmupConfig(target=AOT_TARGET, jobs=1, progress="off", monitor="off"), registry()
    )
    return c


def cli(capsys, *argv):
    code = _cli.main(list(argv))
    out = capsys.readouterr().out
    return code, out


def test_parse_size_and_age():
    assert _cache.parse_size("4096") == 4096
    assert _cache.parse_size("500M") == 500 * 2**20
    assert _cache.parse_size("1.5GiB") == int(1.5 * 2**30)
    assert _cache.parse_age("90s") == 90 and _cache.parse_age("7d") == 7 * 86400
    for bad in ("lots", "5 parsecs", "-1G"):
        with pytest.raises(ValueError, match=repr(bad)):
            _cache.parse_size(bad)
    with pytest.raises(ValueError, match="'soon'"):
        _cache.parse_age("soon")


def test_info_counts_entries_bytes_per_kernel_and_names_the_stale(cache, capsys):
    code, out = cli(capsys, "cache", "info", "--json", "--cache-dir", f"triton={cache}")
    info = json.loads(out)["triton"]
    assert code == 0 and info["entries"] == K and info["stale"] == {}
    assert info["kernels"][Add.name]["entries"] == K
    assert info["bytes"] == sum(p.stat().st_size for p in cache.rglob("*") if p.is_file() and
                                not p.relative_to(cache).parts[0].startswith("."))  # fmt: skip
    # an entry built by another Triton wheel is stale for this one
    victim = next(iter_entries(cache))
    record = victim / "warmkit-aot.json"
    data = json.loads(record.read_text())
    data["validity"]["triton_key_sha256"] = "0" * 64
    record.write_text(json.dumps(data))
    code, out = cli(capsys, "cache", "info", "--cache-dir", f"triton={cache}")
    assert f"STALE {victim.name}: triton_key_sha256" in out and "1 stale" in out


def test_prune_stale_old_and_to_a_size(cache, capsys):
    entries = list(iter_entries(cache))
    record = entries[0] / "warmkit-aot.json"
    data = json.loads(record.read_text())
    data["validity"]["triton_version"] = "0.0.0"
    record.write_text(json.dumps(data))
    code, out = cli(capsys, "cache", "prune", "--stale", "--cache-dir", f"triton={cache}")
    assert code == 0 and not entries[0].exists() and len(list(iter_entries(cache))) == K - 1
    # the least recently used go first
    old = entries[1]
    for p in old.rglob("*"):
        os.utime(p, (time.time() - 10 * 86400,) * 2)
    code, out = cli(capsys, "cache", "prune", "--older-than", "7d", "--cache-dir",
                    f"triton={cache}")  # fmt: skip
    assert not old.exists() and len(list(iter_entries(cache))) == K - 2
    sizes = sorted(
        sum(p.stat().st_size for p in e.rglob("*") if p.is_file()) for e in iter_entries(cache)
    )
    code, out = cli(capsys, "cache", "prune", "--max-size", str(sum(sizes[:3])), "--json",
                    "--cache-dir", f"triton={cache}")  # fmt: skip
    r = json.loads(out)["triton"]
    assert r["bytes"] <= sum(sizes[:3]) and r["kept"] == len(list(iter_entries(cache))) >= 1
    assert not any(p.name.startswith(".warmkit-trash") for p in cache.iterdir())


def test_prune_without_a_criterion_is_a_usage_error(cache, capsys):
    assert _cli.main(["cache", "prune", "--cache-dir", f"triton={cache}"]) == 2
    assert "--max-size, --older-than or --stale" in capsys.readouterr().err


def test_push_then_pull_into_an_empty_cache(cache, tmp_path, monkeypatch, capsys, redis_server):
    code, out = cli(capsys, "cache", "push", redis_server.url, "--json")
    assert code == 0 and len(json.loads(out)["triton"]["pushed"]) == K
    code, out = cli(capsys, "cache", "push", redis_server.url, "--json")
    assert len(json.loads(out)["triton"]["present"]) == K  # the first publisher wins
    other = tmp_path / "other"
    monkeypatch.setenv("TRITON_CACHE_DIR", str(other))
    code, out = cli(capsys, "cache", "pull", redis_server.url, "--json")
    assert code == 0 and len(json.loads(out)["triton"]["pulled"]) == K
    assert sorted(complete_entries(other)) == sorted(complete_entries(cache))
    # group files were relocated: Triton finds them here
    backend = TritonBackend()
    for digest in complete_entries(other):
        assert all(str(p).startswith(str(other)) for p in backend.entry_files(digest).values())
    # and a warmup from it compiles nothing
    Add.clear_executors()
    report = warmkit.warmup(
        warmkit.WarmupConfig(target=AOT_TARGET, jobs=1, progress="off", monitor="off"), registry()
    )
    assert report.totals()["cached"] == K


def test_pull_refuses_a_corrupt_entry(cache, tmp_path, monkeypatch, capsys, redis_server):
    cli(capsys, "cache", "push", redis_server.url)
    client = redis_server.client()
    victim = min(client.keys("warmkit:entry:*"))
    client.hset(victim, "file:add_kernel.ptx", b"garbage")
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "other"))
    code, out = cli(capsys, "cache", "pull", redis_server.url)
    assert code == 1 and "1 refused" in out
    assert not client.exists(victim)  # deleted from the store
    assert len(complete_entries(tmp_path / "other")) == K - 1


def test_push_to_an_unreachable_store_fails_naming_it(cache, capsys, redis_server):
    url = redis_server.url
    redis_server.stop()
    assert _cli.main(["cache", "push", url]) == 1
    err = capsys.readouterr().err
    assert "StoreUnavailableError" in err and url in err


def test_prune_keep_never_evicts_what_the_manifest_needs(cache, capsys, tmp_path):
    # The manifest needs the float16 keys (4 of 8 entries); all entries are equally old, and
    # the least recently used would go first: make the needed ones the oldest.
    reg = warmkit.WarmupRegistry()
    with reg.activate():
        Add().register_warmup(**{**SPACE, "dtype": ["float16"]})
    manifest = reg.save(tmp_path / "serving.json")
    backend = TritonBackend()
    needed = manifest_entries("triton", backend, manifest, AOT_TARGET)
    assert len(needed) == 4 and all(v.startswith(Add.name) for v in needed.values())
    for name in needed:
        for p in (cache / name).rglob("*"):
            os.utime(p, (time.time() - 30 * 86400,) * 2)
    argv = ["cache", "prune", "--older-than", "7d", "--keep", str(manifest), "--target",
            AOT_TARGET, "--json", "--cache-dir", f"triton={cache}"]  # fmt: skip
    # the needed alone exceed a 1-byte cap: an error, nothing removed
    assert _cli.main([*argv, "--max-size", "1"]) == 2
    err = capsys.readouterr().err
    assert "the 4 entr(ies) the --keep manifest needs take" in err and "over --max-size 1" in err
    assert len(list(iter_entries(cache))) == K
    total = sum(p.stat().st_size for n in needed for p in (cache / n).rglob("*") if p.is_file())
    code, out = cli(capsys, *argv, "--max-size", str(total))
    assert code == 0, out
    r = json.loads(out)["triton"]
    assert {e.name for e in iter_entries(cache)} == set(needed)
    assert set(r["removed"]).isdisjoint(needed) and len(r["removed"]) == K - 4
    # without --keep, the same prune would remove the needed (oldest) entries first
