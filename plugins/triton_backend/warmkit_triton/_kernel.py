"""``TritonKernel``, the kernel contract for Triton, and the executors the backend returns.

A subclass names its ``@triton.jit`` function and says, per compile key, which
arguments a launch of that variant has (``warmup_args``) and with which launch
options (``launch_options``). warmkit warms every key up before serving; at
runtime ``run(key, grid, *args)`` launches the compiled variant directly.

Example::

    @triton.jit
    def add_kernel(x, y, out, n, BLOCK: tl.constexpr): ...

    class Add(TritonKernel):
        fn = add_kernel

        @attrs.frozen
        class CompileKey:
            dtype: str
            n_rep: int  # specialization_rep(n)
            block: int

        def dispatch(self, *, dtype, n, block=1024):
            return self.CompileKey(dtype, specialization_rep(n), block)

        def warmup_args(self, key):
            t = WarmupTensor(key.dtype, (key.block,))
            return (t, t, t, key.n_rep), {"BLOCK": key.block}

        def launch_options(self, key):
            return {"num_warps": 4}

        def __call__(self, x, y, out):
            n = x.numel()
            key = self.dispatch(dtype=str(x.dtype).removeprefix("torch."), n=n)
            self.run(key, (triton.cdiv(n, key.block),), x, y, out, n, BLOCK=key.block)
"""

from __future__ import annotations

import difflib
import logging
import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, ClassVar, TypeVar

from warmkit import JitKernel, KernelDefinitionError, WarmkitError

from . import _envs, _stack
from . import _triton_api as api

__all__ = [
    "InterpretedExecutor",
    "SpecializationMismatchError",
    "TritonExecutor",
    "TritonKernel",
    "bind_args",
    "check_warmup_args",
]

logger = logging.getLogger(__name__)

K = TypeVar("K")


class SpecializationMismatchError(WarmkitError, RuntimeError):
    """A launch's arguments specialize differently from the variant its key names.

    Raised only when launch verification is on (``TritonKernel.verify_launches``
    or ``WARMKIT_TRITON_VERIFY=1``).

    Attributes:
        kernel: the kernel's name.
        key: the compile key.
        parameter: the first parameter whose specialization differs.
    """

    def __init__(self, kernel: str, key: Any, parameter: str, expected: Any, got: Any) -> None:
        self.kernel = kernel
        self.key = key
        self.parameter = parameter
        super().__init__(
            f"kernel {kernel!r} key {key!r}: argument {parameter!r} specializes as {got!r} at this "
            f"launch, but the key's variant was compiled for {expected!r}. dispatch() must put "
            "everything Triton specializes on into the key (use warmkit_triton.specialization_rep "
            "for ints, and the alignment of pointers)"
        )


