"""The repository's shape: modules of one concept each, small enough to read, each on the map."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LIBRARY = sorted(
    p
    for p in [*ROOT.glob("warmkit/**/*.py"), *ROOT.glob("plugins/*/warmkit_*/**/*.py")]
    if "__pycache__" not in p.parts
)


@pytest.mark.parametrize("path", LIBRARY, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_library_module_is_over_750_lines(path):
    lines = len(path.read_text().splitlines())
    assert lines <= 750, f"{path.relative_to(ROOT)} has {lines} lines: split it by concept"


def test_every_core_module_is_on_the_architecture_map():
    text = (ROOT / "docs" / "architecture.md").read_text()
    missing = [
        rel
        for p in ROOT.glob("warmkit/**/*.py")
        if p.name not in ("__init__.py", "__main__.py")
        and (rel := p.relative_to(ROOT).as_posix()) not in text
    ]
    assert not missing, f"docs/architecture.md does not map {missing}"


def test_no_plugin_reads_the_cores_private_attributes():
    """Plugins use JitKernel's public accessors (executors, launch_lookup, launch_executor, ...)."""
    import re

    private = re.compile(r"\._warmkit_\w+|\b_warmkit_\w+\s*[(=]|getattr\([^)]*[\"']_warmkit_")
    hits = [
        f"{p.relative_to(ROOT)}:{i}: {line.strip()}"
        for p in ROOT.glob("plugins/*/warmkit_*/**/*.py")
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if private.search(line)
    ]
    assert not hits, "plugins read warmkit's private state:\n" + "\n".join(hits)
