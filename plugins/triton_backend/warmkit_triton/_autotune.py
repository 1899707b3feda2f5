"""Autotuned and heuristic kernels: ``@triton.autotune`` / ``@triton.heuristics`` stacks, tuned once and shipped.

A ``TritonKernel.fn`` may be any stack Triton allows of ``@triton.autotune``,
``@triton.heuristics`` and ``@triton.jit``. This module

* reads the stack through ``_stack`` (``unwrap``, ``derive``: what Triton's own
  layers derive from a key's warmup arguments);
* compiles a key's surviving configs (in parallel), benchmarks them and
  stores the winner, or uses a stored winner (:func:`compile_stack`; the
  benchmark and the results store are in ``_tuned``);
* launches the winner (:class:`AutotunedExecutor`);
* is the backend's tuning component (:class:`TritonTuning`, ``backend.tuning``):
  the stored winners, for bundles, and which keys still need tuning.

Raw autotuned kernels that warmkit never wrapped are reported by ``_hooks``.

The GPU-model policy: a result is used only on the GPU model it was measured
on. On another model (an H100 sharing ``sm_90`` with an H200) device warmup
re-tunes, at warmup, never at runtime, and logs that results of other models
exist. Ahead of time (no GPU) the winners of every model known for the target
are compiled; with no known winner, every surviving config is.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

import attrs

from warmkit import WarmkitError

from . import _triton_api as api
from ._aot import cache_dir, require_device
from ._kernel import InterpretedExecutor, _verify_default, check_warmup_args
from ._stack import (
    Derived,
    Stack,
    check_not_provided,
    derive,
    key_names,
    surviving_configs,
    unwrap,
)
from ._tuned import (
    benchmark,
    find_result,
    gpu_model,
    known_winners,
    result_id,
    scan_results,
    store_result,
)

__all__ = [
    "AutotuneKeyMismatchError",
    "AutotunedArtifact",
    "AutotunedExecutor",
    "StackCompiler",
    "TritonTuning",
    "Variant",
    "compile_stack",
    "stack_variants",
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
            names = key_names(self.stack.tuner, args, {**kwargs, **self._options})
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


class StackCompiler(Protocol):
    """What :func:`compile_stack` needs of the backend: one variant's compile, either way.

    ``scope`` is the backend's compile scope (or None); it is passed through, never read here.
    """

    def compile_aot(
        self,
        name: str,
        key: Any,
        fn: Any,
        args: Any,
        kwargs: Any,
        options: Any,
        tgt: Any,
        scope: Any,
    ) -> Any:
        """An ahead-of-time compile of one variant for ``tgt``: an ``AotArtifact``."""

    def compile_device(
        self,
        name: str,
        key: Any,
        kernel: Any,
        fn: Any,
        args: Any,
        kwargs: Any,
        options: Any,
        scope: Any,
    ) -> Any:
        """A device compile of one variant: a ``TritonExecutor``."""

    def device_target(self) -> str | None:
        """This host's device target (tuned results are stored per target)."""


@attrs.frozen
class Variant:
    """One config of a key's stack that survives pruning, and what the stack derives for it.

    Attributes:
        index: the config's index in the autotuner's configs (0 without ``@triton.autotune``).
        config: the ``triton.Config``, or None without ``@triton.autotune``.
        derived: the launch's parameters, options, heuristics and autotune key.
    """

    index: int
    config: Any
    derived: Derived


@attrs.frozen
class _Job:
    """One key's compile of a stack: what every step of :func:`compile_stack` reads."""

    compiler: StackCompiler
    kernel: Any
    name: str
    key: Any
    stack: Stack
    args: tuple[Any, ...]
    options: Mapping[str, Any]
    scope: Any
    jobs: int
    interpreted: bool
    verify: bool

    def aot(self, variant: Variant, target: Any) -> Any:
        d = variant.derived
        return self.compiler.compile_aot(
            self.name, self.key, self.stack.jit, self.args, d.params, d.options, target, self.scope
        )

    def device(self, variant: Variant) -> Any:
        d = variant.derived
        if self.interpreted:
            return InterpretedExecutor(
                kernel=self.name, key=self.key, fn=self.stack.jit, launch_options=d.options
            )
        return self.compiler.compile_device(
            self.name,
            self.key,
            self.kernel,
            self.stack.jit,
            self.args,
            d.params,
            d.options,
            self.scope,
        )

    def executor(
        self, variant: Variant, inner: Any, tuning: str | None, **extra: Any
    ) -> AutotunedExecutor:
        return AutotunedExecutor(
            kernel=self.name,
            key=self.key,
            stack=self.stack,
            inner=inner,
            config=variant.config,
            derived=variant.derived,
            options=self.options,
            tuning=tuning,
            verify=self.verify,
            **extra,
        )


