"""Every ```python block of docs/*.md runs: a page's blocks, in order, are one module imported in a fresh process.

A block right after a ``<!-- excerpt: PATH -->`` line is an excerpt of the file
at PATH (which must exist) and is not run: that file is the code that runs.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted((ROOT / "docs").glob("*.md"))
BLOCK = re.compile(
    r"(?:^<!-- excerpt: (\S+) -->\n)?^```python\n(.*?)^```", re.MULTILINE | re.DOTALL
)


def program(page: Path) -> str:
    blocks = []
    for m in BLOCK.finditer(page.read_text()):
        if m.group(1) is not None:
            assert (ROOT / m.group(1)).is_file(), f"{page.name}: excerpt of a missing {m.group(1)}"
            continue
        blocks.append(m.group(2))
    return "\n\n".join(blocks)


def run_page(
    page: Path, tmp_path: Path, code: str | None = None
) -> subprocess.CompletedProcess[str]:
    """``page``'s program written as a module beside ``tmp_path``'s Triton cache, then imported
    (or ``code`` run, which imports it) in a fresh process with no ``WARMKIT_*`` variable."""
    script = tmp_path / f"doc_{page.stem.replace('-', '_')}.py"  # a real file: Triton reads sources
    script.write_text(program(page))
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARMKIT_")}
    env["TRITON_CACHE_DIR"] = str(tmp_path / "triton-cache")
    scratch = tmp_path / "tmp"  # a page's temporary files: a reader who copies it keeps none
    scratch.mkdir(exist_ok=True)
    env["TMPDIR"] = str(scratch)
    proc = subprocess.run(
        # Imported, not run as __main__: manifests refuse kernels defined in a script.
        [sys.executable, "-c", code or f"import {script.stem}"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if proc.returncode == 0:  # else the caller's assertion shows why it failed
        # tempfile's own names (tmp*) only: torch and CuTe DSL keep their lasting caches there too
        left = sorted(p.name for p in scratch.glob("tmp*"))
        assert left == [], f"{page.name} left temporary files"
    return proc


@pytest.mark.parametrize("page", [p for p in DOCS if program(p)], ids=lambda p: p.name)
def test_python_blocks_run(page, tmp_path):
    proc = run_page(page, tmp_path)
    assert proc.returncode == 0, f"{page.name}:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"


def test_adopting_level_2_follows_the_operators_target(tmp_path):
    """The guide's level-2 function passes a target to ``from_env`` only when its caller chose
    one, so an operator's ``WARMKIT_TARGET`` applies (it was overridden by ``target=None``)."""
    check = (
        "import os, doc_adopting as d\n"
        "os.environ['WARMKIT_TARGET'] = 'cuda:90'\n"
        "r = d.warm_from_manifest(d.manifest)\n"
        "assert r.ok and r.target == 'cuda:90' and r.monitor == 'off', (r.target, r.monitor)\n"
    )
    proc = run_page(ROOT / "docs" / "adopting.md", tmp_path, check)
    assert proc.returncode == 0, f"{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
