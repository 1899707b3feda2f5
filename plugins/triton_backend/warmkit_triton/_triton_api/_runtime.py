"""Accessors for Triton's runtime internals: JITFunction, CompiledKernel, launcher, drivers, hooks."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

from ._import import require_triton

# -- JITFunction: parameters, kernel cache, binder -------------------------------------------------


def is_jit_function(fn: Any) -> bool:
    """Whether ``fn`` is a ``@triton.jit`` function (or an interpreted one). Checked: 3.6.0, 3.9.0."""
    return hasattr(fn, "warmup") and hasattr(fn, "arg_names") and not isinstance(fn, type)


def is_interpreted(fn: Any) -> bool:
    """Whether ``fn`` was made under ``TRITON_INTERPRET=1`` (an ``InterpretedFunction``). Checked: 3.6.0, 3.9.0."""
    return type(fn).__name__ == "InterpretedFunction"


def interpreting() -> bool:
    """Whether Triton interprets kernels (``knobs.runtime.interpret``). Checked: 3.6.0, 3.9.0."""
    require_triton()
    from triton import knobs

    return bool(knobs.runtime.interpret)


def jit_params(fn: Any) -> tuple[list[str], dict[str, Any]]:
    """A ``JITFunction``'s parameter names (``arg_names``) and defaults. Checked: 3.6.0, 3.9.0."""
    import inspect

    names = list(fn.arg_names)
    sig = getattr(fn, "signature", None) or inspect.signature(fn.fn)
    defaults = {
        n: p.default for n, p in sig.parameters.items() if p.default is not inspect.Parameter.empty
    }
    return names, defaults


def pre_run_hooks(fn: Any) -> list[Any]:
    """The (live) list of ``fn.pre_run_hooks``; non-empty means a launch must go through ``fn[grid]``.

    Checked: 3.6.0, 3.9.0.
    """
    return fn.pre_run_hooks


def prepare_function(fn: Any) -> Any:
    """Compute ``fn.cache_key`` and create its binder for the active device; return the device.

    Triton does both lazily and not thread-safely; the caller holds a lock.
    The ``device_caches[device]`` entry is ``(kernel_cache, kernel_key_cache,
    target, backend, binder)``. Checked: 3.6.0, 3.9.0.
    """
    from triton.runtime.driver import driver

    _ = fn.cache_key
    device = driver.active.get_current_device()
    _ = fn.device_caches[device]
    return device


def kernel_caches(fn: Any) -> list[dict[Any, Any]]:
    """Every in-memory kernel cache of ``fn`` (one dict per device: launch key -> ``CompiledKernel``).

    Checked: 3.6.0, 3.9.0 (``device_caches[device][0]``).
    """
    caches = getattr(fn, "device_caches", None)
    if caches is None:
        return []
    return [entry[0] for entry in list(caches.values())]


def drop_device(fn: Any, device: Any) -> None:
    """Forget ``fn``'s binder and kernel cache for ``device`` (e.g. an AOT target's). Checked: 3.6.0, 3.9.0."""
    fn.device_caches.pop(device, None)


def binder(fn: Any, device: Any) -> Callable[..., Any]:
    """``fn``'s generated binder for ``device``: ``binder(*args, **options) -> (bound, specialization, options)``.

    Checked: 3.6.0, 3.9.0 (``device_caches[device][-1]``).
    """
    return fn.device_caches[device][-1]


def specialization_of(
    fn: Any, device: Any, args: Sequence[Any], options: Mapping[str, Any]
) -> list[Any]:
    """Triton's own specialization of a call, one ``(type, attr)`` per parameter, from the binder.

    Checked: 3.6.0, 3.9.0.
    """
    _, spec, _ = binder(fn, device)(*args, **options)
    return [tuple(s) if isinstance(s, (list, tuple)) else s for s in spec]


def scalar_specializer() -> Callable[[Any, bool, bool], tuple[Any, ...]]:
    """``spec(value, specialize, align) -> (type, attr)``: Triton's C specializer for one argument.

    ``triton.runtime.jit.native_specialize_impl`` with the generic backend, as
    the generated binder calls it. Checked: 3.6.0, 3.9.0.

    Raises:
        ImportError: Triton is not importable.
    """
    from triton.backends.compiler import BaseBackend
    from triton.runtime.jit import native_specialize_impl

    def spec(value: Any, specialize: bool, align: bool) -> tuple[Any, ...]:
        return tuple(native_specialize_impl(BaseBackend, value, False, specialize, align))

    return spec


