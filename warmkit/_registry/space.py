"""Search spaces and their expansion over a kernel's ``dispatch``.

A *space* is the keyword values given to ``get_warmup_keys``,
``register_warmup`` and ``warmup``. Each keyword is one axis:

* ``IntRange(start, stop, step=1)`` is exactly ``range()``;
  ``IntRange(start, stop, advance=f)`` is ``start, f(start), ...`` while ``< stop``.
* ``Choices(*values)`` is exactly these values (a tuple stays one value).
* a ``list`` (or a ``range``) is alternatives.
* anything else, a tuple included, is one value. (vLLM split tuples into
  alternatives, which silently turned one shape into several.)

``zip_inputs(*rows)`` couples several inputs: each row is one point.

Expansion calls ``dispatch`` natively for every point, so warmup and runtime
can never disagree about a key.
"""

from __future__ import annotations

import inspect
import itertools
import logging
import math
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import attrs

__all__ = ["Choices", "DispatchInfo", "IntRange", "ZipGroup", "expand", "zip_inputs"]

logger = logging.getLogger(__name__)

#: The most values an ``IntRange(..., advance=f)`` may produce; guards against
#: an ``advance`` that grows too slowly to ever reach ``stop`` in practice.
MAX_ADVANCE_VALUES = 1_000_000


@attrs.frozen(init=False, repr=False)
class IntRange:
    """Integers from ``start`` below ``stop``.

    ``IntRange(start, stop, step=1)`` yields exactly ``range(start, stop, step)``.
    ``IntRange(start, stop, advance=f)`` yields ``start``, then ``f(v)`` while
    it is ``< stop``; ``f`` must grow strictly (``f(v) > v``).

    Args:
        start: the first value.
        stop: the exclusive bound.
        step: the stride, as for ``range`` (default 1).
        advance: a function from one value to the next, instead of ``step``.

    Raises:
        ValueError: ``step`` and ``advance`` both given; ``step == 0``; an
            empty range; ``advance`` that does not grow (``f(v) <= v``).
        TypeError: non-integer bounds, or ``advance`` not callable.
    """

    start: int
    stop: int
    step: int | None
    advance: Callable[[int], int] | None
    _values: Sequence[int] = attrs.field(eq=False, hash=False)

    def __init__(
        self,
        start: int,
        stop: int,
        step: int | None = None,
        *,
        advance: Callable[[int], int] | None = None,
    ) -> None:
        for what, v in (("start", start), ("stop", stop)):
            if not isinstance(v, int) or isinstance(v, bool):
                raise TypeError(f"IntRange {what} must be an int, got {v!r}")
        if step is not None and advance is not None:
            raise ValueError("IntRange takes either step or advance, not both")
        values: Sequence[int]
        if advance is None:
            if step is not None and (not isinstance(step, int) or isinstance(step, bool)):
                raise TypeError(f"IntRange step must be an int, got {step!r}")
            if step == 0:
                raise ValueError("IntRange step must not be zero")
            values = range(start, stop, 1 if step is None else step)
        else:
            if not callable(advance):
                raise TypeError(f"IntRange advance must be callable, got {advance!r}")
            values = tuple(_advance(start, stop, advance))
        if _axis_len(values) == 0:
            raise ValueError(
                f"IntRange({start}, {stop}{'' if step is None else f', {step}'}) is empty: "
                "an empty axis would silently produce no keys"
            )
        self.__attrs_init__(start, stop, step, advance, values)

    def __iter__(self) -> Iterator[int]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        if self.advance is not None:
            name = getattr(self.advance, "__name__", repr(self.advance))
            return f"IntRange({self.start}, {self.stop}, advance={name})"
        if self.step is not None:
            return f"IntRange({self.start}, {self.stop}, {self.step})"
        return f"IntRange({self.start}, {self.stop})"


