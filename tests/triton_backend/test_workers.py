"""Compile worker processes (warmkit._warmup.workers) with real Triton compiles for cuda:90 on this CPU host."""

from __future__ import annotations

import os
import pickle

import pytest

import warmkit
from warmkit._warmup import workers as _workers

from ._kernels import WorkerAdd

TARGET = "cuda:90"


@pytest.fixture(scope="module", autouse=True)
def _stop_workers():
    yield
    _workers.shutdown()  # one pool for the module: spawning imports torch and Triton


@pytest.fixture
def pids(tmp_path, monkeypatch):
    path = tmp_path / "pids.txt"
    monkeypatch.setenv(WorkerAdd.PIDS_ENV, str(path))
    WorkerAdd.clear_executors()
    return path


def _read(path):
    return {int(p) for p in path.read_text().split()} if path.exists() else set()


def _registry(blocks):
    reg = warmkit.WarmupRegistry()
    reg.add(WorkerAdd, dtype="float32", n=4096, block=list(blocks))
    return reg


def _warmup(reg, **kw):
    return warmkit.warmup(
        warmkit.WarmupConfig(target=TARGET, progress="off", monitor="off", **kw), reg
    )


def test_processes_compile_into_the_shared_cache_and_the_parent_hits(pids, monkeypatch):
    monkeypatch.setenv("WARMKIT_COMPILE_PROCESSES", "on")
    calls = []
    queue_all, cancel_queued = _workers._Workers.queue_all, _workers._Workers.cancel_queued
    monkeypatch.setattr(
        _workers._Workers,
        "queue_all",
        lambda self, items, skip: (
            calls.append(("queue", len(items))) or queue_all(self, items, skip)
        ),
    )
    monkeypatch.setattr(
        _workers._Workers,
        "cancel_queued",
        lambda self: calls.append(("cancel", len(self._queued))) or cancel_queued(self),
    )
    report = _warmup(_registry([32, 64, 128, 256]), jobs=2)
    assert [e.status for e in report.entries] == ["compiled"] * 4, report.table()
    # the group queued at once, at its first cold key; a key whose entry a worker wrote before
    # the parent reached it is loaded without waiting on its (finished) future
    assert calls[0] == ("queue", 4) and [c for c, _ in calls] == ["queue", "cancel"]
    workers = _read(pids) - {os.getpid()}
    assert workers, "no key was compiled in a worker process"
    # the parent's own compile of each key found the worker's entry: a second process-free
    # warmup in this process (executors dropped) is all disk hits
    WorkerAdd.clear_executors()
    monkeypatch.setenv("WARMKIT_COMPILE_PROCESSES", "off")
    again = _warmup(_registry([32, 64, 128, 256]), jobs=1)
    assert [e.status for e in again.entries] == ["cached"] * 4


def test_a_worker_that_dies_fails_that_key_only_and_never_hangs(pids, monkeypatch):
    monkeypatch.setenv("WARMKIT_COMPILE_PROCESSES", "on")
    with pytest.raises(warmkit.WarmupError) as info:
        _warmup(_registry([32, 13 * 16, 64]), jobs=2, on_error="collect")
    report = info.value.report
    by_block = {e.key.block: e for e in report.entries}
    dead = by_block[13 * 16]
    assert dead.status == "failed" and isinstance(dead.exception, warmkit.WorkerDiedError)
    assert "exit code 9" in dead.error and "tests.WorkerAdd" in dead.error
    assert by_block[32].status == "compiled" and by_block[64].status == "compiled"
    # the pool replaced the dead worker: the next warmup still uses processes
    report = _warmup(_registry([512]), jobs=2)
    assert report.entries[0].status == "compiled"


def test_auto_keeps_two_keys_on_two_jobs_on_threads_even_with_a_started_pool(pids):
    _workers.start_workers(2)  # its workers may still be starting: 2 keys would wait for them
    # blocks no other test here warms: on a GPU host an earlier test's device compile of a key
    # stays in Triton's memory (a hit, whatever the cache directory)
    report = _warmup(_registry([16, 1024]), jobs=2)
    assert [e.status for e in report.entries] == ["compiled"] * 2
    assert _read(pids) == {os.getpid()}


def test_no_workers_inside_a_cache_scope(tmp_path):
    from warmkit_triton import TritonBackend

    backend = TritonBackend()
    assert backend.worker_target(TARGET) == TARGET
    with backend.cache_scope(tmp_path / "redirected"):
        assert backend.worker_target(TARGET) is None
        assert _workers.worker_pool(backend, TARGET, keys=100, jobs=8) is None


def test_prepare_workers_runs_the_backends_setup_in_each_started_worker():
    from warmkit._plugin.discovery import get_backend

    size = _workers.start_workers(2)
    futures = _workers.prepare_workers("triton", get_backend("triton"), TARGET)
    assert len(futures) == size
    done = [f.result(timeout=300) for f in futures]
    assert all(ran for _pid, ran, _times in done)  # Triton has a setup (warmkit_triton._setup)
    assert os.getpid() not in {pid for pid, _, _ in done}  # it ran in the workers, not here
    for _pid, _ran, (imports, imported, setup, ready) in done:  # what the debug log reports
        assert imports <= imported <= setup <= ready
    # a backend that cannot compile in workers gets no task
    assert _workers.prepare_workers("fake", object(), TARGET) == []


