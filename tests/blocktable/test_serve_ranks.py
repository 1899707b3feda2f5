"""The two-rank demo (``examples/serve_ranks.py``) on the CPU: two spawned ranks, CUDA hidden.

Each rank compiles ahead of time for ``cuda:90`` (real Triton compiles) and serves
through the torch reference; the compile-once accounting across the two processes
is the real thing: a real shared cache directory with its file locks, a real
``redis-server`` on loopback, Triton's compile listener in both processes.
"""

from __future__ import annotations

import copy
import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "examples" / "serve_ranks.py"
STEPS = 30


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """One run of all four configurations, kept on disk (``--work``), and its summary."""
    from redis_server import RedisServer

    tmp = tmp_path_factory.mktemp("ranks")
    server = RedisServer().start()
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith("WARMKIT_")}
        proc = subprocess.run(
            [sys.executable, str(DEMO), "--device", "cpu", "--steps", str(STEPS),
             "--store", server.url, "--work", str(tmp / "work"), "--json", str(tmp / "s.json")],
            cwd=tmp, env=env, capture_output=True, text=True, timeout=600, check=False,
        )  # fmt: skip
        redis_keys = sorted(k.decode() for k in server.client().keys("warmkit:*"))
    finally:
        server.close()
    summary = json.loads((tmp / "s.json").read_text()) if (tmp / "s.json").exists() else None
    return proc, summary, tmp / "work", redis_keys


def test_every_check_passes_on_both_ranks(demo):
    proc, summary, _work, _ = demo
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-4000:]
    assert "ALL CHECKS PASSED" in proc.stdout and "FAIL" not in proc.stdout
    assert "NO GPU" in proc.stdout and "REFERENCE" in proc.stdout
    assert list(summary["configs"]) == ["cold", "shared", "store", "warm"]
    for name, cfg in summary["configs"].items():
        assert cfg["ok"], (name, cfg["checks"])
        assert {c["check"] for c in cfg["checks"]} >= {
            "0 runtime compile events",
            "sampled slot mappings",
            "slot mappings across ranks",
            "compile accounting",
        }
        assert any(c["check"].startswith("warmkit cache verify") for c in cfg["checks"])
        for r in cfg["per_rank"]:
            assert r["runtime_compile_events"] == 0
            assert r["env"] == {
                "NCCL_NVLS_ENABLE": "0",
                "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
                "NVSHMEM_DISABLE_NVLS": "1",
            }
            assert r["device"] == "cpu"


def test_ranks_have_shared_and_own_keys(demo):
    _, summary, _, _ = demo
    for cfg in summary["configs"].values():
        # 2 context-parallel keys per rank (the rank is in the key), 2 replicated keys shared
        assert cfg["distinct_keys"] == 6
        assert cfg["shared_keys"] == 2
        assert cfg["own_keys_per_rank"] == [2, 2]


def test_cold_each_rank_compiles_everything(demo):
    cold = demo[1]["configs"]["cold"]
    assert cold["compiles_total"] == 8  # 2 ranks x 4 keys: the shared keys twice
    assert [(r["compiled"], r["compiles"]) for r in cold["per_rank"]] == [(4, 4), (4, 4)]


@pytest.mark.parametrize("name, loaded", [("shared", {"waited", "cached"}), ("store", {"fetched"})])
def test_shared_keys_are_compiled_once_in_total(demo, name, loaded):
    cfg = demo[1]["configs"][name]
    assert cfg["compiles_total"] == 6  # every distinct key once, across both processes
    hashes = [h for r in cfg["per_rank"] for h in r["compile_hashes"]]
    assert len(set(hashes)) == 6
    shared = [s for r in cfg["per_rank"] for s in r["shared_key_statuses"]]
    assert sorted(shared).count("compiled") == 2  # each shared key: one rank compiled it
    assert set(shared) - {"compiled"} <= loaded and len(shared) == 4
    assert sum(r["compiled"] for r in cfg["per_rank"]) == 6


def test_the_store_holds_exactly_what_was_compiled(demo):
    _, summary, _, redis_keys = demo
    store = summary["configs"]["store"]
    assert sum(r["fetched"] for r in store["per_rank"]) == 2
    hashes = {h for r in store["per_rank"] for h in r["compile_hashes"]}
    assert redis_keys == sorted(f"warmkit:entry:triton/{h}" for h in hashes)  # no lease left