def _advance(start: int, stop: int, f: Callable[[int], int]) -> Iterator[int]:
    v = start
    n = 0
    while v < stop:
        yield v
        n += 1
        if n > MAX_ADVANCE_VALUES:
            raise ValueError(
                f"IntRange({start}, {stop}, advance=...) produced more than "
                f"{MAX_ADVANCE_VALUES} values; use a faster-growing advance or a step"
            )
        nxt = f(v)
        if not isinstance(nxt, int) or isinstance(nxt, bool):
            raise TypeError(f"IntRange advance returned {nxt!r} for {v}; it must return an int")
        if nxt <= v:
            raise ValueError(f"IntRange advance must grow strictly: f({v}) = {nxt} <= {v}")
        v = nxt


@attrs.frozen(init=False)
class Choices:
    """Exactly these values, in this order; a tuple among them stays one value.

    Raises:
        ValueError: no values.
    """

    values: tuple[Any, ...]

    def __init__(self, *values: Any) -> None:
        if not values:
            raise ValueError("Choices() needs at least one value")
        self.__attrs_init__(tuple(values))

    def __iter__(self) -> Iterator[Any]:
        return iter(self.values)

    def __len__(self) -> int:
        return len(self.values)


@attrs.frozen
class ZipGroup:
    """Coupled inputs: ``rows[i]`` holds one value per name in ``names``. Made by ``zip_inputs``."""

    names: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]

    def __len__(self) -> int:
        return len(self.rows)


def zip_inputs(*rows: Mapping[str, Any]) -> ZipGroup:
    """Couple inputs that vary together: each mapping is one point.

    ``zip_inputs({"m": 16, "n": 32}, {"m": 64, "n": 128})`` gives two points,
    never the four of a cartesian product. Pass the result positionally.

    Raises:
        ValueError: no rows, a non-mapping row, an empty row, a non-string
            name, or rows with different names.
    """
    if not rows:
        raise ValueError("zip_inputs() needs at least one row")
    names: tuple[str, ...] | None = None
    out = []
    for i, row in enumerate(rows):
        if not isinstance(row, Mapping):
            raise ValueError(  # noqa: TRY004 -- the contract says ValueError
                f"zip_inputs row {i} must be a mapping of input names, got {row!r}"
            )
        if not row:
            raise ValueError(f"zip_inputs row {i} is empty")
        for name in row:
            if not isinstance(name, str):
                raise ValueError(  # noqa: TRY004 -- the contract says ValueError
                    f"zip_inputs row {i} has a non-string input name {name!r}"
                )
        row_names = tuple(row)
        if names is None:
            names = row_names
        elif set(row_names) != set(names):
            raise ValueError(
                f"zip_inputs rows must name the same inputs: row 0 has {sorted(names)}, "
                f"row {i} has {sorted(row_names)}"
            )
        out.append(tuple(row[n] for n in names))
    assert names is not None
    return ZipGroup(names, tuple(out))


def axis_values(name: str, value: Any) -> Sequence[Any]:
    """The alternatives of one keyword axis.

    Raises:
        TypeError: an unordered or one-shot collection (set, dict, iterator), or
            a zip group given as a keyword.
    """
    if isinstance(value, (IntRange, Choices)):
        return value._values if isinstance(value, IntRange) else value.values
    if isinstance(value, ZipGroup):
        raise TypeError(
            f"input {name!r}: pass zip_inputs(...) positionally, not as a keyword; "
            "its rows name the inputs"
        )
    if isinstance(value, (list, range)):
        if len(value) == 0:
            raise ValueError(f"input {name!r}: an empty list would silently produce no keys")
        return value
    if isinstance(value, (set, frozenset, dict)) or (
        isinstance(value, Iterator) and not isinstance(value, (str, bytes))
    ):
        raise TypeError(
            f"input {name!r}: {type(value).__name__} is not a search space; "
            "use a list or warmkit.Choices(...) for alternatives, a tuple for one value"
        )
    return (value,)


