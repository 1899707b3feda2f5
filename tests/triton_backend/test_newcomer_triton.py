"""A newcomer's first commands on a CPU host, with the docs' own kernels (issue 29, items 5 and 6)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import warmkit

HERE = Path(__file__).parent
CAUSE = "no GPU is visible to Triton"


def _cli(*argv: str, tmp: Path, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("WARMKIT_")}
    base["TRITON_CACHE_DIR"] = str(tmp / "cache")
    base["PYTHONPATH"] = os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])
    return subprocess.run(
        [sys.executable, "-m", "warmkit", *argv],
        cwd=tmp,
        env=base | env,
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture
def manifest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.syspath_prepend(str(HERE))
    from _docs_tuned import HeurCopy, TunedScale

    reg = warmkit.WarmupRegistry()
    reg.add(TunedScale, n=[4096, 5000])
    reg.add(HeurCopy, n=[100, 200, 300])
    return reg.save(tmp_path / "deploy.json")


@pytest.fixture
def cpu_host() -> None:
    from warmkit_triton import TritonBackend

    if TritonBackend().default_target() is not None:
        pytest.skip("a GPU (or TRITON_INTERPRET) is visible: these are a CPU host's messages")


def test_warmup_without_a_target_says_the_one_cause_once(
    manifest: Path, tmp_path: Path, cpu_host: None
) -> None:
    proc = _cli("warmup", str(manifest), tmp=tmp_path)
    assert proc.returncode == 1
    out = proc.stdout + proc.stderr
    assert out.count(CAUSE) == 1, out
    (line,) = [x for x in out.splitlines() if CAUSE in x]
    assert line.startswith("FAILED 5 key(s) of 2 kernel(s) (_docs_tuned.TunedScale, ")
    # the advice names what works everywhere, `warmkit run` included: no `run --target`
    assert "WARMKIT_TARGET=cuda:90 in the environment (any warmkit command" in line
    assert "on the warmkit command line" not in line
    assert "    keys: _docs_tuned.TunedScale TunedScale.CompileKey(n=4096), " in out
    assert "and 2 more" in out


def test_run_without_a_gpu_says_the_cause_once_and_runs_nothing(
    manifest: Path, tmp_path: Path, cpu_host: None
) -> None:
    child = [sys.executable, "-c", "print('the command ran')"]
    proc = _cli("run", "-m", str(manifest), "--", *child, tmp=tmp_path)
    assert proc.returncode == 1
    assert "the command ran" not in proc.stdout
    assert proc.stderr.count(CAUSE) == 1, proc.stderr
    assert proc.stderr.rstrip().endswith(
        f"warmkit: ERROR warmkit run: warmup of {manifest} failed (the report above says why); "
        "the command did not run"
    )


def test_run_success_line_is_info_not_a_warning(manifest: Path, tmp_path: Path) -> None:
    child = [sys.executable, "-c", "print('the command ran')"]
    proc = _cli("run", "-m", str(manifest), "--", *child, tmp=tmp_path, WARMKIT_TARGET="cuda:90")
    assert proc.returncode == 0, proc.stderr
    assert "the command ran" in proc.stdout
    assert f"warmkit: INFO warmkit run: warmed 5 key(s) of {manifest} in " in proc.stderr
    assert "WARNING warmkit run" not in proc.stderr


# -- Triton's FP-fusion advice -----------------------------------------------------------------

ADVICE = "TRITON_DEFAULT_FP_FUSION is unset"


def test_warmkit_commands_do_not_pass_on_tritons_fp_fusion_advice(
    manifest: Path, tmp_path: Path
) -> None:
    proc = _cli("warmup", str(manifest), "--target", "cuda:90", tmp=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert ADVICE not in proc.stderr


def test_a_bundle_built_with_fp_fusion_set_is_refused_naming_the_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Why following the advice breaks bundles: any value, Triton's default 1 included, is
    # part of Triton's own cache keys, so the entries would never be looked up elsewhere.
    monkeypatch.syspath_prepend(str(HERE))
    from _docs_tuned import HeurCopy

    reg = warmkit.WarmupRegistry()
    reg.add(HeurCopy, n=[100])
    manifest = reg.save(tmp_path / "one.json")
    bundle = tmp_path / "one.wkb"
    built = _cli(
        "bundle", "build", str(manifest), "--target", "cuda:90", "-o", str(bundle),
        tmp=tmp_path, TRITON_DEFAULT_FP_FUSION="1",
    )  # fmt: skip
    assert built.returncode == 0, built.stderr
    (tmp_path / "serving").mkdir()
    proc = _cli(
        "bundle", "install", str(bundle), "--target", "cuda:90",
        tmp=tmp_path, TRITON_CACHE_DIR=str(tmp_path / "serving"),
    )  # fmt: skip
    assert proc.returncode == 1
    assert "TRITON_DEFAULT_FP_FUSION" in proc.stderr
    assert "Rebuild the bundle with the same env as this host" in proc.stderr


# -- push and pull take --cache-dir, as docs/fleet.md says every cache command does -----------


def test_push_and_pull_take_cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(HERE))
    from _docs_tuned import HeurCopy

    reg = warmkit.WarmupRegistry()
    reg.add(HeurCopy, n=[100])
    manifest = reg.save(tmp_path / "one.json")
    built, serving, store = tmp_path / "built", tmp_path / "serving", tmp_path / "store"
    serving.mkdir()
    warm = _cli(
        "warmup", str(manifest), "--target", "cuda:90", tmp=tmp_path, TRITON_CACHE_DIR=str(built)
    )
    assert warm.returncode == 0, warm.stderr
    push = _cli("cache", "push", str(store), "--cache-dir", f"triton={built}", tmp=tmp_path)
    assert push.returncode == 0, push.stderr
    assert push.stdout.startswith(f"triton -> {store}: 1 pushed, 0 already there, 0 skipped")
    pull = _cli("cache", "pull", str(store), "--cache-dir", f"triton={serving}", tmp=tmp_path)
    assert pull.returncode == 0, pull.stderr
    assert pull.stdout.startswith(f"triton <- {store}: 1 pulled, 0 already here, 0 refused")
    assert sorted(p.name for p in serving.iterdir()) == sorted(p.name for p in built.iterdir())
    assert not (tmp_path / "cache").exists()  # the default cache (TRITON_CACHE_DIR) is untouched
