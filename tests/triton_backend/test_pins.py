"""Pinned identity: a CPU build host builds exactly the entries the GPU host's values give.

``_pinned_kernels`` picks ``PREC`` from ``PINNED_TEST_TF32`` at import, as
flash-linear-attention picks its dot precision from the visible GPU:
``PINNED_TEST_TF32=1`` plays the GPU host (where the manifest is saved or
recorded), unset the CPU build host. Each build is a fresh process.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

import warmkit

HERE = Path(__file__).parent
TARGET = "cuda:90"
GPU_HOST = {"PINNED_TEST_TF32": "1"}


def _env(cache: Path, **extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("WARMKIT_") and k != "PINNED_TEST_TF32"
    }
    env["TRITON_CACHE_DIR"] = str(cache)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), env.get("PYTHONPATH")]))
    env.update(extra)
    return env


def _run(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args, env=env, check=False, cwd=cwd, capture_output=True, text=True, timeout=600
    )


def _entries(bundle: Path) -> set[str]:
    info = warmkit.inspect_bundle(bundle)
    return {e["path"].split("/")[0] for e in info["backends"]["triton"]["entries"]}


def _build(manifest: Path, out: Path, tmp: Path, **env: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "warmkit", "bundle", "build", str(manifest)]
    return _run(
        cmd + ["--target", TARGET, "-o", str(out), "--json"], _env(tmp / out.stem, **env), tmp
    )


SAVE = textwrap.dedent(
    """
    import sys, warmkit, _pinned_kernels as K
    reg = warmkit.WarmupRegistry()
    reg.add(K.PinnedDot, block=16)
    reg.add(K.PinnedDot, block=32)
    reg.save(sys.argv[1])
    """
)


@pytest.fixture(scope="module")
def declared(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, set[str]]:
    """A manifest saved on the "GPU host", and the entries a build there holds."""
    tmp = tmp_path_factory.mktemp("pins")
    manifest = tmp / "m.json"
    proc = _run([sys.executable, "-c", SAVE, str(manifest)], _env(tmp / "c0", **GPU_HOST), tmp)
    assert proc.returncode == 0, proc.stderr
    proc = _build(manifest, tmp / "reference.wkb", tmp, **GPU_HOST)
    assert proc.returncode == 0, proc.stderr
    return manifest, _entries(tmp / "reference.wkb")


def test_a_saved_manifest_pins_globals_and_sources(declared) -> None:
    manifest, _ = declared
    pins = json.loads(manifest.read_text())["pins"]["_pinned_kernels.PinnedDot"]
    assert pins["backend"] == "triton"
    assert pins["globals"] == [
        {"module": "_pinned_kernels", "name": "PREC", "constexpr": True, "value": "tf32"},
        {"module": "_pinned_kernels", "name": "SCALE", "constexpr": True, "value": 2.0},
    ]
    assert set(pins["sources"]) == {"_pinned_kernels:dot_kernel", "_pinned_kernels:_scaled"}


def test_declared_kernel_built_under_the_other_value_holds_exactly_the_pinned_entries(
    declared, tmp_path: Path
) -> None:
    manifest, reference = declared
    assert len(reference) == 2
    proc = _build(manifest, tmp_path / "cpu.wkb", tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert _entries(tmp_path / "cpu.wkb") == reference
    # Without the pins (a manifest of an older warmkit) the CPU host builds its own variant,
    # and says so: what this test proves is the pins' doing.
    data = json.loads(manifest.read_text())
    del data["pins"]
    old = tmp_path / "old.json"
    old.write_text(json.dumps(data))
    proc = _build(old, tmp_path / "unpinned.wkb", tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "this manifest has no pinned identity" in proc.stderr
    assert not _entries(tmp_path / "unpinned.wkb") & reference


def _edited_pins(manifest: Path, tmp: Path, edit) -> Path:
    data = json.loads(manifest.read_text())
    edit(data["pins"]["_pinned_kernels.PinnedDot"])
    out = tmp / "edited.json"
    out.write_text(json.dumps(data))
    return out


def test_a_value_that_cannot_be_reproduced_refuses_the_key_naming_it(
    declared, tmp_path: Path
) -> None:
    manifest, _ = declared

    def unencodable(pins):  # a global recorded as an object with no lossless encoding
        rec = pins["globals"][0]
        del rec["value"]
        rec["repr"] = "<Precision object at 0x7f>"

    edited = _edited_pins(manifest, tmp_path, unencodable)
    proc = _build(edited, tmp_path / "x.wkb", tmp_path)
    assert proc.returncode != 0
    assert not (tmp_path / "x.wkb").exists()
    assert (
        "kernel '_pinned_kernels.PinnedDot': the pinned identity cannot be reproduced on this "
        "host: global _pinned_kernels.PREC = tl.constexpr(<Precision object at 0x7f>) when "
        "pinned, tl.constexpr('ieee') here (no lossless encoding: it cannot be reproduced)"
    ) in proc.stderr


def test_a_source_that_differs_refuses_the_key_naming_the_function(
    declared, tmp_path: Path
) -> None:
    manifest, _ = declared

    def other_source(pins):
        pins["sources"]["_pinned_kernels:_scaled"] = "ab" * 32

    edited = _edited_pins(manifest, tmp_path, other_source)
    proc = _build(edited, tmp_path / "x.wkb", tmp_path)
    assert proc.returncode != 0
    assert "function _pinned_kernels:_scaled: source sha256 abababababab when pinned" in proc.stderr
    assert "Refusing to build another variant than the one pinned" in proc.stderr


RECORD_CHILD = textwrap.dedent(
    """
    import sys
    from triton.runtime.driver import driver
    import _record_child, _pinned_kernels as K
    driver.set_active(_record_child._Driver())
    t = _record_child._Tensor("float32")
    for block in (16, 32):
        K.dot_kernel.warmup(t, t, t, BLOCK=block, grid=(1,))
    """
)


_recorded: list[Path] = []  # this test process's one recording (the tests only read it)


def _record_on_the_gpu_host(tmp_path: Path) -> Path:
    """A real `warmkit record` on the "GPU host": a copy of its recording, in ``tmp_path``.

    Triton's jit_cache_hook fires from fn.warmup with an sm_90 driver that needs no GPU;
    the interpreter records nothing. Recorded once per test process (7 tests read it;
    each recording is a process that compiles), copied for each test.
    """
    if not _recorded:
        where = Path(tempfile.mkdtemp(prefix="pins-recording-"))
        atexit.register(shutil.rmtree, where, ignore_errors=True)  # shared by the tests: at exit
        script = where / "work.py"
        script.write_text(RECORD_CHILD)
        cmd = [sys.executable, "-m", "warmkit", "record", "-o", str(where / "rec.json"), "--"]
        proc = _run(cmd + [sys.executable, str(script)], _env(where / "c0", **GPU_HOST), where)
        assert proc.returncode == 0, proc.stderr
        _recorded.append(where / "rec.json")
    out = tmp_path / "rec.json"
    shutil.copyfile(_recorded[0], out)
    return out


def test_recorded_kernel_built_under_the_other_value_holds_exactly_the_recorded_entries(
    tmp_path: Path,
) -> None:
    out = _record_on_the_gpu_host(tmp_path)
    (spec,) = {json.dumps(e.spec["pins"], sort_keys=True) for e in warmkit.read_recorded(out)}
    assert '"name": "PREC"' in spec and '"value": "tf32"' in spec
    proc = _build(out, tmp_path / "reference.wkb", tmp_path, **GPU_HOST)
    assert proc.returncode == 0, proc.stderr
    reference = _entries(tmp_path / "reference.wkb")
    assert len(reference) == 2
    proc = _build(out, tmp_path / "cpu.wkb", tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert _entries(tmp_path / "cpu.wkb") == reference
    # A device warmup here would build this host's variant: refused, naming the global.
    env = _env(tmp_path / "c1")
    check = textwrap.dedent(
        f"""
        import warmkit, json
        from warmkit_triton._record import recorded_kernel
        (entry, *_) = warmkit.read_recorded({str(out)!r})
        kernel, key = recorded_kernel(entry)
        try:
            kernel.function_for(key)
        except RuntimeError as exc:
            print(exc)
        """
    )
    proc = _run([sys.executable, "-c", check], env, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (
        "recorded kernel _pinned_kernels:dot_kernel: this host would compile another variant "
        "than the one recorded: global _pinned_kernels.PREC = tl.constexpr('tf32') when pinned, "
        "tl.constexpr('ieee') here. Build it ahead of time (--target)"
    ) in proc.stdout


RECORD_KEYS = textwrap.dedent(
    """
    import sys, warmkit, _pinned_kernels as K
    from warmkit._registry.recorded import key_entry
    reg = warmkit.WarmupRegistry()
    for block in (16, 32):  # what `warmkit record` writes for a declared kernel's runtime miss
        reg.add_recorded(key_entry(K.PinnedDot, K.PinnedDot.CompileKey(block), "cuda:90"))
    reg.save(sys.argv[1])
    """
)


def test_recorded_keys_of_a_declared_kernel_are_pinned_too(declared, tmp_path: Path) -> None:
    _, reference = declared
    out = tmp_path / "keys.json"
    proc = _run(
        [sys.executable, "-c", RECORD_KEYS, str(out)], _env(tmp_path / "c0", **GPU_HOST), tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    (entry, _) = warmkit.read_recorded(out)
    assert entry.kind == "key" and entry.spec["pins"]["globals"][0]["value"] == "tf32"
    proc = _build(out, tmp_path / "cpu.wkb", tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert _entries(tmp_path / "cpu.wkb") == reference


TUNED_CHILD = textwrap.dedent(
    """
    import sys, warmkit
    from triton.runtime.driver import driver
    import _record_child, _pinned_kernels as K
    import warmkit_triton._tuned
    from warmkit_triton._record import tuned_entry
    driver.set_active(_record_child._Driver())
    # torch's name of the GPU measured on (this CPU torch has none to name)
    warmkit_triton._tuned.gpu_model = lambda *a, **k: "NVIDIA H100 80GB HBM3"
    tuner = K.tuned_dot_kernel
    reg = warmkit.WarmupRegistry()
    reg.add_recorded(tuned_entry(tuner, (16,), tuner.configs[1]))  # a finished raw autotune
    reg.save(sys.argv[1])
    """
)


def test_a_recorded_autotune_winner_builds_on_a_host_with_other_globals(tmp_path: Path) -> None:
    # Found on the H100 -> CPU build of flash-linear-attention: a winner's entry holds pins, but
    # its source check ignored them, so every autotuned kernel whose module picks a global from
    # the GPU failed the CPU build with "This recording predates pinned identity"; and where the
    # library computes its configs from the GPU, with "its autotune configs changed".
    out = tmp_path / "tuned.json"
    proc = _run([sys.executable, "-c", TUNED_CHILD, str(out)], _env(tmp_path / "c0", **GPU_HOST), tmp_path)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    (entry,) = warmkit.read_recorded(out)
    assert "autotune" in entry.spec and entry.spec["pins"]["globals"][0]["name"] == "PREC"
    cmd = [sys.executable, "-m", "warmkit", "warmup", str(out), "--target", TARGET, "--json"]
    proc = _run(cmd, _env(tmp_path / "c1"), tmp_path)  # no PINNED_TEST_TF32: the CPU host
    assert proc.returncode == 0, proc.stderr
    (row,) = json.loads(proc.stdout)["entries"]
    assert row["status"] in ("compiled", "cached") and row["tuning"] == "needs-device", row


def test_a_pinned_recording_warms_up_again_on_a_warm_cache(tmp_path: Path) -> None:
    # Found building fla's H100 recording on the CPU box: the first ahead-of-time warmup built
    # the pinned variants, the second (the same cache, warm) refused them with "did not
    # reproduce Triton's recorded cache key".
    out = _record_on_the_gpu_host(tmp_path)
    warm = [sys.executable, "-m", "warmkit", "warmup", str(out), "--target", TARGET, "--json"]
    statuses = []
    for _ in range(2):  # the CPU host, one cache: cold, then warm
        proc = _run(warm, _env(tmp_path / "c1"), tmp_path)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        statuses.append(sorted(r["status"] for r in json.loads(proc.stdout)["entries"]))
    assert statuses == [["compiled", "compiled"], ["cached", "cached"]]


def _edit_recorded(recording: Path, out: Path, edit) -> Path:
    """A copy of ``recording`` with its entries edited, their ids made to match again (a forger's)."""
    from warmkit._registry.manifest.codec import _canonical
    from warmkit._registry.manifest.entries import _entry_id

    data = json.loads(recording.read_text())
    (group,) = data["recorded"]
    edit(group["entries"])
    where = (group["backend"], group["kind"], group["kernel"])
    group["entries"] = [
        [_entry_id(*where, _canonical(spec), group["target"]), spec]
        for _, spec in group["entries"]
    ]
    out.write_text(json.dumps(data))
    return out


def _unencodable(entries) -> None:  # BLOCK=16's PREC recorded as an object with no encoding
    spec = next(s for _, s in entries if s["args"][-1]["value"] == 16)
    rec = next(g for g in spec["pins"]["globals"] if g["name"] == "PREC")
    del rec["value"]
    rec["repr"] = "<Precision object at 0x7f>"


def test_skip_refused_leaves_out_and_lists_only_the_refused_keys(tmp_path: Path) -> None:
    recording = _record_on_the_gpu_host(tmp_path)
    proc = _build(recording, tmp_path / "reference.wkb", tmp_path, **GPU_HOST)
    assert proc.returncode == 0, proc.stderr
    edited = _edit_recorded(recording, tmp_path / "edited.json", _unencodable)
    proc = _build(edited, tmp_path / "all.wkb", tmp_path)  # without the flag: the build fails
    assert proc.returncode == 1 and not (tmp_path / "all.wkb").exists()
    out = tmp_path / "partial.wkb"
    cmd = [sys.executable, "-m", "warmkit", "bundle", "build", str(edited), "--skip-refused"]
    cmd += ["--target", TARGET, "-o", str(out), "--json"]
    proc = _run(cmd, _env(tmp_path / "c2"), tmp_path)
    assert proc.returncode == 0, proc.stderr
    (refused,) = json.loads(proc.stdout)["refused"]
    assert refused["kernel"] == "_pinned_kernels.dot_kernel" and "BLOCK=16" in refused["key"]
    assert "global _pinned_kernels.PREC = tl.constexpr(<Precision object at 0x7f>)" in (
        refused["reason"]
    )
    assert "1 key(s) left out" in proc.stderr and refused["reason"] in proc.stderr
    info = warmkit.inspect_bundle(out)
    assert info["refused"] == [refused] and info["totals"]["keys"] == 1
    # The key that was built is the reference's (the GPU host's) variant of BLOCK=32.
    assert len(_entries(out)) == 1 and _entries(out) < _entries(tmp_path / "reference.wkb")


def test_skip_refused_still_fails_on_any_other_failure(tmp_path: Path) -> None:
    recording = _record_on_the_gpu_host(tmp_path)

    def refused_and_gone(entries) -> None:
        _unencodable(entries)
        other = next(s for _, s in entries if s["args"][-1]["value"] == 32)
        del other["args"][-1]  # BLOCK=32's arguments no longer match the function's parameters

    edited = _edit_recorded(recording, tmp_path / "edited.json", refused_and_gone)
    out = tmp_path / "x.wkb"
    cmd = [sys.executable, "-m", "warmkit", "bundle", "build", str(edited), "--skip-refused"]
    proc = _run(cmd + ["--target", TARGET, "-o", str(out)], _env(tmp_path / "c2"), tmp_path)
    assert proc.returncode == 1 and not out.exists(), proc.stdout + proc.stderr
    assert "left out" not in proc.stderr


def test_bundle_check_names_a_key_left_out_at_build(tmp_path: Path) -> None:
    recording = _record_on_the_gpu_host(tmp_path)
    edited = _edit_recorded(recording, tmp_path / "edited.json", _unencodable)
    out = tmp_path / "partial.wkb"
    cmd = [sys.executable, "-m", "warmkit", "bundle", "build", str(edited), "--skip-refused"]
    proc = _run(cmd + ["--target", TARGET, "-o", str(out)], _env(tmp_path / "c2"), tmp_path)
    assert proc.returncode == 0, proc.stderr
    check = [sys.executable, "-m", "warmkit", "bundle", "check", str(out), "--json"]
    proc = _run(check, _env(tmp_path / "c3"), tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    rows = {r["key"].split(", ")[-1]: r for r in json.loads(proc.stdout)["keys"]}
    assert rows["BLOCK=32"]["status"] == "hit"
    assert rows["BLOCK=16"]["status"] == "miss" and rows["BLOCK=16"]["factor"] == "refused"
    assert rows["BLOCK=16"]["reason"].startswith(f"left out of {out} at build (--skip-refused): ")


def test_a_device_check_of_an_unchanged_identity_uses_tritons_hash_alone(tmp_path: Path) -> None:
    # Triton's hash covers every pinned input: when it equals the recorded one, the walk of
    # the pins (0.6 s on fla's 66 keys) is skipped; when it differs, the walk names the global.
    out = _record_on_the_gpu_host(tmp_path)
    check = textwrap.dedent(
        f"""
        import warmkit, warmkit_triton._record as R
        def walked(*a, **k):
            print("WALKED")
            return _differences(*a, **k)
        _differences, R.differences = R.differences, walked
        (entry, *_) = warmkit.read_recorded({str(out)!r})
        kernel, key = R.recorded_kernel(entry)
        try:
            kernel.function_for(key)
            print("OK")
        except warmkit.IdentityMismatchError as exc:
            print("REFUSED", exc)
        """
    )
    same = _run([sys.executable, "-c", check], _env(tmp_path / "c1", **GPU_HOST), tmp_path)
    assert same.returncode == 0, same.stderr
    assert same.stdout.split() == ["OK"]
    other = _run([sys.executable, "-c", check], _env(tmp_path / "c2"), tmp_path)
    assert other.returncode == 0, other.stderr
    assert other.stdout.startswith("WALKED\nREFUSED recorded kernel _pinned_kernels:dot_kernel")


def test_differences_are_walked_once_while_nothing_pinned_changes(monkeypatch) -> None:
    # The walk of a function's source (twice per key: probe and compile) was 30 % of a warm
    # key; its answer is reused while Triton's hash, the pins and each pinned global (its object
    # and that object's value) are unchanged: a global rebound or changed in place is seen.
    import triton.language as tl

    monkeypatch.syspath_prepend(str(HERE))
    import _pinned_kernels as K
    from warmkit_triton import _pins

    pins = _pins.pins_of(K.dot_kernel)
    walks = []
    walk = _pins._differences
    monkeypatch.setattr(_pins, "_differences", lambda *a: walks.append(1) or walk(*a))
    monkeypatch.setattr(_pins, "_differences_memo", {})
    assert _pins.differences(K.dot_kernel, pins) == ([], [])
    assert _pins.differences(K.dot_kernel, pins) == ([], [])
    assert len(walks) == 1
    monkeypatch.setattr(K, "PREC", tl.constexpr("ieee" if K.PREC.value == "tf32" else "tf32"))
    problems, changes = _pins.differences(K.dot_kernel, pins)
    assert len(walks) == 2 and problems == [] and [c[1] for c in changes] == ["PREC"]
    monkeypatch.undo()  # PREC back; a constexpr changed in place is seen too
    monkeypatch.setattr(_pins, "_differences", lambda *a: walks.append(1) or walk(*a))
    assert _pins.differences(K.dot_kernel, pins) == ([], [])
    monkeypatch.setattr(K.SCALE, "value", 3.0)
    problems, changes = _pins.differences(K.dot_kernel, pins)
    assert len(walks) == 4 and [c[1] for c in changes] == ["SCALE"]
    monkeypatch.undo()
    monkeypatch.setattr(_pins, "_differences", lambda *a: walks.append(1) or walk(*a))
    other = {**pins, "globals": [g for g in pins["globals"] if g["name"] != "SCALE"]}
    problems, _ = _pins.differences(K.dot_kernel, other)  # other pins: walked again
    assert len(walks) == 5 and any("SCALE" in p for p in problems)
