"""Fixtures shared by every test package."""

from __future__ import annotations

import compileall
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis_server import RedisServer

ROOT = Path(__file__).resolve().parents[1]


def pytest_configure(config: pytest.Config) -> None:
    """Byte-compile this repository's Python once, before any test starts a process.

    The suite starts a few hundred Python processes (``warmkit`` commands, benchmark
    children, recorded commands), and each imported warmkit and its plugins from
    source when ``PYTHONDONTWRITEBYTECODE`` is set (as on the CI box), since an
    editable install is never byte-compiled by pip: ~0.3 s of every such process.
    The ``.pyc`` files are checked against their source's mtime on import, so an
    edited module is still read from its source. Only in the controller (xdist's
    workers start after it).
    """
    if hasattr(config, "workerinput"):
        return
    skip = re.compile(r"(^|/)\.(venv|git)|/(build|dist)/")
    dirs = [ROOT / "warmkit", ROOT / "tests", ROOT / "benchmarks", ROOT / "examples"]
    dirs += sorted(ROOT.glob("plugins/*/warmkit_*"))
    for directory in dirs:
        compileall.compile_dir(directory, quiet=2, rx=skip, workers=1)


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    """A fresh real redis-server on 127.0.0.1 at a free port, stopped after the test."""
    server = RedisServer().start()
    try:
        yield server
    finally:
        server.close()
