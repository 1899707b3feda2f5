"""Differences between Python versions that warmkit works around, and its use of the collector.

Every version branch of the core, and every ``gc`` call: :func:`gc_paused` (a
manifest load, planning), :func:`kept_out_of_gc` (a warmup), the freeze accounting.

**``ast.parse`` from two threads at once** can fail with ``SystemError: AST
constructor recursion depth mismatch`` on CPython 3.11.0-3.11.7 and
3.12.0-3.12.1 (CPython gh-106905, fixed in 3.11.8 and 3.12.2). The converter
from the parser's tree to ``ast`` objects counted its depth in one
interpreter-wide field; when a garbage collection inside it runs a finalizer,
the GIL can pass to another thread's conversion, and the count no longer
matches. Every DSL frontend parses its kernel's source with ``ast.parse``
(Triton's ``JITFunction.parse``, TileLang's TVM script parser, CuTe DSL's
preprocessor), so two compiles in two threads can fail for no fault of the
key.

:func:`ast_parse_serialized` makes ``ast.parse`` take one lock, on those
Pythons only, while warmkit's own threads may compile: during ``warmup()``
and ``prepare()``'s setup. It changes nothing else: the conversion holds the
GIL apart from that finalizer window, so one parse at a time costs the
compiles no parallelism. Code that bound ``from ast import parse`` before is
not covered; no frontend warmkit supports does that.

**The collector's permanent generation is not empty at startup** on CPython
3.12: it holds the immortal ``__bases__`` / ``__mro__`` tuples of the static
built-in types (about 375; their immortalization, gh-84436, put them there).
warmkit freezes what a warmup or a manifest load keeps (``gc.freeze``) only
when the process froze nothing itself, since ``gc.unfreeze`` would thaw that
too: :func:`process_froze_objects` tells the two apart by the count read when
warmkit is imported (:data:`STARTUP_FROZEN`), where ``gc.get_freeze_count()``
alone took 3.12's tuples for a process's own and never froze anything
(0.7-2.8 us of collection per key at 100,000 keys on the H200 host). The
tuples are thawed with the rest at the end: immortal, they only join the
walks of the oldest generation. A process that froze objects before
importing warmkit (or froze fewer than that many) is not told apart on 3.12
(its objects are thawed after a warmup); freezing after imports, as pre-fork
servers do, is.

**``site`` is still being imported while ``sitecustomize`` runs**: Python
imports ``sitecustomize`` from the last line of ``site``'s own import, so the
main thread holds ``site``'s module lock, and another thread's ``import site``
waits for it. The startup hook of ``warmkit run`` / ``record`` warms up from
``sitecustomize`` and waits for its compile threads, so a compile thread that
imported torch (``cuda.pathfinder`` imports ``site``) deadlocked the command.
:func:`site_import_done` marks ``site`` imported: its body has run by then
(``main()`` is its last line), and CPython 3.11-3.13 takes a module's lock
only while its ``__spec__._initializing`` is true.

**``sysconfig``'s first use is not thread-safe** before CPython 3.13: the first
``sysconfig.get_config_vars()`` publishes an empty dict, then fills it, so a
thread that reads a variable meanwhile gets None. Triton's knobs read
``sysconfig.get_config_var("EXE")`` on first use, and ``prepare()``'s thread
failed with "can only concatenate str (not "NoneType") to str" while the main
thread's imports read ``sysconfig`` (seen once in CI). :func:`settle_sysconfig`
fills it in the calling thread before warmkit starts a thread of its own.

Counting is not free on any version: ``gc.get_freeze_count()`` walks the
permanent generation, ~100 ns an object (18 ms with torch imported and the heap
frozen). A warmup counts once, at its start, and holds :func:`known_frozen`
while its heap is frozen, so the checks nested in it (planning, grouping)
walk nothing; before that, a 4-key warmup in a process with torch imported
took 36 ms, two walks of the heap the warmup itself had frozen.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import gc
import logging
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any, Protocol

__all__ = [
    "AST_PARSE_RACES",
    "STARTUP_FROZEN",
    "ast_parse_serialized",
    "gc_paused",
    "kept_out_of_gc",
    "known_frozen",
    "process_froze_objects",
    "settle_sysconfig",
    "site_import_done",
]

logger = logging.getLogger(__name__)

#: Whether concurrent ``ast.parse`` calls can fail on this Python (CPython gh-106905).
AST_PARSE_RACES = sys.implementation.name == "cpython" and (
    (3, 11) <= sys.version_info[:3] < (3, 11, 8) or (3, 12) <= sys.version_info[:3] < (3, 12, 2)
)

#: Objects in the collector's permanent generation when warmkit was imported: the interpreter's
#: own (CPython 3.12's immortal type tuples), 0 on the other Pythons.
STARTUP_FROZEN = gc.get_freeze_count() if sys.version_info[:2] == (3, 12) else 0


def site_import_done() -> None:
    """Let other threads import ``site`` while ``sitecustomize`` runs (see the module's docstring)."""
    spec = getattr(sys.modules.get("site"), "__spec__", None)
    if spec is not None and getattr(spec, "_initializing", False):
        spec._initializing = False


def settle_sysconfig() -> None:
    """Fill ``sysconfig``'s variables in this thread, before it starts others (module docstring).

    About 1 ms once per process (it reads ``_sysconfigdata``); a dict lookup after that.
    """
    import sysconfig

    sysconfig.get_config_vars()


_frozen_lock = threading.Lock()
_frozen_blocks = 0  # known_frozen() blocks open now, over every thread


def process_froze_objects() -> bool:
    """Whether the process froze objects itself (``gc.freeze``), beyond the interpreter's own.

    ``gc.get_freeze_count()`` walks the whole permanent generation (~100 ns an
    object: 18 ms once torch is imported and frozen), so inside a
    :func:`known_frozen` block the answer is ``True`` without a count.
    """
    return _frozen_blocks > 0 or gc.get_freeze_count() > STARTUP_FROZEN


@contextlib.contextmanager
def known_frozen() -> Iterator[None]:
    """Inside the block, :func:`process_froze_objects` is ``True`` at once.

    For a caller that knows the permanent generation holds objects (its own
    ``gc.freeze()``, or the process's, counted once): the checks nested in it
    then walk nothing. ``True`` is the safe answer either way: it only keeps
    warmkit from freezing and thawing.
    """
    global _frozen_blocks
    with _frozen_lock:
        _frozen_blocks += 1
    try:
        yield
    finally:
        with _frozen_lock:
            _frozen_blocks -= 1


_parse_lock = threading.RLock()  # one conversion at a time; re-entrant for a finalizer's parse
_install_lock = threading.Lock()  # guards the two below
_depth = 0  # blocks inside ast_parse_serialized(), over every thread
_installed: tuple[Callable[..., Any], Callable[..., Any]] | None = None  # (original, wrapper)


def _serialized(parse: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(parse)
    def serialized_parse(*args: Any, **kwargs: Any) -> Any:
        with _parse_lock:
            return parse(*args, **kwargs)

    return serialized_parse


@contextlib.contextmanager
def ast_parse_serialized() -> Iterator[None]:
    """Inside the block, ``ast.parse`` calls run one at a time, where this Python needs it.

    Re-entrant and safe to enter from several threads at once: ``ast.parse`` is
    replaced when the first block opens and put back when the last one closes.
    A replacement someone else installed in between is left in place (theirs
    then calls ours, which keeps working).
    """
    global _depth, _installed
    if not AST_PARSE_RACES:
        yield
        return
    with _install_lock:
        if _depth == 0:
            original = ast.parse
            _installed = (original, _serialized(original))
            ast.parse = _installed[1]
            logger.debug("warmkit: ast.parse serialized (CPython gh-106905 on %s)", sys.version)
        _depth += 1
    try:
        yield
    finally:
        with _install_lock:
            _depth -= 1
            if _depth == 0 and _installed is not None:
                original, wrapper = _installed
                if ast.parse is wrapper:
                    ast.parse = original
                _installed = None


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """No cyclic garbage collection in the block: a manifest's load keeps all it builds.

    Loading makes ~10 objects per entry and frees none, so each collection
    (the oldest generation grows with the heap) only walks them: ~20 % of a
    100k-entry load. Collection resumes after, as it was, with the block's
    objects in the oldest generation.
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        if not process_froze_objects():
            # What the block made is long-lived: straight into the oldest generation (a
            # freeze and a thaw move it there without a walk), or the next young
            # collection walks all of it (~60 ms after a 100k-entry load).
            gc.freeze()
            gc.unfreeze()
        gc.enable()


class Keep(Protocol):
    """``keep(collect=True)``: what :func:`kept_out_of_gc` yields."""

    def __call__(self, collect: bool = True) -> None: ...


def keep_nothing(collect: bool = True) -> None:
    """The ``Keep`` of a warmup that keeps nothing out of the collector."""


@contextlib.contextmanager
def kept_out_of_gc() -> Iterator[Keep]:
    """Garbage collection in the block skips what existed before it, and what ``keep()`` keeps.

    A warmup keeps what it makes (keys, executors, report entries), and each
    full collection walks every tracked object again: the loaded manifest,
    the plan. At 100,000 keys that was 2-13 us a key. ``gc.freeze`` puts
    them out of the collector's walks until the block ends. A frozen object
    is never collected meanwhile, so garbage is collected before each freeze:
    the young generations at the start (cheap), everything not yet frozen at
    each ``keep()`` (cheap too: the rest is frozen). ``keep(False)`` skips
    that, for what was just built with the collector paused (the plan).
    Garbage already in the oldest generation when the block starts stays
    until it ends: an engine that drops a large object graph before warming
    up should ``gc.collect()`` first.

    Nothing is frozen when the process froze objects itself (a pre-fork
    server): ``gc.unfreeze`` would thaw those too. That is counted once, here
    (a walk of the frozen heap); the checks inside find it known. CPython 3.12's
    own frozen objects do not count (``STARTUP_FROZEN``). (A ``gc.freeze()`` another
    thread makes during the warmup is thawed by it: one permanent generation.)
    """
    if not gc.isenabled():
        yield keep_nothing
        return
    if process_froze_objects():
        with known_frozen():
            yield keep_nothing
        return

    def keep(collect: bool = True) -> None:
        if collect:
            gc.collect()
        gc.freeze()

    gc.collect(1)
    gc.freeze()
    try:
        with known_frozen():
            yield keep
    finally:
        gc.unfreeze()