@attrs.frozen
class DispatchInfo:
    """What a kernel's ``dispatch`` accepts and reads, learned at class definition.

    Attributes:
        params: keyword-only input name -> default (``inspect.Parameter.empty`` if required).
        var_kw: the name of the ``**fields`` parameter, if any.
        used: the inputs the body actually reads (all of them if the source was unreadable).
        key_type: the kernel's ``CompileKey``; every key dispatch returns must be one.
    """

    params: Mapping[str, Any]
    var_kw: str | None
    used: frozenset[str]
    key_type: type | None = None

    def accepts(self, name: str) -> bool:
        return self.var_kw is not None or name in self.params

    def accepted_names(self) -> str:
        names = ", ".join(self.params) or "(none)"
        return names + (f", **{self.var_kw}" if self.var_kw else "")

    def check_names(self, kernel_name: str, names: Iterable[str]) -> None:
        """Raise ``TypeError`` for an input that ``dispatch`` does not accept."""
        unknown = [n for n in names if not self.accepts(n)]
        if unknown:
            raise TypeError(
                f"kernel {kernel_name!r}: dispatch() got unknown input(s) "
                f"{', '.join(map(repr, unknown))}; it accepts: {self.accepted_names()}"
            )


def _names(zip_groups: Sequence[Any], space: Mapping[str, Any]) -> list[str]:
    seen: dict[str, str] = {}
    for i, g in enumerate(zip_groups):
        if not isinstance(g, ZipGroup):
            raise TypeError(
                f"positional arguments must be zip_inputs(...) groups; argument {i} is {g!r}. "
                "Pass inputs as keywords."
            )
        for n in g.names:
            if n in seen:
                raise ValueError(f"input {n!r} is given twice ({seen[n]} and zip group {i})")
            seen[n] = f"zip group {i}"
    for n in space:
        if n in seen:
            raise ValueError(f"input {n!r} is given twice ({seen[n]} and a keyword)")
        seen[n] = "a keyword"
    return list(seen)


def expand(
    kernel_name: str,
    dispatch: Callable[..., Hashable],
    info: DispatchInfo,
    zip_groups: Sequence[Any],
    where: Callable[..., Any] | None,
    space: Mapping[str, Any],
    max_points: int,
) -> dict[Hashable, None]:
    """Run ``dispatch`` over every point of a space; return the unique keys in first-seen order.

    The keys are a dict's (values None): planning merges them into its own
    without hashing each key again.

    Axis order: one per zip group in positional order, then one per keyword
    in insertion order; the last axis varies fastest.

    Raises:
        TypeError: a positional argument that is not a zip group; an input
            dispatch does not accept (the message lists the accepted ones); a
            required input missing; a ``where`` parameter naming no input; a
            key field dispatch forwards but the key rejects; dispatch returning
            something other than the kernel's ``CompileKey``.
        ValueError: a name given twice; more than ``max_points`` points.
    """
    if zip_groups:
        names = _names(zip_groups, space)
        _check_complete(kernel_name, info, names)
    else:
        # Without zip groups, whether a space's names are complete and accepted depends
        # only on the names: checked once per kernel and set of names.
        seen = (id(info), tuple(space))
        names = list(seen[1])
        known = _complete.get(seen)
        if known is None or known[0] is not info:
            _check_complete(kernel_name, info, names)
            unread = any(n in info.params and n not in info.used for n in names)
            known = (info, unread)
            _remember(_complete, seen, known)
        if where is None and _ONE_VALUE.issuperset(map(type, space.values())):
            # every value is one alternative (a recording's registration per key): the same
            # checks, one dispatch call
            if not known[1]:
                kwargs = dict(space)
            else:  # the argument order of the loop below (unread inputs last), for its messages
                kwargs, not_read = {}, {}
                for name, value in space.items():
                    if name in info.params and name not in info.used:
                        not_read[name] = value
                    else:
                        kwargs[name] = value
                kwargs.update(not_read)
            _check_budget(kernel_name, 1, max_points)
            keys: dict[Hashable, None] = {}
            _add_key(keys, kernel_name, dispatch, info.key_type, kwargs)
            return keys

    pred, pred_args = _bind_where(kernel_name, where, names, info)
    read_by_where = {a for a, _ in pred_args}
    axes: list[Sequence[Any]] = []
    axis_names: list[tuple[str, ...]] = []
    for g in zip_groups:
        axes.append(g.rows)
        axis_names.append(g.names)
    fixed: dict[str, Any] = {}
    for name, value in space.items():
        values = axis_values(name, value)
        if name in info.params and name not in info.used and name not in read_by_where:
            # dispatch never reads it (nor does where=): one value is as good as a hundred.
            if _axis_len(values) > 1:
                logger.debug(
                    "kernel %s: dispatch never reads input %r; not expanding its %d values",
                    kernel_name,
                    name,
                    _axis_len(values),
                )
            fixed[name] = values[0]
            continue
        axes.append(values)
        axis_names.append((name,))

    _check_budget(kernel_name, math.prod(_axis_len(a) for a in axes), max_points)

    flat_names = tuple(itertools.chain.from_iterable(axis_names))
    nz = len(zip_groups)
    key_type = info.key_type
    if not nz and not fixed and pred is None:
        return _expand_plain(kernel_name, dispatch, key_type, flat_names, axes)
    keys = {}
    for combo in itertools.product(*axes):
        if nz:
            combo = (*itertools.chain.from_iterable(combo[:nz]), *combo[nz:])
        kwargs = dict(zip(flat_names, combo))
        if fixed:
            kwargs.update(fixed)
        if pred is not None and not pred(**{a: kwargs.get(a, d) for a, d in pred_args}):
            continue
        _add_key(keys, kernel_name, dispatch, key_type, kwargs)
    return keys


