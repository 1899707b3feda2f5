"""Ahead-of-time compiles of the real kernel for sm_90a on this host, and a second process's lookups."""

from __future__ import annotations

import json

import pytest
from warmkit_tilelang import TiledGemm, TileLangArtifact, TileLangBackend, parse_target

import warmkit

from .conftest import AOT_TARGET, run_child

SHAPES = {"m": [64, 256], "n": 256, "k": 128}

SECOND_PROCESS = f"""
import json, warmkit
from warmkit_tilelang import TiledGemm
reg = warmkit.WarmupRegistry()
reg.add(TiledGemm, **{SHAPES!r})
warmkit.monitor.arm("warn")
report = warmkit.warmup(warmkit.WarmupConfig(target={AOT_TARGET!r}, progress="off", monitor="error"), reg)
print(json.dumps([e.status for e in report.entries]))
"""


def _registry() -> warmkit.WarmupRegistry:
    reg = warmkit.WarmupRegistry()
    reg.add(TiledGemm, **SHAPES)
    return reg


def test_aot_compile_writes_the_entry_the_device_looks_up_and_a_second_process_only_hits(
    tilelang_cache,
):
    report = warmkit.warmup(warmkit.WarmupConfig(target=AOT_TARGET, progress="off"), _registry())
    assert [e.status for e in report.entries] == ["compiled", "compiled"]
    backend = TileLangBackend()
    entries = sorted(p.name for p in backend.cache_dir().iterdir())
    assert len(entries) == 2
    # The same compile again: a disk hit that names the entry warmup wrote.
    artifacts = [backend.compile(TiledGemm(), e.key, AOT_TARGET) for e in report.entries]
    arch = "sm_100a" if AOT_TARGET == "cuda:100" else "sm_90a"
    for art in artifacts:
        assert isinstance(art, TileLangArtifact) and art.arch == arch and art.cache_hit
        assert art.entry.parent == backend.cache_dir() and art.entry.name in entries
        files = {p.name for p in art.entry.iterdir()}
        assert {"executable.so", "params.json", "device_kernel.cu", "manifest.json"} <= files
        manifest = json.loads((art.entry / "manifest.json").read_text())
        assert "executable.so" in manifest["files"]
        # The device code inside executable.so was built for the arch named in the key's target.
        assert f".target {arch}".encode() in (art.entry / "executable.so").read_bytes()
    before = {p.name: p.stat().st_mtime_ns for e in artifacts for p in e.entry.iterdir()}

    # A new process, monitor armed in error mode: every key is a disk hit, nothing compiles.
    proc = run_child(SECOND_PROCESS, tilelang_cache)
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == ["cached", "cached"]
    after = {p.name: p.stat().st_mtime_ns for e in artifacts for p in e.entry.iterdir()}
    assert after == before  # looked up, not rewritten
    assert sorted(p.name for p in backend.cache_dir().iterdir()) == entries


ORDERED_PROCESS = f"""
import json, warmkit
from warmkit_tilelang import TiledGemm
reg = warmkit.WarmupRegistry()
reg.add(TiledGemm, **{SHAPES!r})
report = warmkit.warmup(warmkit.WarmupConfig(target={AOT_TARGET!r}, progress="off", jobs=1), reg)
print(json.dumps([[e.key.m, e.status] for e in report.entries]))
"""


def test_a_key_has_one_cache_entry_whatever_was_loaded_before_it_in_the_process(tilelang_cache):
    # TileLang rewrites a @tilelang.jit function's out_idx list in place when it loads a
    # kernel from disk, and out_idx is part of its disk key: a kernel looked up after
    # another one had been loaded used to get another key than the one it was compiled
    # under, and compiled again. Both processes are fresh, so nothing of this one's
    # earlier tests leaks into the keys.
    first = run_child(ORDERED_PROCESS, tilelang_cache)
    assert json.loads(first.stdout.strip().splitlines()[-1]) == [
        [64, "compiled"],
        [256, "compiled"],
    ]
    second = run_child(ORDERED_PROCESS, tilelang_cache)
    assert json.loads(second.stdout.strip().splitlines()[-1]) == [[64, "cached"], [256, "cached"]]
    assert len(list(TileLangBackend().cache_dir().iterdir())) == 2


def test_a_corrupt_entry_is_not_trusted_it_is_recompiled(tilelang_cache):
    warmkit.warmup(warmkit.WarmupConfig(target=AOT_TARGET, progress="off"), _registry())
    entry = min(p for p in TileLangBackend().cache_dir().iterdir() if p.is_dir())
    lib = entry / "executable.so"
    data = bytearray(lib.read_bytes())
    data[len(data) // 2] ^= 0xFF
    lib.write_bytes(bytes(data))
    proc = run_child(SECOND_PROCESS, tilelang_cache)
    statuses = json.loads(proc.stdout.strip().splitlines()[-1])
    assert sorted(statuses) == ["cached", "compiled"]  # the flipped entry was rebuilt, not loaded


def test_targets_parse_to_compute_capabilities_and_unknown_ones_are_refused():
    assert str(parse_target("sm_90a")) == str(parse_target("cuda:90")) == "cuda:90"
    assert str(parse_target("100")) == "cuda:100"
    with pytest.raises(ValueError, match="cuda:90"):
        parse_target("hopper")
    with pytest.raises(ValueError, match="unknown TileLang target .sm_9."):
        warmkit.warmup(warmkit.WarmupConfig(target="sm_9", progress="off"), _registry())