class TritonKernel(JitKernel[K]):
    """A warmkit kernel wrapper around one ``@triton.jit`` function.

    A subclass provides, besides ``CompileKey`` and ``dispatch``:

    * ``fn``: the ``@triton.jit`` function (class attribute), or any stack of
      ``@triton.autotune`` / ``@triton.heuristics`` over it (``docs/triton.md``);
    * ``warmup_grid(key)``: for an autotuned ``fn``, the grid to benchmark with;
    * ``warmup_args(key) -> (args, kwargs)``: the positional and keyword
      arguments (constexprs included, launch options excluded) of a launch
      with exactly ``key``'s specialization, built from ``WarmupTensor``\\ s
      and representative scalars;
    * ``launch_options(key)``: ``num_warps``, ``num_stages`` ... The same
      function serves warmup and runtime, because Triton's in-memory cache key
      includes the exact launch kwargs and even their order.

    Its own ``__call__`` computes the key with ``dispatch`` and calls
    :meth:`run`.

    Class attributes:
        backend: ``"triton"``.
        fn: the ``@triton.jit`` function.
        verify_launches: check every launch's argument specialization against
            the key's variant (slower; for tests and debugging). The
            environment variable ``WARMKIT_TRITON_VERIFY=1`` turns it on for
            every kernel.
    """

    backend: ClassVar[str | None] = "triton"
    fn: ClassVar[Any]
    verify_launches: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.dispatch_info() is None or cls.compile is not TritonKernel.compile:
            return
        fn = getattr(cls, "fn", None)
        if fn is None:
            raise KernelDefinitionError(
                cls, "is a TritonKernel without fn: set fn = <your @triton.jit function>"
            )
        if not api.is_jit_function(fn):
            raise KernelDefinitionError(
                cls, f"fn must be a @triton.jit function, got {type(fn).__name__} {fn!r}"
            )
        if cls.warmup_args is TritonKernel.warmup_args:
            raise KernelDefinitionError(cls, "must define warmup_args(self, key) -> (args, kwargs)")
        try:
            stack = _stack.unwrap(fn)
        except TypeError as exc:
            raise KernelDefinitionError(cls, f"fn: {exc}") from exc
        tuner = stack.tuner if stack is not None else None
        if (
            tuner is not None
            and len(tuner.configs) > 1
            and cls.warmup_grid is TritonKernel.warmup_grid
        ):
            raise KernelDefinitionError(
                cls,
                f"fn is @triton.autotune'd ({len(tuner.configs)} configs): define "
                "warmup_grid(self, key), the launch grid for warmup_args(key) (a tuple, or a "
                "callable of the bound arguments like a grid lambda), so that device warmup can "
                "benchmark the configs",
            )

    def warmup_args(self, key: K) -> tuple[Sequence[Any], Mapping[str, Any]]:
        """The arguments of a launch with exactly ``key``'s specialization.

        Args:
            key: a ``CompileKey``.

        Returns:
            ``(args, kwargs)``: positional and keyword arguments of ``fn``,
            constexprs included, launch options (``num_warps`` ...) excluded.
            Use ``WarmupTensor`` for tensors and
            ``specialization_rep`` values for specialized ints.
        """
        raise NotImplementedError(f"{type(self).__qualname__} must define warmup_args(self, key)")

    def warmup_grid(self, key: K) -> Any:
        """The launch grid for ``warmup_args(key)``: needed when ``fn`` is ``@triton.autotune``'d.

        Device warmup benchmarks every surviving config with it, on scratch
        tensors shaped like the key's warmup tensors. Return a tuple, or
        a callable of the bound arguments (config constexprs included), like
        the ``lambda META: (triton.cdiv(n, META["BLOCK"]),)`` of a launch.
        """
        raise NotImplementedError(
            f"{type(self).__qualname__} must define warmup_grid(self, key) to be benchmarked"
        )

    def launch_options(self, key: K) -> Mapping[str, Any]:
        """Triton launch options (``num_warps``, ``num_stages`` ...) for ``key``; default none.

        Used at warmup and at runtime alike; return the same keys in the same
        order every time.
        """
        return {}

    def run(self, key: K, grid: Any, *args: Any, **kwargs: Any) -> Any:
        """Launch ``key``'s variant: ``get_or_compile(key)``, then launch.

        After warmup this calls the cached compiled kernel's launcher directly
        (no binder, no in-memory cache lookup); where the installed Triton does
        not allow it, it falls back to ``fn[grid](*args, **kwargs, **launch_options(key))``.

        Args:
            key: the key ``dispatch`` returned for this launch.
            grid: the launch grid (a tuple, or a callable of the bound arguments).
            *args: the kernel's positional arguments.
            **kwargs: the kernel's keyword arguments (constexprs included);
                launch options come from ``launch_options(key)``.

        Raises:
            warmkit.RuntimeCompileError: the key was not warmed up and the
                monitor is in ``"error"`` mode.
            TypeError: the arguments do not match ``fn``'s parameters.
        """
        # the hot path: the key object launched before (JitKernel.launch_lookup), no hash
        seen = self.launch_lookup(id(key))
        executor = seen[1] if seen is not None and seen[0] is key else self.launch_executor(key)
        if type(executor) is TritonExecutor:
            return executor.launch(grid, args, kwargs)  # no second packing of the arguments
        return executor(grid, *args, **kwargs)

    @classmethod
    def dispatch_memo_types(cls) -> frozenset[type]:
        """``torch.dtype`` (an immutable singleton) is a plain dispatch input too."""
        torch = sys.modules.get("torch")
        dtype = getattr(torch, "dtype", None)
        return frozenset({dtype}) if isinstance(dtype, type) else frozenset()

    @classmethod
    def runtime_inputs(cls, inputs: Mapping[str, Any]) -> Iterable[Mapping[str, Any]]:
        """``inputs``, and the form a launch passes: ``torch.float16`` where it says ``"float16"``.

        A registration holds plain data, so a kernel registers dtypes by name
        while its ``__call__`` passes ``x.dtype``; device warmup rehearses both.
        """
        torch = sys.modules.get("torch")
        dtype = getattr(torch, "dtype", None)
        if not isinstance(dtype, type):
            return (inputs,)
        runtime = {
            k: getattr(torch, v)
            if type(v) is str and isinstance(getattr(torch, v, None), dtype)
            else v
            for k, v in inputs.items()
        }
        return (inputs, runtime) if runtime != inputs else (inputs,)

    def function_for(self, key: K) -> Any:
        """The ``@triton.jit`` function (or autotune/heuristics stack) that compiles ``key``: ``fn``.

        A kernel whose function depends on the key (a recorded kernel imports
        its function on first use) overrides this; the backend asks it before
        it computes a key's cache entry without compiling.
        """
        return self.fn


