"""A registration: one ``(kernel, space)`` the registry holds, and its canonical identity.

The registry stores identical registrations once: two are identical when the
kernel's name and the canonical form of their space (``_canon_space``) are.
The canonical form keeps apart what compares equal but is another kernel
(``True``, ``1`` and ``1.0``), and a tuple (one value) from a list (alternatives).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from .._plugin.contract import KernelClass
from .space import Choices, IntRange, ZipGroup

__all__ = ["Registration"]


@attrs.frozen
class Registration:
    """One ``(kernel, space)`` registration.

    Attributes:
        kernel: the kernel's ``name``.
        kernel_cls: the kernel class.
        zip_groups: the coupled inputs, in order.
        space: keyword axes, in insertion order.
    """

    kernel: str
    kernel_cls: KernelClass = attrs.field(repr=False)
    zip_groups: tuple[ZipGroup, ...]
    space: Mapping[str, Any]
    _instance: Any = attrs.field(default=None, repr=False, eq=False)

    def kernel_instance(self) -> Any:
        """The registering instance if it is still alive, else a fresh one."""
        inst = self._instance() if self._instance is not None else None
        if inst is not None:
            return inst
        try:
            return self.kernel_cls()
        except Exception as exc:
            raise TypeError(
                f"kernel {self.kernel!r}: cannot construct {self.kernel_cls.__qualname__}() to "
                f"plan its registration ({type(exc).__name__}: {exc}); kernels must be "
                "constructible with no arguments so that a manifest can be replayed"
            ) from exc


# -- canonical form ---------------------------------------------------------------------


def _canon(v: Any) -> Any:
    if type(v) in _CANON_AS_IS:
        return (type(v).__name__, v)
    if isinstance(v, tuple):
        return ("tuple", tuple(_canon(x) for x in v))
    if isinstance(v, float) and math.isnan(v):
        return ("float", "nan")
    # bool, int and float compare equal (True == 1 == 1.0) but are different kernels.
    return (type(v).__name__, v)


_CANON_AS_IS = frozenset({type(None), bool, int, str})


def _canon_axis(v: Any) -> Any:
    if type(v) in _CANON_AS_IS:
        return (type(v).__name__, v)
    if isinstance(v, IntRange):
        if v.advance is None:
            return ("IntRange", v.start, v.stop, v.step or 1)
        return ("values", tuple(_canon(x) for x in v))
    if isinstance(v, Choices):
        return ("values", tuple(_canon(x) for x in v.values))
    if isinstance(v, list):
        return ("values", tuple(_canon(x) for x in v))
    return _canon(v)


def _canon_space(zip_groups: Sequence[ZipGroup], space: Mapping[str, Any]) -> tuple[Any, ...]:
    if not zip_groups and _CANON_AS_IS.issuperset(map(type, space.values())):
        names = tuple(sorted(space))
        return _canon_point(names, tuple([space[k] for k in names]))
    zips = (
        tuple((g.names, tuple(tuple(_canon(x) for x in row) for row in g.rows)) for g in zip_groups)
        if zip_groups
        else ()
    )
    kws = tuple(
        sorted(
            [
                (k, (type(v).__name__, v) if type(v) in _CANON_AS_IS else _canon_axis(v))
                for k, v in space.items()
            ]
        )
    )
    return (zips, kws)


def _canon_point(names: tuple[str, ...], values: tuple[Any, ...]) -> tuple[Any, ...]:
    """A point of plain scalars (values in the order of the sorted names): its types beside.

    The types keep True, 1 (and 1.0) apart, as ``_canon`` does; a recording adds
    a point per key, so this form is cheap (no tuple per value).
    """
    return ("point", names, values, tuple(map(type, values)))
