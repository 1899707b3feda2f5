"""Fixtures shared by every test package."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from redis_server import RedisServer


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    """A fresh real redis-server on 127.0.0.1 at a free port, stopped after the test."""
    server = RedisServer().start()
    try:
        yield server
    finally:
        server.close()
