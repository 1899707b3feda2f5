"""The startup hook of ``warmkit record`` and ``warmkit run``: zero-code adoption.

Both commands run the user's command with warmkit's ``_cli/hook`` folder prepended to
``PYTHONPATH``: it holds one ``sitecustomize.py``. Python imports it at
startup, before the command's own code, in the child process only (and in its
Python children, which inherit ``PYTHONPATH``: the ranks of a launcher). It
calls :func:`main`, which:

* ``warmkit run -m MANIFEST``: warms ``WARMKIT_MANIFEST`` up with
  ``WarmupConfig.from_env()``, which then arms the monitor (and records, if
  ``WARMKIT_RECORD`` is set; ``on_error`` defaults to ``collect`` there, so
  every stale entry is listed); a failed warmup stops the command with exit
  code 1 before any of its code runs;
* ``warmkit record -o PATH``: starts recording into ``WARMKIT_RECORD`` and
  arms the monitor of every installed backend (``WARMKIT_MONITOR``, default
  ``warn``), so a command that never imports warmkit is recorded too.

The original ``sitecustomize`` further down ``sys.path``, if any, still runs.
"""

from __future__ import annotations

import contextlib
import importlib.machinery
import importlib.util
import logging
import os
import re
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, NoReturn

from .. import _envs
from .._compat import site_import_done
from .._exceptions import not_in_report

__all__ = [
    "exec_under_hook",
    "hook_environment",
    "hookless_python",
    "main",
    "nothing_recorded_hint",
    "record_refusal",
    "refuse_hookless",
    "run_under_hook",
]

logger = logging.getLogger(__name__)

#: the folder of warmkit's ``sitecustomize.py``, shipped in the package: nothing to write or clean
HOOK_DIR = str(Path(__file__).with_name("hook"))


def hook_environment(env: dict[str, str]) -> dict[str, str]:
    """``env`` with warmkit's ``sitecustomize.py``, which calls :func:`main`, first on ``PYTHONPATH``."""
    env = dict(env)
    old = env.get("PYTHONPATH")
    env["PYTHONPATH"] = HOOK_DIR if not old else HOOK_DIR + os.pathsep + old
    env["WARMKIT_PYTHON"] = sys.executable  # named by a hook that cannot import warmkit
    return env


@contextlib.contextmanager
def _naming(cmd: list[str]) -> Iterator[None]:
    """A command that is missing or not executable: the same error, naming the command."""
    try:
        yield
    except (FileNotFoundError, PermissionError) as exc:
        raise type(exc)(f"cannot run {cmd[0]!r}: {exc.strerror}") from exc


def run_under_hook(cmd: list[str], env: dict[str, str]) -> int:
    """Run ``cmd`` under the startup hook and wait for it (``record`` reads what it wrote)."""
    import subprocess

    with _naming(cmd):
        return subprocess.run(cmd, env=hook_environment(env), check=False).returncode


def exec_under_hook(cmd: list[str], env: dict[str, str]) -> NoReturn:
    """Become ``cmd`` under the startup hook (``run``: nothing is left to do after it).

    No second process waits beside the command: its exit status, signals and
    terminal are its own, and the parent's teardown is not on its way.
    """
    env = hook_environment(env)
    sys.stdout.flush()
    sys.stderr.flush()
    with _naming(cmd):
        os.execvpe(cmd[0], cmd, env)
    raise AssertionError("unreachable: execvpe returns only by raising")


def _chain(hook_file: str) -> None:
    """Run the ``sitecustomize`` that ours shadows, if there is one."""
    here = os.path.dirname(os.path.abspath(hook_file))
    rest = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


def _configure_logging() -> None:
    """warmkit's and its plugins' warnings to stderr, in a process whose logging is its own.

    The plugins log under their own packages (``warmkit_triton``...), not under
    ``warmkit``: without a handler of theirs, a plugin's warning (a recorded
    autotune winner measured on another GPU model) was lost when a library of
    the command had configured the root logger its own way.
    """
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("warmkit: %(levelname)s %(message)s"))
    handler.addFilter(not_in_report)  # a failed warmup's table is printed: said once
    from .._plugin.discovery import discover

    try:
        plugins = {
            info.value.split(":")[0].split(".")[0]
            for group in ("warmkit.backends", "warmkit.kernels")
            for info in discover(group)
        } - {"warmkit"}
        failure = None
    except Exception as exc:  # noqa: BLE001 -- logging's set-up must not stop the hook: said below
        plugins, failure = set(), exc
    for name in ("warmkit", *sorted(plugins)):
        log = logging.getLogger(name)
        if not any(isinstance(h, logging.StreamHandler) for h in log.handlers):
            log.addHandler(handler)
            log.setLevel(logging.WARNING)
    # Except this module's own lines: `warmkit run`'s one success line is news, not a warning.
    logger.setLevel(logging.INFO)
    if failure is not None:
        logger.warning(
            "the plugins' loggers were not set up (plugin discovery failed: %s: %s); their "
            "warnings go wherever this command's logging sends them",
            type(failure).__name__,
            failure,
        )


