"""Shared setup of the block-table plugin's tests."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# Make the helper module importable whatever pytest's import mode is.
sys.path.insert(0, str(Path(__file__).resolve().parent))


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "gpu: needs a CUDA device (skipped without one)")
