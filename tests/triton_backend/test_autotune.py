"""Autotuned and heuristic kernels on a CPU-only host: real sm_90 compiles, the interpreter, stored results, bundles."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import triton
from warmkit_triton import (
    TritonBackend,
    TritonKernel,
    WarmupTensor,
    _hooks,
    _stack,
    _tuned,
)
from warmkit_triton._aot import AotDriver, aot_driver, parse_target

import warmkit
from warmkit import KernelDefinitionError

from . import _autotune_kernels as K
from .conftest import AOT_TARGET

pytestmark = pytest.mark.filterwarnings("ignore:TRITON_DEFAULT_FP_FUSION")

REPO = Path(__file__).resolve().parents[2]
IMPORT_ROOT = Path(__file__).resolve().parents[len((__package__ or "").split("."))]
SCALE_KEY = (1000, "torch.float32", "torch.float32")


def aot(kernel, key, target=AOT_TARGET, jobs=1):
    backend = TritonBackend()
    with backend.compile_scope(target, jobs):
        return backend.compile(kernel, key, target)


def triton_own_hashes(fn, *args, **kwargs) -> set[str]:
    """The cache hashes Triton's own layers compile for a call on real (CPU) tensors, ahead of time."""
    drv = AotDriver(parse_target(AOT_TARGET))
    with aot_driver(drv):
        out = fn.warmup(*args, grid=(1,), **kwargs)
    _stack.unwrap(fn).jit.device_caches.pop(drv.device, None)
    return {k.hash for k in (out if isinstance(out, list) else [out])}


# -- the definition-time check understands the stack -----------------------------------------------


def test_an_autotuned_fn_without_warmup_grid_is_refused_at_definition():
    with pytest.raises(KernelDefinitionError, match="warmup_grid"):

        class NoGrid(TritonKernel):
            fn = K.tuned_scale_kernel
            CompileKey = K.TunedScale.CompileKey
            dispatch = K.TunedScale.dispatch
            warmup_args = K.TunedScale.warmup_args


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: triton.autotune([triton.Config({"BLOCK": 8})], key=["n"])(K.tuned_scale_kernel), "two @triton.autotune"),
        (lambda: triton.heuristics({"NOPE": lambda a: 1})(K.tuned_scale_kernel.fn), "'NOPE', which is not a parameter"),
        (lambda: triton.heuristics({"BLOCK": lambda a: 64})(K.tuned_scale_kernel), "'BLOCK' is set by both"),
    ],
)  # fmt: skip
def test_stacks_warmkit_cannot_serve_are_refused_naming_why(make, message):
    body = {
        "fn": make(),
        "CompileKey": K.TunedScale.CompileKey,
        "dispatch": K.TunedScale.dispatch,
        "warmup_args": K.TunedScale.warmup_args,
        "warmup_grid": K.TunedScale.warmup_grid,
    }
    with pytest.raises(KernelDefinitionError, match=message):
        type("Bad", (TritonKernel,), body)


@pytest.mark.parametrize(
    ("warmup", "options", "message"),
    [
        (lambda t, n: ((t, t, n, 2.0), {"BLOCK": 64}), {}, "passes 'BLOCK', which the autotune configs"),
        (lambda t, n: ((t, t, n, 2.0, 64), {}), {}, "passes 'BLOCK', which the autotune configs"),
        (lambda t, n: ((t, t, n, 2.0), {}), {"num_warps": 4}, "launch_options.*'num_warps'.*autotune"),
        (lambda t, n: ((t, t, n), {}), {}, "does not give parameter 'factor'"),
    ],
)  # fmt: skip
def test_warmup_args_may_not_pass_what_the_stack_sets(warmup, options, message):
    class Scale(K.TunedScale):
        def warmup_args(self, key):
            return warmup(WarmupTensor("float32", (key.n,)), key.n)

        def launch_options(self, key):
            return options

    with pytest.raises(TypeError, match=message):
        aot(Scale(), Scale.CompileKey("float32", 1000))


