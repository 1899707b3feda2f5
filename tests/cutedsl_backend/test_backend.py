"""CuTe DSL: sm_90a exports on this CPU host, a second process finds only exports, a corrupt export
is rebuilt, the bundle round trip, and the plugin replacing the core stub."""

from __future__ import annotations

import json
import struct

import pytest
from warmkit_cutedsl import CuteArtifact, CuteDSLBackend, VectorAdd

import warmkit
from warmkit._plugin import discovery as plugins
from warmkit.testing import unload_backend

from .conftest import AOT_TARGET, run_child

SPACE = {"n": [1000, 4096], "dtype": ["float32", "float16"]}

CHILD = f"""
import json, warmkit
from warmkit_cutedsl import VectorAdd
reg = warmkit.WarmupRegistry()
reg.add(VectorAdd, **{SPACE!r})
warmkit.monitor.arm("error")
report = warmkit.warmup(warmkit.WarmupConfig(target={AOT_TARGET!r}, progress="off", monitor="error"), reg)
print(json.dumps([e.status for e in report.entries]))
"""


def _registry() -> warmkit.WarmupRegistry:
    reg = warmkit.WarmupRegistry()
    reg.add(VectorAdd, **SPACE)
    return reg


def _cubin_sm(obj: bytes) -> int:
    """The SM version in the e_flags of the cubin embedded in an exported object file."""
    i = obj.find(b"\x7fELF", 1)
    assert i > 0, "no cubin inside the export"
    return struct.unpack_from("<I", obj, i + 0x30)[0] & 0xFF


def test_aot_exports_for_sm90a_then_a_second_process_only_finds_them(cute_cache):
    report = warmkit.warmup(warmkit.WarmupConfig(target=AOT_TARGET, progress="off"), _registry())
    assert [e.status for e in report.entries] == ["compiled"] * 4
    entries = sorted(p.name for p in cute_cache.iterdir() if not p.name.startswith("."))
    assert len(entries) == 4
    backend = CuteDSLBackend()
    sm = 100 if AOT_TARGET == "cuda:100" else 90
    for e in report.entries:
        art = backend.compile(VectorAdd(), e.key, AOT_TARGET)  # found, not rebuilt
        assert isinstance(art, CuteArtifact) and art.cache_hit and art.entry.name in entries
        assert _cubin_sm((art.entry / "kernel.o").read_bytes()) == sm
        assert backend.verify_cache_entry(art.entry) == []
    proc = run_child(CHILD, cute_cache.parent)
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == ["cached"] * 4
    assert sorted(p.name for p in cute_cache.iterdir() if not p.name.startswith(".")) == entries


def test_a_flipped_bit_in_an_export_is_rebuilt_not_loaded(cute_cache):
    warmkit.warmup(warmkit.WarmupConfig(target=AOT_TARGET, progress="off"), _registry())
    entry = min(p for p in cute_cache.iterdir() if not p.name.startswith("."))
    obj = entry / "kernel.o"
    data = bytearray(obj.read_bytes())
    data[len(data) // 2] ^= 0x01
    obj.write_bytes(bytes(data))
    assert CuteDSLBackend().verify_cache_entry(entry) != []
    proc = run_child(CHILD, cute_cache.parent)
    assert sorted(json.loads(proc.stdout.strip().splitlines()[-1])) == ["cached"] * 3 + ["compiled"]
    assert CuteDSLBackend().verify_cache_entry(entry) == []


def test_bundle_round_trip_into_an_empty_cache_then_only_exports(tmp_path):
    out = tmp_path / "vadd.wkb"
    info = warmkit.build_bundle(_registry(), out, target=AOT_TARGET, progress="off")
    fp = info["backends"]["cutedsl"]["fingerprint"]
    assert fp["cutedsl"] == "4.8.1" and fp["arch"] in ("sm_90a", "sm_100a")
    dest = tmp_path / "serving" / "warmkit-exports"
    result = warmkit.install_bundle(out, cache_dirs={"cutedsl": dest})
    assert len(result.installed) == 4
    proc = run_child(CHILD, tmp_path / "serving")
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == ["cached"] * 4


def test_the_plugin_replaces_the_core_stub():
    (info,) = [i for i in plugins.discover(plugins.BACKENDS_GROUP) if i.name == "cutedsl"]
    assert info.distribution == "warmkit-cutedsl" and not info.conflicts
    assert info.replaces == "warmkit._plugin.contract:CuteDSLStubBackend"
    unload_backend("cutedsl")
    backend = plugins.get_backend("cutedsl")
    assert isinstance(backend, CuteDSLBackend) and backend.available().version == "4.8.1"
    assert plugins.load_kernel("cutedsl.vector_add") is VectorAdd


def test_unknown_targets_and_bad_inputs_are_refused():
    with pytest.raises(ValueError, match="cuda:90"):
        CuteDSLBackend().canonical_target("sm_80")
    with pytest.raises(ValueError, match="dtype"):
        VectorAdd().dispatch(n=8, dtype="int8")


def test_a_host_without_a_gpu_names_no_target_without_importing_torch(tmp_path):
    """``warmkit record``'s hint asks every backend for this host's target: CuTe DSL's answer
    came from torch, 1.5 s to import on a CPU host, only to learn there is no GPU."""
    from warmkit._plugin.contract import no_gpu_device

    if not no_gpu_device():  # pragma: no cover - a GPU host
        pytest.skip("this host has a GPU device node or a libcuda.so.1")
    code = (
        "import sys\n"
        "from warmkit_cutedsl import CuteDSLBackend\n"
        "print(CuteDSLBackend().default_target(), 'torch' in sys.modules)\n"
    )
    proc = run_child(code, tmp_path / "cute-cache")
    assert proc.stdout.split()[-2:] == ["None", "False"]
