"""The kernel contract: ``JitKernel``.

A kernel wrapper declares its compiled variants in one place:

* ``CompileKey``: a frozen, hashable class naming one compiled variant;
* ``dispatch(self, *, ...)``: ordinary Python mapping one call site to its key.
  It runs natively both at runtime and during warmup, so the two cannot drift.

The class is checked when it is defined (``KernelDefinitionError``). The AST of
``dispatch`` is read only to learn which inputs it reads, so that an input it
never reads is not expanded during warmup.
"""

from __future__ import annotations

import ast
import contextvars
import dataclasses
import inspect
import logging
import textwrap
import threading
import time
import types
from collections.abc import Callable, Collection, Hashable, Iterable, Mapping
from typing import Any, ClassVar, Generic, TypeVar

from .. import _envs, monitor
from .._exceptions import KernelDefinitionError
from .._plugin.contract import Executor, ReportsTuning, current_target
from .._plugin.discovery import get_backend
from .._registry.recorded import active_recorder, key_entry
from .._registry.registry import active_registry, check_registration, warn_unregistered
from .._registry.space import DispatchInfo, expand
from . import memo as _memo

__all__ = ["JitKernel"]

logger = logging.getLogger(__name__)

K = TypeVar("K", bound=Hashable)

_NO_EXECUTORS: dict[int, tuple[Any, Any]] = {}

#: Keys per kernel class that ``launch_lookup`` remembers before it starts over.
LAUNCH_LOOKUP_LIMIT = 1024


