"""What a DSL backend plugin shares: a kernel around one JIT function, and chained method hooks.

TileLang and CuTe DSL (and the next DSL) look alike to warmkit: a kernel wraps
one decorated function, named directly or as ``"module:attr"`` (so importing
the kernel class does not import the DSL); each compile key says with which
arguments that function builds its variant; at runtime the executor's
``launch`` is called with the tensors. And a DSL without a hook API is watched
by replacing a few of its methods, chained so that another tool's replacement
keeps working and uninstalling restores exactly what was there.

* :class:`FunctionKernel`: the kernel base (definition checks, resolving
  ``fn``, the launch path);
* :class:`MethodHooks`: a set of chained method replacements, installed and
  removed together, or once the DSL is imported (``install_when_imported``).

This module imports no DSL: the plugin passes its own predicates and hook
points (``fn_check``, ``(owner, attribute)`` pairs) from its DSL layer.
"""

from __future__ import annotations

import functools
import importlib
import logging
import sys
import threading
from collections.abc import Callable, Iterable
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Any, ClassVar, TypeVar

from .._exceptions import KernelDefinitionError
from .jit import JitKernel

__all__ = ["FunctionKernel", "MethodHooks"]

logger = logging.getLogger(__name__)

K = TypeVar("K")


class FunctionKernel(JitKernel[K]):
    """A kernel around one JIT function of a DSL: the base of ``TileLangKernel`` and ``CuteDSLKernel``.

    A DSL plugin subclasses it once, setting ``backend``, ``fn_kind`` and
    ``fn_check``; a kernel then subclasses that, with ``CompileKey``,
    ``dispatch``, ``fn`` and ``compile_args``. Checked when the kernel class
    is defined: ``fn`` is set, a string ``fn`` is a ``"module:attr"`` path,
    another ``fn`` passes ``fn_check``, and ``compile_args`` is defined.

    Class attributes:
        fn: the JIT function, or ``"module:attr"`` naming it (imported on
            first use by :meth:`jit_function`).
        fn_kind: what ``fn`` must be, for messages, e.g. ``"@tilelang.jit function"``.
        fn_check: ``staticmethod(fn_check)``, ``fn_check(obj) -> bool``: whether
            ``obj`` is such a function; None = not checked (a DSL whose
            functions cannot be told apart).
        prime: launch once on scratch inputs during device warmup (default True),
            so that the first real call loads nothing.
    """

    fn: ClassVar[Any]
    fn_kind: ClassVar[str] = "JIT function"
    # a staticmethod; not a ClassVar, which mypy would bind as a method taking self
    fn_check: Callable[[Any], bool] | None = None
    prime: ClassVar[bool] = True

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.dispatch_info() is None or cls.compile is not JitKernel.compile:
            return  # an abstract base, or a kernel that compiles itself
        fn = getattr(cls, "fn", None)
        if fn is None:
            raise KernelDefinitionError(
                cls,
                f"is a {cls._base_name()} without fn: set fn = <your {cls.fn_kind}> "
                "or 'module:attr'",
            )
        if isinstance(fn, str):
            if ":" not in fn:
                raise KernelDefinitionError(
                    cls, f"fn {fn!r} must be a {cls.fn_kind} or a 'module:attr' path"
                )
        elif not cls._is_jit(fn):
            raise KernelDefinitionError(
                cls, f"fn must be a {cls.fn_kind}, got {type(fn).__name__} {fn!r}"
            )
        if cls.compile_args is FunctionKernel.compile_args:
            raise KernelDefinitionError(
                cls,
                f"must define compile_args(self, key): the arguments of the {cls.fn_kind} "
                f"that build key's variant (see {cls._base_name()})",
            )

    @classmethod
    def jit_function(cls) -> Any:
        """``fn``, imported (once) if it was given as ``"module:attr"``.

        Raises:
            LookupError: the path does not resolve (the message names the kernel).
            TypeError: what it names fails ``fn_check``.
        """
        fn = cls.fn
        if isinstance(fn, str):
            module, _, attr = fn.partition(":")
            try:
                obj: Any = importlib.import_module(module)
                for part in attr.split("."):
                    obj = getattr(obj, part)
            except (ImportError, AttributeError) as exc:
                raise LookupError(
                    f"kernel {cls.name!r}: fn {fn!r} does not resolve ({exc})"
                ) from exc
            if not cls._is_jit(obj):
                raise TypeError(f"kernel {cls.name!r}: fn {fn!r} is not a {cls.fn_kind}")
            cls.fn = fn = obj
        return fn

    def compile_args(self, key: K) -> Any:
        """The arguments of ``fn`` that build ``key``'s variant; the same every time for one key.

        What form they take is the DSL's (``TileLangKernel``: ``(args, kwargs)``;
        ``CuteDSLKernel``: positional arguments with ``FakeTensor`` for tensors).
        """
        raise NotImplementedError(f"{type(self).__qualname__} must define compile_args(self, key)")

    def run(self, key: K, *args: Any) -> Any:
        """Launch ``key``'s variant on ``args`` and return what it returns.

        After warmup this is one dict lookup (``executors``) and the
        executor's ``launch``.

        Raises:
            warmkit.RuntimeCompileError: the key was not warmed up and the
                monitor is in ``"error"`` mode.
        """
        executor: Any  # a DSL backend's executor: an Executor with launch(*args)
        try:  # the hot path: no call into get_or_compile
            executor = self.executors[key]
        except (KeyError, AttributeError):
            executor = self.get_or_compile(key)
        return executor.launch(*args)

    def __call__(self, *args: Any, **inputs: Any) -> Any:
        """Run ``dispatch(**inputs)``'s variant on ``args``."""
        return self.run(self.dispatch(**inputs), *args)

    @classmethod
    def _is_jit(cls, obj: Any) -> bool:
        check = cls.fn_check  # a plain function or a staticmethod: unbound through the class
        return check is None or bool(check(obj))

    @classmethod
    def _base_name(cls) -> str:
        """The DSL plugin's base class (the last abstract class before the kernel)."""
        bases = [c for c in cls.__mro__[1:] if issubclass(c, FunctionKernel)]
        return next((c.__qualname__ for c in bases if c.dispatch_info() is None), cls.__qualname__)