def prime_specializer() -> None:
    """Run Triton's C specializer once, so that its one-time lazy imports happen now.

    On its first call ``native_specialize_impl`` imports the classes it
    recognises, ``triton.experimental.gluon`` among them (~70 ms on the CPU
    box); ``warmkit.prepare()`` pays that in the background. Checked: 3.6.0, 3.9.0.
    """
    scalar_specializer()(16, True, True)


def wrap_warmup_arg(arg: Any) -> Any:
    """What ``JITFunction.warmup`` does to a positional argument (a torch dtype becomes a ``MockTensor``).

    Checked: 3.6.0, 3.9.0.
    """
    from triton.runtime.jit import MockTensor

    return MockTensor.wrap_dtype(arg)


def launch_option_names() -> set[str] | None:
    """The names ``fn[grid](...)`` accepts as launch options (``CUDAOptions`` fields); None without CUDA.

    Checked: 3.6.0, 3.9.0.
    """
    try:
        from triton.backends.nvidia.compiler import CUDAOptions
    except ImportError:
        return None
    return set(CUDAOptions.__dataclass_fields__) | {"debug", "instrumentation_mode"}


def warmup(
    fn: Any, args: Sequence[Any], kwargs: Mapping[str, Any], options: Mapping[str, Any]
) -> Any:
    """``fn.warmup(*args, grid=(1,), **kwargs, **options)``: compile without launching.

    Returns the ``CompiledKernel`` (a ``FutureKernel`` under an async compile
    mode, None when a ``jit_cache_hook`` returned True). Checked: 3.6.0, 3.9.0.
    """
    return fn.warmup(*args, grid=(1,), **kwargs, **options)


# -- CompiledKernel: identity, handles, the launcher ---------------------------------------------------


def compiled_identity(compiled: Any) -> tuple[str, str]:
    """``(hash, name)`` of a ``CompiledKernel``: its cache hash (hex sha256) and function name.

    Checked: 3.6.0, 3.9.0.
    """
    return compiled.hash, compiled.name


def load_handles(compiled: Any) -> None:
    """Load the module and build the launcher now (``CompiledKernel._init_handles``).

    3.6 builds a per-signature C launcher with gcc here. Checked: 3.6.0, 3.9.0.
    """
    compiled._init_handles()


def launcher_recipe(compiled: Any) -> dict[str, Any] | None:
    """What building ``compiled``'s C launcher needs besides its cache entry, as JSON; None if unknown.

    The launcher is not in the kernel's cache entry: ``CudaLauncher(src,
    metadata)`` builds it with gcc at the first load. On 3.6 its C source comes
    from ``src.signature``'s types and the entry's ``tensordesc_meta`` only
    (``make_launcher`` ignores the constants); 3.9 has one generic launcher in
    ``cuda_utils``. So the signature, kept with the entry, lets another host
    build the very launcher a load would (:func:`build_launcher`).

    Checked: 3.6.0, 3.9.0.
    """
    signature = getattr(getattr(compiled, "src", None), "signature", None)
    if not isinstance(signature, Mapping):
        return None

    def plain(ty: Any) -> Any:  # nested tuples (tuple arguments) become lists
        return [plain(t) for t in ty] if isinstance(ty, tuple) else str(ty)

    return {"signature": [[str(name), plain(ty)] for name, ty in signature.items()]}


def build_launcher(recipe: Mapping[str, Any], metadata: Mapping[str, Any]) -> None:
    """Build (or find in Triton's cache) the launcher of an entry, as its first load would.

    It runs the active driver's own ``launcher_cls(src, metadata)`` with the
    recorded signature and the entry's metadata JSON, so the C source, and so
    the cache key of the built module, are Triton's. Needs a CUDA driver: the
    module links against ``libcuda`` and is imported once built.

    Raises:
        RuntimeError: no active CUDA driver here; gcc or the import failed.
    Checked: 3.6.0, 3.9.0.
    """
    from types import SimpleNamespace

    def typed(ty: Any) -> Any:
        return tuple(typed(t) for t in ty) if isinstance(ty, list) else ty

    signature = {name: typed(ty) for name, ty in recipe["signature"]}
    src = SimpleNamespace(
        signature=signature, constants={}, fn=SimpleNamespace(arg_names=list(signature))
    )
    active_driver().launcher_cls(src, SimpleNamespace(**metadata))


class Launcher(NamedTuple):
    """What a direct launch needs of a ``CompiledKernel``."""

    run: Any  # the launcher object (``CudaLauncher``)
    function: Any  # the ``CUfunction`` handle
    packed_metadata: Any


