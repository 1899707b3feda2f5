"""Recording raw @triton.jit compiles and replaying them: real Triton, compiled for sm_90 on this host.

The workload (``_record_child.py``) never imports warmkit; it compiles through
``fn.warmup`` with a minimal sm_90 driver, which fires the same Triton hooks a
GPU launch fires.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import triton.language as tl
from hypothesis import given, settings
from hypothesis import strategies as st
from warmkit_triton._values import decode_value, encode_value

import warmkit

HERE = Path(__file__).parent
CHILD = HERE / "_record_child.py"
TARGET = os.environ.get("AOT_TARGET", "cuda:90")

dtypes = st.sampled_from(
    [tl.float16, tl.bfloat16, tl.float32, tl.float64, tl.int8, tl.int32, tl.int64, tl.uint8]
    + [tl.float8e4nv, tl.float8e5, tl.int1]
)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**64), max_value=2**64),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=6),
    dtypes,
)
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3).map(tuple), max_leaves=8)


def _same(x: object, y: object) -> bool:
    if isinstance(x, float) and math.isnan(x):
        return isinstance(y, float) and math.isnan(y)
    if isinstance(x, tuple):
        return type(y) is tuple and len(x) == len(y) and all(map(_same, x, y))
    return type(x) is type(y) and x == y and repr(x) == repr(y)


@settings(max_examples=300, deadline=None)
@given(values)
def test_every_constexpr_kind_round_trips_losslessly_through_json(value) -> None:
    data = json.loads(json.dumps(encode_value(value), allow_nan=False))
    assert _same(decode_value(data), value)


def test_values_without_a_lossless_encoding_are_refused() -> None:
    from warmkit_triton._values import UnreplayableError

    with pytest.raises(UnreplayableError, match="no lossless encoding"):
        encode_value(object())
    with pytest.raises(UnreplayableError):
        encode_value([1, 2])  # a list is not a Triton constexpr value


def _env(cache: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARMKIT_")}
    env["TRITON_CACHE_DIR"] = str(cache)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), env.get("PYTHONPATH")]))
    env.update(extra)
    return env


def _warmkit(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "warmkit", *args],
        env=env,
        check=False,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, str]:
    """One `warmkit record` of the workload; shared by the tests below (compiles are slow here)."""
    tmp = tmp_path_factory.mktemp("record")
    out = tmp / "run.json"
    variants = ["aligned", "unaligned", "one", "fp16", "kinds", "tuned", "main"]
    proc = _warmkit(
        ["record", "-o", str(out), "--json", "--", sys.executable, str(CHILD), *variants],
        _env(tmp / "cache-a"),
        tmp,
    )
    assert proc.returncode == 0, proc.stderr
    return out, json.loads(proc.stdout), proc.stderr


def test_record_a_command_that_never_imports_warmkit(recorded) -> None:
    out, summary, stderr = recorded
    assert summary["exit_code"] == 0
    assert summary["specializations"] == 8 and summary["kernels"] == 4
    assert summary["unreplayable"] == [
        {
            "kernel": "__main__.main_kernel",
            "reason": "it is defined in __main__, which another process cannot import; "
            "move it into a module",
        }
    ]
    assert "__main__.main_kernel compiled at runtime cannot be replayed" in stderr
    entries = {e.spec_json: e for e in warmkit.read_recorded(out)}
    axpy = [e for e in entries.values() if e.name == "_record_kernels.axpy_kernel"]
    args = sorted(json.dumps(e.spec["args"][:4], sort_keys=True) for e in axpy)
    assert len(args) == 4 and all(e.target == "cuda:90" for e in axpy)
    ptr = {(a["dtype"], a["aligned"]) for e in axpy for a in e.spec["args"][:1]}
    assert ptr == {("fp32", True), ("fp32", False), ("fp16", True)}
    assert {json.dumps(e.spec["args"][3], sort_keys=True) for e in axpy} == {
        '{"class": "i32", "div16": true, "kind": "int", "name": "n"}',
        '{"class": "one", "kind": "int", "name": "n"}',
    }
    (kinds,) = [e for e in entries.values() if e.name == "_record_kernels.kinds_kernel"]
    by_name = {a["name"]: a for a in kinds.spec["args"]}
    assert by_name["flag"] == {"name": "flag", "kind": "bool"}
    assert by_name["maybe"] == {"name": "maybe", "kind": "none"}
    assert by_name["SHAPE"]["value"] == {"tuple": [16, 2]}
    assert by_name["MODE"]["value"] == "relu"
    assert by_name["DTYPE"]["value"] == {"tl.dtype": "fp16"}
    assert repr(by_name["SCALE"]["value"]) == "-0.0"
    assert by_name["EMPTY"]["value"] is None and by_name["ON"]["value"] is True
    assert kinds.spec["options"] == [["num_warps", 2]]
    # an autotuned raw kernel: each config the autotuner compiles, with its launch options
    tuned = sorted(
        (e.spec["args"][3]["value"], e.spec["options"])
        for e in entries.values()
        if e.name == "_record_kernels.tuned_copy_kernel"
    )
    assert [(b, dict(o)["num_warps"]) for b, o in tuned] == [(64, 2), (128, 4)]
    assert all(e.replayable for e in entries.values() if "tuned" in e.name)


def test_error_mode_records_then_refuses(tmp_path: Path) -> None:
    out = tmp_path / "err.json"
    proc = _warmkit(
        ["record", "-o", str(out), "--monitor", "error", "--", sys.executable, str(CHILD)]
        + ["aligned", "refuse"],
        _env(tmp_path / "cache"),
        tmp_path,
    )
    assert proc.returncode == 3, proc.stderr  # the workload saw RuntimeCompileError
    assert "RuntimeCompileError" in proc.stderr
    (entry,) = warmkit.read_recorded(out)
    assert entry.name == "_record_kernels.axpy_kernel" and entry.replayable


def test_aot_replay_then_a_second_process_finds_disk_hits_only(recorded, tmp_path: Path) -> None:
    out, _, _ = recorded
    cache = tmp_path / "cache-b"
    env = _env(cache)
    proc = _warmkit(["warmup", str(out), "--target", TARGET, "--json"], env, tmp_path)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    rows = [(e["kind"], e["kernel"], e["status"]) for e in report["entries"]]
    assert sorted(rows) == sorted(
        [("recorded", "_record_kernels.axpy_kernel", "compiled")] * 4
        + [("recorded", "_record_kernels.kinds_kernel", "compiled")]
        + [("recorded", "_record_kernels.tuned_copy_kernel", "compiled")] * 2
        + [("recorded", "__main__.main_kernel", "skipped")]
    )
    # `warmkit run`: the startup hook warms the manifest (disk hits now), then the workload's
    # own compiles of every variant are disk hits: nothing compiles for real.
    proc = subprocess.run(
        [sys.executable, "-m", "warmkit", "run", "-m", str(out), "--", sys.executable, str(CHILD)]
        + ["aligned", "unaligned", "one", "fp16", "kinds", "tuned"],
        env=_env(cache, WARMKIT_TARGET=TARGET),
        check=False,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert "(0 compiled, 7 cached)" in proc.stderr
    (events,) = [line for line in proc.stderr.splitlines() if line.startswith("EVENTS ")]
    assert events == "EVENTS " + ",".join(["disk_hit"] * 7)


def test_recorded_kernels_are_compiled_once_per_fleet_through_the_store(
    recorded, tmp_path: Path, redis_server
) -> None:
    # Two hosts (two caches), one real Redis: recorded kernels are fetched like declared keys.
    out, _, _ = recorded
    statuses = []
    for host in ("host-a", "host-b"):
        env = _env(tmp_path / host, WARMKIT_STORE=redis_server.url)
        proc = _warmkit(["warmup", str(out), "--target", TARGET, "--json"], env, tmp_path)
        assert proc.returncode == 0, proc.stderr
        report = json.loads(proc.stdout)
        statuses.append(sorted(e["status"] for e in report["entries"] if e["status"] != "skipped"))
    assert statuses == [["compiled"] * 7, ["fetched"] * 7]


def test_a_failed_warmup_stops_warmkit_run_before_the_command(recorded, tmp_path: Path) -> None:
    out, _, _ = recorded
    env = _env(tmp_path / "cache", WARMKIT_TARGET=TARGET)
    env["PYTHONPATH"] = ""  # the recorded module is not importable: every entry fails
    proc = subprocess.run(
        [sys.executable, "-m", "warmkit", "run", "-m", str(out), "--"]
        + [sys.executable, "-c", "print('RAN')"],
        env=env,
        check=False,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 1
    assert "RAN" not in proc.stdout
    assert "module '_record_kernels' no longer imports" in proc.stderr
    assert "Fatal Python error" not in proc.stderr


def test_changed_source_is_a_per_entry_error(tmp_path: Path) -> None:
    pkg = tmp_path / "mods"
    pkg.mkdir()
    src = textwrap.dedent(
        """
        import triton
        import triton.language as tl

        @triton.jit
        def k1(x, n, B: tl.constexpr):
            tl.store(x + tl.arange(0, B), n)

        @triton.jit
        def k2(x, n, B: tl.constexpr):
            tl.store(x + tl.arange(0, B), n + 1)
        """
    )
    (pkg / "edited_mod.py").write_text(src)
    script = tmp_path / "work.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import sys
            sys.path[:0] = [{str(HERE)!r}, {str(pkg)!r}]
            from triton.runtime.driver import driver
            import _record_child, edited_mod
            driver.set_active(_record_child._Driver())
            t = _record_child._Tensor("float32")
            edited_mod.k1.warmup(t, 16, B=32, grid=(1,))
            edited_mod.k2.warmup(t, 16, B=32, grid=(1,))
            """
        )
    )
    out = tmp_path / "m.json"
    proc = _warmkit(
        ["record", "-o", str(out), "--", sys.executable, str(script)],
        _env(tmp_path / "c"),
        tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    (pkg / "edited_mod.py").write_text(src.replace("n + 1", "n + 2"))
    env = _env(tmp_path / "c")
    env["PYTHONPATH"] = os.pathsep.join([str(pkg), env["PYTHONPATH"]])
    proc = _warmkit(["warmup", str(out), "--target", TARGET, "--json"], env, tmp_path)
    assert proc.returncode == 1
    rows = {e["kernel"]: e for e in json.loads(proc.stdout)["entries"]}
    assert rows["edited_mod.k1"]["status"] in ("compiled", "cached")
    assert rows["edited_mod.k2"]["status"] == "failed"
    error = rows["edited_mod.k2"]["error"]
    assert "kernel 'edited_mod.k2': the pinned identity cannot be reproduced" in error
    assert "function edited_mod:k2: source sha256 " in error and " when pinned, " in error


def test_a_replay_that_misses_the_recorded_cache_key_is_an_error(recorded, tmp_path: Path) -> None:
    out, _, _ = recorded
    reg = warmkit.WarmupRegistry()
    for e in warmkit.read_recorded(out):
        if e.name.endswith("axpy_kernel"):
            spec = e.spec
            spec["triton_key"] = spec["triton_key"].replace(
                "('constexpr', 128)", "('constexpr', 256)"
            )
            assert spec["triton_key"] != e.spec["triton_key"]
            reg.add_recorded(
                warmkit.RecordedEntry.make(
                    backend=e.backend,
                    kind=e.kind,
                    kernel=e.kernel,
                    name=e.name,
                    spec=spec,
                    target=e.target,
                )
            )
            break
    sys.path.insert(0, str(HERE))
    try:
        with pytest.raises(
            warmkit.WarmupError, match="did not reproduce Triton's recorded cache key"
        ):
            warmkit.warmup(warmkit.WarmupConfig(target=TARGET, monitor="off", progress="off"), reg)
    finally:
        sys.path.remove(str(HERE))


def test_bundle_build_includes_recorded_entries(recorded, tmp_path: Path) -> None:
    out, _, _ = recorded
    wkb = tmp_path / "k.wkb"
    proc = _warmkit(
        ["bundle", "build", str(out), "--target", TARGET, "-o", str(wkb), "--json"],
        _env(tmp_path / "cache"),
        tmp_path,
    )
    assert proc.returncode == 0, proc.stderr  # the __main__ kernel: skipped, not failed
    info = warmkit.inspect_bundle(wkb) if wkb.exists() else None
    assert info is not None, proc.stderr
    assert set(info["kernels"]) >= {"_record_kernels.axpy_kernel", "_record_kernels.kinds_kernel"}


def test_unreplayable_import_paths_are_named(monkeypatch: pytest.MonkeyPatch) -> None:
    import triton
    from warmkit_triton._values import _import_problem

    monkeypatch.syspath_prepend(str(HERE))
    import _record_kernels as K

    def make():
        @triton.jit
        def inner(x):
            tl.store(x, 1)

        return inner

    inner = make()
    assert "inside a function" in _import_problem(inner.fn.__module__, inner.fn.__qualname__, inner)
    assert _import_problem("_record_kernels", "axpy_kernel", K.axpy_kernel) is None
    # an autotuned kernel's module attribute is the Autotuner: it unwraps to the same function
    tuned = K.tuned_copy_kernel.fn
    assert _import_problem("_record_kernels", "tuned_copy_kernel", tuned) is None
    monkeypatch.setattr(K, "axpy_kernel", K.kinds_kernel)
    problem = _import_problem("_record_kernels", "axpy_kernel", K.tuned_copy_kernel.fn)
    assert problem is not None and "resolves to a different object" in problem
    assert "does not resolve" in _import_problem("_record_kernels", "nope", tuned)