class MethodHooks:
    """Chained replacements of methods on a DSL's classes, installed and removed together.

    Each replacement of ``owner.attr`` calls ``body(previous, self, *args,
    **kwargs)``, where ``previous`` is what was installed before it (the
    DSL's method, or another tool's replacement). :meth:`uninstall` restores
    exactly that; if someone replaced the method on top of ours meanwhile,
    ours stays in their chain as a pure pass-through, so their chain is never
    broken. Not thread-safe: the plugin holds its own lock around these calls.

    Args:
        name: what the hooks are, for logs (e.g. ``"TileLang runtime hooks"``).
        passthrough: called on every call of a replacement; True = call
            ``previous`` directly (e.g. ``warmkit.monitor.in_managed_compile``).
    """

    def __init__(self, name: str, passthrough: Callable[[], bool] | None = None) -> None:
        self.name = name
        self.passthrough = passthrough
        self._chained: list[_Chained] = []
        self._pending: list[tuple[Callable[[], None], str]] | None = None

    def install_when_imported(self, module: str, install: Callable[[], None]) -> None:
        """Call ``install`` now if ``module`` is imported, else right after its import.

        A DSL's hooks need the DSL imported, and importing one costs seconds (TileLang
        about 3 s, torch with it): arming the monitor of a process that never uses it
        (``warmkit record`` of a Triton engine) paid that. :meth:`uninstall` before
        the import cancels the call. Should ``install`` fail after the import, the
        import still succeeds and the failure is one warning naming the hooks.

        Args:
            module: the DSL's module whose import the hooks wait for (``"tilelang"``).
            install: installs the hooks (typically calls :meth:`install` under the
                plugin's lock); not called again if an earlier call is still pending.
        """
        if module in sys.modules:
            install()
            return
        if self._pending:  # already waiting for this import
            return
        self._pending = _after_import(module, install, self.name)

    def install(self, points: Iterable[tuple[tuple[type, str], Callable[..., Any]]]) -> None:
        """Replace each ``(owner, attr)`` with its body, chained (idempotent).

        Args:
            points: ``((owner, attr), body)`` pairs, from the plugin's DSL layer.
        """
        if self.installed():
            return
        self.uninstall()
        for (owner, attr), body in points:
            self._chained.append(_Chained(owner, attr, body, self.passthrough))

    def uninstall(self) -> None:
        """Restore what each replacement replaced, innermost last (idempotent); cancel a pending install."""
        if self._pending is not None:
            self._pending.clear()  # the cell _after_import holds: emptied, the call is cancelled
            self._pending = None
        while self._chained:
            self._chained.pop().remove(self.name)

    def installed(self) -> bool:
        """Whether every replacement is the method installed right now."""
        return bool(self._chained) and all(c.current() for c in self._chained)