def _expand_plain(
    kernel_name: str,
    dispatch: Callable[..., Hashable],
    key_type: type | None,
    names: tuple[str, ...],
    axes: list[Sequence[Any]],
) -> dict[Hashable, None]:
    """``expand``'s loop for keyword axes only (the common space): ``_add_key`` inlined.

    A key of exactly ``key_type`` that hashes is stored here; anything else (an
    error, a subclass, no ``key_type``) goes through ``_add_key``, which says
    what is wrong. A call per point less: ~10 % of planning 1M points (B6).
    """
    keys: dict[Hashable, None] = {}
    for combo in itertools.product(*axes):
        kwargs = dict(zip(names, combo))
        try:
            key = dispatch(**kwargs)
        except TypeError as exc:
            raise _dispatch_failed(kernel_name, kwargs, exc) from exc
        if key.__class__ is key_type:
            try:
                keys[key] = None
                continue
            except TypeError:
                pass
        _check_key(keys, kernel_name, key_type, kwargs, key)
    return keys


#: Values ``axis_values`` turns into one alternative (itself): a space of only these is one point.
_ONE_VALUE = frozenset({type(None), bool, int, float, str, tuple})

# (id(info), names) -> info (and whether dispatch leaves one of the names unread), for
# spaces whose names were checked; the value keeps info alive, so its id is never another's.
_complete: dict[tuple[int, tuple[str, ...]], tuple[DispatchInfo, bool]] = {}
_accepted: dict[tuple[int, tuple[str, ...]], DispatchInfo] = {}
_REMEMBERED = 4096


def _remember(table: dict[Any, Any], seen: tuple[int, tuple[str, ...]], value: Any) -> None:
    if len(table) >= _REMEMBERED:
        table.clear()
    table[seen] = value


def _check_complete(kernel_name: str, info: DispatchInfo, names: Sequence[str]) -> None:
    info.check_names(kernel_name, names)
    missing = [n for n, d in info.params.items() if d is inspect.Parameter.empty and n not in names]
    if missing:
        raise TypeError(
            f"kernel {kernel_name!r}: the space gives no value for required dispatch input(s) "
            f"{', '.join(map(repr, missing))}"
        )


