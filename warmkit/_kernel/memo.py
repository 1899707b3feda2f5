"""Memoized ``dispatch``: a warmed call site pays a dict lookup, not a key build and hash.

Warmup already relies on ``dispatch`` being a function of its inputs: it
expands the space ahead of time and trusts the runtime to compute the same
keys. So a call whose inputs are all plain immutable scalars can be answered
from a memo, exactly: the memo is keyed by the input names, their values *and
their exact types* (``1``, ``True`` and ``1.0`` are equal in Python but are
different kernels), and it returns the very key object computed the first
time, which lets launch paths look their executor up by identity.

A dispatch is memoized when its source shows it uses ``self`` only as
``self.CompileKey`` (anything else could read instance state), or when the
class sets ``memoize_dispatch = True``; ``memoize_dispatch = False`` turns it
off (for a dispatch that reads a mutable module-level setting).
"""

from __future__ import annotations

import ast
import inspect
import logging
import textwrap
from collections.abc import Callable
from typing import Any

__all__ = ["MEMO_LIMIT", "REHEARSE_LIMIT", "install", "raw_dispatch", "rehearse"]

logger = logging.getLogger(__name__)

#: Entries per kernel class before the memo starts over (a call site whose
#: inputs never repeat must not grow memory without bound).
MEMO_LIMIT = 4096

#: Exact input types the memo accepts. Not float (``0.0 == -0.0``), not tuple
#: (``(1,) == (True,)``): equal values there may still be different kernels.
PLAIN_TYPES: frozenset[type] = frozenset({int, str, bool, type(None)})

#: Registered points per kernel class that a device warmup rehearses (``rehearse``): the
#: identity lookup keeps ``LAUNCH_LOOKUP_LIMIT`` (1024) keys, and rehearsing more would evict them.
REHEARSE_LIMIT = 256

# Names that make a body's reads unknowable, or reach state beyond its inputs.
_OPAQUE = {"locals", "vars", "eval", "exec", "globals", "super", "getattr", "id"}


def raw_dispatch(cls: type) -> Callable[..., Any]:
    """The class's own ``dispatch`` function, under any memo this module wrapped around it."""
    fn = cls.dispatch  # type: ignore[attr-defined]
    return getattr(fn, "_warmkit_raw", fn)


def rehearse(kernel: Any, points: list[dict[str, Any]]) -> int:
    """Make each point's first launch a memo hit: the launch-time half of a device warmup.

    A launch's first ``dispatch`` of inputs it never saw builds and hashes a
    key, and its first executor lookup hashes it again (measured: 5-13 us on the
    H200 host, and ~50 us for the first call in the process, against 4-6 us
    warm). For each single-point registration (plain scalars only: its inputs
    are what the launch passes), and each variant ``kernel.runtime_inputs``
    gives, this calls the memoized ``dispatch`` exactly as a launch does, and
    when the key it returns was warmed up, fills the identity lookup with that
    very key object (``JitKernel.launch_executor``, which never compiles here).
    A dispatch that raises on a variant is skipped: the variant was a guess.

    Args:
        kernel: a kernel instance (memo and lookup are per class).
        points: the inputs of its single-point registrations.

    Returns:
        How many (point, variant) launch forms now hit the memo and the identity lookup.
    """
    cls = type(kernel)
    if raw_dispatch(cls) is cls.dispatch:  # not memoized: nothing to fill
        return 0
    executors, done = cls.executors, 0
    for inputs in points[:REHEARSE_LIMIT]:
        try:
            variants = list(cls.runtime_inputs(inputs))
        except Exception as exc:  # noqa: BLE001 - an optimisation: never fails a warmup
            logger.warning(
                "%s.runtime_inputs(%r) raised %r: not rehearsed", cls.__qualname__, inputs, exc
            )
            continue
        for variant in variants:
            try:
                key = kernel.dispatch(**variant)
                if key in executors:
                    kernel.launch_executor(key)  # in executors: never compiles
                    done += 1
            except Exception as exc:  # noqa: BLE001 - a guessed variant may not be accepted
                logger.debug("%s: dispatch(**%r) not rehearsed: %s", cls.__qualname__, variant, exc)
    return done