class _Chained:
    """One chained replacement of ``owner.attr``; inactive = pure pass-through."""

    def __init__(
        self,
        owner: type,
        attr: str,
        body: Callable[..., Any],
        passthrough: Callable[[], bool] | None,
    ) -> None:
        self.owner, self.attr = owner, attr
        self.had_own = attr in owner.__dict__
        self.previous = previous = owner.__dict__.get(attr, getattr(owner, attr))
        self.active = True

        @functools.wraps(previous)
        def method(inner_self: Any, *args: Any, **kwargs: Any) -> Any:
            if not self.active or (passthrough is not None and passthrough()):
                return previous(inner_self, *args, **kwargs)
            return body(previous, inner_self, *args, **kwargs)

        method.__warmkit_wrapper__ = self  # type: ignore[attr-defined]  # how tests find ``previous``
        self.method = method
        setattr(owner, attr, method)

    def current(self) -> bool:
        return self.owner.__dict__.get(self.attr) is self.method

    def remove(self, name: str) -> None:
        if self.current():
            if self.had_own:
                setattr(self.owner, self.attr, self.previous)
            else:
                delattr(self.owner, self.attr)
            return
        self.active = False  # someone replaced it on top of ours: stay in their chain
        logger.debug(
            "%s: %s.%s was replaced on top of warmkit's; leaving ours as a pass-through",
            name,
            self.owner.__qualname__,
            self.attr,
        )


# -- calls right after a module's import ----------------------------------------------------
#
# wrapt's post-import hooks do the same but cannot be cancelled, and a pending install must be
# when the monitor is disarmed before the DSL is imported.

_after_lock = threading.Lock()
#: module -> cells of pending (call, what it installs); a cell emptied = cancelled
_after: dict[str, list[list[tuple[Callable[[], None], str]]]] = {}


def _after_import(
    module: str, call: Callable[[], None], name: str
) -> list[tuple[Callable[[], None], str]]:
    """Call ``call`` once ``module`` has been imported; returns its cell (``clear()`` cancels)."""
    cell = [(call, name)]
    with _after_lock:
        _after.setdefault(module, []).append(cell)
        if _FINDER not in sys.meta_path:
            sys.meta_path.insert(0, _FINDER)
    if module in sys.modules:  # imported by another thread before the finder was in place
        _run_after(module)
    return cell


def _run_after(module: str) -> None:
    with _after_lock:
        cells = _after.pop(module, [])
        if not _after and _FINDER in sys.meta_path:
            sys.meta_path.remove(_FINDER)
    for cell in cells:
        if not cell:
            continue
        call, name = cell[0]
        try:
            call()
        except Exception as exc:  # noqa: BLE001 - the user's import must not fail for warmkit
            logger.warning(
                "warmkit could not install %s after %s was imported: %s", name, module, exc
            )


class _AfterImportFinder:
    """Finds nothing itself: wraps the loader of a watched module so that its calls run after it."""

    def find_spec(
        self, fullname: str, path: Any = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname not in _after:
            return None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec: ModuleSpec | None = find(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        if spec.loader is not None and hasattr(spec.loader, "exec_module"):
            spec.loader = _ThenLoader(spec.loader)  # type: ignore[assignment]
        return spec


class _ThenLoader:
    """The module's own loader, then the calls waiting for it; the module sees only its own."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        created: ModuleType | None = self.loader.create_module(spec)
        return created

    def exec_module(self, module: ModuleType) -> None:
        module.__loader__ = self.loader  # importlib.resources and friends read it
        if module.__spec__ is not None:
            module.__spec__.loader = self.loader
        self.loader.exec_module(module)
        _run_after(module.__name__)

    def __getattr__(self, attr: str) -> Any:
        return getattr(self.loader, attr)


_FINDER = _AfterImportFinder()