class JitKernel(Generic[K]):
    """Base class of a JIT-compiled kernel wrapper.

    A subclass defines a nested frozen ``CompileKey`` class and a keyword-only
    ``dispatch``; the class attribute ``backend`` names the backend plugin
    (entry point in ``warmkit.backends``) that compiles it, unless the subclass
    overrides ``compile`` itself. Kernels must be constructible with no
    arguments, so that a manifest can be replayed in another process.

    Class attributes:
        backend: the backend's entry-point name, e.g. ``"triton"``.
        name: a stable identifier; defaults to ``module.QualName``.
        max_points: the largest search space ``get_warmup_keys`` expands
            (``WARMKIT_MAX_POINTS``, default 1,000,000).
        executors: read-only, live: key -> the executor compiled for this
            process's device. A backend's launch path may look a key up here
            first (one dict lookup) and call ``get_or_compile`` on a miss.
        launch_lookup: ``launch_lookup(id(key)) -> (key, executor) | None``:
            the executors of key *objects* launched before (a memoized
            ``dispatch`` returns the same key object every time), so a launch
            path skips hashing the key; check ``seen[0] is key``, and call
            :meth:`launch_executor` on a miss, which fills it.
        memoize_dispatch: answer ``dispatch`` calls on plain inputs from a
            memo (``docs/kernel-contract.md``); None (default) = when its
            source uses ``self`` only as ``self.CompileKey``.
    """

    backend: ClassVar[str | None] = None
    name: ClassVar[str] = "warmkit.JitKernel"
    max_points: ClassVar[int | None] = None
    memoize_dispatch: ClassVar[bool | None] = None

    CompileKey: ClassVar[type]
    executors: ClassVar[Mapping[Any, Executor]]  # key -> executor (a ClassVar has no K)
    # not a ClassVar: to mypy a ClassVar callable is a method, bound to the instance
    launch_lookup: Callable[[int], tuple[Any, Any] | None] = _NO_EXECUTORS.get
    _warmkit_dispatch_info: ClassVar[DispatchInfo]
    _warmkit_executors: ClassVar[dict[Any, Any]]
    _warmkit_target_executors: ClassVar[dict[tuple[str, Any], Any]]
    _warmkit_inflight: ClassVar[dict[Any, _Pending]]
    _warmkit_target_inflight: ClassVar[dict[tuple[str, Any], _Pending]]
    _warmkit_lock: ClassVar[threading.Lock]
    _warmkit_by_id: ClassVar[dict[int, tuple[Any, Any]]]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "name" not in cls.__dict__:
            cls.name = f"{cls.__module__}.{cls.__qualname__}"
        key_cls = getattr(cls, "CompileKey", None)
        has_dispatch = cls.dispatch is not JitKernel.dispatch
        if key_cls is None and not has_dispatch:
            # An intermediate base such as a backend's TritonKernel: nothing to check yet.
            return
        if key_cls is None:
            raise KernelDefinitionError(cls, "defines dispatch() but no nested CompileKey class")
        if not has_dispatch:
            raise KernelDefinitionError(cls, "defines CompileKey but no dispatch(self, *, ...)")
        _check_key(cls, key_cls)
        cls._warmkit_dispatch_info = _analyse_dispatch(cls)
        _memo.install(cls, cls.dispatch_memo_types())
        if cls.backend is None and cls.compile is JitKernel.compile:
            raise KernelDefinitionError(
                cls,
                'sets no backend: add backend = "<entry point in warmkit.backends>" '
                "(e.g. 'triton') or override compile(self, key)",
            )
        cls._warmkit_executors = {}
        cls.executors = types.MappingProxyType(cls._warmkit_executors)
        cls._warmkit_by_id = {}
        cls.launch_lookup = cls._warmkit_by_id.get  # a builtin: no binding, one call
        cls._warmkit_target_executors = {}
        cls._warmkit_inflight = {}
        cls._warmkit_target_inflight = {}
        cls._warmkit_lock = threading.Lock()

    # -- the contract --------------------------------------------------------------

    # (*args, **inputs): to mypy any override's keyword-only inputs are compatible with it
    def dispatch(self, *args: Any, **inputs: Any) -> K:
        """Map one call site's inputs to its ``CompileKey``. Override with keyword-only inputs."""
        raise NotImplementedError(f"{type(self).__qualname__} must define dispatch(self, *, ...)")

    def get_warmup_keys(self, *zip_groups: Any, where: Any = None, **space: Any) -> list[K]:
        """Expand a search space over ``dispatch``; return the unique keys in first-seen order.

        Override to derive a space from the kernel's own configuration.

        Raises:
            TypeError: an input dispatch does not accept, a positional argument
                that is not a ``zip_inputs`` group, a key field the key rejects.
            ValueError: a name given twice, or more points than ``max_points``.
        """
        cls = self._concrete()
        keys = expand(
            cls.name,
            _memo.raw_dispatch(cls).__get__(self),  # planning must not fill the runtime memo
            cls._warmkit_dispatch_info,
            zip_groups,
            where,
            space,
            self.max_points or _envs.get("WARMKIT_MAX_POINTS"),
        )
        return list(keys)  # type: ignore[arg-type]

    @classmethod
    def _warmkit_planner(cls) -> Callable[[Any, Any, Mapping[str, Any]], Collection[K]]:
        """``(instance, zip_groups, space) -> get_warmup_keys(*zip_groups, **space)``, for planning.

        Without an override of ``get_warmup_keys``, it calls ``expand`` directly,
        with the budget read once (a recording plans one registration per key),
        and returns its dict of keys.
        """
        if cls.get_warmup_keys is not JitKernel.get_warmup_keys:
            # a list of its own: planning merges a dict it is given into its own, and
            # must not take (and then grow) a dict an override keeps
            return lambda inst, zip_groups, space: list(inst.get_warmup_keys(*zip_groups, **space))
        cls._concrete()
        raw, info = _memo.raw_dispatch(cls), cls._warmkit_dispatch_info
        default: list[int] = []  # WARMKIT_MAX_POINTS, read on first need (as get_warmup_keys does)

        def plan(inst: Any, zip_groups: Any, space: Mapping[str, Any]) -> Collection[K]:
            budget = inst.max_points
            if not budget:
                if not default:
                    default.append(_envs.get("WARMKIT_MAX_POINTS"))
                budget = default[0]
            return expand(cls.name, raw.__get__(inst), info, zip_groups, None, space, budget)  # type: ignore[return-value]

        return plan

    def compile(self, key: K) -> Executor:
        """Make ``key``'s variant available and return its launchable executor.

        The default delegates to the ``backend`` plugin, for the target of the
        warmup in progress (``warmkit.current_target()``; ``None`` = this device).
        """
        cls = self._concrete()
        backend = get_backend(cls.backend, kernel=cls.name)  # type: ignore[arg-type]
        return backend.compile(self, key, current_target())

    def get_or_compile(self, key: K, *, runtime_context: Any = None) -> Executor:
        """The runtime entry: the cached executor for ``key``, compiling it on a miss.

        A miss after warmup is reported to ``warmkit.monitor`` first; in
        ``"error"`` mode that raises ``RuntimeCompileError`` before compiling.
        """
        try:
            return self._warmkit_executors[key]
        except KeyError:
            pass
        except AttributeError:
            self._concrete()
        cls = type(self)
        recorder = active_recorder()
        if recorder is not None and monitor.mode() != "off":
            recorder.add_safely(lambda: key_entry(cls, key, current_target()))
        monitor.on_miss(
            kernel=cls.name,
            key=key,
            backend=cls.backend,
            context=runtime_context,
            why=lambda: _miss_reason(self, key),
        )
        t0 = time.perf_counter()
        executor, cached = self._warmkit_compile(key, None, runtime_context)
        if not cached:
            monitor.record(
                kernel=cls.name,
                key=key,
                backend=cls.backend,
                context=runtime_context,
                seconds=time.perf_counter() - t0,
                kind="compile",
            )
            if isinstance(executor, ReportsTuning) and executor.autotune_seconds > 0:
                # the compile included an autotune benchmark
                monitor.record(
                    kernel=cls.name,
                    key=executor.tuning_key,
                    backend=cls.backend,
                    context=runtime_context,
                    seconds=executor.autotune_seconds,
                    kind="autotune",
                )
        return executor

    def register_warmup(self, *zip_groups: Any, **space: Any) -> None:
        """Record ``(kernel, space)`` in the active ``WarmupRegistry``; compile nothing.

        Outside an active registry (e.g. in a worker thread not wrapped with
        ``registry.bind``) nothing is recorded, and a WARNING naming the kernel
        and the fix is logged, once per kernel.

        Raises:
            TypeError: a value that is not plain immutable data (None, bool,
                int, float, str, tuples of these, or a search-space object),
                or an input dispatch does not accept.
        """
        cls = self._concrete()
        registry = active_registry()
        if registry is None:
            # Checked all the same: a mistake must not depend on the scope.
            check_registration(cls, zip_groups, space)
            warn_unregistered(cls.name, space)
            return
        registry.add(self, *zip_groups, **space)

    def warmup(self, *zip_groups: Any, where: Any = None, **space: Any) -> list[K]:
        """Expand the space and compile every key now, for this device; return the keys."""
        keys = self.get_warmup_keys(*zip_groups, where=where, **space)
        for key in keys:
            self._warmkit_compile(key, None, None)
        return keys

    @classmethod
    def dispatch_info(cls) -> DispatchInfo | None:
        """What ``dispatch`` accepts and reads, learned when the class was defined.

        Returns:
            The :class:`warmkit.DispatchInfo`, or None for an abstract base
            (no ``CompileKey``/``dispatch`` yet, such as a backend's kernel base class).
        """
        return getattr(cls, "_warmkit_dispatch_info", None)

    def launch_executor(self, key: K) -> Executor:
        """The device executor for a launch of ``key``: ``executors[key]``, else ``get_or_compile``.

        It is remembered by the key object's identity for :attr:`launch_lookup`
        (at most ``LAUNCH_LOOKUP_LIMIT`` keys: keys built fresh per call never
        hit, so the table starts over rather than grow).

        Raises:
            warmkit.RuntimeCompileError: as ``get_or_compile``.
        """
        try:
            executor = self.executors[key]
        except (KeyError, AttributeError):
            executor = self.get_or_compile(key)
        by_id = type(self)._warmkit_by_id
        if len(by_id) >= LAUNCH_LOOKUP_LIMIT:
            by_id.clear()
        by_id[id(key)] = (key, executor)  # the entry keeps key alive: its id stays unique
        return executor

    @classmethod
    def dispatch_memo_types(cls) -> frozenset[type]:
        """Exact input types, beyond plain scalars, that a ``dispatch`` memo may key on.

        A backend's kernel base overrides it for its DSL's immutable value
        types (``TritonKernel``: ``torch.dtype``). Called when each kernel class
        is defined. Default: none.
        """
        return frozenset()

    @classmethod
    def runtime_inputs(cls, inputs: Mapping[str, Any]) -> Iterable[Mapping[str, Any]]:
        """The ways a launch may pass a registered point's ``inputs`` to ``dispatch``.

        A device warmup calls the memoized ``dispatch`` once with each, so the
        first launch of a registered point is a memo hit (``docs/performance.md``,
        B4). A backend's kernel base adds the runtime forms of plain values
        (``TritonKernel``: ``torch.float16`` for ``"float16"``). Default: ``(inputs,)``.
        """
        return (inputs,)

    @classmethod
    def clear_executors(cls) -> None:
        """Drop every cached executor of this kernel, as a new process would start (tests, benchmarks)."""
        with cls._warmkit_lock:
            cls._warmkit_executors.clear()
            cls._warmkit_target_executors.clear()
            cls._warmkit_by_id.clear()

    # -- internals shared with warmkit.warmup ------------------------------------------

    @classmethod
    def _concrete(cls) -> type[JitKernel[Any]]:
        if not hasattr(cls, "_warmkit_dispatch_info"):
            raise TypeError(
                f"{cls.__qualname__} is an abstract kernel base: subclass it with a "
                "CompileKey and a dispatch()"
            )
        return cls

    def _warmkit_compile(
        self, key: K, target: str | None, runtime_context: Any = None
    ) -> tuple[Any, bool]:
        """Compile ``key`` for ``target`` once per process; return ``(executor, was_cached)``.

        Concurrent callers for one key wait for a single compile.
        """
        cls = type(self)
        ckey: Hashable
        if target is None:
            cache, inflight, ckey = cls._warmkit_executors, cls._warmkit_inflight, key
        else:
            cache, inflight = cls._warmkit_target_executors, cls._warmkit_target_inflight
            ckey = (target, key)
        mine = _Pending()
        with cls._warmkit_lock:
            executor = cache.get(ckey, _MISSING)
            if executor is not _MISSING:
                return executor, True
            pending = inflight.setdefault(ckey, mine)  # one hash of the key, not two
            if pending is not mine:
                pending.add_waiter()
        if pending is not mine:
            return pending.wait(), True
        try:
            if monitor._managed.get() and monitor._target_var.get() == target:
                executor = self.compile(key)  # in warmup's scope already (one per group)
            else:  # monitor.compile_scope(target), as a context copy (its sets outlive nothing)
                executor = contextvars.copy_context().run(
                    monitor._in_scope, target, self.compile, key
                )
            if executor is None:
                where = f"target {target!r}, runtime context {runtime_context!r}"
                raise RuntimeError(
                    f"kernel {cls.name!r}: compile({key!r}) returned None ({where}); compile() must "
                    "return the launchable executor, so that nothing compiles silently later"
                )
        except BaseException as exc:
            with cls._warmkit_lock:
                del inflight[ckey]
                waiters = mine.settle(None, exc)
            if waiters is not None:
                waiters.set()
            raise
        with cls._warmkit_lock:
            cache[ckey] = executor
            del inflight[ckey]
            waiters = mine.settle(executor, None)
        if waiters is not None:
            waiters.set()
        return executor, False

    def _warmkit_in_memory(self, key: K, target: str | None) -> bool:
        """Whether ``key`` for ``target`` already has an executor in this process."""
        cls = type(self)
        cache = cls._warmkit_executors if target is None else cls._warmkit_target_executors
        return (key if target is None else (target, key)) in cache