def install(cls: type, extra_types: frozenset[type] = frozenset()) -> bool:
    """Wrap ``cls.dispatch`` in a memo of its own (per class) when that is exact; True if it did.

    Args:
        cls: a concrete ``JitKernel`` subclass (its ``dispatch`` already checked).
        extra_types: more exact input types that are immutable values (``torch.dtype``).
    """
    raw = raw_dispatch(cls)
    setting = getattr(cls, "memoize_dispatch", None)
    if setting is None:
        setting = _uses_only_its_inputs(raw)
        if not setting:
            logger.debug(
                "%s.dispatch reads more than its inputs (self beyond self.CompileKey); "
                "not memoized (set memoize_dispatch = True if it is a function of its inputs)",
                cls.__qualname__,
            )
    if not setting:
        if raw is not cls.dispatch:  # type: ignore[attr-defined]
            cls.dispatch = raw  # type: ignore[attr-defined]  # a parent's memo is not ours
        return False
    cls.dispatch = _memoized(raw, PLAIN_TYPES | extra_types)  # type: ignore[attr-defined]
    return True


class _Missing:
    """An input the call did not pass (its default applies inside dispatch)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<not given>"


_MISSING = _Missing()


def _memoized(raw: Callable[..., Any], plain: frozenset[type]) -> Callable[..., Any]:
    memo: dict[tuple[Any, ...], Any] = {}
    plain = plain | {_Missing}
    params = inspect.signature(raw).parameters.values()
    names = [p.name for p in params if p.kind is p.KEYWORD_ONLY]
    var_kw = any(p.kind is p.VAR_KEYWORD for p in params)

    def miss(self: Any, args: tuple[Any, ...], inputs: dict[str, Any], mkey: Any) -> Any:
        if args:
            return raw(self, *args, **inputs)  # dispatch is keyword-only: its own error
        key = raw(self, **inputs)
        if mkey is not None and plain.issuperset(map(type, mkey[: len(mkey) // 2])):
            if len(memo) >= MEMO_LIMIT:
                memo.clear()
            memo[mkey] = key
        return key

    if var_kw or not names or not all(n.isidentifier() for n in names):

        def dispatch(self: Any, *args: Any, **inputs: Any) -> Any:
            # (name, value) pairs, then the exact types: 1, True and 1.0 are distinct keys
            mkey = (*inputs.items(), *map(type, inputs.values()))
            try:
                return memo[mkey]
            except (KeyError, TypeError):
                pass
            values = tuple(inputs.values())
            ok = plain.issuperset(map(type, values)) and not args
            key = raw(self, *args, **inputs)
            if ok:
                if len(memo) >= MEMO_LIMIT:
                    memo.clear()
                memo[mkey] = key
            return key

    else:
        # Generated with the inputs as named keyword parameters, as attrs generates
        # its methods: no kwargs dict, and the memo key is one BUILD_TUPLE.
        sig = ", ".join(f"{n}=_MISSING" for n in names)
        values = ", ".join(names)
        types = ", ".join(f"type({n})" for n in names)
        given = ", ".join(f"({n!r}, {n})" for n in names)
        src = (
            f"def dispatch(self, *args, {sig}):\n"
            "    mkey = None\n"
            "    if not args:\n"
            f"        mkey = ({values}, {types},)\n"
            "        try:\n"
            "            return memo[mkey]\n"
            "        except KeyError:\n"
            "            pass\n"
            "        except TypeError:\n"
            "            mkey = None\n"
            f"    inputs = {{k: v for k, v in ({given},) if v is not _MISSING}}\n"
            "    return miss(self, args, inputs, mkey)\n"
        )
        namespace: dict[str, Any] = {"memo": memo, "miss": miss, "_MISSING": _MISSING}
        exec(compile(src, f"<warmkit memoized {raw.__qualname__}>", "exec"), namespace)  # noqa: S102
        dispatch = namespace["dispatch"]

    dispatch.__name__ = raw.__name__
    dispatch.__qualname__ = raw.__qualname__
    dispatch.__doc__ = raw.__doc__
    dispatch.__wrapped__ = raw  # type: ignore[attr-defined]  # inspect.signature/getsource
    dispatch._warmkit_raw = raw  # type: ignore[attr-defined]
    dispatch._warmkit_memo = memo  # type: ignore[attr-defined]
    return dispatch


def _uses_only_its_inputs(fn: Callable[..., Any]) -> bool:
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError, IndentationError):
        return False
    func = next(
        (n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))), None
    )
    if func is None or not func.args.args:
        return False
    self_name = func.args.args[0].arg
    allowed: set[int] = set()
    for node in ast.walk(func):
        if isinstance(node, (ast.Global, ast.Nonlocal, ast.Yield, ast.YieldFrom, ast.Await)):
            return False
        if (
            isinstance(node, ast.Attribute)
            and node.attr == "CompileKey"
            and isinstance(node.value, ast.Name)
            and node.value.id == self_name
        ):
            allowed.add(id(node.value))
    for node in ast.walk(func):
        if isinstance(node, ast.Name):
            if node.id in _OPAQUE:
                return False
            if node.id == self_name and id(node) not in allowed:
                return False
    return True
