"""``WarmupConfig``: how ``warmkit.warmup`` runs, field by field, each with its ``WARMKIT_*`` variable."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import attrs

from . import _envs

__all__ = ["WarmupConfig"]


def _in(*choices: str) -> Callable[[Any, Any, Any], None]:
    def check(_inst: Any, attribute: Any, value: Any) -> None:
        if value not in choices:
            raise ValueError(
                f"WarmupConfig.{attribute.name} must be one of {', '.join(map(repr, choices))}, "
                f"got {value!r}"
            )

    return check


def _jobs(_inst: Any, _attr: Any, value: Any) -> None:
    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
        raise ValueError(f"WarmupConfig.jobs must be a positive int or None (auto), got {value!r}")


def _timeout(_inst: Any, _attr: Any, value: Any) -> None:
    if value is not None and (
        isinstance(value, bool) or not isinstance(value, int | float) or not value > 0
    ):
        raise ValueError(
            f"WarmupConfig.compile_timeout must be a positive number of seconds or None, "
            f"got {value!r}"
        )


def _backends(value: Any) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, str):
        value = value.split(",")
    return tuple(sorted({str(v).strip() for v in value if str(v).strip()}))


@attrs.frozen
class WarmupConfig:
    """How ``warmkit.warmup`` runs. Every field has a ``WARMKIT_*`` variable (``from_env``).

    Attributes:
        enabled: False makes warmup return at once, importing no backend.
        monitor: what a compile after warmup does: ``"off"``, ``"warn"``, ``"error"``.
        jobs: parallel compiles; None = the number of CPUs.
        target: compile for this target (e.g. ``"cuda:90"``) instead of the current device.
        on_error: ``"raise"`` stops at the first failure; ``"collect"`` compiles
            everything, then raises once listing every failure.
        progress: ``"auto"`` (a bar on a TTY, else a line per 10 % or 10 s; rank 0 only), ``"on"``, ``"off"``.
        backends: allow-list of backend names; kernels of others are skipped.
        bundle: a ``.wkb`` bundle to install before compiling (``docs/bundles.md``);
            its entries turn compiles into cache hits.
        compile_timeout: seconds one key's compile may take; a longer one is a
            failed key (``TimeoutError``) and its thread is abandoned
            (``docs/reliability.md``). None = unbounded.
        record: after warmup, record every runtime JIT event into this
            manifest (``{rank}`` allowed; ``docs/record.md``); needs the
            monitor in ``"warn"`` or ``"error"`` mode.
        store: a shared compile store (``docs/fleet.md``): ``redis://host:port/db``,
            ``rediss://...``, or a directory; None = the local cache only. Each key
            is fetched before it is compiled and published after.
        store_required: an unreachable store fails the warmup instead of
            degrading to local compiles with one warning.
        read_only: serve from a read-only cache (e.g. a bundle baked into an
            image): write nothing, and make any miss a ``CacheMissError``.
    """

    enabled: bool = attrs.field(default=True, validator=attrs.validators.instance_of(bool))
    monitor: str = attrs.field(default="warn", validator=_in(*_envs.MONITOR_MODES))
    jobs: int | None = attrs.field(default=None, validator=_jobs)
    target: str | None = None
    on_error: str = attrs.field(default="raise", validator=_in(*_envs.ON_ERROR_MODES))
    progress: str = attrs.field(default="auto", validator=_in(*_envs.PROGRESS_MODES))
    backends: tuple[str, ...] | None = attrs.field(default=None, converter=_backends)
    bundle: str | None = attrs.field(
        default=None, converter=lambda v: None if v is None else str(v)
    )
    compile_timeout: float | None = attrs.field(default=None, validator=_timeout)
    record: str | None = attrs.field(
        default=None, converter=lambda v: None if v is None else os.fspath(v)
    )
    store: str | None = attrs.field(default=None, converter=lambda v: None if v is None else str(v))
    store_required: bool = attrs.field(default=False, validator=attrs.validators.instance_of(bool))
    read_only: bool = attrs.field(default=False, validator=attrs.validators.instance_of(bool))

    def __attrs_post_init__(self) -> None:
        if self.record is not None and self.monitor == "off":
            raise ValueError(
                f"WarmupConfig.record={self.record!r} needs the monitor: recording sees what it "
                "sees; set monitor='warn' (record and compile) or 'error' (record, then raise)"
            )

    @classmethod
    def from_env(cls, **overrides: Any) -> WarmupConfig:
        """A config from the ``WARMKIT_*`` variables (``docs/configuration.md``), then ``overrides``.

        Raises:
            ValueError: a variable that does not parse (the message names it).
        """
        values = {
            "enabled": _envs.get("WARMKIT_ENABLED"),
            "monitor": _envs.get("WARMKIT_MONITOR"),
            "jobs": _envs.get("WARMKIT_JOBS"),
            "target": _envs.get("WARMKIT_TARGET"),
            "on_error": _envs.get("WARMKIT_ON_ERROR"),
            "progress": _envs.get("WARMKIT_PROGRESS"),
            "backends": _envs.get("WARMKIT_BACKENDS"),
            "bundle": _envs.get("WARMKIT_BUNDLE"),
            "compile_timeout": _envs.get("WARMKIT_COMPILE_TIMEOUT"),
            "record": _envs.get("WARMKIT_RECORD"),
            "store": _envs.get("WARMKIT_STORE"),
            "store_required": _envs.get("WARMKIT_STORE_REQUIRED"),
            "read_only": _envs.get("WARMKIT_READ_ONLY"),
        }
        values.update(overrides)
        return cls(**values)