def test_a_heuristic_target_passed_by_warmup_args_is_named():
    class Copy(K.HeurCopy):
        def warmup_args(self, key):
            t = WarmupTensor("float32", (key.n,))
            return (t, t, key.n), {"EVEN": True}

    with pytest.raises(TypeError, match="passes 'EVEN', which the heuristics"):
        aot(Copy(), Copy.CompileKey("float32", 64))


# -- ahead of time --------------------------------------------------------------------------------


def test_aot_compiles_every_config_with_the_runtime_hashes():
    art = aot(K.TunedScale(), K.TunedScale.CompileKey("float32", 1000), jobs=2)
    assert art.tuning == "needs-device" and art.configs == (0, 1, 2, 3)
    assert art.tuning_key == SCALE_KEY
    assert not art.cache_hit and len({a.hash for a in art.artifacts}) == 4
    x = torch.empty(1000)
    assert {a.hash for a in art.artifacts} == triton_own_hashes(
        K.tuned_scale_kernel, x, x, 1000, 2.0
    )


def test_heuristic_constexprs_equal_the_runtime_ones():
    for n in (100, 64):  # EVEN false, then true
        art = aot(K.HeurCopy(), K.HeurCopy.CompileKey("float32", n))
        x = torch.empty(n)
        assert {art.hash} == triton_own_hashes(K.heur_copy_kernel, x, x, n, num_warps=4)
    derived = _stack.derive(_stack.unwrap(K.heur_copy_kernel), (x, x, 64), {}, None)
    assert derived.heuristics == {"BLOCK": 64, "EVEN": True}


def test_autotune_over_heuristics_with_pruning_compiles_the_survivors_as_triton_would():
    art = aot(K.SumInplace(), K.SumInplace.CompileKey(200))
    assert art.configs == (0, 1, 2)  # BLOCK 512 > next_power_of_2(200) was pruned
    x, acc = torch.empty(200), torch.empty(1)
    assert {a.hash for a in art.artifacts} == triton_own_hashes(K.sum_inplace_kernel, x, acc, 200)