def launcher_of(compiled: Any) -> Launcher | None:
    """The launcher, function handle and packed metadata of a loaded kernel; None when it has none.

    Reading ``run`` loads the module if needed. Checked: 3.6.0, 3.9.0.
    """
    try:
        launcher = compiled.run
        function = compiled.function
        packed = compiled.packed_metadata
    except AttributeError:
        return None
    if launcher is None or function is None:
        return None
    return Launcher(launcher, function, packed)


def runtime_knobs() -> Any:
    """``triton.knobs.runtime`` (launch hooks, load hooks, ``jit_cache_hook``). Checked: 3.6.0, 3.9.0."""
    from triton import knobs

    return knobs.runtime


def hook_chain_active(hook: Any) -> bool:
    """Whether a launch hook slot holds something that runs (not None, not an empty ``HookChain``).

    Checked: 3.6.0, 3.9.0.
    """
    from triton.knobs import HookChain

    return hook is not None and not (type(hook) is HookChain and not hook.calls)


def direct_launch(compiled: Any, launcher: Launcher, layout: str = "direct") -> tuple[Any, str]:
    """A function ``go(grid, stream, function, args)`` launching ``compiled``, and its path's name.

    ``CudaLauncher.__call__`` only allocates scratch buffers (none for most
    kernels) and forwards to its C ``launch``, whose argument layout differs
    between Triton 3.6 (per-signature launcher: scratch buffers, then the
    metadata and hooks, then each argument) and 3.9 (generic launcher: the
    metadata and hooks, the scratch buffers, then the argument annotations,
    the packed signature and the arguments as one tuple). ``layout="launcher"``
    (or a launcher that needs scratch or is not a ``CudaLauncher``) calls the
    launcher object instead. The launch hooks are read at each call, as
    ``CompiledKernel.__getitem__`` does.

    Returns:
        ``(go, path)``, path one of ``"direct-3.6"``, ``"direct-3.9"``, ``"launcher"``.

    Checked: 3.6.0, 3.9.0.
    """
    from triton.knobs import HookChain as hc

    rt = runtime_knobs()
    run, packed = launcher.run, launcher.packed_metadata

    def hooks(grid: Any, stream: Any, args: Any) -> tuple[Any, Any, Any]:
        # hook_chain_active() inlined: this runs at every launch
        enter, leave = rt.launch_enter_hook, rt.launch_exit_hook
        if (enter is None or (type(enter) is hc and not enter.calls)) and (
            leave is None or (type(leave) is hc and not leave.calls)
        ):
            return None, None, None
        return compiled.launch_metadata(grid, stream, *args), enter, leave

    def via_launcher(grid: Any, stream: Any, function: Any, args: Any) -> None:
        n = len(grid)
        meta, enter, leave = hooks(grid, stream, args)
        run(grid[0], grid[1] if n > 1 else 1, grid[2] if n > 2 else 1, stream, function, packed,
            meta, enter, leave, *args)  # fmt: skip

    launch = getattr(run, "launch", None)
    needs_scratch = getattr(run, "global_scratch_size", 1) or getattr(
        run, "profile_scratch_size", 1
    )
    if (
        layout == "launcher"
        or type(run).__name__ != "CudaLauncher"
        or launch is None
        or needs_scratch
        or getattr(run, "gsan_enabled", False)
    ):
        return via_launcher, "launcher"
    coop, pdl = run.launch_cooperative_grid, run.launch_pdl
    if hasattr(run, "arg_annotations") and hasattr(run, "kernel_signature"):
        annotations, signature = run.arg_annotations, run.kernel_signature

        def go39(grid: Any, stream: Any, function: Any, args: Any) -> None:
            n = len(grid)
            meta, enter, leave = hooks(grid, stream, args)
            launch(grid[0], grid[1] if n > 1 else 1, grid[2] if n > 2 else 1, stream, function,
                   coop, pdl, packed, meta, enter, leave, None, None, annotations, signature,
                   args)  # fmt: skip

        return go39, "direct-3.9"

    def go36(grid: Any, stream: Any, function: Any, args: Any) -> None:
        n = len(grid)
        meta, enter, leave = hooks(grid, stream, args)
        launch(grid[0], grid[1] if n > 1 else 1, grid[2] if n > 2 else 1, stream, function,
               coop, pdl, None, None, packed, meta, enter, leave, *args)  # fmt: skip

    return go36, "direct-3.6"


