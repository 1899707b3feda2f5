"""Reading a ``TritonKernel.fn`` decorator stack: ``@triton.autotune`` / ``@triton.heuristics`` over ``@triton.jit``.

Below the kernel (``_kernel`` checks a kernel's stack at class creation) and
above ``_triton_api`` only:

* reads the stack (:func:`unwrap`): which parameters the configs and the
  heuristics supply, so ``warmup_args`` must not;
* derives, from a key's warmup arguments, exactly what Triton's own layers
  would at runtime (:func:`derive`): the heuristic constexprs, the autotune
  key (the values of ``key=[...]`` plus ``str(dtype)`` of every tensor
  argument, as ``Autotuner.run`` builds it) and the final keyword arguments of
  the ``@triton.jit`` launch for each config;
* prunes the configs as the autotuner would (:func:`surviving_configs`).

Compiling and tuning a stack is ``_autotune``'s.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from . import _triton_api as api

__all__ = [
    "Derived",
    "Stack",
    "check_not_provided",
    "derive",
    "key_names",
    "surviving_configs",
    "tuning_key",
    "unwrap",
]


# -- the stack ----------------------------------------------------------------------------------


@attrs.frozen(eq=False)
class Stack:
    """A ``TritonKernel.fn`` read as layers over one ``@triton.jit`` function.

    Attributes:
        top: the object the kernel names as ``fn``.
        jit: the innermost ``JITFunction`` (an ``InterpretedFunction`` under ``TRITON_INTERPRET=1``).
        layers: outermost first, ``("autotune", AutotunerParts)`` or
            ``("heuristics", {parameter: function}, arg_names)``.
        autotuner: the stack's ``Autotuner`` object, or None.
        tuner: its parts (``_triton_api.AutotunerParts``), or None.
        provided: parameter name -> ``"autotune config"`` or ``"heuristic"``,
            for every parameter the stack supplies itself.
    """

    top: Any
    jit: Any
    layers: tuple[tuple[Any, ...], ...]
    autotuner: Any
    tuner: Any
    provided: Mapping[str, str]

    @property
    def name(self) -> str:
        fn = getattr(self.jit, "fn", None)
        module = getattr(fn, "__module__", None) or "?"
        return f"{module}.{getattr(fn, '__qualname__', getattr(self.jit, '__name__', '?'))}"


_stacks: dict[int, Stack] = {}
_stacks_lock = threading.Lock()


def unwrap(fn: Any) -> Stack | None:
    """Read ``fn`` as a stack; None for a plain ``@triton.jit`` function.

    Raises:
        TypeError: a layer that is not ``@triton.autotune``, ``@triton.heuristics``
            or ``@triton.jit``; two ``@triton.autotune`` layers; a config or
            heuristic that sets something that is not a parameter of the
            function, or a parameter set by both.
    """
    with _stacks_lock:
        hit = _stacks.get(id(fn))
        if hit is not None and hit.top is fn:
            return hit
    found = api.stack_layers(fn)
    if found is None:
        return None
    objects, jit = found
    tuners = [obj for obj in objects if api.is_autotuner(obj)]
    if len(tuners) > 1:
        raise TypeError(
            "fn stacks two @triton.autotune decorators; warmkit supports one (merge their configs)"
        )
    layers: list[tuple[Any, ...]] = []
    for obj in objects:
        if api.is_autotuner(obj):
            layers.append(("autotune", api.autotuner_parts(obj)))
        else:
            layers.append(("heuristics", *api.heuristic_values(obj)))
    names = list(jit.arg_names)
    provided: dict[str, str] = {}

    def provide(name: str, by: str, what: str) -> None:
        if name not in names:
            raise TypeError(
                f"{what} sets {name!r}, which is not a parameter of "
                f"{jit.__name__}({', '.join(names)})"
            )
        if provided.get(name, by) != by:
            raise TypeError(f"{name!r} is set by both a @triton.heuristics and an autotune config")
        provided[name] = by

    for layer in reversed(layers):  # innermost first, so an outer layer's clash names both
        if layer[0] == "autotune":
            for i, cfg in enumerate(layer[1].configs):
                for name in cfg.kwargs:
                    provide(name, "autotune config", f"autotune config {i} ({cfg})")
        else:
            for name in layer[1]:
                provide(name, "heuristic", "@triton.heuristics")
    tuner = next((layer[1] for layer in layers if layer[0] == "autotune"), None)
    stack = Stack(fn, jit, tuple(layers), tuners[0] if tuners else None, tuner, provided)
    with _stacks_lock:
        _stacks[id(fn)] = stack
    return stack


# -- what Triton's layers derive ---------------------------------------------------------------


def _dtype_text(arg: Any) -> str:
    dtype = arg.dtype
    if isinstance(dtype, str):  # a WarmupTensor without torch: as torch would print it
        return f"torch.{dtype}"
    return str(dtype)


def tuning_key(autotuner: Any, args: Sequence[Any], kwargs: Mapping[str, Any]) -> tuple[Any, ...]:
    """The autotune key exactly as ``Autotuner.run`` builds it from one call's arguments.

    Args:
        autotuner: the ``AutotunerParts`` (anything with ``arg_names`` and ``keys``).
        args: the call's positional arguments.
        kwargs: its keyword arguments as they reach the autotuner.
    """
    arg_names = autotuner.arg_names
    all_args = {**dict(zip(arg_names, args)), **kwargs}
    named = {k: v for k, v in all_args.items() if k in arg_names}
    key: list[Any] = [named[k] for k in autotuner.keys if k in named]
    key.extend(_dtype_text(v) for v in named.values() if hasattr(v, "dtype"))
    return tuple(key)


def key_names(autotuner: Any, args: Sequence[Any], kwargs: Mapping[str, Any]) -> list[str]:
    """The argument each position of :func:`tuning_key` comes from (for messages)."""
    arg_names = autotuner.arg_names
    all_args = {**dict(zip(arg_names, args)), **kwargs}
    named = {k: v for k, v in all_args.items() if k in arg_names}
    out = [k for k in autotuner.keys if k in named]
    out.extend(f"{k} (dtype)" for k, v in named.items() if hasattr(v, "dtype"))
    return out


@attrs.frozen
class Derived:
    """What the stack derives for one config from one call's arguments.

    Attributes:
        params: the ``@triton.jit`` function's keyword parameters of the launch
            (the call's own, the config's and the heuristics'), in Triton's order.
        options: the launch options (``num_warps`` ...), in Triton's order.
        heuristics: parameter -> the value its heuristic gave.
        tuning_key: the autotune key (None without ``@triton.autotune``).
    """

    params: dict[str, Any]
    options: dict[str, Any]
    heuristics: dict[str, Any]
    tuning_key: tuple[Any, ...] | None


def derive(stack: Stack, args: Sequence[Any], kwargs: Mapping[str, Any], config: Any) -> Derived:
    """Walk ``stack`` as Triton's ``run`` methods would for a call ``fn[grid](*args, **kwargs)``.

    Args:
        stack: from :func:`unwrap`.
        args: the call's positional arguments.
        kwargs: its keyword arguments (launch options included).
        config: the autotune config to apply (None without ``@triton.autotune``).

    Raises:
        TypeError: the call passes a parameter the stack supplies (named).
    """
    kw = dict(kwargs)
    heur: dict[str, Any] = {}
    tkey = None
    for layer in stack.layers:
        if layer[0] == "autotune":
            tkey = tuning_key(layer[1], args, kw)
            extra = config.all_kwargs() if config is not None else {}
            clash = [k for k in extra if k in kw]
            if clash:
                raise TypeError(
                    f"{clash[0]!r} is set by the autotune configs of {stack.name}; do not pass it "
                    "(warmup_args and launch_options must leave it to the configs)"
                )
            kw = {**kw, **extra}
        else:
            for name, fn in layer[1].items():
                value = fn({**dict(zip(layer[2], args)), **kw})
                kw[name] = value
                heur[name] = value
    names = set(stack.jit.arg_names)
    params = {k: v for k, v in kw.items() if k in names}
    options = {k: v for k, v in kw.items() if k not in names}
    return Derived(params, options, heur, tkey)


def check_not_provided(
    kernel: str, stack: Stack, args: Sequence[Any], kwargs: Mapping[str, Any], options: Any
) -> None:
    """Refuse warmup arguments that pass a parameter the stack supplies, naming it.

    Raises:
        TypeError: naming the parameter and whether a config or a heuristic sets it.
    """
    names = list(stack.jit.arg_names)
    given = list(kwargs) + names[: len(args)]
    for name in given:
        source = stack.provided.get(name)
        if source is not None:
            raise TypeError(
                f"kernel {kernel!r}: warmup_args passes {name!r}, which the {source}s of "
                f"{stack.name} set; leave it out (the stack supplies it at every launch)"
            )
    if stack.autotuner is not None:
        tuned = {"num_warps", "num_stages", "num_ctas", "maxnreg", "ir_override"}
        for name in options:
            if name in tuned:
                raise TypeError(
                    f"kernel {kernel!r}: launch_options(key) sets {name!r}, which the autotune "
                    f"configs of {stack.name} set; leave it to the configs"
                )


def surviving_configs(
    kernel: str, stack: Stack, args: Sequence[Any], kwargs: Mapping[str, Any]
) -> list[tuple[int, Any]]:
    """``(index, config)`` of each config that survives the autotuner's ``prune_configs_by``.

    ``early_config_prune`` and ``perf_model`` run on the warmup arguments, so
    they see ``WarmupTensor``\\ s: shapes, strides and dtypes, never data.

    Raises:
        RuntimeError: the pruning functions failed on the warmup arguments (chained).
    """
    tuner = stack.tuner
    if tuner is None:
        return [(0, None)]
    configs = tuner.configs
    if not tuner.prunes:
        return list(enumerate(configs))
    above: dict[str, Any] = dict(kwargs)
    for layer in stack.layers:  # heuristics above the autotuner add their values first
        if layer[0] == "autotune":
            break
        for name, fn in layer[1].items():
            above[name] = fn({**dict(zip(layer[2], args)), **above})
    try:
        kept = api.prune_configs(stack.autotuner, args, above)
    except Exception as exc:
        raise RuntimeError(
            f"kernel {kernel!r}: prune_configs_by of {stack.name} failed on the warmup "
            f"arguments ({type(exc).__name__}: {exc}); at warmup it sees WarmupTensors "
            "(shape, strides, dtype), never tensor data"
        ) from exc
    index = {id(c): i for i, c in enumerate(configs)}
    return [(index.get(id(c), configs.index(c)), c) for c in kept]
