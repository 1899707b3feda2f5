"""Worker processes always stop: a key past compile_timeout, Ctrl-C, a second Ctrl-C, the exit.

Each test breaks a compile on purpose in a real worker process (``_proc_kernels``):
it hangs, sleeps, segfaults, or ignores SIGTERM; then no process may be left.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import warmkit
from warmkit._warmup import workers as _workers
from warmkit.testing import backend_override

from ._proc_kernels import LOG_ENV, ProcBackend, ProcKernel, read_log

TESTS = Path(__file__).resolve().parents[1]


def _alive(pid: int) -> bool:
    """A process that runs (a zombie, exited but not reaped, counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):  # gone, or reaped between open and read
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _spawned_children() -> set[int]:
    """This process's live children that multiprocessing spawned: its workers (not the
    resource tracker, one per process that lives as long as it does)."""
    me, found = str(os.getpid()), set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if fields[1] == me and fields[0] != "Z" and b"spawn_main" in cmdline:
            found.add(int(entry.name))
    return found


def _wait_gone(pids, seconds=30.0):
    deadline = time.monotonic() + seconds
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return {p for p in pids if _alive(p)}


@pytest.fixture
def procs(tmp_path, monkeypatch):
    """4 worker processes that import nothing at start; stopped after the test."""
    monkeypatch.setenv(LOG_ENV, str(tmp_path / "log"))
    monkeypatch.setenv("WARMKIT_COMPILE_PROCESSES", "on")
    ProcKernel.clear_executors()
    _workers.shutdown()
    _workers.start_workers(4, modules=[])
    # started: compile_timeout counts from the key's start, a worker's spawn included
    while (
        len({f.result() for f in [_workers._pool.schedule(_workers._ping) for _ in range(8)]}) < 4
    ):
        pass
    with backend_override("fakeproc", ProcBackend()):
        yield tmp_path / "log"
    _workers.shutdown()


def _warmup(reg, **kw):
    config = warmkit.WarmupConfig(progress="off", monitor="off", on_error="collect", jobs=4, **kw)
    with pytest.raises(warmkit.WarmupError) as info:
        warmkit.warmup(config, reg)
    return {(e.key.mode, e.key.n): e for e in info.value.report.entries}


@pytest.mark.parametrize("mode", ["hang", "sleep", "ignore_term"])
def test_a_key_past_compile_timeout_kills_its_worker_and_fails_that_key_only(procs, mode):
    reg = warmkit.WarmupRegistry()
    reg.add(ProcKernel, mode="ok", n=[0, 1, 2, 3])
    reg.add(ProcKernel, mode=mode, n=[0, 1])  # two of the four workers stuck ...
    reg.add(ProcKernel, mode="ok", n=[4, 5, 6, 7])  # ... the other two go on
    by_key = _warmup(reg, compile_timeout=1.0)
    assert [k for k, e in by_key.items() if e.status != "compiled"] == [(mode, 0), (mode, 1)]
    for n in range(2):
        bad = by_key[(mode, n)]
        assert bad.status == "failed" and isinstance(bad.exception, TimeoutError)
        assert "tests.ProcKernel" in bad.error and f"mode='{mode}'" in bad.error
        assert "compile_timeout=1s" in bad.error
        assert "worker process was killed and replaced" in bad.error
    ran_bad = {pid for pid, m, _ in read_log(procs) if m == mode}
    assert ran_bad and not _wait_gone(ran_bad)  # killed (SIGKILL for one ignoring SIGTERM)
    # replaced: the pool still compiles in processes
    again = warmkit.WarmupRegistry()
    again.add(ProcKernel, mode="ok", n=[10, 11, 12, 13, 14, 15, 16, 17])
    report = warmkit.warmup(warmkit.WarmupConfig(progress="off", monitor="off", jobs=4), again)
    assert report.count("compiled") == 8
    assert {pid for pid, _, _ in read_log(procs)} - ran_bad  # live workers took them
    workers = _spawned_children()
    _workers.shutdown()
    assert not _wait_gone(workers, 5.0) and not _spawned_children()


