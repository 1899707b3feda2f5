"""``WarmupConfig``: how ``warmkit.warmup`` runs, field by field, each with its ``WARMKIT_*`` variable."""

from __future__ import annotations

import logging
import os
import threading
import weakref
from collections.abc import Callable
from typing import Any

import attrs

from .. import _envs
from .._plugin.contract import Target

__all__ = ["ENV_FIELDS", "WarmupConfig", "deliberate", "unapplied_variables", "warn_unapplied"]

logger = logging.getLogger(__name__)

#: Each ``WarmupConfig`` field and the variable ``WarmupConfig.from_env`` reads it from.
ENV_FIELDS = {
    "enabled": "WARMKIT_ENABLED",
    "monitor": "WARMKIT_MONITOR",
    "jobs": "WARMKIT_JOBS",
    "target": "WARMKIT_TARGET",
    "on_error": "WARMKIT_ON_ERROR",
    "progress": "WARMKIT_PROGRESS",
    "backends": "WARMKIT_BACKENDS",
    "bundle": "WARMKIT_BUNDLE",
    "compile_timeout": "WARMKIT_COMPILE_TIMEOUT",
    "record": "WARMKIT_RECORD",
    "store": "WARMKIT_STORE",
    "store_required": "WARMKIT_STORE_REQUIRED",
    "read_only": "WARMKIT_READ_ONLY",
}


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


def _optional_str(value: object) -> str | None:
    return None if value is None else str(value)


def _optional_path(value: str | os.PathLike[str] | None) -> str | None:
    return None if value is None else os.fspath(value)


def _target_text(value: str | Target | None) -> str | None:
    # a Target is kept as its one spelling; a string as given (its backend parses it)
    return str(value) if isinstance(value, Target) else value


def _store_url(_inst: Any, _attr: Any, url: str | None) -> None:
    # A malformed store URL is a configuration error now, not a failure of every key later.
    if url is not None:
        from .._cache.stores.base import check_url

        check_url(url)


@attrs.frozen
class WarmupConfig:
    """How ``warmkit.warmup`` runs. Every field has a ``WARMKIT_*`` variable (``from_env``).

    Attributes:
        enabled: False makes warmup return at once, importing no backend.
        monitor: what a compile after warmup does: ``"off"``, ``"warn"``, ``"error"``.
        jobs: parallel compiles; None = the number of CPUs.
        target: compile for this target (e.g. ``"cuda:90"`` or a ``warmkit.Target``) instead
            of the current device.
        on_error: ``"raise"`` stops at the first failure; ``"collect"`` compiles
            everything, then raises once listing every failure.
        progress: ``"auto"`` (a bar on a TTY, else a line per 10 % or 10 s; rank 0 only), ``"on"``, ``"off"``.
        backends: allow-list of backend names; kernels of others are skipped.
        bundle: a ``.wkb`` bundle to install before compiling (``docs/bundles.md``);
            its entries turn compiles into cache hits.
        compile_timeout: seconds one key's compile may take; a longer one is a
            failed key (``TimeoutError``), its thread abandoned, its worker process killed
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
    target: str | None = attrs.field(default=None, converter=_target_text)
    on_error: str = attrs.field(default="raise", validator=_in(*_envs.ON_ERROR_MODES))
    progress: str = attrs.field(default="auto", validator=_in(*_envs.PROGRESS_MODES))
    backends: tuple[str, ...] | None = attrs.field(default=None, converter=_backends)
    bundle: str | None = attrs.field(default=None, converter=_optional_str)
    compile_timeout: float | None = attrs.field(default=None, validator=_timeout)
    record: str | None = attrs.field(default=None, converter=_optional_path)
    store: str | None = attrs.field(default=None, converter=_optional_str, validator=_store_url)
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
        values = {field: _envs.get(name) for field, name in ENV_FIELDS.items()}
        values.update(overrides)
        config = cls(**values)
        return deliberate(config)


#: Configs ``from_env`` made, or warmkit's own (``deliberate``): never a trap.
_deliberate: weakref.WeakSet[WarmupConfig] = weakref.WeakSet()
#: The sets of unapplied variables already warned about: one warning each per process.
_warned: set[tuple[str, ...]] = set()
_warned_lock = threading.Lock()


def deliberate(config: WarmupConfig) -> WarmupConfig:
    """Mark ``config`` as one whose ignored ``WARMKIT_*`` variables are meant: no warning.

    ``from_env`` marks what it makes (its overrides are the caller's choice);
    warmkit marks its own configs that ignore variables on purpose
    (``warmkit bundle build`` never uses the store, the monitor or a recording).
    """
    _deliberate.add(config)
    return config


def unapplied_variables(config: WarmupConfig) -> tuple[str, ...]:
    """The ``WARMKIT_*`` variables set in the environment that ``config`` does not follow.

    A variable counts when it is set (even to a value that does not parse)
    and the config's field differs from what ``WarmupConfig.from_env`` would
    read from it. A config ``from_env`` made is never one that ignores them.
    """
    if config in _deliberate:
        return ()
    fields = attrs.fields_dict(WarmupConfig)
    names = []
    for field, name in ENV_FIELDS.items():
        if not os.environ.get(name, "").strip():
            continue
        try:
            value = _envs.get(name)
            converter = fields[field].converter
            if callable(converter):  # a plain function (attrs could also hold a Converter)
                value = converter(value)
        except ValueError:
            names.append(name)  # it could not apply anyway: say so too
            continue
        if value != getattr(config, field):
            names.append(name)
    return tuple(names)


def warn_unapplied(config: WarmupConfig) -> WarmupConfig:
    """One WARNING per process (per set of variables) when ``config`` ignores set ``WARMKIT_*`` variables.

    An operator sets ``WARMKIT_STORE`` or ``WARMKIT_READ_ONLY`` on the fleet;
    the engine passes ``WarmupConfig(monitor="error")``: without this, no
    store is used, nothing is read-only, and nothing says so.
    """
    names = unapplied_variables(config)
    with _warned_lock:
        if not names or names in _warned:
            return config
        _warned.add(names)
    logger.warning(
        "warmkit: %s %s set but not applied: this warmup was given an explicit WarmupConfig(...), "
        "which ignores WARMKIT_* variables. To apply them, build it with "
        "WarmupConfig.from_env(<your fields>=...) (the variables, then your fields over them); "
        "to silence this, unset them or give the config their values",
        ", ".join(names),
        "is" if len(names) == 1 else "are",
    )
    return config
