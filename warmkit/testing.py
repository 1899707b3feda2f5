"""Test seams: put a backend object under a name for one test, in the spirit of stevedore's ``make_test_instance``.

A test that needs a backend normally gets it the way production does, through
an installed entry point. When a test wants *its own* object instead (a
recording backend, a backend that fails on purpose), it registers it here for
the duration of a block; the object must satisfy :class:`warmkit.Backend`,
exactly as an entry point's object must::

    from warmkit.testing import backend_override

    with backend_override("triton", RecordingBackend()):
        warmkit.warmup(config)

These are the only supported ways to change which backends are loaded; tests
must not touch ``warmkit._plugin.discovery``' state.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from ._plugin import discovery as _plugins
from ._plugin.components import capability
from ._plugin.contract import MonitorHooks

__all__ = ["backend_override", "isolated_backends", "unload_backend"]


@contextlib.contextmanager
def backend_override(name: str, backend: Any) -> Iterator[Any]:
    """Make ``backend`` the backend named ``name`` for the block; put back what was there after.

    ``warmkit._plugin.discovery.get_backend(name)`` (so every warmup, bundle and kernel
    compile) returns ``backend`` inside the block. If the monitor is armed and
    ``backend`` has :class:`warmkit.MonitorHooks`, its hooks are installed, as
    for a backend loaded from an entry point.

    Args:
        name: the entry-point name it stands in for, e.g. ``"triton"``.
        backend: an object satisfying :class:`warmkit.Backend` (``name`` is set
            to ``name`` if it has none).

    Raises:
        TypeError: ``backend`` lacks members of :class:`warmkit.Backend`; the message lists them.
    """
    missing = _plugins.conform(name, backend)
    if missing:
        raise TypeError(
            f"backend_override({name!r}, ...): {type(backend).__qualname__} is not a warmkit "
            f"backend: it lacks {', '.join(missing)} of warmkit.Backend"
        )
    previous = _plugins.swap_backend(name, backend)
    from . import monitor

    hooks = capability(backend, MonitorHooks) if monitor.mode() != "off" else None
    if hooks is not None:
        hooks.install_monitor()
    try:
        yield backend
    finally:
        if hooks is not None:
            hooks.uninstall_monitor()
        _plugins.swap_backend(name, previous)


def unload_backend(name: str) -> None:
    """Forget the loaded backend ``name``: the next use loads it from its entry point again."""
    _plugins.swap_backend(name, None)


@contextlib.contextmanager
def isolated_backends() -> Iterator[None]:
    """Whatever the block loads, overrides or unloads, the loaded backends are as before after it."""
    saved = _plugins.loaded_backend_table()
    try:
        yield
    finally:
        _plugins.restore_backend_table(saved)