def test_a_second_process_aot_finds_only_disk_hits(tmp_path):
    reg = warmkit.WarmupRegistry()
    reg.add(K.TunedScale, n=[1000, 3000])
    reg.add(K.SumInplace, n=200)
    reg.add(K.HeurCopy, n=100)
    manifest = reg.save(tmp_path / "warmup.json")
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARMKIT_")}
    env |= {"TRITON_CACHE_DIR": str(tmp_path / "cache"), "PYTHONPATH": str(IMPORT_ROOT)}
    runs = []
    for _ in range(2):
        out = subprocess.run(
            [sys.executable, "-m", f"{__package__}._bundle_child", str(manifest), AOT_TARGET],
            env=env, cwd=REPO, capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        assert out.returncode == 0, out.stderr
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    first, second = runs
    # n=1000 and n=3000 are two autotune keys but one specialization (neither divisible by 16):
    # 4 configs + 3 survivors + 1 heuristic variant
    assert first["listener"] == [False] * 8
    assert second["listener"] == [True] * 8
    assert second["statuses"] == ["cached"] * 4


def test_the_report_says_which_keys_need_device_tuning():
    reg = warmkit.WarmupRegistry()
    reg.add(K.TunedScale, n=1000)
    reg.add(K.HeurCopy, n=100)
    report = warmkit.warmup(
        warmkit.WarmupConfig(target=AOT_TARGET, monitor="off", progress="off"), reg
    )
    assert [e.tuning for e in report.entries] == ["needs-device", None]
    assert [e.kernel for e in report.needs_tuning] == [K.TunedScale.name]
    assert "NEEDS TUNING ON A DEVICE" in report.table()
    assert json.loads(report.to_json())["entries"][0]["tuning"] == "needs-device"


# -- stored results -----------------------------------------------------------------------------


def _store(directory, gpu="NVIDIA H200", winner=2, key=SCALE_KEY, target=AOT_TARGET):
    stack = _stack.unwrap(K.tuned_scale_kernel)
    rid = _tuned.result_id(stack, key, gpu, target)
    timings = {i: [1.0 + abs(i - winner), 1.0, 1.0] for i in range(4)}
    path = _tuned.store_result(
        directory, rid, kernel=K.TunedScale.name, configs=stack.autotuner.configs,
        timings=timings, winner=winner, seconds=0.25,
    )  # fmt: skip
    return stack, rid, path


def test_results_are_found_only_for_their_gpu_model(tmp_path):
    stack, rid, _ = _store(tmp_path)
    assert _tuned.find_result(stack, rid, tmp_path)[0] == 2
    other = _tuned.result_id(stack, SCALE_KEY, "NVIDIA H100 80GB HBM3", AOT_TARGET)
    assert _tuned.find_result(stack, other, tmp_path) is None
    assert _tuned.known_winners(stack, other, str(tmp_path)) == {"NVIDIA H200": 2}


@pytest.mark.parametrize("damage", ["truncate", "flip", "winner"])
def test_a_damaged_result_is_refused_with_a_warning(tmp_path, caplog, damage):
    stack, rid, path = _store(tmp_path)
    text = path.read_text()
    if damage == "truncate":
        path.write_text(text[: len(text) // 2])
    elif damage == "flip":
        path.write_text(text.replace('"winner": 2', '"winner": 1'))
    else:  # a consistent file whose winner the kernel does not have
        doc = json.loads(text)
        doc["body"]["winner"] = 9
        path.write_text(_tuned._seal(doc["body"]))
    with caplog.at_level(logging.WARNING):
        assert _tuned.find_result(stack, rid, tmp_path) is None
    assert str(path) in caplog.text


def test_known_winners_compile_only_the_winners_ahead_of_time(triton_cache):
    _store(triton_cache, gpu="NVIDIA H200", winner=2)
    _store(triton_cache, gpu="NVIDIA H100 80GB HBM3", winner=3)
    art = aot(K.TunedScale(), K.TunedScale.CompileKey("float32", 1000))
    assert art.tuning == "known-winners" and art.configs == (2, 3)
    assert art.known_winners == {"NVIDIA H200": 2, "NVIDIA H100 80GB HBM3": 3}


def test_a_bundle_carries_results_and_installs_them(tmp_path, triton_cache):
    _store(triton_cache)  # as a GPU host measured it, for key n=1000
    reg = warmkit.WarmupRegistry()
    reg.add(K.TunedScale, n=[1000, 3000])
    bundle = tmp_path / "tuned.wkb"
    warmkit.build_bundle(reg, bundle, target=AOT_TARGET, progress="off")
    info = warmkit.inspect_bundle(bundle)
    tuned = info["backends"]["triton"]["tuned"]
    assert info["totals"]["tuned"] == 1
    assert [(t["gpu"], t["winner"], t["autotune_key"]) for t in tuned] == [
        ("NVIDIA H200", 2, repr(SCALE_KEY))
    ]
    cli = subprocess.run(
        [sys.executable, "-m", "warmkit", "bundle", "inspect", str(bundle)],
        capture_output=True, text=True, check=True, timeout=120,
    )  # fmt: skip
    assert "tuned: " in cli.stdout and "NVIDIA H200" in cli.stdout
    empty = tmp_path / "serving-cache"
    warmkit.install_bundle(bundle, cache_dirs={"triton": empty})
    stack = _stack.unwrap(K.tuned_scale_kernel)
    rid = _tuned.result_id(stack, SCALE_KEY, "NVIDIA H200", AOT_TARGET)
    assert _tuned.find_result(stack, rid, empty)[0] == 2


# -- device tuning, end to end under the interpreter ---------------------------------------------


def interp(step: str, cache: Path, **extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARMKIT_")}
    env |= {"TRITON_INTERPRET": "1", "TRITON_CACHE_DIR": str(cache), **extra}
    out = subprocess.run(
        [sys.executable, str(Path(__file__).with_name("_autotune_interp.py")), step],
        env=env, cwd=REPO, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_device_tuning_stores_results_and_a_restart_benchmarks_nothing(tmp_path):
    cache = tmp_path / "cache"
    first = interp("tune", cache)
    tuned = {"TunedScale 1000": "benchmarked", "TunedScale 3000": "benchmarked"}
    assert first["tuning"] == tuned | {
        "SumInplace 200": "benchmarked",
        "HeurCopy 100": None,
        "HeurCopy 64": None,
    }
    assert first["benchmarks_at_warmup"] == 3 and first["stored"] == 3
    # restore_value put x back between runs; reset_to_zero zeroed acc before each (one run's sum)
    assert first["restored"] is True
    assert first["acc_after_bench"] == pytest.approx(first["x_sum"], abs=1e-3)
    assert first["pre_hook_calls"] >= 3  # every surviving config ran its pre_hook
    second = interp("restore", cache)
    for facts in (first, second):
        assert all(v for k, v in facts.items() if k.endswith("_ok") or "_ok_" in k)
        assert facts["benchmarks_at_runtime"] == 0 and facts["events"] == []
    assert second["tuning"] == {k: "stored" if v else v for k, v in first["tuning"].items()}
    assert second["benchmarks_at_warmup"] == 0


def test_a_result_tuned_on_one_host_reaches_another_through_the_store(tmp_path, redis_server):
    # Two hosts (two caches), one real Redis: the first tunes and publishes, the second
    # fetches every result before benchmarking anything, and keeps it in its own cache.
    store = {"WARMKIT_STORE": redis_server.url}
    first = interp("tune", tmp_path / "host-a", **store)
    assert first["benchmarks_at_warmup"] == 3 and first["stored"] == 3
    second = interp("restore", tmp_path / "host-b", **store)
    assert second["benchmarks_at_warmup"] == 0 and second["benchmarks_at_runtime"] == 0
    assert second["tuning"] == {k: "stored" if v else v for k, v in first["tuning"].items()}
    assert second["stored"] == 3 and second["events"] == []
    # A result damaged in the store is refused there (and deleted), so the next host re-tunes.
    import redis

    client = redis.Redis.from_url(redis_server.url)
    keys = [k for k in client.scan_iter() if b"autotune/" in k]
    assert keys, "no tuned result was published"
    for k in keys:
        if client.type(k) == b"hash":
            fields = client.hgetall(k)
            name = next(f for f in fields if f.endswith(b"autotune.json"))
            client.hset(k, name, fields[name].replace(b'"winner": ', b'"winner":  ', 1))
    third = interp("restore", tmp_path / "host-c", **store)
    assert third["benchmarks_at_warmup"] == 3


def test_a_raw_autotuned_kernel_is_refused_before_benchmarking_then_reported(tmp_path):
    facts = interp("raw", tmp_path / "cache")
    assert (
        facts["refused_kind"] == "autotune"
        and facts["refused_key"] == "(300, 'torch.float32', 'torch.float32')"
    )
    assert facts["benchmarked_before_refusal"] is False
    assert facts["ok"] is True
    assert facts["events"] == [
        ["refused", "raw_tuned", facts["refused_key"], False],
        ["autotune", "raw_tuned", facts["refused_key"], True],
    ]


def _with_tuned(manifest: Path, dest: Path, **changes: str) -> Path:
    """A copy of ``manifest`` whose recorded autotunes have ``changes`` (their ids recomputed)."""
    body = json.loads(manifest.read_text())
    for group in body["recorded"]:  # version 2: groups of [id, spec]
        fields = {k: group[k] for k in ("backend", "kind", "kernel", "name", "target")}
        for item in group["entries"]:
            if "autotune" in item[1]:
                spec = {**item[1], "autotune": {**item[1]["autotune"], **changes}}
                new = warmkit.RecordedEntry.make(spec=spec, **fields)
                item[:] = [new.id, new.spec]
    dest.write_text(json.dumps(body))
    return dest


def test_a_raw_autotune_winner_is_recorded_and_a_replay_benchmarks_nothing(tmp_path):
    manifest = tmp_path / "recorded.json"
    first = interp("raw-record", tmp_path / "cache-a", WARMKIT_RECORD=str(manifest))
    assert first["ok"] and first["events"] == [["autotune", "raw_tuned_add"]]
    data = json.loads(manifest.read_text())
    (tuned,) = [
        g | {"spec": spec}
        for g in data["recorded"]
        for _, spec in g["entries"]
        if "autotune" in spec
    ]
    assert tuned["kernel"].endswith("_autotune_kernels:raw_tuned_add") and tuned["replayable"]
    assert tuned["spec"]["autotune"]["winner"]["kwargs"] == first["winner"]
    assert tuned["spec"]["autotune"]["gpu"] == "triton-interpreter"
    # A new process on an empty cache: the warmup places the winner; the call tunes nothing.
    second = interp("raw-replay", tmp_path / "cache-b", MANIFEST=str(manifest))
    assert ["recorded", "cached", "stored"] in second["rows"]
    assert second["ok"] and second["events"] == [] and second["winner"] == first["winner"]
    # Configs changed since the recording: the entry fails, naming why, and the call tunes.
    stale = _with_tuned(manifest, tmp_path / "stale.json", configs="0" * 64)
    with pytest.raises(AssertionError, match="configs changed since it was recorded"):
        interp("raw-replay", tmp_path / "cache-c", MANIFEST=str(stale))
    # Measured on another GPU model: nothing is placed, and the first call tunes (reported).
    other = _with_tuned(manifest, tmp_path / "other-gpu.json", gpu="NVIDIA H200")
    third = interp("raw-replay", tmp_path / "cache-d", MANIFEST=str(other))
    assert ["recorded", "cached", "needs-device"] in third["rows"]
    assert third["ok"] and third["events"] == [["autotune", "raw_tuned_add"]]


def test_autotune_key_drift_is_detected_naming_the_argument(tmp_path):
    facts = interp("drift", tmp_path / "cache")
    assert (facts["parameter"], facts["expected"], facts["got"]) == ("n", 1024, 1000)


def test_the_raw_monitor_wraps_and_restores_autotuner_run():
    from triton.runtime.autotuner import Autotuner

    original = Autotuner.run
    warmkit.monitor.arm("warn")
    assert Autotuner.run is _hooks._monitored_run
    warmkit.monitor.disarm()
    assert Autotuner.run is original


def test_unknown_layers_are_named():
    class NotTriton:
        fn = K.tuned_scale_kernel.fn
        arg_names = ("x",)

        def warmup(self):  # pragma: no cover
            pass

    with pytest.raises(TypeError, match="NotTriton"):
        _stack.unwrap(NotTriton())


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_the_gpu_first_calls_compile_and_benchmark_nothing(tmp_path):
    """B11 in tiny mode: device warmup, a bundle installed in a new process, monitor "error"."""
    out = tmp_path / "b11.json"
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "autotune.py"), "--tiny", "--out", str(out)],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    res = json.loads(out.read_text())["results"]
    assert res["problems"] == [] and res["bundle_build"]["tuned_in_bundle"] >= 2


def test_plan_says_which_keys_need_device_tuning(tmp_path, triton_cache):
    _store(triton_cache, gpu="NVIDIA H200")  # a winner for n=1000 only
    reg = warmkit.WarmupRegistry()
    reg.add(K.TunedScale, n=[1000, 3000])
    reg.add(K.HeurCopy, n=100)
    manifest = reg.save(tmp_path / "warmup.json")
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARMKIT_")}
    env |= {"TRITON_CACHE_DIR": str(triton_cache), "PYTHONPATH": str(IMPORT_ROOT)}
    out = subprocess.run(
        [sys.executable, "-m", "warmkit", "plan", str(manifest), "--target", AOT_TARGET],
        env=env, cwd=REPO, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    lines = [line for line in out.stdout.splitlines() if "CompileKey(" in line]
    assert lines[0].endswith("[tuned on NVIDIA H200]")
    assert lines[1].endswith("[needs device tuning]")
    assert "[" not in lines[2].split(")", 1)[1]  # a heuristic kernel: nothing to tune