def test_prime_worker_compiles_for_the_target_into_a_throwaway_cache(triton_cache):
    from triton import knobs
    from warmkit_triton import _triton_api as api

    from warmkit._plugin.discovery import get_backend

    backend = get_backend("triton")
    assert isinstance(backend, warmkit.PrimesWorkers)
    compiles = []
    knobs.compilation.listener = lambda **kw: compiles.append(kw.get("cache_hit"))
    before = sorted(p.name for p in triton_cache.glob("*"))
    backend.prime_worker(TARGET)  # the real thing: a Triton compile for sm_90
    assert compiles == [False]  # one real compile ...
    assert sorted(p.name for p in triton_cache.glob("*")) == before  # ... not in the real cache
    assert api.cache_dir() == str(triton_cache)  # and the cache directory is back


class _Pool:
    """pebble's ``schedule`` as a test seam: records what was asked, futures the test settles."""

    def __init__(self):
        self.asked, self.futures, self.answer = [], [], None

    def schedule(self, fn, args, timeout=None):
        from concurrent.futures import Future

        self.asked.append(pickle.loads(args[1]))
        future = Future()
        if self.answer is not None:
            future.set_result(self.answer)
        self.futures.append(future)
        return future


def test_a_group_is_queued_in_order_and_what_no_warmup_took_is_cancelled():
    pool = _Pool()
    workers = _workers._Workers(pool, TARGET)
    kernel = WorkerAdd()
    items = [(kernel, WorkerAdd.CompileKey("float32", 4096, b)) for b in (32, 64, 128, 256)]
    workers.queue_all(items, lambda k, key: key.block == 64)  # e.g. already loaded here
    assert [key.block for key in pool.asked] == [32, 128, 256]  # all at once, before any result
    first = pool.futures[0]
    first.set_result(("compiled", 1, 0.0, 0.1))
    assert workers.compile(items[0]) == "compiled"
    assert len(pool.asked) == 3  # the queued future, not a second submission
    pool.futures[1].set_running_or_notify_cancel()  # a worker took 128: it runs on
    workers.cancel_queued()
    assert not pool.futures[1].cancelled() and pool.futures[2].cancelled()
    # after the queue: one by one again
    pool.answer = ("cached", 1, 0.0, 0.1)
    assert workers.compile(items[2]) == "cached"
    assert len(pool.asked) == 4


def test_a_pool_that_refuses_the_queue_is_a_warning_naming_the_key_and_nothing_is_lost(caplog):
    class Refusing(_Pool):
        def schedule(self, fn, args, timeout=None):
            if len(self.asked) == 1:
                self.asked.append(None)
                raise RuntimeError("pool is closing")
            return super().schedule(fn, args, timeout)

    pool = Refusing()
    workers = _workers._Workers(pool, TARGET)
    kernel = WorkerAdd()
    items = [(kernel, WorkerAdd.CompileKey("float32", 4096, b)) for b in (32, 64, 128)]
    with caplog.at_level("WARNING", logger="warmkit._warmup.workers"):
        workers.queue_all(items, lambda k, key: False)
    (message,) = [r.getMessage() for r in caplog.records]
    assert "tests.WorkerAdd" in message and "block=64" in message and "pool is closing" in message
    pool.answer = ("compiled", 1, 0.0, 0.1)
    assert [workers.compile(item) for item in items[1:]] == ["compiled", "compiled"]  # asked now


def test_a_warm_restart_never_starts_nor_waits_for_the_pool(pids, monkeypatch):
    """The parent probes each key's entry first: only a cold key starts the workers."""
    monkeypatch.setenv("WARMKIT_COMPILE_PROCESSES", "on")
    started = []
    inner = _workers.worker_pool
    monkeypatch.setattr(
        _workers, "worker_pool", lambda *a, **kw: started.append(a[2]) or inner(*a, **kw)
    )
    blocks = [2048, 4096, 8192]
    report = _warmup(_registry(blocks[:2]), jobs=2)
    assert [e.status for e in report.entries] == ["compiled"] * 2 and started == [2]
    WorkerAdd.clear_executors()  # as a new process: only the disk cache
    started.clear()
    pids.unlink(missing_ok=True)
    report = _warmup(_registry(blocks[:2]), jobs=2)
    assert [e.status for e in report.entries] == ["cached"] * 2
    assert started == [] and _read(pids) <= {os.getpid()}
    # one cold key among warm ones: the pool starts for it, and the warm ones still load here
    WorkerAdd.clear_executors()
    report = _warmup(_registry(blocks), jobs=2)
    assert sorted(e.status for e in report.entries) == ["cached", "cached", "compiled"]
    assert started == [3]


def test_a_warm_restart_of_autotuned_keys_never_starts_the_pool(monkeypatch):
    """An autotuned key has no entry key to probe: unknown is not cold (flash-linear-attention's
    warm restart started 16 workers for its autotuned keys, ~2.9 s on an H100)."""
    from ._autotune_kernels import TunedScale

    monkeypatch.setenv("WARMKIT_COMPILE_PROCESSES", "on")
    started = []
    inner = _workers.worker_pool
    monkeypatch.setattr(
        _workers, "worker_pool", lambda *a, **kw: started.append(a[2]) or inner(*a, **kw)
    )
    reg = warmkit.WarmupRegistry()
    reg.add(TunedScale, dtype=["float32", "float16", "bfloat16"], n=4096)
    TunedScale.clear_executors()
    report = _warmup(reg, jobs=2)
    # cold: the first key compiled here shows the group is cold, and the pool starts for the rest
    assert [e.status for e in report.entries] == ["compiled"] * 3 and started == [3]
    TunedScale.clear_executors()  # as a new process: only the disk cache
    started.clear()
    report = _warmup(reg, jobs=2)
    assert [e.status for e in report.entries] == ["cached"] * 3
    assert started == []