def main(hook_file: str | None = None) -> None:
    """Warm up and/or start recording for this process, from the environment.

    A failed warmup of ``WARMKIT_MANIFEST`` ends the process with exit code 1
    (after printing the report), before any of the command's code runs.

    In a process that ``multiprocessing`` spawned, what it is becomes known only
    once it has unpickled its process object: the hook then acts just before
    the process's target runs, and not at all in warmkit's own compile workers
    (``_warmup.workers._WorkerProcess``), which would otherwise each warm up (or
    record) the whole manifest again.
    """
    # Called from sitecustomize, inside site's own import: compile threads may import site.
    site_import_done()
    try:
        if _multiprocessing_child():
            _defer_to_bootstrap()
        else:
            _act()
    finally:
        if hook_file is not None:
            _chain(hook_file)


def _multiprocessing_child() -> bool:
    """Started by ``multiprocessing``: a spawned child (its target not known yet), its forkserver
    or its resource tracker (neither runs the command's code)."""
    return any(a.startswith("from multiprocessing.") for a in getattr(sys, "orig_argv", ()))


def _defer_to_bootstrap() -> None:
    from multiprocessing.process import BaseProcess

    original = BaseProcess._bootstrap  # type: ignore[attr-defined]  # private, stable since 3.8

    def bootstrap(self: BaseProcess, *args: Any, **kwargs: Any) -> Any:
        BaseProcess._bootstrap = original  # type: ignore[attr-defined]  # once per process
        if not getattr(self, "warmkit_compile_worker", False):
            _act()
        return original(self, *args, **kwargs)

    BaseProcess._bootstrap = bootstrap  # type: ignore[attr-defined]


def _act() -> None:
    from .._plugin.discovery import one_scan

    with one_scan():  # the loggers', the manifest's and the warmup's lookups share one scan
        _act_scanned()


def _act_scanned() -> None:
    from .. import monitor
    from .._registry.recorded import start_recording

    _configure_logging()
    manifest = _envs.get("WARMKIT_MANIFEST")
    record = _envs.get("WARMKIT_RECORD")
    if manifest is not None:
        from .._exceptions import WarmkitError
        from .._registry.registry import WarmupRegistry
        from .._warmup.config import WarmupConfig
        from .._warmup.orchestrate import warmup

        try:
            overrides: dict[str, Any] = {"progress": "off"}
            if "WARMKIT_ON_ERROR" not in os.environ:
                overrides["on_error"] = "collect"
            config = WarmupConfig.from_env(**overrides)
            report = warmup(config, WarmupRegistry.load(manifest))
        except (WarmkitError, ValueError) as exc:
            partial = getattr(exc, "report", None)
            if partial is not None:
                sys.stderr.write(partial.table() + "\n")
            logger.error(
                "warmkit run: warmup of %s failed%s; the command did not run",
                manifest,
                " (the report above says why)" if partial is not None else f": {exc}",
            )
            sys.stderr.flush()
            # SystemExit inside sitecustomize is a fatal interpreter error with a traceback;
            # the command must simply not run.
            os._exit(1)
        logger.info(
            "warmkit run: warmed %d key(s) of %s in %.2fs (%d compiled, %d cached); monitor %s",
            len(report.entries),
            manifest,
            report.seconds,
            report.count("compiled"),
            report.count("cached"),
            report.monitor,
        )
    elif record is not None:
        from .._plugin.discovery import load_every_backend

        mode = _envs.get("WARMKIT_MONITOR")
        start_recording(record)
        load_every_backend()  # a command that never imports warmkit: hook every backend
        if mode == "off":  # armed only so that the recording sees compiles: they are not news
            monitor._arm_for_recording()
        else:
            monitor.arm(mode)