def check_keyword_names(kernel_name: str, info: DispatchInfo, space: Mapping[str, Any]) -> None:
    """``info.check_names`` for a space without zip groups, remembered per set of names.

    Raises:
        TypeError: an input dispatch does not accept.
    """
    seen = (id(info), tuple(space))
    if _accepted.get(seen) is not info:
        info.check_names(kernel_name, seen[1])
        _remember(_accepted, seen, info)


def _check_budget(kernel_name: str, total: int, max_points: int) -> None:
    if total > max_points:
        raise ValueError(
            f"kernel {kernel_name!r}: the search space has {total:,} points, over the "
            f"limit of {max_points:,}; narrow it, couple inputs with zip_inputs(), or raise "
            "the kernel's max_points (WARMKIT_MAX_POINTS)"
        )


def _add_key(
    keys: dict[Hashable, None],
    kernel_name: str,
    dispatch: Callable[..., Hashable],
    key_type: type | None,
    kwargs: dict[str, Any],
) -> None:
    try:
        key = dispatch(**kwargs)
    except TypeError as exc:
        raise _dispatch_failed(kernel_name, kwargs, exc) from exc
    _check_key(keys, kernel_name, key_type, kwargs, key)


def _dispatch_failed(kernel_name: str, kwargs: dict[str, Any], exc: TypeError) -> TypeError:
    return TypeError(f"kernel {kernel_name!r}: dispatch({_fmt(kwargs)}) failed: {exc}")


def _check_key(
    keys: dict[Hashable, None],
    kernel_name: str,
    key_type: type | None,
    kwargs: dict[str, Any],
    key: Any,
) -> None:
    """Store ``key``, returned by ``dispatch(**kwargs)``, or raise saying why it is not a key."""
    if key_type is not None and not isinstance(key, key_type):
        raise TypeError(
            f"kernel {kernel_name!r}: dispatch({_fmt(kwargs)}) returned {key!r}, not a "
            f"{key_type.__qualname__} (a missing return?)"
        )
    try:
        keys[key] = None
    except TypeError as exc:
        raise TypeError(
            f"kernel {kernel_name!r}: dispatch({_fmt(kwargs)}) returned {key!r}, which is "
            f"not hashable ({exc}); CompileKey fields must be hashable (a tuple, not a list)"
        ) from exc


def _axis_len(values: Sequence[Any]) -> int:
    """``len(values)``, also for a ``range`` longer than ``sys.maxsize`` (``len`` overflows)."""
    if isinstance(values, range):
        return max(0, -((values.start - values.stop) // values.step))
    return len(values)


def _fmt(kwargs: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in kwargs.items())


def _bind_where(
    kernel_name: str,
    where: Callable[..., Any] | None,
    names: Sequence[str],
    info: DispatchInfo,
) -> tuple[Callable[..., Any] | None, list[tuple[str, Any]]]:
    if where is None:
        return None, []
    if not callable(where):
        raise TypeError(f"kernel {kernel_name!r}: where= must be callable, got {where!r}")
    args: list[tuple[str, Any]] = []
    for p in inspect.signature(where).parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            raise TypeError(
                f"kernel {kernel_name!r}: where= must name the inputs it reads; "
                f"*{p.name}/**{p.name} is not allowed"
            )
        if p.name in names:
            args.append((p.name, None))
        elif p.name in info.params and info.params[p.name] is not inspect.Parameter.empty:
            args.append((p.name, info.params[p.name]))
        elif p.default is not inspect.Parameter.empty:
            args.append((p.name, p.default))
        else:
            raise TypeError(
                f"kernel {kernel_name!r}: where= reads {p.name!r}, which is not an input of "
                f"this space; inputs: {', '.join(names) or '(none)'}"
            )
    return where, args