# -- drivers and targets -----------------------------------------------------------------------------


def gpu_target(backend: str, arch: int, warp_size: int) -> Any:
    """``triton.backends.compiler.GPUTarget(backend, arch, warp_size)``. Checked: 3.6.0, 3.9.0."""
    require_triton()
    from triton.backends.compiler import GPUTarget

    return GPUTarget(backend, arch, warp_size)


def active_driver() -> Any:
    """Triton's active driver (``driver.active``: the installed one, else the default).

    Checked: 3.6.0, 3.9.0.
    """
    from triton.runtime.driver import driver

    return driver.active


def installed_driver() -> Any:
    """What Triton's active-driver slot holds now (``driver._active``; None until first used).

    Checked: 3.6.0, 3.9.0.
    """
    from triton.runtime.driver import driver

    return driver._active


def set_installed_driver(drv: Any) -> None:
    """Put ``drv`` in Triton's active-driver slot (``driver._active``; None = the default again).

    A driver object must answer ``get_current_target``, ``get_current_device``
    and ``get_current_stream`` for ``JITFunction.warmup``. Checked: 3.6.0, 3.9.0.
    """
    from triton.runtime.driver import driver

    driver._active = drv


def backend_names() -> list[str]:
    """The backends Triton found installed (``triton.backends.backends``: ``amd``, ``nvidia``, ...).

    Checked: 3.6.0, 3.9.0.
    """
    from triton.backends import backends

    return sorted(backends)


def default_driver() -> Any:
    """Triton's driver for this process's GPU (``driver.default``); raises when there is none.

    Checked: 3.6.0, 3.9.0 (3.6 needs ``torch.cuda.is_available()``).
    """
    from triton.runtime.driver import driver

    return driver.default


def ptxas_path(arch: int) -> str | None:
    """The path of the ptxas Triton uses for ``arch`` (``TRITON_PTXAS*_PATH`` or the bundled one).

    Unlike the version (:func:`ptxas_info`), which Triton caches per arch for
    the process's life, the tool is looked up by path on every call, so asking
    early latches nothing. None without Triton's NVIDIA backend or a usable
    ptxas. Checked: 3.6.0, 3.9.0.
    """
    try:
        from triton.backends.nvidia import compiler as nv

        return str(nv.get_ptxas(arch).path)
    except Exception:  # noqa: BLE001 - no NVIDIA backend or no ptxas: nothing to probe
        return None


def ptxas_version_inputs(arch: int) -> tuple[str | None, str | None]:
    """What Triton's ptxas version for ``arch`` is read with: the ptxas path and ``TRITON_MOCK_PTX_VERSION``.

    ``get_ptxas_version`` caches its answer per arch for the process's life
    (``functools.lru_cache``) and returns the mock version instead when that is
    set. Checked: 3.6.0, 3.9.0.
    """
    from triton import knobs

    return ptxas_path(arch), knobs.nvidia.mock_ptx_version


def prime_ptxas_version(arch: int) -> tuple[str | None, str | None]:
    """Fill Triton's cache of the ptxas version for ``arch`` now; return :func:`ptxas_version_inputs`.

    Checked: 3.6.0, 3.9.0.
    """
    from triton.backends.nvidia import compiler as nv

    inputs = ptxas_version_inputs(arch)
    nv.get_ptxas_version(arch)
    return inputs


def forget_ptxas_version() -> None:
    """Empty Triton's cache of ptxas versions: the next cache key asks ptxas again. Checked: 3.6.0, 3.9.0."""
    from triton.backends.nvidia import compiler as nv

    nv.get_ptxas_version.cache_clear()


def ptxas_info(arch: int) -> dict[str, str | None]:
    """The path and version string of the ptxas Triton uses for ``arch``. Checked: 3.6.0, 3.9.0."""
    try:
        from triton.backends.nvidia import compiler as nv
    except ImportError as exc:  # a Triton build without the NVIDIA backend
        return {"path": None, "version": None, "error": str(exc)}
    try:
        path = nv.get_ptxas(arch).path
    except Exception as exc:  # noqa: BLE001 - report, do not fail the record
        path = f"<unavailable: {exc}>"
    try:
        version = nv.get_ptxas_version(arch).strip()
    except Exception as exc:  # noqa: BLE001
        version = f"<unavailable: {exc}>"
    return {"path": path, "version": version}


# -- hooks: slots and keyword shapes ------------------------------------------------------------------