def test_a_segfault_fails_its_key_only_and_leaves_no_process(procs):
    reg = warmkit.WarmupRegistry()
    reg.add(ProcKernel, mode=["segv", "ok"], n=[0, 1, 2, 3])
    by_key = _warmup(reg)
    for n in range(4):
        bad = by_key[("segv", n)]
        assert by_key[("ok", n)].status == "compiled"
        assert isinstance(bad.exception, warmkit.WorkerDiedError)
        assert "exit code -11" in bad.error and "tests.ProcKernel" in bad.error
    _workers.shutdown()
    assert not _spawned_children()


def test_shutdown_never_waits_for_a_compile_that_never_ends(procs):
    """The process's exit (atexit: shutdown) with a worker stuck on a key no warmup waits for."""
    ignoring = _workers._pool.schedule(
        _workers._compile_in_worker,
        args=(
            "core._proc_kernels:ProcKernel",
            __import__("pickle").dumps(ProcKernel.CompileKey("ignore_term", 0)),
            "cpu",
            dict(os.environ),
        ),
    )
    deadline = time.monotonic() + 60
    while not read_log(procs) and time.monotonic() < deadline:
        time.sleep(0.05)
    (pid, _, _), *_ = read_log(procs)
    t0 = time.monotonic()
    _workers.shutdown()
    assert time.monotonic() - t0 < _workers.TERM_GRACE + 2.0  # pebble's close+join: forever
    assert not _alive(pid) and not _spawned_children()
    assert ignoring.done() or ignoring.cancel()


def _child(tmp_path, *args):
    env = dict(os.environ, PYTHONPATH=str(TESTS))
    proc = subprocess.Popen(
        [sys.executable, "-m", "core._sigint_proc_child", str(tmp_path), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
    deadline = time.monotonic() + 60
    while len(read_log(tmp_path / "log")) < 4 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(read_log(tmp_path / "log")) == 4  # every worker is stuck on a key
    return proc


def test_ctrl_c_stops_every_worker_starts_no_key_and_exits_within_2s(tmp_path):
    proc = _child(tmp_path)
    t_signal = time.monotonic()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    elapsed = time.monotonic() - t_signal
    assert proc.returncode == 130, err
    assert elapsed < 2.0, f"exit took {elapsed:.2f}s after SIGINT (workers that ignore SIGTERM)"
    assert [m for _, m, t in read_log(tmp_path / "log") if t > t_signal] == []  # none started
    report = json.loads(out)
    assert report["cancelled"] is True and report["totals"]["keys"] == 24
    assert report["totals"]["skipped"] == 24
    assert all("cancelled" in e["error"] for e in report["entries"])
    workers = {int(p) for p in (tmp_path / "pids").read_text().split()}
    workers |= {pid for pid, _, _ in read_log(tmp_path / "log")}
    assert not _wait_gone(workers, 5.0), "a worker process outlived the warmup"
    assert "cancelled (SIGINT)" in err and "Traceback" not in err


def test_a_second_ctrl_c_exits_at_once_and_leaves_no_worker(tmp_path):
    proc = _child(tmp_path, "stuck-scope")  # the first Ctrl-C's clean-up never ends
    proc.send_signal(signal.SIGINT)
    time.sleep(0.5)
    assert proc.poll() is None  # still in the clean-up
    t_signal = time.monotonic()
    proc.send_signal(signal.SIGINT)
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert time.monotonic() - t_signal < 2.0
    assert "second Ctrl-C: exiting now" in err
    workers = {int(p) for p in (tmp_path / "pids").read_text().split()}
    workers |= {pid for pid, _, _ in read_log(tmp_path / "log")}
    assert not _wait_gone(workers, 5.0), "a worker process outlived the process"


def test_a_pool_replaced_by_a_larger_one_is_stopped_at_shutdown_even_with_a_stuck_worker(procs):
    import pickle

    stuck = _workers._pool.schedule(
        _workers._compile_in_worker,
        args=(
            "core._proc_kernels:ProcKernel",
            pickle.dumps(ProcKernel.CompileKey("ignore_term", 7)),
            "cpu",
            dict(os.environ),
        ),
    )
    deadline = time.monotonic() + 60
    while not read_log(procs) and time.monotonic() < deadline:
        time.sleep(0.05)
    (pid, _, _), *_ = read_log(procs)
    _workers.start_workers(6, modules=[])  # the 4-worker pool is closed, its task runs on
    assert _alive(pid)
    _workers.shutdown()  # at exit: multiprocessing would otherwise wait for that worker forever
    assert not _alive(pid) and not _spawned_children()
    assert stuck.done() or stuck.cancel()
