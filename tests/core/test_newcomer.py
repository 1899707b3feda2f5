"""What a newcomer hit first (issue 29): the ``warmkit`` commands' rough edges, each reproduced."""

from __future__ import annotations

import importlib.metadata
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest


def warmkit_cli(*argv: str, cwd: Path, env: dict[str, str] | None = None, timeout: int = 300):
    base = {k: v for k, v in os.environ.items() if not k.startswith("WARMKIT_")}
    return subprocess.run(
        [sys.executable, "-m", "warmkit", *argv],
        cwd=cwd,
        env=base | (env or {}),
        check=False,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


# -- record of a run that compiled nothing --------------------------------------------------


def test_record_of_a_run_that_compiled_nothing_writes_an_empty_manifest_the_chain_reads(
    tmp_path: Path,
) -> None:
    out = tmp_path / "run.json"
    rec = warmkit_cli("record", "-o", str(out), "--", sys.executable, "-c", "pass", cwd=tmp_path)
    assert rec.returncode == 0, rec.stderr
    assert f"recorded 0 specialization(s) of 0 kernel(s) (0 new) into {out}" in rec.stdout
    assert json.loads(out.read_text())["format"] == "warmkit.manifest"
    # the CI chain `record && coverage` and the replay `run -m` go on, and say 0
    cov = warmkit_cli("coverage", str(out), "--recorded", str(out), "--json", cwd=tmp_path)
    assert cov.returncode == 0, cov.stderr
    assert json.loads(cov.stdout) == {"ok": True, "total": 0, "covered": 0, "missed": []}
    run = warmkit_cli(
        "run", "-m", str(out), "--", sys.executable, "-c", "print('child ran')", cwd=tmp_path
    )
    assert run.returncode == 0, run.stderr
    assert "child ran" in run.stdout


def test_record_json_lists_the_empty_manifest_it_wrote(tmp_path: Path) -> None:
    out = tmp_path / "sub" / "run.json"
    rec = warmkit_cli(
        "record", "--json", "-o", str(out), "--", sys.executable, "-c", "pass", cwd=tmp_path
    )
    assert rec.returncode == 0, rec.stderr
    data = json.loads(rec.stdout)
    assert (data["output"], data["specializations"]) == ([str(out)], 0)
    assert out.is_file()


def test_an_existing_manifest_is_left_as_it_was(tmp_path: Path) -> None:
    out = tmp_path / "run.json"
    out.write_text("not json")  # not ours to overwrite: record writes only when nothing is there
    rec = warmkit_cli("record", "-o", str(out), "--", sys.executable, "-c", "pass", cwd=tmp_path)
    assert out.read_text() == "not json"
    assert rec.returncode == 2
    assert f"{out}: invalid JSON" in rec.stderr


# -- recording raw kernels needs a GPU ------------------------------------------------------


def test_record_refuses_triton_interpret_naming_it(tmp_path: Path) -> None:
    out = tmp_path / "run.json"
    rec = warmkit_cli(
        "record", "-o", str(out), "--", sys.executable, "-c", "pass",
        cwd=tmp_path, env={"TRITON_INTERPRET": "1"},
    )  # fmt: skip
    assert rec.returncode == 2
    line = rec.stderr.strip()
    assert line.startswith("warmkit: error: ValueError: warmkit record: TRITON_INTERPRET is set")
    assert "unset TRITON_INTERPRET and record on a GPU host" in line
    assert len(line.splitlines()) == 1
    assert not out.exists()  # refused before the command ran: no empty manifest to pass CI on


def test_a_failed_recording_on_a_host_without_a_gpu_says_why(tmp_path: Path) -> None:
    from warmkit._plugin.discovery import discover, get_backend

    for info in discover("warmkit.backends"):
        try:
            seen = get_backend(info.name).default_target()
        except Exception:  # noqa: BLE001
            seen = None
        if seen is not None:
            pytest.skip(f"backend {info.name} sees a device ({seen}): the hint is for CPU hosts")
    out = tmp_path / "run.json"
    fail = "raise SystemExit(3)"  # what a launch on a host with no driver ends as
    rec = warmkit_cli("record", "-o", str(out), "--", sys.executable, "-c", fail, cwd=tmp_path)
    assert rec.returncode == 3
    hints = [line for line in rec.stderr.splitlines() if "no backend sees a GPU" in line]
    assert len(hints) == 1, rec.stderr
    assert "the command failed (exit 3) and compiled nothing" in hints[0]
    assert "record on a GPU host" in hints[0]


# -- --json is one JSON document on stdout ----------------------------------------------------


def test_record_json_keeps_the_commands_own_stdout_off_the_json(tmp_path: Path) -> None:
    out = tmp_path / "run.json"
    child = [sys.executable, "-c", "print('the command speaks')"]
    rec = warmkit_cli("record", "--json", "-o", str(out), "--", *child, cwd=tmp_path)
    assert rec.returncode == 0, rec.stderr
    assert json.loads(rec.stdout)["output"] == [str(out)]  # all of stdout is the document
    assert "the command speaks" in rec.stderr  # the command's stdout goes to stderr under --json


def test_record_without_json_leaves_the_commands_stdout_alone(tmp_path: Path) -> None:
    child = [sys.executable, "-c", "print('the command speaks')"]
    rec = warmkit_cli("record", "-o", str(tmp_path / "r.json"), "--", *child, cwd=tmp_path)
    assert rec.stdout.startswith("the command speaks\nrecorded 0 specialization(s)")


# -- one cause, said once ---------------------------------------------------------------------


def _failed(kernel: str, n: int, error: str) -> Any:
    from warmkit import ReportEntry

    return ReportEntry(kernel, "fake", n, "failed", error=error)


def test_the_table_says_a_cause_shared_by_many_keys_once() -> None:
    from warmkit import WarmupReport

    down = "StoreError: kernel '{}': the store redis://127.0.0.1:1 is down; start it"
    entries = [_failed(f"k{i % 4}", i, down.format(f"k{i % 4}")) for i in range(96)]
    entries.append(_failed("other", 0, "TypeError: kernel 'other': bad warmup_args"))
    table = WarmupReport(enabled=True, entries=tuple(entries), seconds=1.0).table()
    failed = [line for line in table.splitlines() if line.startswith(("FAILED", "    keys:"))]
    assert failed == [
        (
            "FAILED 96 key(s) of 4 kernel(s) (k0, k1, k2 and 1 more): StoreError: the store "
            "redis://127.0.0.1:1 is down; start it"
        ),
        "    keys: k0 0, k1 1, k2 2 and 93 more",
        "FAILED other 0: TypeError: kernel 'other': bad warmup_args",  # alone: as it was
    ]


def test_needs_tuning_is_one_summary_line_not_one_per_key() -> None:
    from warmkit import ReportEntry, WarmupReport

    entries = tuple(
        ReportEntry(f"k{i % 3}", "fake", i, "compiled", tuning="needs-device") for i in range(150)
    )
    table = WarmupReport(enabled=True, entries=entries, seconds=1.0).table()
    lines = [line for line in table.splitlines() if "NEEDS TUNING" in line]
    assert lines == [
        (
            "NEEDS TUNING ON A DEVICE: 150 autotuned key(s) of 3 kernel(s) (k0, k1, k2): every "
            "config compiled, no known winner; a warmup on the GPU host benchmarks them once (--json "
            "gives each key's 'tuning')"
        )
    ]


# -- simple commands import no backend they do not need ---------------------------------------


def test_list_reports_tilelang_and_cutedsl_without_importing_them(tmp_path: Path) -> None:
    code = (
        "import json, sys\n"
        "from warmkit._cli.commands import main\n"
        "rc = main(['list', '--json'])\n"
        "heavy = sorted(m for m in ('tilelang', 'tvm', 'cutlass', 'torch') if m in sys.modules)\n"
        "print(json.dumps(heavy), file=sys.stderr)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stderr.strip().splitlines()[-1]) == []
    backends = {b["name"]: b for b in json.loads(proc.stdout)["backends"]}
    for name, dist in (("tilelang", "tilelang"), ("cutedsl", "nvidia-cutlass-dsl")):
        if name not in backends:
            continue
        try:
            version = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            assert backends[name]["available"] is False
            continue
        assert (backends[name]["available"], backends[name]["version"]) == (True, version)


# -- a misspelt WARMKIT_* name --------------------------------------------------------------


def test_a_misspelt_variable_is_named_once_with_a_did_you_mean(tmp_path: Path) -> None:
    proc = warmkit_cli(
        "list", cwd=tmp_path, env={"WARMKIT_TARGTE": "cuda:90", "WARMKIT_TRITON_VERIFY": "0"}
    )
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if "not a warmkit variable" in line]
    assert lines == [
        (
            "WARNING warmkit._envs: WARMKIT_TARGTE is set but is not a warmkit variable, so it is "
            "ignored; did you mean WARMKIT_TARGET? (docs/configuration.md lists them)"
        )
    ]  # a plugin's own variable (WARMKIT_TRITON_VERIFY) is not flagged


# -- list --check flags a kernel entry point that plan refuses -----------------------------


def test_list_check_flags_an_entry_point_that_is_not_a_kernel(capsys, fake_backend) -> None:
    from warmkit._cli.commands import main

    from . import _kernels

    fake_backend.add_dist(
        "raw-kernels", "0.1", kernels={"raw.fn": f"{_kernels.__name__}:next_pow2"}
    )
    assert main(["list"]) == 0  # without --check nothing is imported: listed as installed
    capsys.readouterr()
    assert main(["list", "--check"]) == 1
    out = capsys.readouterr().out
    (line,) = [x for x in out.splitlines() if "UNUSABLE" in x]
    assert line.startswith(
        f"    UNUSABLE: kernel 'raw.fn' resolves to {_kernels.next_pow2!r}, which is not a "
        "JitKernel subclass"
    )
    assert line.endswith("`warmkit plan` and `warmup` refuse it")
    assert main(["list", "--check", "--json"]) == 1
    raw = [k for k in json.loads(capsys.readouterr().out)["kernels"] if k["name"] == "raw.fn"]
    assert "not a JitKernel subclass" in raw[0]["problem"]


# -- progress a CI log can read -----------------------------------------------------------------


def test_line_progress_writes_a_line_per_tenth_and_the_last() -> None:
    import io

    from warmkit._warmup.report import LineProgress

    out = io.StringIO()
    bar = LineProgress(96, every=1e9, file=out)  # no time-based line in this test
    for _ in range(96):
        bar.update(1)
    bar.close()
    lines = out.getvalue().splitlines()
    assert [line.split(" (")[0] for line in lines] == [
        f"warmkit warmup: {n}/96 key(s)" for n in (10, 20, 30, 40, 50, 60, 70, 80, 90, 96)
    ]
    assert lines[-1].startswith("warmkit warmup: 96/96 key(s) (100%) after ")


def test_a_warmup_with_stderr_not_a_terminal_shows_progress_lines(capsys, fake_backend) -> None:
    import warmkit

    from ._kernels import PyKernel

    reg = warmkit.WarmupRegistry()
    reg.add(PyKernel, n=[1, 2], flag=[False, True])
    report = warmkit.warmup(warmkit.WarmupConfig(monitor="off", progress="auto"), reg)
    assert report.ok
    err = capsys.readouterr().err  # captured: not a terminal, as in CI
    lines = [line for line in err.splitlines() if line.startswith("warmkit warmup: ")]
    assert lines and lines[-1].startswith("warmkit warmup: 4/4 key(s) (100%) after ")
    assert "\r" not in err  # no bar redrawn into the log


# -- Ctrl-C does not kill the compilers that compile threads started ----------------------------


@pytest.mark.skipif(not hasattr(signal, "pthread_sigmask"), reason="POSIX signal masks")
def test_a_compile_threads_child_process_is_shielded_from_the_terminals_ctrl_c() -> None:
    from warmkit._warmup.runner import run

    probe = (
        "import signal; print(int(signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, [])))"
    )
    seen: dict[int, str] = {}
    ran_in: dict[int, int] = {}

    def compile_one(i: int) -> str:  # what a compile does: start a compiler process (ptxas)
        ran_in[i] = threading.get_ident()
        return subprocess.run(
            [sys.executable, "-c", probe], capture_output=True, text=True, check=True
        ).stdout.strip()

    run(
        [0, 1, 2, 3],
        compile_one,
        workers=2,
        timeout=None,
        on_done=lambda i, out: bool(seen.__setitem__(i, out)),
        on_timeout=lambda i, s: None,
        on_unrun=lambda i, why: None,
    )
    caller = threading.get_ident()
    # A compiler child of a compile thread blocks SIGINT: the terminal's Ctrl-C does not fail
    # a compile the warmup only abandons. One of the calling thread (which runs items itself)
    # does not: the Ctrl-C stops that item together with the warmup, as it would any code.
    assert seen == {i: "0" if ran_in[i] == caller else "1" for i in range(4)}
    assert set(ran_in.values()) - {caller}, "no item ran on a compile thread"
    assert signal.SIGINT not in signal.pthread_sigmask(signal.SIG_BLOCK, [])  # not in the caller
