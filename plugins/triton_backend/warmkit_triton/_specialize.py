"""``specialization_rep``: the representative of a scalar's Triton specialization class.

Triton compiles one variant per *specialization* of each argument, not per
value. For an int the class is its width (``i32``, ``i64``, ``u64``), whether
it is divisible by 16 (``'D'``), and whether it equals 1 (then it becomes a
compile-time constant). A warmup therefore needs one representative per class,
and a kernel's ``dispatch`` can key on ``specialization_rep(n)`` instead of
``n``.

The class is computed by **the installed Triton's own specializer**
(``_triton_api.scalar_specializer``: the function Triton's generated
binder calls), and the representative is the first of a fixed list of
candidates that falls in the same class. So the result follows whatever policy
the installed Triton has. Only when Triton cannot be imported does a pure-Python
copy of the 3.6/3.9 policy stand in; tests check both against Triton.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any, overload

from . import _triton_api as api

__all__ = ["specialization_rep"]

logger = logging.getLogger(__name__)

I32 = (-(2**31), 2**31)
I64 = (-(2**63), 2**63)
U64 = (2**63, 2**64)

# One candidate per class, in the order they are tried. The non-divisible member
# of each width comes first, so that with ``specialize=False`` (one class per
# width) the representative is 2, 2**31+1 or 2**63+1.
_CANDIDATES = (2, 16, 1, 2**31 + 1, 2**31, 2**63 + 1, 2**63)


# Representatives already computed (default flags), so a dispatch on the hot path
# pays one dict lookup; bounded so that a stream of distinct values cannot grow it.
_memo: dict[int, int] = {}
_MEMO_MAX = 1 << 16


@functools.cache
def _native() -> Callable[..., Any] | None:
    try:
        return api.scalar_specializer()
    except ImportError:
        logger.debug("triton not importable: specialization_rep uses its Python table")
        return None


def python_specialization(
    value: int, *, specialize: bool = True, align: bool = True
) -> tuple[Any, ...]:
    """The class of an int under Triton 3.6/3.9's policy, without Triton (a fallback).

    Raises:
        OverflowError: outside ``[-2**63, 2**64)``.
    """
    if isinstance(value, bool):
        return ("u1", None)
    if value == 1 and specialize:
        return ("constexpr", 1)
    if I32[0] <= value < I32[1]:
        width = "i32"
    elif I64[0] <= value < I64[1]:
        width = "i64"
    elif U64[0] <= value < U64[1]:
        width = "u64"
    else:
        raise OverflowError(
            f"integer {value} is too large for a Triton argument (not in [-2**63, 2**64))"
        )
    if not specialize:
        return (width, None)
    return (width, "D" if align and value % 16 == 0 else "")


def _class_of(value: int, specialize: bool, align: bool) -> tuple[Any, ...]:
    native = _native()
    if native is None:
        return python_specialization(value, specialize=specialize, align=align)
    try:
        return native(value, specialize, align)
    except OverflowError as exc:
        raise OverflowError(
            f"integer {value} is outside the range Triton can pass to a kernel ([-2**63, 2**64)): {exc}"
        ) from exc


@overload
def specialization_rep(value: bool, *, specialize: bool = ..., align: bool = ...) -> bool: ...
@overload
def specialization_rep(value: int, *, specialize: bool = ..., align: bool = ...) -> int: ...
@overload
def specialization_rep(value: float, *, specialize: bool = ..., align: bool = ...) -> float: ...
@overload
def specialization_rep(value: None, *, specialize: bool = ..., align: bool = ...) -> None: ...


def specialization_rep(
    value: float | bool | None, *, specialize: bool = True, align: bool = True
) -> int | float | bool | None:
    """Map a scalar kernel argument to the representative of its Triton specialization class.

    Two values with the same representative compile to the same kernel variant,
    so a ``dispatch`` can put ``specialization_rep(n)`` in its key and a warmup
    can pass the representative as the argument.

    With the default flags, for an int:

    * ``1`` -> ``1`` (Triton makes it a compile-time constant);
    * an ``i32`` (``-2**31 <= v < 2**31``) -> ``16`` if ``v % 16 == 0`` else ``2``;
    * an ``i64`` -> ``2**31`` or ``2**31 + 1``;
    * a ``u64`` (``2**63 <= v < 2**64``) -> ``2**63`` or ``2**63 + 1``.

    Other scalars: a bool stays the same bool (Triton passes it as ``u1``, it is
    never the int 1); a float -> ``1.0`` (every float is ``fp32``); ``None`` ->
    ``None``.

    Args:
        value: the runtime value of a non-constexpr scalar argument.
        specialize: False for a parameter in ``do_not_specialize``: one
            representative per width (``2``, ``2**31 + 1``, ``2**63 + 1``).
        align: False for a parameter in ``do_not_specialize_on_alignment``: no
            divisible-by-16 class.

    Returns:
        The representative, of the same Python type as ``value``.

    Raises:
        OverflowError: an int outside ``[-2**63, 2**64)``, which Triton cannot pass.
        TypeError: a value that is not None, bool, int or float (Triton itself
            rejects strings and numpy scalars).
    """
    if type(value) is int and specialize and align:
        rep = _memo.get(value)
        if rep is not None:
            return rep
        rep = _rep_of_class(_class_of(value, True, True), True, True)
        if rep is None:
            return value
        if len(_memo) < _MEMO_MAX:
            _memo[value] = rep
        return rep
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, float):
        return 1.0
    if not isinstance(value, int):
        raise TypeError(
            f"specialization_rep() takes None, bool, int or float, got {type(value).__name__} "
            f"({value!r}); convert numpy scalars with int() first, as Triton cannot specialize them"
        )
    value = int(value)  # an int subclass (IntEnum ...) behaves as its int value
    rep = _rep_of_class(_class_of(value, specialize, align), specialize, align)
    if rep is None:
        # A class this module does not know (a future Triton policy): the value is
        # its own representative, which is always correct, merely not shared.
        logger.debug("specialization_rep(%r): no known representative; returning the value", value)
        return value
    return rep


@functools.cache
def _rep_of_class(target: tuple[Any, ...], specialize: bool, align: bool) -> int | None:
    for candidate in _CANDIDATES:
        if _class_of(candidate, specialize, align) == target:
            return candidate
    return None
