"""What the ``warmkit`` command writes: under ``--json``, its one JSON document alone on stdout.

Everything else a command writes to stdout meanwhile (a DSL's log handler,
C code, the child process of ``warmkit record/run``) goes to stderr.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import Any

__all__ = ["json_stdout", "print_json"]

_json_out: list[Any] = []  # the real stdout while a --json command runs (see json_stdout)


def print_json(text: str) -> None:
    """Print the command's one JSON document: to the real stdout, also under ``--json``."""
    print(text, file=_json_out[-1] if _json_out else sys.stdout)


def _stdout_fd() -> int | None:
    try:
        return sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # replaced by a stream without one (tests)
        return None


@contextlib.contextmanager
def json_stdout(on: bool) -> Iterator[None]:
    """Under ``--json``, stdout carries the JSON document and nothing else.

    Everything else that writes to stdout while the command runs goes to
    stderr: Python code through ``sys.stdout`` (TileLang's log handler writes
    its INFO lines there), C code through file descriptor 1, and the child
    process of ``warmkit record/run --json``, which inherits it.
    """
    if not on:
        yield
        return
    saved = sys.stdout
    saved.flush()
    real_fd = os.dup(1) if _stdout_fd() == 1 else None
    if real_fd is None:
        out = saved  # not the process's stdout (a test's capture): Python-level only
    else:
        out = open(real_fd, "w", encoding=saved.encoding or "utf-8", closefd=False)  # noqa: SIM115
        os.dup2(2, 1)
    _json_out[:] = [out]
    sys.stdout = sys.stderr
    try:
        yield
    finally:
        sys.stderr.flush()
        with contextlib.suppress(OSError):  # a closed pipe: main's BrokenPipeError handles it
            out.flush()
        sys.stdout = saved
        _json_out.clear()
        if real_fd is not None:
            os.dup2(real_fd, 1)
            os.close(real_fd)
