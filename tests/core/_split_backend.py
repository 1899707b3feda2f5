"""Backends whose optional capabilities live on components only (``warmkit._plugin.components``).

``split(Flat)`` is a backend named as ``Flat`` with the required ``warmkit.Backend``
members and nothing else on itself. An instance of the flat fake ``Flat`` is its
``cache`` component (bundles, entries by key, ``prepare_entries``), and it compiles
through that instance, so entries land where the component says; a :class:`Hooks`
is its ``runtime`` component. The core uses those capabilities only if it asks
``capability()``: ``isinstance(backend, warmkit.FleetCapable)`` is False.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any, ClassVar

import warmkit


class Hooks:
    """A ``runtime`` component with the monitor's hooks (``warmkit.MonitorHooks``) only."""

    calls: ClassVar[list[str]] = []

    def install_monitor(self) -> None:
        type(self).calls.append("install")

    def uninstall_monitor(self) -> None:
        type(self).calls.append("uninstall")


def split(flat: type) -> type:
    """A backend class: the required members, with ``flat()`` as its ``cache`` component."""

    class Split:
        name = flat.name

        def __init__(self) -> None:
            self.cache = flat()
            self.runtime = Hooks()

        def available(self) -> warmkit.BackendStatus:
            return self.cache.available()

        def default_target(self) -> str | None:
            return self.cache.default_target()

        def parallelism(self, target: str | None) -> int:
            return self.cache.parallelism(target)

        def compile_scope(self, target: str | None, jobs: int) -> AbstractContextManager[Any]:
            return self.cache.compile_scope(target, jobs)

        def compile(self, kernel: Any, key: Any, target: str | None) -> Any:
            return self.cache.compile(kernel, key, target)

    Split.__name__ = Split.__qualname__ = f"Split{flat.__name__}"
    return Split


def reset() -> None:
    Hooks.calls = []