# -- argument checks ------------------------------------------------------------------------------


def _suggest(name: str, names: Sequence[str]) -> str:
    close = difflib.get_close_matches(name, list(names), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def check_warmup_args(
    kernel: str, fn: Any, warmup: Any, options: Mapping[str, Any]
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Validate ``warmup_args(key)``'s result and ``launch_options(key)`` against ``fn``'s parameters.

    Args:
        kernel: the kernel's name, for messages.
        fn: the ``@triton.jit`` function.
        warmup: what ``warmup_args`` returned.
        options: what ``launch_options`` returned.

    Returns:
        ``(args, kwargs)`` as a tuple and a dict.

    Raises:
        TypeError: naming the parameter: too many positional arguments, an
            unknown keyword, a parameter given twice or not at all, a launch
            option that is a kernel parameter or unknown to Triton.
    """
    fname = getattr(fn, "__name__", repr(fn))
    if not (isinstance(warmup, tuple) and len(warmup) == 2 and isinstance(warmup[1], Mapping)):
        raise TypeError(
            f"kernel {kernel!r}: warmup_args(key) must return (args, kwargs), a tuple and a dict; "
            f"got {type(warmup).__name__} {warmup!r:.200}"
        )
    args, kwargs = tuple(warmup[0]), dict(warmup[1])
    names, defaults = api.jit_params(fn)
    listing = f"{fname}({', '.join(names)})"
    if len(args) > len(names):
        raise TypeError(
            f"kernel {kernel!r}: warmup_args gives {len(args)} positional arguments but {listing} "
            f"takes {len(names)}"
        )
    positional = set(names[: len(args)])
    for name in kwargs:
        if name not in names:
            hint = ""
            if name in (api.launch_option_names() or ()):
                hint = "; launch options belong in launch_options(key)"
            raise TypeError(
                f"kernel {kernel!r}: warmup_args passes {name!r}, which is not a parameter of "
                f"{listing}{_suggest(name, names)}{hint}"
            )
        if name in positional:
            raise TypeError(
                f"kernel {kernel!r}: warmup_args gives parameter {name!r} of {listing} both "
                "positionally and by keyword"
            )
    known = api.launch_option_names()
    for name in options:
        if name in names:
            raise TypeError(
                f"kernel {kernel!r}: launch_options(key) sets {name!r}, which is a parameter of "
                f"{listing}; pass it in warmup_args and at launch instead"
            )
        if known is not None and name not in known:
            raise TypeError(
                f"kernel {kernel!r}: launch_options(key) sets {name!r}, which is not a Triton "
                f"launch option{_suggest(name, sorted(known))}"
            )
    for name in names[len(args) :]:
        if name not in kwargs and name not in defaults:
            raise TypeError(
                f"kernel {kernel!r}: warmup_args does not give parameter {name!r} of {listing}"
            )
    return args, kwargs


# -- executors ------------------------------------------------------------------------------------


_prime_ok = True


def _verify_default() -> bool:
    return bool(_envs.get("WARMKIT_TRITON_VERIFY"))


class TritonExecutor:
    """A warmed-up Triton variant, launchable as ``executor(grid, *args, **kwargs)``.

    It holds the loaded ``CompiledKernel`` and calls its launcher directly,
    the way ``JITFunction.run`` does after its binder and cache lookup, but
    without them. It falls back to ``fn[grid](...)`` when a fast launch is not
    possible: another current device, ``pre_run_hooks`` on ``fn``, or a
    ``CompiledKernel`` without the expected launcher attributes.

    Attributes:
        kernel: the kernel's name.
        key: the compile key.
        fn: the ``@triton.jit`` function.
        compiled: Triton's ``CompiledKernel`` (loaded).
        launch_options: the launch options it was compiled with.
        device: the device it was loaded on.
        cache_hit: True when the variant came from Triton's disk cache (or was
            already in memory), False when it was compiled.
        fast: whether launches bypass ``fn[grid]``.
        primed: whether device warmup ran the launch path (see :meth:`prime`).
        launch_path: ``"direct-3.6"``/``"direct-3.9"`` (the launcher's C
            function, called with the installed Triton's argument layout),
            ``"launcher"`` (the launcher object) or ``"fn[grid]"``.
    """

    def __init__(
        self,
        *,
        kernel: str,
        key: Any,
        fn: Any,
        compiled: Any,
        launch_options: Mapping[str, Any],
        device: Any,
        cache_hit: bool,
        specialization: list[Any] | None = None,
        verify: bool = False,
    ) -> None:
        self.kernel = kernel
        self.key = key
        self.fn = fn
        self.compiled = compiled
        self.launch_options = dict(launch_options)
        self.device = device
        self.cache_hit = cache_hit
        self._specialization = specialization
        self._verify = verify or _verify_default()
        self._names, self._defaults = api.jit_params(fn)
        self._nparams = len(self._names)
        # names to take from kwargs, by number of positional arguments
        self._tails = {i: tuple(self._names[i:]) for i in range(self._nparams + 1)}
        self._pre_run_hooks = api.pre_run_hooks(fn)
        active = api.active_driver()
        self._get_device = _fast_device_getter(active)
        self._get_stream = active.get_current_stream
        self.fast = False
        self.primed = False
        self.launch_path = "fn[grid]"
        launcher = api.launcher_of(
            compiled
        )  # loads the module and builds the launcher if not yet done
        if launcher is None:
            logger.debug("kernel %s: no fast launch; using fn[grid]", kernel)
            return
        self._launcher = launcher
        self._function = launcher.function
        self._go, self.launch_path = api.direct_launch(compiled, launcher)
        self.fast = True

    def __call__(self, grid: Any, *args: Any, **kwargs: Any) -> None:
        return self.launch(grid, args, kwargs)

    def launch(self, grid: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """``self(grid, *args, **kwargs)``, with the arguments as they are (``TritonKernel.run``)."""
        if kwargs or len(args) != self._nparams:
            args = self._bind(args, kwargs)
        if not self.fast or self._pre_run_hooks:
            return self.fn[grid](*args, **self.launch_options)
        device = self._get_device()
        if device != self.device:
            return self.fn[grid](*args, **self.launch_options)
        if self._verify:
            self._check(args)
        if callable(grid):
            grid = grid(dict(zip(self._names, args)))
        self._go(grid, self._get_stream(device), self._function, args)
        return None

    def prime(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> bool:
        """Run the whole launch path once without running the kernel (done by device warmup).

        Triton resolves some things lazily at the first real launch: 3.6's
        per-signature launcher looks up ``cuLaunchKernelEx`` with ``dlsym`` then
        (3.9's shared launcher once per process), and the launch path's Python
        and C code runs for the first time. This calls the executor exactly as
        a launch would, with the warmup's arguments (tensors replaced by a
        small real device buffer) and a null ``CUfunction``: the driver rejects
        the launch with "invalid resource handle" and nothing runs on the GPU.
        It also checks the direct launcher call's argument layout: if the C
        launcher rejects it, the executor falls back to the launcher object.
        ``WARMKIT_TRITON_PRIME=0`` turns priming off.

        Returns:
            True when the launch path ran up to the driver's rejection.
        """
        global _prime_ok
        if not self.fast or not _prime_ok or not _envs.get("WARMKIT_TRITON_PRIME"):
            return False
        try:
            import torch

            buf = torch.empty(256, dtype=torch.uint8, device=torch.device("cuda", self.device))
        except Exception as exc:  # noqa: BLE001 - priming is an optimisation, never a failure
            logger.debug("launch priming skipped: %s", exc)
            return False
        call_args = tuple(buf if hasattr(a, "data_ptr") else a for a in args)
        call_kwargs = {k: (buf if hasattr(v, "data_ptr") else v) for k, v in kwargs.items()}
        function, verify = self._function, self._verify
        self._function, self._verify = 0, False
        try:
            for _attempt in range(2):
                try:
                    self((1, 1, 1), *call_args, **call_kwargs)
                except TypeError as exc:
                    if self.launch_path.startswith("direct"):
                        # the installed Triton's launcher takes another argument layout
                        logger.debug("direct launch rejected (%s); using the launcher object", exc)
                        self._go, self.launch_path = api.direct_launch(
                            self.compiled, self._launcher, layout="launcher"
                        )
                        continue
                    logger.debug("kernel %s: launch path not primed (%s)", self.kernel, exc)
                    return False
                except RuntimeError as exc:
                    if "invalid resource handle" in str(exc) or "INVALID_HANDLE" in str(exc):
                        return True
                    _prime_ok = False
                    logger.debug("launch priming disabled: unexpected error %s", exc)
                    return False
                except Exception as exc:  # noqa: BLE001
                    logger.debug("kernel %s: launch path not primed (%s)", self.kernel, exc)
                    return False
                _prime_ok = False
                logger.warning(
                    "launch priming: a launch with a null CUfunction did not fail; priming disabled"
                )
                return False
            return False
        finally:
            self._function, self._verify = function, verify

    def _bind(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
        tail = self._tails.get(len(args))
        if tail is not None and len(kwargs) == len(tail):
            try:
                return args + tuple([kwargs[name] for name in tail])
            except KeyError:
                pass
        return bind_args(self.kernel, self.fn.__name__, self._names, self._defaults, args, kwargs)

    def _check(self, args: tuple[Any, ...]) -> None:
        if self._specialization is None:
            return
        spec = api.specialization_of(self.fn, self.device, args, self.launch_options)
        for name, want, got in zip(self._names, self._specialization, spec):
            if tuple(want) != tuple(got):
                raise SpecializationMismatchError(self.kernel, self.key, name, want, got)

    def __repr__(self) -> str:
        return f"<TritonExecutor {self.kernel} key={self.key!r} device={self.device!r} {self.launch_path}>"


def _fast_device_getter(active: Any) -> Any:
    """torch's C getter for the current CUDA device when Triton uses torch's, else the driver's."""
    getter = active.get_current_device
    try:
        import torch

        if getter is torch.cuda.current_device:
            from torch._C import _cuda_getDevice

            return _cuda_getDevice
    except (ImportError, AttributeError):
        pass
    return getter


def bind_args(
    kernel: str,
    fname: str,
    names: Sequence[str],
    defaults: Mapping[str, Any],
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
) -> tuple[Any, ...]:
    """Bind a launch's arguments to the kernel's parameters, in order, defaults filled in.

    Raises:
        TypeError: too many positional arguments, a parameter given twice or
            missing, or a keyword that is not a parameter (named, with a suggestion).
    """
    if len(args) > len(names):
        raise TypeError(
            f"kernel {kernel!r}: {len(args)} positional arguments given, "
            f"{fname} takes {len(names)} ({', '.join(names)})"
        )
    out = list(args)
    remaining = dict(kwargs)
    for name in names[: len(args)]:
        if name in remaining:
            raise TypeError(f"kernel {kernel!r}: argument {name!r} of {fname} given twice")
    for name in names[len(args) :]:
        if name in remaining:
            out.append(remaining.pop(name))
        elif name in defaults:
            out.append(defaults[name])
        else:
            raise TypeError(f"kernel {kernel!r}: missing argument {name!r} of {fname}")
    if remaining:
        name = next(iter(remaining))
        raise TypeError(
            f"kernel {kernel!r}: {name!r} is not a parameter of {fname}"
            f"{_suggest(name, names)}; launch options come from launch_options(key)"
        )
    return tuple(out)


class InterpretedExecutor:
    """The executor under ``TRITON_INTERPRET=1``: nothing compiles, launches run in Triton's interpreter.

    Attributes:
        kernel: the kernel's name.
        key: the compile key.
        cache_hit: always True (nothing was compiled).
    """

    cache_hit = True

    def __init__(
        self, *, kernel: str, key: Any, fn: Any, launch_options: Mapping[str, Any]
    ) -> None:
        self.kernel = kernel
        self.key = key
        self.fn = fn
        self.launch_options = dict(launch_options)

    def __call__(self, grid: Any, *args: Any, **kwargs: Any) -> Any:
        return self.fn[grid](*args, **kwargs, **self.launch_options)

    def __repr__(self) -> str:
        return f"<InterpretedExecutor {self.kernel} key={self.key!r}>"
