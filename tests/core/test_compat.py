"""``warmkit._compat``: concurrent ``ast.parse`` on the CPythons where it races (gh-106905)."""

from __future__ import annotations

import ast
import gc
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest

import warmkit
from warmkit import _compat

from ._kernels import PyKernel

SOURCE = "\n".join(
    f"def f{i}(a, b):\n    return [x * a + b for x in range({i}) if (x % 3) and (a or b)]"
    for i in range(20)
)


class _Finalized:
    def __del__(self) -> None:  # a finalizer the collector runs inside a conversion
        pass


@pytest.fixture
def racy_interpreter() -> Iterator[None]:
    """Thread switches every microsecond and frequent collections: the race shows in ~20 ms."""
    interval, thresholds = sys.getswitchinterval(), gc.get_threshold()
    sys.setswitchinterval(1e-6)
    gc.set_threshold(10)
    try:
        yield
    finally:
        sys.setswitchinterval(interval)
        gc.set_threshold(*thresholds)


def parse_with_garbage(until: float, errors: list[BaseException]) -> None:
    """Parse SOURCE over and over, leaving a finalizable cycle each time, until ``until``."""
    while time.monotonic() < until and not errors:
        try:
            ast.parse(SOURCE)
        except SystemError as exc:
            errors.append(exc)
        cycle = _Finalized()
        cycle.self = cycle  # type: ignore[attr-defined]


def race(threads: int, seconds: float) -> list[BaseException]:
    errors: list[BaseException] = []
    until = time.monotonic() + seconds
    workers = [
        threading.Thread(target=parse_with_garbage, args=(until, errors)) for _ in range(threads)
    ]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    return errors


def test_the_flag_names_exactly_the_cpythons_with_the_bug():
    v = sys.version_info[:3]
    affected = (3, 11, 0) <= v <= (3, 11, 7) or (3, 12, 0) <= v <= (3, 12, 1)
    assert _compat.AST_PARSE_RACES is (affected and sys.implementation.name == "cpython")


@pytest.mark.skipif(not _compat.AST_PARSE_RACES, reason="this Python has the gh-106905 fix")
@pytest.mark.skipif(
    sys.version_info[:2] == (3, 12),
    reason="3.12 collects garbage only at the eval breaker, never inside the conversion, so this "
    "test's trigger (a finalizer in a collection there) cannot fire: no race in 20 s on 3.12.1 "
    "(CPython lists 3.12.0-3.12.1 as affected, so the guard stays on there)",
)
def test_unguarded_concurrent_parses_fail_here(racy_interpreter):
    """The control: without the guard, this test's race does fail on this Python."""
    errors = race(2, 20.0)  # stops at the first error (~20 ms on the 2-core box)
    assert errors and "recursion depth mismatch" in str(errors[0])


def test_guarded_concurrent_parses_never_fail(racy_interpreter):
    with _compat.ast_parse_serialized():
        assert race(3, 1.5) == []  # ~75x the time the unguarded race takes to fail


def test_warmup_compiles_in_threads_that_parse_without_the_race(racy_interpreter):
    """A frontend that parses in every compile (as Triton's and TileLang's do), on 2 threads."""
    PyKernel.hook = lambda key: parse_with_garbage(time.monotonic() + 0.3, errors)
    errors: list[BaseException] = []
    reg = warmkit.WarmupRegistry()
    reg.add(PyKernel, n=[1, 2, 3, 4])
    report = warmkit.warmup(warmkit.WarmupConfig(jobs=2, progress="off"), reg)
    assert errors == []
    assert [e.status for e in report.entries] == ["compiled"] * 4
    assert report.jobs == 2


def test_the_guard_installs_once_over_nested_and_concurrent_blocks_and_restores(monkeypatch):
    monkeypatch.setattr(_compat, "AST_PARSE_RACES", True)
    original = ast.parse
    inside = threading.Event()
    leave = threading.Event()
    seen: list[object] = []

    def other_thread() -> None:
        with _compat.ast_parse_serialized():
            seen.append(ast.parse)
            inside.set()
            leave.wait(10)

    with _compat.ast_parse_serialized():
        wrapper = ast.parse
        assert wrapper is not original and wrapper.__wrapped__ is original
        assert ast.parse("x + 1", mode="eval").body.op.__class__ is ast.Add
        with _compat.ast_parse_serialized():
            assert ast.parse is wrapper
        assert ast.parse is wrapper  # the inner block's exit leaves the outer one's
        t = threading.Thread(target=other_thread)
        t.start()
        assert inside.wait(10)
    assert ast.parse is wrapper  # the other thread's block is still open
    leave.set()
    t.join(10)
    assert seen == [wrapper]
    assert ast.parse is original


def test_the_guard_leaves_a_replacement_made_inside_it(monkeypatch):
    monkeypatch.setattr(_compat, "AST_PARSE_RACES", True)
    original = ast.parse
    try:
        with _compat.ast_parse_serialized():
            wrapper = ast.parse

            def theirs(*args, **kwargs):
                return wrapper(*args, **kwargs)

            ast.parse = theirs
        assert ast.parse is theirs  # not put back over someone else's replacement
        assert isinstance(ast.parse("1"), ast.Module)
        with _compat.ast_parse_serialized():  # wraps theirs, which calls the old wrapper
            assert ast.parse.__wrapped__ is theirs
            done = []
            t = threading.Thread(target=lambda: done.append(ast.parse("1")), daemon=True)
            t.start()
            t.join(10)  # the lock taken twice in one thread: re-entrant, no deadlock
            assert len(done) == 1 and isinstance(done[0], ast.Module)
        assert ast.parse is theirs
    finally:
        ast.parse = original