# -- what recording needs from the host ---------------------------------------------------------

_TRUE = ("1", "true", "yes", "on", "y")  # how Triton's knobs read a boolean variable


def record_refusal(env: Mapping[str, str]) -> str | None:
    """Why ``warmkit record`` would record nothing of a command run with ``env``, or None.

    Raw kernels are recorded when they compile. Under ``TRITON_INTERPRET=1``
    Triton interprets every kernel and compiles none, so a recording would be
    empty and a ``record && coverage`` CI step would pass on nothing. (Named
    here, not in the Triton plugin, because the check runs before anything,
    the plugin included, is imported.)
    """
    if env.get("TRITON_INTERPRET", "").strip().lower() in _TRUE:
        return (
            "TRITON_INTERPRET is set: Triton then interprets kernels and compiles none, so "
            "nothing would be recorded; unset TRITON_INTERPRET and record on a GPU host "
            "(docs/record.md, 'What recording needs')"
        )
    return None


#: Python's options that keep ``sitecustomize`` from running: ``-S`` (no ``site``), ``-E`` and
#: ``-I`` (``PYTHONPATH`` ignored, so the hook's folder is never on ``sys.path``).
_NO_HOOK_OPTIONS = frozenset("ESI")
#: Python's options that take a value (``-W error``, ``-Xdev``) and the ones after which the
#: arguments are the program's (``-c CODE``, ``-m MODULE``).
_VALUED_OPTIONS, _LAST_OPTIONS = frozenset("WX"), frozenset("cm")


def hookless_python(cmd: list[str]) -> str | None:
    """The option of ``cmd``, a Python command line, that keeps warmkit's startup hook out, or None.

    ``python -I serve.py`` ignores ``PYTHONPATH`` and ``python -S`` skips ``site``: the
    command would run without the hook, unwarmed and unrecorded, and nothing would
    say so. Only a command that *is* Python is read (``python``, ``python3.12``); a
    script that runs Python with such options is beyond what a command line shows.
    """
    if not re.fullmatch(r"python[0-9.]*", os.path.basename(cmd[0])):
        return None
    args = iter(cmd[1:])
    for arg in args:
        if arg.startswith("--") and arg != "--":
            continue  # --check-hash-based-pycs MODE and the like: long options, no hook flag
        if arg in ("-", "--") or not arg.startswith("-"):
            return None  # the script, stdin or the end of the options
        for i, flag in enumerate(arg[1:], 1):
            if flag in _NO_HOOK_OPTIONS:
                return f"-{flag}"
            if flag in _LAST_OPTIONS:
                return None
            if flag in _VALUED_OPTIONS:
                if i == len(arg) - 1:
                    next(args, None)  # the value is the next argument
                break
    return None


def refuse_hookless(command: str, cmd: list[str]) -> None:
    """Refuse ``warmkit run``/``record`` of a Python command line that keeps the hook out.

    Raises:
        ValueError: ``cmd`` is Python started with ``-I``, ``-E`` or ``-S`` (the message
            names the option and how to do without it).
    """
    flag = hookless_python(cmd)
    if flag is not None:
        doing = "warm anything up" if command == "run" else "record anything"
        raise ValueError(
            f"warmkit {command}: the command runs Python with {flag}, which keeps warmkit's "
            f"startup hook out (-S skips site, -E and -I ignore PYTHONPATH), so it could not "
            f"{doing}; drop {flag}, or call warmkit.warmup() in the command's own code"
        )


def nothing_recorded_hint(exit_code: int) -> str | None:
    """One line for a recorded command that failed and compiled nothing on a host with no GPU.

    Raw kernels compile when they launch, and they launch only on a GPU (on a
    host without one Triton's launch fails with "0 active drivers"), so the
    command most likely failed for that reason. None when a backend sees a device.
    """
    from .._plugin.discovery import discover, get_backend

    for info in discover("warmkit.backends"):
        try:
            if get_backend(info.name).default_target() is not None:
                return None
        except Exception:  # an unavailable backend sees no device either
            logger.debug("backend %s: no default target", info.name, exc_info=True)
    return (
        f"the command failed (exit {exit_code}) and compiled nothing, and no backend sees a GPU "
        "on this host: raw kernels are recorded when they launch, which needs a GPU (Triton: "
        "'0 active drivers'); record on a GPU host (docs/record.md, 'What recording needs')"
    )
