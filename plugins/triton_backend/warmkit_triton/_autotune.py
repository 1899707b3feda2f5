"""Autotuned and heuristic kernels: ``@triton.autotune`` / ``@triton.heuristics`` stacks, tuned once and shipped.

A ``TritonKernel.fn`` may be any stack Triton allows of ``@triton.autotune``,
``@triton.heuristics`` and ``@triton.jit``. This module

* reads the stack (:func:`unwrap`): which parameters the configs and the
  heuristics supply, so ``warmup_args`` must not;
* derives, from a key's warmup arguments, exactly what Triton's own layers
  would at runtime (:func:`derive`): the heuristic constexprs, the autotune
  key (the values of ``key=[...]`` plus ``str(dtype)`` of every tensor
  argument, as ``Autotuner.run`` builds it) and the final keyword arguments of
  the ``@triton.jit`` launch for each config;
* compiles a key's surviving configs (in parallel), benchmarks them and
  stores the winner, or uses a stored winner (:func:`compile_stack`; the
  benchmark and the results store are in ``_tuned``);
* launches the winner (:class:`AutotunedExecutor`).

Raw autotuned kernels that warmkit never wrapped are reported by ``_hooks``.

The GPU-model policy: a result is used only on the GPU model it was measured
on. On another model (an H100 sharing ``sm_90`` with an H200) device warmup
re-tunes, at warmup, never at runtime, and logs that results of other models
exist. Ahead of time (no GPU) the winners of every model known for the target
are compiled; with no known winner, every surviving config is.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import attrs

from warmkit import WarmkitError

from . import _triton_api as api
from ._tuned import benchmark, find_result, gpu_model, known_winners, result_id, store_result

__all__ = [
    "AutotuneKeyMismatchError",
    "AutotunedArtifact",
    "AutotunedExecutor",
    "Derived",
    "Stack",
    "check_not_provided",
    "compile_stack",
    "derive",
    "surviving_configs",
    "tuning_key",
    "unwrap",
]

logger = logging.getLogger(__name__)


class AutotuneKeyMismatchError(WarmkitError, RuntimeError):
    """A launch's arguments give another autotune key than the warmup arguments of its compile key.

    The winner was tuned for the warmup's autotune key; this launch would have
    been tuned separately by Triton. Raised when launch verification is on
    (``TritonKernel.verify_launches`` or ``WARMKIT_TRITON_VERIFY=1``).

    Attributes:
        kernel: the kernel's name.
        key: the compile key.
        parameter: the argument whose value (or dtype) differs.
        expected: what the warmup arguments gave.
        got: what this launch gives.
    """

    def __init__(self, kernel: str, key: Any, parameter: str, expected: Any, got: Any) -> None:
        self.kernel = kernel
        self.key = key
        self.parameter = parameter
        self.expected = expected
        self.got = got
        super().__init__(
            f"kernel {kernel!r} key {key!r}: argument {parameter!r} gives autotune key value "
            f"{got!r} at this launch, but the key's warmup arguments give {expected!r}, so the "
            "winner was tuned for another autotune key. dispatch() must put the exact values of "
            "the autotune key=[...] arguments (and the tensor dtypes) into the CompileKey, and "
            "warmup_args(key) must pass them"
        )


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


def _key_names(autotuner: Any, args: Sequence[Any], kwargs: Mapping[str, Any]) -> list[str]:
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


# -- what the backend returns ----------------------------------------------------------------------


class AutotunedExecutor:
    """The launchable winner of an autotuned (or heuristic) key: ``executor(grid, *args, **kwargs)``.

    It adds the winner config's and the heuristics' constexprs to the call
    and launches the compiled winner through its :class:`TritonExecutor`'s
    fast path: no heuristic, no autotune key, no benchmark, no cache lookup.
    With launch verification on it recomputes the heuristics and the autotune
    key from the launch's arguments and raises on a difference.

    Attributes:
        kernel: the kernel's name.
        key: the compile key.
        inner: the winner's executor.
        config: the winning ``triton.Config`` (None for a heuristics-only stack).
        tuning_key: the autotune key (None for a heuristics-only stack).
        tuning: ``"benchmarked"`` (tuned at this warmup), ``"stored"`` (a stored
            result was used), ``"single"`` (one surviving config) or None.
        timings: config index -> [p50, p20, p80] ms, when known.
        autotune_seconds: seconds spent benchmarking in this process (0 when none).
        cache_hit: whether every compile was a cache hit.
    """

    def __init__(
        self,
        *,
        kernel: str,
        key: Any,
        stack: Stack,
        inner: Any,
        config: Any,
        derived: Derived,
        options: Mapping[str, Any],
        tuning: str | None,
        timings: Mapping[int, Sequence[float]] | None = None,
        autotune_seconds: float = 0.0,
        cache_hit: bool = True,
        verify: bool = False,
    ) -> None:
        self.kernel = kernel
        self.key = key
        self.stack = stack
        self.inner = inner
        self.config = config
        self.tuning_key = derived.tuning_key
        self.tuning = tuning
        self.timings = dict(timings or {})
        self.autotune_seconds = autotune_seconds
        self.cache_hit = cache_hit
        self._derived = derived
        self._fixed = {k: v for k, v in derived.params.items() if k in stack.provided}
        self._fixed_names = frozenset(self._fixed)
        self._options = dict(options)
        self._pre_hook = getattr(config, "pre_hook", None)
        self._verify = verify
        self._names = list(stack.jit.arg_names)

    def __call__(self, grid: Any, *args: Any, **kwargs: Any) -> Any:
        if kwargs:
            if not self._fixed_names.isdisjoint(kwargs):
                name = min(self._fixed_names & set(kwargs))
                raise TypeError(
                    f"kernel {self.kernel!r}: {name!r} is set by the "
                    f"{self.stack.provided[name]}s of {self.stack.name}; do not pass it"
                )
            call = {**kwargs, **self._fixed}
        else:
            call = self._fixed
        if self._verify:
            self.check(args, kwargs)
        if self._pre_hook is not None:  # Triton's autotuner runs the winner's pre_hook every launch
            self._pre_hook({**dict(zip(self._names, args)), **call, **self.config.all_kwargs()})
        return self.inner(grid, *args, **call)

    def check(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> None:
        """Recompute the heuristics and the autotune key from a launch's arguments; raise on a difference.

        Raises:
            AutotuneKeyMismatchError: the autotune key differs (names the argument).
            SpecializationMismatchError: a heuristic gives another constexpr (names it).
        """
        from ._kernel import SpecializationMismatchError

        got = derive(self.stack, args, {**kwargs, **self._options}, self.config)
        want = self._derived
        if got.tuning_key != want.tuning_key:
            names = _key_names(self.stack.tuner, args, {**kwargs, **self._options})
            for i, (a, b) in enumerate(zip(want.tuning_key or (), got.tuning_key or ())):
                if a != b:
                    raise AutotuneKeyMismatchError(self.kernel, self.key, names[i], a, b)
            raise AutotuneKeyMismatchError(
                self.kernel, self.key, "(the set of arguments)", want.tuning_key, got.tuning_key
            )
        for name, value in want.heuristics.items():
            if got.heuristics.get(name) != value:
                raise SpecializationMismatchError(
                    self.kernel, self.key, name, value, got.heuristics.get(name)
                )

    @property
    def fast(self) -> bool:
        return bool(getattr(self.inner, "fast", False))

    @property
    def launch_path(self) -> str:
        return str(getattr(self.inner, "launch_path", "fn[grid]"))

    def __repr__(self) -> str:
        return (
            f"<AutotunedExecutor {self.kernel} key={self.key!r} autotune_key={self.tuning_key!r} "
            f"config=({self.config}) {self.tuning}>"
        )


@attrs.frozen
class AutotunedArtifact:
    """What an ahead-of-time compile of an autotuned key returns: one ``AotArtifact`` per config compiled.

    Attributes:
        kernel: the kernel's name.
        key: the compile key.
        target: e.g. ``"cuda:90"``.
        tuning_key: the autotune key.
        artifacts: the configs' ``AotArtifact``\\ s, in config order.
        configs: the indices of the configs compiled.
        known_winners: GPU model -> winner index, from stored results (only those were compiled).
        tuning: ``"needs-device"`` (every surviving config compiled, no result
            known: a GPU host benchmarks, compiling nothing) or ``"known-winners"``.
    """

    kernel: str
    key: Any
    target: str
    tuning_key: tuple[Any, ...] | None
    artifacts: tuple[Any, ...]
    configs: tuple[int, ...]
    known_winners: Mapping[str, int]
    tuning: str

    @property
    def cache_hit(self) -> bool:
        return all(a.cache_hit for a in self.artifacts)

    @property
    def autotune_seconds(self) -> float:
        """Always 0: nothing is benchmarked ahead of time."""
        return 0.0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(
            f"kernel {self.kernel!r} key {self.key!r} was compiled ahead of time for {self.target}; "
            "an AOT artifact cannot launch. Warm up on the GPU host (target=None): the configs "
            "are disk hits there."
        )


def tuning_key_of(kernel: Any, stack: Stack, key: Any) -> tuple[Any, ...] | None:
    """The autotune key a compile key's warmup arguments give (no compile)."""
    args, kwargs = _warmup_pair(kernel.name, kernel.warmup_args(key))
    options = dict(kernel.launch_options(key) or {})
    configs = stack.tuner.configs if stack.tuner is not None else [None]
    return derive(stack, args, {**kwargs, **options}, configs[0]).tuning_key