def get_jit_cache_hook() -> Any:
    """``knobs.runtime.jit_cache_hook``: called on every in-memory miss, before compiling. Checked: 3.6.0, 3.9.0."""
    return runtime_knobs().jit_cache_hook


def set_jit_cache_hook(hook: Any) -> None:
    """Set ``knobs.runtime.jit_cache_hook`` (a truthy return skips the compile). Checked: 3.6.0, 3.9.0."""
    runtime_knobs().jit_cache_hook = hook


def get_compilation_listener() -> Any:
    """``knobs.compilation.listener``: called inside ``triton.compile``. Checked: 3.6.0, 3.9.0."""
    from triton import knobs

    return knobs.compilation.listener


def set_compilation_listener(listener: Any) -> None:
    """Set ``knobs.compilation.listener``. Checked: 3.6.0, 3.9.0."""
    from triton import knobs

    knobs.compilation.listener = listener


def load_hooks() -> tuple[Any, Any] | None:
    """The ``kernel_load_start_hook`` and ``kernel_load_end_hook`` ``HookChain``\\ s; None when not chains.

    Each is called as ``hook(module, function, name, metadata_group, hash)``. Checked: 3.6.0, 3.9.0.
    """
    rt = runtime_knobs()
    start, end = rt.kernel_load_start_hook, rt.kernel_load_end_hook
    if all(hasattr(h, "add") and hasattr(h, "remove") for h in (start, end)):
        return start, end
    return None


class MissEvent(NamedTuple):
    """What ``jit_cache_hook``'s keywords say about an in-memory miss."""

    jit_fn: Any  # the JITFunction, or None
    name: str  # module.name of the kernel as Triton reports it
    signature: Mapping[str, Any]
    constants: Mapping[Any, Any]
    attrs: Mapping[Any, Any]
    options: dict[str, Any]  # num_warps, num_stages, num_ctas
    key: Any = None  # the in-memory cache key: str(specialization) + str(launch options)


def miss_event(kw: Mapping[str, Any]) -> MissEvent:
    """Parse ``jit_cache_hook(key=, repr=, fn=, compile=, is_manual_warmup=, already_compiled=)``.

    ``fn`` is a ``JitFunctionInfo`` (``module``, ``name``, ``jit_function``);
    ``compile`` a dict with ``signature``, ``constants``, ``configs`` (one
    attrs dict) and the options; ``key`` the in-memory cache key, a string
    ``str(specialization) + str(launch kwargs)``. Checked: 3.6.0, 3.9.0.
    """
    info = kw.get("fn")
    comp = kw.get("compile") or {}
    configs = comp.get("configs") or [{}]
    return MissEvent(
        jit_fn=getattr(info, "jit_function", None),
        name=f"{getattr(info, 'module', '?')}.{getattr(info, 'name', '?')}",
        signature=comp.get("signature", {}),
        constants=comp.get("constants", {}),
        attrs=configs[0],
        options={k: comp.get(k) for k in ("num_warps", "num_stages", "num_ctas")},
        key=kw.get("key"),
    )


class CompileEvent(NamedTuple):
    """What ``compilation.listener``'s keywords say about one ``triton.compile``."""

    jit_fn: Any  # the JITFunction of an ASTSource, or None
    name: str
    hash: str | None
    cache_hit: bool
    seconds: float  # Triton's own timing of the compile (0 for a disk hit)
    signature: Mapping[str, Any]
    constants: Mapping[Any, Any]
    attrs: Mapping[Any, Any]
    metadata: Mapping[str, Any]


def compile_event(kw: Mapping[str, Any]) -> CompileEvent:
    """Parse ``listener(src=, metadata=, metadata_group=, times=, cache_hit=)``.

    ``metadata`` is a dict with ``hash``; ``times.total`` is in microseconds;
    ``src`` an ``ASTSource`` (``fn``, ``name``, ``signature``, ``constants``,
    ``attrs``). Checked: 3.6.0, 3.9.0.
    """
    metadata = kw.get("metadata") or {}
    src = kw.get("src")
    times = kw.get("times")
    return CompileEvent(
        jit_fn=getattr(src, "fn", None),
        name=str(getattr(src, "name", "?")),
        hash=metadata.get("hash"),
        cache_hit=bool(kw.get("cache_hit")),
        seconds=getattr(times, "total", 0) / 1e6 if times is not None else 0.0,
        signature=getattr(src, "signature", {}) or {},
        constants=getattr(src, "constants", {}) or {},
        attrs=getattr(src, "attrs", {}) or {},
        metadata=metadata,
    )