_MISSING = object()


class _Pending:
    """A compile in progress: later callers for the same key wait for its owner's result.

    Warmup makes one per key and almost never has a waiter, so the ``Event``
    is made only by the first waiter. ``add_waiter`` and ``settle`` run under
    the kernel's lock, ``settle`` in the same hold that takes the key out of
    the in-flight map: a waiter that found it there always gets its event set.
    """

    __slots__ = ("_error", "_event", "_result")

    def __init__(self) -> None:
        self._event: threading.Event | None = None
        self._result: Any = None
        self._error: BaseException | None = None

    def add_waiter(self) -> None:
        if self._event is None:
            self._event = threading.Event()

    def settle(self, result: Any, error: BaseException | None) -> threading.Event | None:
        """Record the outcome; return the event to set once the lock is released, if any."""
        self._result = result
        self._error = error
        return self._event

    def wait(self) -> Any:
        assert self._event is not None  # add_waiter() ran, under the lock
        self._event.wait()
        if self._error is not None:
            raise self._error
        return self._result


# -- definition-time checks ------------------------------------------------------------


def _check_key(cls: type, key_cls: Any) -> None:
    if not isinstance(key_cls, type):
        raise KernelDefinitionError(cls, f"CompileKey must be a class, got {key_cls!r}")
    frozen = False
    if dataclasses.is_dataclass(key_cls):
        frozen = key_cls.__dataclass_params__.frozen  # type: ignore[attr-defined]
    elif getattr(key_cls, "__attrs_attrs__", None) is not None:
        frozen = getattr(key_cls.__setattr__, "__name__", "") == "_frozen_setattrs"
    elif issubclass(key_cls, tuple) and hasattr(key_cls, "_fields"):
        frozen = True
    if not frozen:
        raise KernelDefinitionError(
            cls,
            "CompileKey must be frozen: decorate it with @attrs.frozen or @dataclass(frozen=True)",
        )
    if key_cls.__hash__ is None:
        raise KernelDefinitionError(cls, "CompileKey must be hashable (its __hash__ is None)")
    eq: object = key_cls.__eq__  # object, not a bound method: compared with object's
    if eq is object.__eq__:
        raise KernelDefinitionError(
            cls,
            "CompileKey must compare by value, not identity (eq=False): equal keys made by two "
            "dispatch calls would be two variants, so nothing would dedupe or hit the cache. "
            "Drop eq=False to get value equality",
        )