def test_warm_restart_compiles_nothing(demo):
    warm = demo[1]["configs"]["warm"]
    assert warm["compiles_total"] == 0
    assert [(r["cached"], r["compiled"]) for r in warm["per_rank"]] == [(4, 0), (4, 0)]


def _checks():
    sys.path.insert(0, str(DEMO.parent))
    try:
        return importlib.import_module("serve_ranks")
    finally:
        sys.path.remove(str(DEMO.parent))


def _rank_results(work: Path, name: str) -> list[dict]:
    return [json.loads((work / name / f"rank{r}.json").read_text()) for r in range(2)]


def test_the_checks_fail_on_a_double_compile(demo):
    """Breaks the compile-once promise in the ranks' real results: the checker must say so."""
    demo_mod = _checks()
    ranks = _rank_results(demo[2], "shared")
    run = {"ranks": ranks, "verify": [], "wall_s": 0, "warmup_wall_s": 0}
    assert {c: ok for c, ok, _ in demo_mod.check_config("shared", run)}["compile accounting"]
    broken = copy.deepcopy(ranks)
    loader = next(r for r in broken if any(k["status"] != "compiled" for k in r["keys"]))
    entry = next(k for k in loader["keys"] if k["status"] != "compiled")
    entry["status"] = "compiled"
    loader["compiles"].append("f" * 64)
    checks = demo_mod.check_config("shared", {**run, "ranks": broken})
    assert not {c: ok for c, ok, _ in checks}["compile accounting"]


def test_the_checks_fail_when_a_token_has_two_owners(demo):
    demo_mod = _checks()
    ranks = _rank_results(demo[2], "cold")
    assert demo_mod.check_slots(ranks)[0]
    broken = copy.deepcopy(ranks)
    # rank 1 claims every token rank 0 owns in the first sampled step's first group
    broken[1]["samples"][0]["owned"][0] = ranks[0]["samples"][0]["owned"][0]
    ok, detail = demo_mod.check_slots(broken)
    assert not ok and "owners" in detail
    broken = copy.deepcopy(ranks)
    broken[1]["samples"][0]["replicated"][0] = "0" * 64
    ok, detail = demo_mod.check_slots(broken)
    assert not ok and "replicated" in detail


def test_a_store_that_already_holds_the_kernels_is_not_reported_as_compiled_once(demo):
    """The 'compiled once' check needs an empty store: a warm one makes the demo fail, loudly."""
    demo_mod = _checks()
    ranks = _rank_results(demo[2], "store")
    for r in ranks:  # what both ranks see when every entry was already in the store
        r["compiles"] = []
        for k in r["keys"]:
            k["status"] = "fetched"
    checks = {c: ok for c, ok, _ in demo_mod.check_config("store", {"ranks": ranks, "verify": []})}
    assert not checks["compile accounting"]


def test_serve_py_ranks_is_the_two_rank_demo(tmp_path):
    out = tmp_path / "s.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARMKIT_")}
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "serve.py"), "--ranks", "2", "--device", "cpu",
         "--configs", "shared", "--steps", "5", "--json", str(out)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-4000:]
    summary = json.loads(out.read_text())
    assert summary["program"] == "examples/serve_ranks.py" and summary["ok"]
    assert summary["configs"]["shared"]["compiles_total"] == 6


@pytest.mark.gpu
@pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.device_count() < 2, reason="needs 2 CUDA GPUs"
)
def test_two_gpus(tmp_path, redis_server):
    """The real thing: rank r on cuda:r launching the warmed kernels, every check on both."""
    out = tmp_path / "s.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARMKIT_")}
    proc = subprocess.run(
        [sys.executable, str(DEMO), "--device", "cuda", "--steps", "200",
         "--store", redis_server.url, "--json", str(out)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-4000:]
    summary = json.loads(out.read_text())
    assert summary["ok"] and summary["device"] == "cuda"
    for cfg in summary["configs"].values():
        assert [r["device"] for r in cfg["per_rank"]] == ["cuda:0", "cuda:1"]
        assert all(r["implementation"] == ["triton"] for r in cfg["per_rank"])
        assert all(r["runtime_compile_events"] == 0 for r in cfg["per_rank"])
    assert summary["configs"]["shared"]["compiles_total"] == 6
    assert summary["configs"]["store"]["compiles_total"] == 6
    assert summary["configs"]["warm"]["compiles_total"] == 0
