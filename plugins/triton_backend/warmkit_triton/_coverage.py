"""What ``warmkit coverage`` compares for declared Triton kernels: each key's specialization.

Computed by Triton's own binder under the ahead-of-time driver, without
compiling, in the form recorded raw entries use (``_record``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from . import _triton_api as api
from ._record import spec_from_call
from ._values import UnreplayableError, _unwrap, encode_value

__all__ = ["declared_specializations"]

logger = logging.getLogger(__name__)


def declared_specializations(
    kernel: Any, keys: Sequence[Any], target: str | None
) -> list[tuple[str, dict[str, Any]]]:
    """Each declared key's Triton specialization, from Triton's own binder, without compiling.

    An autotuned or heuristic ``fn`` gives one specialization per surviving
    config, with the configs' and the heuristics' values applied exactly as a
    warmup compiles them, plus ``{"autotune": {"key": ...}}`` for the autotune
    key (a declared key covers its raw autotune on any GPU model: a device
    warmup tunes it there).

    Args:
        kernel: a ``TritonKernel`` instance.
        keys: its planned keys.
        target: the target to specialize for; default ``"cuda:90"`` (the
            specialization rules are the same on every CUDA target).

    Returns:
        ``(import path of fn, spec)`` per key (and config), in the form
        recorded entries use.

    Raises:
        TypeError: ``warmup_args``/``launch_options`` do not match ``fn``.
    """
    from ._aot import AotDriver, aot_driver, parse_target
    from ._stack import unwrap

    fn = _unwrap(kernel)  # kernel.fn may be an autotune/heuristics stack
    if fn is None:
        return []
    stack = unwrap(kernel.fn)
    path = f"{fn.fn.__module__}:{fn.fn.__qualname__}"
    drv = AotDriver(parse_target(target or "cuda:90"))
    out = []
    with aot_driver(drv):
        try:
            binder = api.binder(fn, api.prepare_function(fn))
            for key in keys:
                for spec in _key_specializations(kernel, key, fn, stack, binder):
                    out.append((path, spec))
        finally:
            api.drop_device(fn, drv.device)
    return out


def _key_specializations(
    kernel: Any, key: Any, fn: Any, stack: Any, binder: Any
) -> list[dict[str, Any]]:
    """One key's specializations: one per launch a warmup compiles, plus its autotune key."""
    from ._autotune import _warmup_pair, stack_variants
    from ._kernel import check_warmup_args

    name = type(kernel).name
    options = dict(kernel.launch_options(key) or {})
    if stack is None:
        launches = [check_warmup_args(name, fn, kernel.warmup_args(key), options) + (options,)]
        tkey = None
    else:
        args, kwargs = _warmup_pair(name, kernel.warmup_args(key))
        variants = stack_variants(name, stack, args, kwargs, options)
        launches = [
            check_warmup_args(name, fn, (args, v.derived.params), v.derived.options)
            + (v.derived.options,)
            for v in variants
        ]
        tkey = variants[-1].derived.tuning_key if variants else None
    out: list[dict[str, Any]] = []
    for args, kwargs, opts in launches:
        wrapped = [api.wrap_warmup_arg(a) for a in args]
        _, specialization, bound = binder(*wrapped, **kwargs, **opts)
        try:
            out.append(spec_from_call(fn, specialization, bound))
        except UnreplayableError as exc:
            logger.info("kernel %s key %r: no specialization (%s)", name, key, exc)
    if stack is not None and stack.tuner is not None and tkey is not None:
        try:
            out.append({"autotune": {"key": encode_value(tuple(tkey))}})
        except UnreplayableError as exc:
            logger.info("kernel %s key %r: autotune key not comparable (%s)", name, key, exc)
    return out
