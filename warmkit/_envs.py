"""Every ``WARMKIT_*`` environment variable of the core, in one table; :class:`EnvVar` for plugins' tables.

Values are read when asked for (never cached at import), so a test or a
launcher may set them at any time before ``WarmupConfig.from_env()``.
Each plugin declares its own variables (``WARMKIT_<PLUGIN>_*``) in a table
of ``warmkit.EnvVar`` in its ``_envs.py``, with the same parsers (one boolean
rule for all: :meth:`EnvVar.flag`). ``docs/configuration.md`` documents every
table; a test keeps them equal. The mode literals (``MONITOR_MODES``,
``ON_ERROR_MODES``, ``PROGRESS_MODES``) are defined here, once.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, NamedTuple

__all__ = [
    "ENVIRONMENT",
    "MONITOR_MODES",
    "ON_ERROR_MODES",
    "PROGRESS_MODES",
    "EnvVar",
    "get",
    "rank",
]

#: What a compile after warmup does (``WarmupConfig.monitor``, ``warmkit.monitor.arm``).
MONITOR_MODES = ("off", "warn", "error")
#: ``WarmupConfig.on_error``: stop at the first failure, or compile everything, then raise once.
ON_ERROR_MODES = ("raise", "collect")
#: ``WarmupConfig.progress``.
PROGRESS_MODES = ("auto", "on", "off")


def _bool(raw: str) -> bool:
    v = raw.strip().lower()
    if v in ("1", "true", "yes", "on"):
        return True
    # An empty value is an error, not "off": a launcher that exports WARMKIT_ENABLED=
    # by mistake must not silently turn warmup off.
    if v in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"expected 1/0, true/false, yes/no or on/off, got {raw!r}")


def _opt_int(raw: str) -> int | None:
    v = raw.strip().lower()
    if v in ("", "auto"):
        return None
    n = int(v)
    if n < 1:
        raise ValueError(f"expected a positive integer or 'auto', got {raw!r}")
    return n


def _pos_int(raw: str) -> int:
    n = int(raw.strip().replace("_", ""))
    if n < 1:
        raise ValueError(f"expected a positive integer, got {raw!r}")
    return n


def _opt_seconds(raw: str) -> float | None:
    v = raw.strip().lower()
    if v in ("", "none", "off"):
        return None
    n = float(v)
    if not n > 0:
        raise ValueError(f"expected a positive number of seconds or 'off', got {raw!r}")
    return n


def _opt_str(raw: str) -> str | None:
    return raw.strip() or None


def _pos_float(raw: str) -> float:
    n = float(raw.strip())
    if not n > 0:
        raise ValueError(f"expected a positive number of seconds, got {raw!r}")
    return n


def _lease_seconds(raw: str) -> float:
    n = _pos_float(raw)
    # A lease must expire: an infinite one would pin a dead holder's key for good.
    if n == float("inf") or n > 86400:
        raise ValueError(f"expected a finite number of seconds up to 86400, got {raw!r}")
    return n


def _key_files(raw: str) -> tuple[str, ...]:
    # Empty is an error, not "no trust": WARMKIT_BUNDLE_TRUST='' once turned checks off silently.
    names = _names(raw)
    if not names:
        raise ValueError(
            "empty: name one or more Ed25519 public key files (PEM), or unset it to check no "
            "signatures"
        )
    return names


def _path(raw: str) -> str:
    if not raw.strip():
        raise ValueError("empty: name an Ed25519 private key file (PEM), or unset it")
    return raw.strip()


def _names(raw: str) -> tuple[str, ...]:
    return tuple(sorted({n.strip() for n in raw.split(",") if n.strip()}))


def _choice(*choices: str) -> Callable[[str], str]:
    def parse(raw: str) -> str:
        v = raw.strip().lower()
        if v not in choices:
            raise ValueError(f"expected one of {', '.join(choices)}, got {raw!r}")
        return v

    return parse


class EnvVar(NamedTuple):
    """One environment variable: its default (when unset), its parser and what it does.

    A table maps each name to one; a plugin keeps its own table (e.g.
    ``warmkit_triton._envs.ENVIRONMENT``) and reads a variable with
    ``table[name].read(name)``. A frozen value, as an ``attrs`` class would be, but
    a ``NamedTuple``: ``warmkit run``'s CLI process reads the mode literals of this
    module before it execs the command, and attrs is 20 ms of imports it needs for nothing.

    Attributes:
        default: the value when the variable is unset.
        parse: raw string -> value; raises ``ValueError`` on a bad value.
        doc: one line for the documentation.
    """

    default: Any
    parse: Callable[[str], Any]
    doc: str

    @classmethod
    def flag(cls, default: bool, doc: str) -> EnvVar:
        """A boolean variable: ``1/0``, ``true/false``, ``yes/no``, ``on/off``; anything else (even empty) is an error."""
        return cls(default, _bool, doc)

    @classmethod
    def choice(cls, default: str, choices: tuple[str, ...], doc: str) -> EnvVar:
        """A variable taking one of ``choices`` (case-insensitive)."""
        return cls(default, _choice(*choices), doc)

    def read(self, name: str) -> Any:
        """The parsed value of variable ``name`` now, or the default when it is unset.

        Raises:
            ValueError: it is set to something that does not parse; the message
                names the variable and the value.
        """
        raw = os.environ.get(name)
        if raw is None:
            return self.default
        try:
            return self.parse(raw)
        except ValueError as exc:
            raise ValueError(f"environment variable {name}={raw!r} is invalid: {exc}") from None


ENVIRONMENT: dict[str, EnvVar] = {
    # Master switch: 0 makes warmkit.warmup() return at once, importing no backend.
    "WARMKIT_ENABLED": EnvVar.flag(True, "WarmupConfig.enabled: 0 disables warmup entirely."),
    # What a compile after warmup does: off, warn (one warning per kernel and key), error.
    "WARMKIT_MONITOR": EnvVar.choice(
        "warn", MONITOR_MODES, "WarmupConfig.monitor: off, warn or error."
    ),
    # Parallel compile jobs; unset or 'auto' = the number of CPUs.
    "WARMKIT_JOBS": EnvVar(
        None, _opt_int, "WarmupConfig.jobs: parallel compiles; unset/auto = CPU count."
    ),
    # Compile worker processes (warmkit._warmup.workers): auto = when they pay (>= 4 jobs, >= 2 keys each).
    "WARMKIT_COMPILE_PROCESSES": EnvVar(
        "auto",
        _choice("auto", "on", "off"),
        "Compile worker processes: auto (when they pay), on, or off (threads only).",
    ),
    # Compile for a declared target instead of this device, e.g. cuda:90 on a CPU-only host.
    "WARMKIT_TARGET": EnvVar(
        None, _opt_str, "WarmupConfig.target: e.g. cuda:90; unset = the current device."
    ),
    # raise: stop at the first failure; collect: compile everything, then raise once.
    "WARMKIT_ON_ERROR": EnvVar.choice(
        "raise", ON_ERROR_MODES, "WarmupConfig.on_error: raise or collect."
    ),
    # Progress bar: auto (on a TTY, rank 0 only), on, off.
    "WARMKIT_PROGRESS": EnvVar.choice(
        "auto", PROGRESS_MODES, "WarmupConfig.progress: auto, on or off."
    ),
    # Comma-separated backends to warm up; kernels of other backends are skipped.
    "WARMKIT_BACKENDS": EnvVar(
        None, _names, "WarmupConfig.backends: comma-separated allow-list; unset = all."
    ),
    # Plugin allow-list for discovery: unset = every installed plugin, empty = none.
    "WARMKIT_PLUGINS": EnvVar(
        None,
        _names,
        "Entry-point names warmkit may load (backends and kernels); unset = all, empty = none.",
    ),
    # A bundle installed before compiling (warmkit bundle build ...).
    "WARMKIT_BUNDLE": EnvVar(
        None, _opt_str, "WarmupConfig.bundle: a .wkb bundle to install before compiling."
    ),
    # Bound on one key's compile; a longer one fails that key and its thread is abandoned.
    "WARMKIT_COMPILE_TIMEOUT": EnvVar(
        None,
        _opt_seconds,
        "WarmupConfig.compile_timeout: seconds per key's compile; unset/off = unbounded.",
    ),
    # Public keys (PEM files) bundles and store entries must be signed by (docs/reliability.md).
    "WARMKIT_TRUST": EnvVar(
        None,
        _key_files,
        "Comma-separated Ed25519 public key files; bundles and store entries must be signed by one.",
    ),
    # The older name of WARMKIT_TRUST (bundles only then); both set and different is an error.
    "WARMKIT_BUNDLE_TRUST": EnvVar(
        None, _key_files, "Alias of WARMKIT_TRUST (kept working); both set must be equal."
    ),
    # A publisher's private key: every entry it publishes to the store is signed with it.
    "WARMKIT_SIGNING_KEY": EnvVar(
        None,
        _path,
        "Ed25519 private key (PEM) that signs the store entries this process publishes.",
    ),
    # Record every runtime JIT event after warmup into this manifest ({rank} allowed).
    "WARMKIT_RECORD": EnvVar(
        None, _opt_str, "WarmupConfig.record: manifest path for runtime compiles ({rank} allowed)."
    ),
    # Which modules a manifest may import (warmkit._registry.manifest.modules): installed or any.
    "WARMKIT_MANIFEST_MODULES": EnvVar.choice(
        "installed",
        ("installed", "any"),
        "Modules a manifest may import: installed (not the current or script directory) or any.",
    ),
    # Set by `warmkit run -m MANIFEST` for its child: warmed by the startup hook first.
    "WARMKIT_MANIFEST": EnvVar(
        None, _opt_str, "Manifest that warmkit run's startup hook warms before the command runs."
    ),
    # Set by `warmkit run` for its command, which becomes its process (exec): the startup hook
    # of a Python that cannot import warmkit stops the command itself, warns in its children.
    "WARMKIT_COMMAND_PID": EnvVar(
        None, _opt_str, "Set by warmkit run: its command's process id (the hook's own use)."
    ),
    # Set by `warmkit run`/`record` for the command: the Python warmkit is installed in, which
    # the startup hook names when the command's Python cannot import warmkit.
    "WARMKIT_PYTHON": EnvVar(
        None,
        _opt_str,
        "Set by warmkit run/record: the Python warmkit runs in (the hook's own use).",
    ),
    # A shared compile store: redis://host:port/db, rediss://..., or a directory (docs/fleet.md).
    "WARMKIT_STORE": EnvVar(
        None, _opt_str, "WarmupConfig.store: redis://host:port/db or a directory; unset = none."
    ),
    # An unreachable store fails the warmup instead of degrading to local compiles.
    "WARMKIT_STORE_REQUIRED": EnvVar(
        False, _bool, "WarmupConfig.store_required: 1 fails a warmup whose store is unreachable."
    ),
    # Used when a redis:// store URL carries no password.
    "WARMKIT_STORE_PASSWORD": EnvVar(
        None, _opt_str, "Password for a redis:// store whose URL has none."
    ),
    # Read-only serving: load everything from the cache, write nothing, a miss is an error.
    "WARMKIT_READ_ONLY": EnvVar(
        False, _bool, "WarmupConfig.read_only: 1 writes nothing; a cache miss is a WarmupError."
    ),
    # How long a process waits for another one compiling the same key before compiling itself.
    "WARMKIT_WAIT_SECONDS": EnvVar(
        300.0, _pos_float, "Bounded wait for another process's compile of a key (host or fleet)."
    ),
    # The fleet-wide lease on a key being compiled: renewed every third; a dead holder's expires.
    "WARMKIT_LEASE_SECONDS": EnvVar(
        30.0,
        _lease_seconds,
        "Lifetime of a store lease on a key being compiled (renewed while alive).",
    ),
    # Budget for one search-space expansion, checked before any work.
    "WARMKIT_MAX_POINTS": EnvVar(
        1_000_000, _pos_int, "Default JitKernel.max_points: the largest space expanded."
    ),
    # This process's rank; progress bars show on rank 0 only. Falls back to RANK.
    "WARMKIT_RANK": EnvVar(
        None, lambda raw: int(raw.strip()), "Process rank for progress bars; unset = RANK, else 0."
    ),
}


def get(name: str) -> Any:
    """The parsed value of ``name`` from the environment, or its default when unset.

    Raises:
        KeyError: ``name`` is not in the table.
        ValueError: the variable is set to something it cannot parse; the
            message names the variable.
    """
    _warn_misspelt_once()
    return ENVIRONMENT[name].read(name)


_checked_names = False


def _warn_misspelt_once() -> None:
    """Warn once per process about a set ``WARMKIT_*`` name that is close to a known one.

    A misspelt variable (a typo of ``WARMKIT_TARGET``) would otherwise be ignored
    silently. Only names close to the core's are flagged, so plugins'
    variables (``WARMKIT_TRITON_*``, in their own tables) are never called unknown.
    """
    global _checked_names
    if _checked_names:
        return
    _checked_names = True
    import difflib
    import logging

    for name in sorted(os.environ):
        if not name.startswith("WARMKIT_") or name in ENVIRONMENT:
            continue
        close = difflib.get_close_matches(name, list(ENVIRONMENT), n=1, cutoff=0.85)
        if close:
            logging.getLogger(__name__).warning(
                "%s is set but is not a warmkit variable, so it is ignored; did you mean %s? "
                "(docs/configuration.md lists them)",
                name,
                close[0],
            )


def rank() -> int:
    """This process's rank: ``WARMKIT_RANK``, else ``RANK``, else 0."""
    r = get("WARMKIT_RANK")
    if r is None:
        raw = os.environ.get("RANK", "").strip()
        r = int(raw) if raw.lstrip("-").isdigit() else 0
    return r