def test_the_guard_changes_nothing_on_a_fixed_python(monkeypatch):
    monkeypatch.setattr(_compat, "AST_PARSE_RACES", False)
    original = ast.parse
    with _compat.ast_parse_serialized():
        assert ast.parse is original


def test_warmup_and_prepares_setup_run_under_the_guard(monkeypatch):
    monkeypatch.setattr(_compat, "AST_PARSE_RACES", True)
    original = ast.parse
    during: list[bool] = []
    PyKernel.hook = lambda key: during.append(ast.parse is not original)
    reg = warmkit.WarmupRegistry()
    reg.add(PyKernel, n=[1, 2])
    warmkit.warmup(warmkit.WarmupConfig(jobs=2, progress="off"), reg)
    assert during == [True, True]
    assert ast.parse is original

    from warmkit._warmup import prepare as _prepare

    in_setup: list[bool] = []
    monkeypatch.setattr(
        _prepare, "_set_up_backends", lambda *a: in_setup.append(ast.parse is not original)
    )
    _prepare._setup(None, (), threading.Event())
    assert in_setup == [True]
    assert ast.parse is original


def test_a_fresh_process_has_frozen_nothing_of_its_own():
    """What the interpreter froze at startup (3.12) is not taken for the process's own freeze."""
    code = (
        "import gc; n = gc.get_freeze_count(); import warmkit; from warmkit import _compat as c; "
        "print(n, c.STARTUP_FROZEN, c.process_froze_objects()); gc.freeze(); "
        "print(c.process_froze_objects())"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split()
    startup, recorded, froze, froze_after = out
    assert recorded == (startup if sys.version_info[:2] == (3, 12) else "0")
    assert (froze, froze_after) == ("False", "True")


def _counting_freeze_count(monkeypatch) -> list[int]:
    """``gc.get_freeze_count`` counted: each call walks the whole permanent generation."""
    calls: list[int] = []
    count = gc.get_freeze_count

    def counted() -> int:
        calls.append(1)
        return count()

    monkeypatch.setattr(gc, "get_freeze_count", counted)
    return calls


def test_inside_known_frozen_the_check_walks_nothing_in_any_thread(monkeypatch):
    calls = _counting_freeze_count(monkeypatch)
    if _compat.process_froze_objects():
        pytest.skip("the test process froze objects itself")
    assert len(calls) == 1
    seen: list[bool] = []
    with _compat.known_frozen():
        with _compat.known_frozen():  # nested
            seen.append(_compat.process_froze_objects())
        seen.append(_compat.process_froze_objects())
        other = threading.Thread(target=lambda: seen.append(_compat.process_froze_objects()))
        other.start()
        other.join()
    assert seen == [True, True, True] and len(calls) == 1  # no count inside the block
    assert _compat.process_froze_objects() is False and len(calls) == 2  # counted again after


def test_known_frozen_closes_when_its_block_raises(monkeypatch):
    calls = _counting_freeze_count(monkeypatch)
    with pytest.raises(KeyError), _compat.known_frozen():
        raise KeyError("x")
    _compat.process_froze_objects()
    assert len(calls) == 1  # outside again: counted


_SYSCONFIG_CHILD = """
import sys, sysconfig, threading
import warmkit
from warmkit._warmup import runner

seen = []
start = threading.Thread.start

def start_and_look(self):
    # what a thread started now may read at once: a complete sysconfig, or None
    seen.append((self.name, sysconfig._CONFIG_VARS is not None and "EXE" in sysconfig._CONFIG_VARS))
    return start(self)

threading.Thread.start = start_and_look
which = sys.argv[1]
sysconfig._CONFIG_VARS = None  # as in a process that has not read it yet
if which == "prepare":
    warmkit.prepare(warmkit.WarmupConfig(target="cuda:90", jobs=1))
else:
    # with a timeout every item runs on a thread (without one, cheap items stay in this one)
    runner.run([1], lambda i: i, workers=1, timeout=60.0, on_done=lambda i, r: False,
               on_timeout=lambda i, s: None, on_unrun=lambda i, r: None)
print(seen)
"""


@pytest.mark.parametrize("which", ["prepare", "runner"])
def test_sysconfig_is_filled_before_warmkit_starts_a_thread(which: str) -> None:
    """A thread of prepare() or of a warmup's runner reading sysconfig while another thread
    filled it for the first time got None (CPython < 3.13): seen in CI as Triton's knobs
    failing with "can only concatenate str (not "NoneType") to str"."""
    out = subprocess.run(
        [sys.executable, "-c", _SYSCONFIG_CHILD, which],
        capture_output=True, text=True, timeout=120, check=True,
    ).stdout  # fmt: skip
    seen = ast.literal_eval(out.strip().splitlines()[-1])
    assert seen, "no thread was started"
    assert all(ok for _, ok in seen), seen
