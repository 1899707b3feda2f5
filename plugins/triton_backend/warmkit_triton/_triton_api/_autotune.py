"""Accessors for Triton's ``Autotuner`` and ``Heuristics`` layers (``triton.runtime.autotuner``).

``triton.autotune``, ``triton.heuristics`` and ``triton.Config`` are public;
what warmkit reads of the objects they build (the config list, the key
names, the in-memory tuning cache, the reset/restore hooks, the pruning
functions, the benchmarker, ``Autotuner.run``) is not.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

from ._import import require_triton


def _classes() -> tuple[Any, Any, Any]:  # Triton's classes (untyped)
    require_triton()
    from triton.runtime.autotuner import Autotuner, Heuristics
    from triton.runtime.jit import JITFunction

    return Autotuner, Heuristics, JITFunction


def _innermost(obj: Any, jit_cls: type) -> bool:
    return isinstance(obj, jit_cls) or type(obj).__name__ == "InterpretedFunction"


def stack_layers(fn: Any) -> tuple[list[Any], Any] | None:
    """``fn``'s ``@triton.autotune``/``@triton.heuristics`` layers, outermost first, and the innermost function.

    None for a plain ``@triton.jit`` (or interpreted) function. Checked: 3.6.0, 3.9.0.

    Raises:
        TypeError: a layer that is none of those (named).
    """
    autotuner, heuristics, jit = _classes()
    if _innermost(fn, jit):
        return None
    layers: list[Any] = []
    obj = fn
    while not _innermost(obj, jit):
        if not isinstance(obj, (autotuner, heuristics)):
            raise TypeError(
                f"fn's decorator stack contains {type(obj).__name__} {obj!r:.80}; warmkit "
                "supports stacks of @triton.autotune, @triton.heuristics and @triton.jit"
            )
        layers.append(obj)
        obj = getattr(obj, "fn", None)
        if obj is None:
            raise TypeError(f"fn's decorator {type(layers[-1]).__name__} wraps nothing")
    return layers, obj


def is_autotuner(layer: Any) -> bool:
    """Whether a stack layer is an ``Autotuner`` (else a ``Heuristics``). Checked: 3.6.0, 3.9.0."""
    return isinstance(layer, _classes()[0])


class AutotunerParts(NamedTuple):
    """What warmkit reads of an ``Autotuner``."""

    configs: list[Any]
    keys: list[str]
    arg_names: list[str]
    cache: dict[tuple[Any, ...], Any]  # the live in-memory tuning cache: autotune key -> Config
    pre_hook: Callable[..., Any]  # reset_to_zero / restore_value, or the user's
    post_hook: Callable[..., Any]
    prunes: bool  # prune_configs_by has early_config_prune or perf_model


def autotuner_parts(tuner: Any) -> AutotunerParts:
    """The parts of an ``Autotuner`` warmkit uses. Checked: 3.6.0, 3.9.0."""
    return AutotunerParts(
        list(tuner.configs),
        list(tuner.keys),
        list(tuner.arg_names),
        tuner.cache,
        tuner.pre_hook,
        tuner.post_hook,
        tuner.early_config_prune is not None or tuner.perf_model is not None,
    )


def heuristic_values(layer: Any) -> tuple[Mapping[str, Callable[[dict[str, Any]], Any]], list[str]]:
    """A ``Heuristics`` layer's ``{parameter: function of the named arguments}`` and its argument names.

    Checked: 3.6.0, 3.9.0.
    """
    return layer.values, list(layer.arg_names)


_nargs_lock = threading.Lock()


def prune_configs(tuner: Any, args: Sequence[Any], kwargs: Mapping[str, Any]) -> list[Any]:
    """The configs ``prune_configs_by`` keeps for a call, as ``Autotuner.run`` computes them.

    ``prune_configs`` reads the positional arguments from ``tuner.nargs``,
    which ``run`` sets; it is set for the call and restored. Checked: 3.6.0, 3.9.0.
    """
    with _nargs_lock:
        saved = getattr(tuner, "nargs", None)
        tuner.nargs = dict(zip(tuner.arg_names, args))
        try:
            return list(tuner.prune_configs(dict(kwargs)))
        finally:
            tuner.nargs = saved


def benchmarker(tuner: Any, *, driver_available: bool) -> Callable[..., Any] | None:
    """``bench(fn, quantiles=...) -> [ms ...]``: the autotuner's own ``do_bench``, else the driver's.

    None when the autotuner has none of its own and there is no driver (the
    interpreter). Checked: 3.6.0, 3.9.0.
    """
    own = getattr(tuner, "_do_bench", None)
    if own is not None:
        return own
    return tuner.do_bench if driver_available else None


def bench_time(tuner: Any) -> float | None:
    """Seconds the autotuner's last benchmark took (``bench_time``), None before any. Checked: 3.6.0, 3.9.0."""
    value = getattr(tuner, "bench_time", None)
    return float(value) if value is not None else None


def function_cache_key(jit: Any) -> str:
    """A digest of the kernel's source and dependencies (``JITFunction.cache_key``).

    An interpreted function has none: the sha256 of its source stands in.
    Checked: 3.6.0, 3.9.0.
    """
    digest = getattr(jit, "cache_key", None)
    if isinstance(digest, str):
        return digest
    import inspect

    return hashlib.sha256(inspect.getsource(jit.fn).encode()).hexdigest()


def wrap_autotuner_run(wrapper: Callable[..., Any]) -> Callable[..., Any]:
    """Replace ``Autotuner.run`` (class level, every instance) with ``wrapper``; return the original.

    Checked: 3.6.0, 3.9.0.
    """
    autotuner = _classes()[0]
    original = autotuner.run
    autotuner.run = wrapper
    return original


def restore_autotuner_run(wrapper: Callable[..., Any], original: Callable[..., Any]) -> bool:
    """Put ``original`` back if ``wrapper`` is still ``Autotuner.run``; whether it was. Checked: 3.6.0, 3.9.0."""
    autotuner = _classes()[0]
    if autotuner.run is wrapper:
        autotuner.run = original
        return True
    return False