def stack_variants(
    name: str,
    stack: Stack,
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    options: Mapping[str, Any],
) -> list[Variant]:
    """The surviving configs of a key, each derived and its arguments checked against the function.

    Raises:
        TypeError: warmup arguments that pass what the stack supplies, or do not fit the function.
        RuntimeError: the autotuner's pruning failed on the warmup arguments.
    """
    check_not_provided(name, stack, args, kwargs, options)
    top = {**kwargs, **options}
    variants = []
    for index, config in surviving_configs(name, stack, args, top):
        derived = derive(stack, args, top, config)
        check_warmup_args(name, stack.jit, (args, derived.params), derived.options)
        variants.append(Variant(index, config, derived))
    return variants


def compile_stack(
    compiler: StackCompiler,
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
    args, kwargs = _warmup_pair(name, warmup)
    variants = stack_variants(name, stack, args, kwargs, options)
    job = _Job(
        compiler=compiler,
        kernel=kernel,
        name=name,
        key=key,
        stack=stack,
        args=args,
        options=options,
        scope=scope,
        jobs=getattr(scope, "jobs", 1) if scope is not None else 1,
        interpreted=api.is_interpreted(stack.jit),
        verify=bool(getattr(kernel, "verify_launches", False)) or _verify_default(),
    )
    if target is not None:
        return _compile_ahead(job, variants, target)
    if stack.autotuner is None or len(variants) == 1:
        inner = job.device(variants[0])
        if stack.autotuner is None:
            return job.executor(variants[0], inner, None, cache_hit=inner.cache_hit)
        stack.tuner.cache[variants[0].derived.tuning_key] = variants[0].config
        return job.executor(variants[0], inner, "single", cache_hit=inner.cache_hit)
    return _compile_on_device(job, variants)


def _compile_ahead(job: _Job, variants: list[Variant], target: Any) -> Any:
    """The known winners for ``target`` (of every GPU model), else every surviving config."""
    if job.stack.autotuner is None:
        return job.aot(variants[0], target)
    tkey = variants[0].derived.tuning_key
    assert tkey is not None  # derive() gives one wherever there is an @triton.autotune layer
    rid = result_id(job.stack, tkey, gpu="", target=str(target))
    winners = known_winners(job.stack, rid, cache_dir(), copy=True)
    chosen = [v for v in variants if v.index in set(winners.values())] if winners else []
    arts = run_parallel(lambda v: job.aot(v, target), chosen or variants, job.jobs)
    return AutotunedArtifact(
        kernel=job.name,
        key=job.key,
        target=str(target),
        tuning_key=tkey,
        artifacts=tuple(arts),
        configs=tuple(v.index for v in chosen or variants),
        known_winners=winners,
        tuning="known-winners" if chosen else "needs-device",
    )


def _compile_on_device(job: _Job, variants: list[Variant]) -> AutotunedExecutor:
    """The stored winner of this GPU model, else every config compiled and benchmarked here."""
    name, key, stack = job.name, job.key, job.stack
    if not job.interpreted:
        require_device(name)  # before the driver is asked for its device: say why
    tkey = variants[0].derived.tuning_key
    assert tkey is not None  # only stacks with an @triton.autotune layer are tuned
    where = cache_dir()
    gpu = gpu_model(None if job.interpreted else _current_device(), interpreted=job.interpreted)
    rid = result_id(stack, tkey, gpu=gpu, target=str(job.compiler.device_target()))
    found = find_result(stack, rid, where)
    if found is not None:
        winner, body = found
        variant = next((v for v in variants if v.index == winner), None)
        if variant is not None:
            inner = job.device(variant)
            stack.tuner.cache[tkey] = variant.config
            timings = {int(i): t for i, t in body.get("timings_ms", {}).items()}
            return job.executor(
                variant, inner, "stored", timings=timings, cache_hit=inner.cache_hit
            )
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
    return _tune(job, variants, rid, gpu, where)


def _compile_each(job: _Job, variants: list[Variant]) -> list[tuple[int, Any, Any, Derived]]:
    """Every variant compiled in parallel; those that fail are logged and left out (as in Triton).

    Raises:
        Exception: the first failure, when every variant failed.
    """

    def attempt(variant: Variant) -> Any:
        try:
            return job.device(variant)
        except Exception as exc:  # noqa: BLE001 - one config failing is a timing of inf, as in Triton
            return exc

    compiled = run_parallel(attempt, variants, job.jobs)
    for v, inner in zip(variants, compiled):
        if isinstance(inner, BaseException):
            logger.warning(
                "kernel %s key %r: config %d (%s) does not compile: %s: %s",
                job.name,
                job.key,
                v.index,
                v.config,
                type(inner).__name__,
                inner,
            )
    candidates = [
        (v.index, v.config, inner, v.derived)
        for v, inner in zip(variants, compiled)
        if not isinstance(inner, BaseException)
    ]
    if not candidates:
        raise next(c for c in compiled if isinstance(c, BaseException))
    return candidates


def _tune(job: _Job, variants: list[Variant], rid: Any, gpu: str, where: str) -> AutotunedExecutor:
    """Compile every variant, benchmark them here, store the winner and return it."""
    name, key, stack = job.name, job.key, job.stack
    candidates = _compile_each(job, variants)
    grid = job.kernel.warmup_grid(key)
    bench_device = "cpu" if job.interpreted else _torch_device(candidates[0][2].device)
    timings, seconds = benchmark(
        stack, candidates, job.args, grid, bench_device, interpreted=job.interpreted
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
    stack.tuner.cache[variants[0].derived.tuning_key] = best[1]
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
    variant = next(v for v in variants if v.index == best[0])
    return job.executor(
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


class TritonTuning:
    """The tuning component of ``TritonBackend`` (``backend.tuning``).

    ``warmkit.TunedResults`` (the winners a cache directory holds, listed by
    bundles) and ``warmkit.TuningPlan`` (``warmkit plan --target``).

    Args:
        compiler: names this host's device target (tuned results are stored per target).
    """

    def __init__(self, compiler: StackCompiler) -> None:
        self._compiler = compiler

    def tuning_plan(self, kernel: Any, keys: list[Any], target: str | None) -> dict[Any, str]:
        """For each autotuned key: ``"needs device tuning"``, or the GPU models with a stored winner.

        Args:
            kernel: a ``TritonKernel``.
            keys: its keys.
            target: the target the keys would be compiled for (None: this device's).
        """
        stack = unwrap(getattr(kernel, "fn", None))
        if stack is None or stack.tuner is None or len(stack.tuner.configs) <= 1:
            return {}
        tgt = target if target is not None else self._compiler.device_target()
        out: dict[Any, str] = {}
        for key in keys:
            try:
                tkey = tuning_key_of(kernel, stack, key)
            except Exception as exc:  # noqa: BLE001 - a note, the warmup reports the error
                out[key] = f"autotuned; cannot derive its autotune key: {exc}"
                continue
            if tgt is None:
                out[key] = "autotuned; pass --target to see whether it is tuned"
                continue
            rid = result_id(stack, tkey, "", str(tgt))
            known = known_winners(stack, rid, cache_dir())
            out[key] = f"tuned on {', '.join(sorted(known))}" if known else "needs device tuning"
        return out

    def tuned_results(
        self, directory: str | os.PathLike[str] | None = None
    ) -> list[dict[str, Any]]:
        """The tuned autotune results stored in a cache directory (default: the one in effect).

        Each is a dict: ``kernel``, ``function``, ``autotune_key``, ``gpu``,
        ``target``, ``triton_version``, ``winner`` (config index),
        ``winner_config`` and ``timings_ms``. Bundles list them (``bundle inspect``).
        """
        base = directory if directory is not None else cache_dir()
        out = []
        for body in scan_results(base):
            rid = body["id"]
            out.append(
                {
                    "kernel": body.get("kernel"),
                    "function": rid["function"],
                    "autotune_key": rid["autotune_key"],
                    "gpu": rid["gpu"],
                    "target": rid["target"],
                    "triton_version": rid["triton_version"],
                    "winner": body.get("winner"),
                    "winner_config": body.get("winner_config"),
                    "timings_ms": body.get("timings_ms"),
                }
            )
        return out