def _warmup_pair(kernel: str, warmup: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    if not (isinstance(warmup, tuple) and len(warmup) == 2 and isinstance(warmup[1], Mapping)):
        raise TypeError(
            f"kernel {kernel!r}: warmup_args(key) must return (args, kwargs), a tuple and a dict; "
            f"got {type(warmup).__name__} {warmup!r:.200}"
        )
    return tuple(warmup[0]), dict(warmup[1])


def compile_stack(
    backend: Any,
    kernel: Any,
    name: str,
    key: Any,
    stack: Stack,
    warmup: Any,
    options: Mapping[str, Any],
    target: Any,
    scope: Any,
) -> Any:
    """Compile one key of an autotuned or heuristic kernel (the backend's ``compile`` for stacks).

    Ahead of time (``target`` set): the known winners, or every surviving
    config, as an :class:`AutotunedArtifact`. On the device: the stored
    winner, or every surviving config compiled in parallel then benchmarked,
    as an :class:`AutotunedExecutor`.
    """
    from ._aot import cache_dir, require_device
    from ._kernel import InterpretedExecutor, _verify_default, check_warmup_args

    args, kwargs = _warmup_pair(name, warmup)
    check_not_provided(name, stack, args, kwargs, options)
    top = {**kwargs, **options}
    variants = []
    for index, config in surviving_configs(name, stack, args, top):
        derived = derive(stack, args, top, config)
        check_warmup_args(name, stack.jit, (args, derived.params), derived.options)
        variants.append((index, config, derived))
    jit = stack.jit
    tkey = variants[0][2].tuning_key
    jobs = getattr(scope, "jobs", 1) if scope is not None else 1
    interpreted = api.is_interpreted(jit)
    verify = bool(getattr(kernel, "verify_launches", False)) or _verify_default()

    if target is not None:

        def aot(variant: Any) -> Any:
            return backend._compile_aot(
                name, key, jit, args, variant[2].params, variant[2].options, target, scope
            )

        if stack.autotuner is None:
            return aot(variants[0])
        rid = result_id(stack, tkey, gpu="", target=str(target))
        winners = known_winners(stack, rid, cache_dir(), copy=True)
        chosen = [v for v in variants if v[0] in set(winners.values())] if winners else []
        arts = run_parallel(aot, chosen or variants, jobs)
        return AutotunedArtifact(
            kernel=name,
            key=key,
            target=str(target),
            tuning_key=tkey,
            artifacts=tuple(arts),
            configs=tuple(v[0] for v in chosen or variants),
            known_winners=winners,
            tuning="known-winners" if chosen else "needs-device",
        )

    def device(variant: Any) -> Any:
        if interpreted:
            return InterpretedExecutor(
                kernel=name, key=key, fn=jit, launch_options=variant[2].options
            )
        return backend._compile_device(
            name, key, kernel, jit, args, variant[2].params, variant[2].options, scope
        )

    def done(variant: Any, inner: Any, tuning: str | None, **extra: Any) -> AutotunedExecutor:
        return AutotunedExecutor(
            kernel=name,
            key=key,
            stack=stack,
            inner=inner,
            config=variant[1],
            derived=variant[2],
            options=options,
            tuning=tuning,
            verify=verify,
            **extra,
        )

    if stack.autotuner is None or len(variants) == 1:
        inner = device(variants[0])
        if stack.autotuner is not None:
            stack.tuner.cache[tkey] = variants[0][1]
        return done(
            variants[0],
            inner,
            "single" if stack.autotuner is not None else None,
            cache_hit=inner.cache_hit,
        )
    if not interpreted:
        require_device(name)  # before the driver is asked for its device: say why
    where = cache_dir()
    dev = None if interpreted else _current_device()
    gpu = gpu_model(dev, interpreted=interpreted)
    rid = result_id(stack, tkey, gpu=gpu, target=str(backend.default_target()))
    found = find_result(stack, rid, where)
    if found is not None:
        winner, body = found
        variant = next((v for v in variants if v[0] == winner), None)
        if variant is not None:
            inner = device(variant)
            stack.tuner.cache[tkey] = variant[1]
            timings = {int(i): t for i, t in body.get("timings_ms", {}).items()}
            return done(variant, inner, "stored", timings=timings, cache_hit=inner.cache_hit)
        logger.warning(
            "kernel %s key %r: the stored winner (config %d) does not survive pruning now; re-tuning",
            name,
            key,
            winner,
        )
    others = sorted(known_winners(stack, rid, where))
    if others:
        logger.info(
            "kernel %s key %r: tuned results exist for %s but not for %s; tuning here (results "
            "are only used on the GPU model they were measured on)",
            name,
            key,
            ", ".join(others),
            gpu,
        )

    def attempt(variant: Any) -> Any:
        try:
            return device(variant)
        except Exception as exc:  # noqa: BLE001 - one config failing is a timing of inf, as in Triton
            return exc

    compiled = run_parallel(attempt, variants, jobs)
    candidates = [
        (v[0], v[1], inner, v[2])
        for v, inner in zip(variants, compiled)
        if not isinstance(inner, BaseException)
    ]
    for v, inner in zip(variants, compiled):
        if isinstance(inner, BaseException):
            logger.warning(
                "kernel %s key %r: config %d (%s) does not compile: %s: %s",
                name,
                key,
                v[0],
                v[1],
                type(inner).__name__,
                inner,
            )
    if not candidates:
        raise next(c for c in compiled if isinstance(c, BaseException))
    grid = kernel.warmup_grid(key)
    bench_device = "cpu" if interpreted else _torch_device(candidates[0][2].device)
    timings, seconds = benchmark(
        stack, candidates, args, grid, bench_device, interpreted=interpreted
    )
    best = min(candidates, key=lambda c: timings[c[0]])
    if timings[best[0]][0] == float("inf"):
        raise RuntimeError(
            f"kernel {name!r} key {key!r}: every config failed while benchmarking on the device"
        )
    store_result(
        where,
        rid,
        kernel=name,
        configs=stack.tuner.configs,
        timings=timings,
        winner=best[0],
        seconds=seconds,
    )
    stack.tuner.cache[tkey] = best[1]
    logger.info(
        "kernel %s key %r: tuned %d config(s) in %.3fs on %s; winner %d (%s) %.4f ms",
        name,
        key,
        len(candidates),
        seconds,
        gpu,
        best[0],
        best[1],
        timings[best[0]][0],
    )
    variant = next(v for v in variants if v[0] == best[0])
    return done(
        variant,
        best[2],
        "benchmarked",
        timings=timings,
        autotune_seconds=seconds,
        cache_hit=all(getattr(c[2], "cache_hit", True) for c in candidates),
    )


def _current_device() -> Any:
    return api.active_driver().get_current_device()


def _torch_device(device: Any) -> Any:
    import torch

    return torch.device("cuda", device) if isinstance(device, int) else torch.device(device)


def run_parallel(fn: Callable[[Any], Any], items: Sequence[Any], jobs: int) -> list[Any]:
    """``[fn(item) ...]``, up to ``jobs`` at once, each in a copy of the caller's context."""
    import contextvars

    if jobs <= 1 or len(items) <= 1:
        return [fn(item) for item in items]
    with ThreadPoolExecutor(min(jobs, len(items)), thread_name_prefix="warmkit-autotune") as pool:
        futures = [pool.submit(contextvars.copy_context().run, fn, item) for item in items]
        return [f.result() for f in futures]