def _analyse_dispatch(cls: type) -> DispatchInfo:
    fn = cls.dispatch  # type: ignore[attr-defined]
    sig = inspect.signature(fn)
    params: dict[str, Any] = {}
    var_kw = None
    for i, p in enumerate(sig.parameters.values()):
        if i == 0 and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            continue  # self
        if p.kind is p.KEYWORD_ONLY:
            params[p.name] = p.default
        elif p.kind is p.VAR_KEYWORD:
            var_kw = p.name
        else:
            raise KernelDefinitionError(
                cls,
                f"dispatch() input {p.name!r} must be keyword-only: write dispatch(self, *, "
                f"{p.name}, ...) so that a misplaced positional argument can never be ignored",
            )
    all_names = set(params) | ({var_kw} if var_kw else set())
    try:
        source = textwrap.dedent(inspect.getsource(fn))
        tree = ast.parse(source)
    except (OSError, TypeError, SyntaxError, IndentationError) as exc:
        logger.debug(
            "%s.dispatch: source unavailable (%s); treating every input as used",
            cls.__qualname__,
            exc,
        )
        return DispatchInfo(params, var_kw, frozenset(all_names), cls.CompileKey)  # type: ignore[attr-defined]
    func = next(
        (n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))), None
    )
    if func is None:  # e.g. dispatch = some_lambda
        return DispatchInfo(params, var_kw, frozenset(all_names), cls.CompileKey)  # type: ignore[attr-defined]
    loads = {n.id for node in func.body for n in ast.walk(node) if isinstance(n, ast.Name)}
    if loads & {"locals", "vars", "eval", "exec"}:
        used = set(all_names)
    else:
        used = all_names & loads
    if var_kw is not None and var_kw not in used:
        raise KernelDefinitionError(
            cls,
            f"dispatch() takes **{var_kw} but never uses it: extra inputs would be silently "
            f"dropped. Forward them, e.g. return self.CompileKey(**{var_kw}, ...)",
        )
    return DispatchInfo(params, var_kw, frozenset(used), cls.CompileKey)  # type: ignore[attr-defined]


def _miss_reason(kernel: JitKernel[Any], key: Any) -> str | None:
    """The monitor's one-line reason for a runtime miss (``_explain.miss_reason``), or None."""
    from .._cache.misses import miss_reason
    from .._plugin.discovery import get_backend

    backend_name = type(kernel).backend
    if backend_name is None:
        return None
    try:
        backend = get_backend(backend_name)
    except Exception:  # noqa: BLE001 -- the compile that follows reports it
        return None
    return miss_reason(backend, kernel, key, None)
