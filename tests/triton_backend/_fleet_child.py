"""Child process of the fleet tests: one "rank" warming the synthetic manifest.

    python -m triton_backend._fleet_child SPEC.json

SPEC: ``{"cache", "store", "target", "ready", "go", "out", "hang_on_lease"}``. The
child writes ``ready``, waits for ``go`` (so that every rank starts at once),
warms up with Triton's compile listener counting real compiles, and writes
``out``: ``{"compiles", "statuses", "complete", "seconds", "store_refused"}``. With ``hang_on_lease`` it
stops inside its first compile made under a fleet lease (writing
``out + ".leased"``) until it is killed.
"""

from __future__ import annotations

import base64
import json
import os
import sys
import time
from pathlib import Path

from triton import knobs
from warmkit_triton import TritonBackend

import warmkit

from ._kernels import Add

SPACE = {"dtype": ["float32", "float16"], "n": [64, 65], "block": [64, 128]}  # 8 keys


def registry() -> warmkit.WarmupRegistry:
    reg = warmkit.WarmupRegistry()
    with reg.activate():
        Add().register_warmup(**SPACE)
    return reg


def complete_entries(cache: Path) -> list[str]:
    """Hashes (hex) of the complete Triton entries in ``cache``."""
    backend = TritonBackend()
    out = []
    for d in sorted(cache.iterdir()) if cache.exists() else ():
        if d.name.startswith("."):
            continue
        digest = base64.b32decode(d.name + "=" * (-len(d.name) % 8)).hex()
        if backend.entry_files(digest) is not None:
            out.append(digest)
    return out


def main() -> None:
    spec = json.loads(Path(sys.argv[1]).read_text())
    os.environ["TRITON_CACHE_DIR"] = spec["cache"]
    compiles: list[str] = []
    knobs.compilation.listener = lambda **kw: (
        None if kw["cache_hit"] else compiles.append(kw["metadata"]["hash"])
    )
    if spec.get("hang_on_lease"):

        def hang(**_kw):
            fleet = warmkit.current_fleet()
            if fleet is not None and fleet._leases:  # compiling under a fleet lease
                Path(spec["out"] + ".leased").write_text(next(iter(fleet._leases)))
                time.sleep(3600)
            return False

        knobs.runtime.jit_cache_hook = hang
    reg = registry()
    Path(spec["ready"]).write_text("")
    while not Path(spec["go"]).exists():
        time.sleep(0.005)
    report = warmkit.warmup(
        warmkit.WarmupConfig(
            target=spec["target"], jobs=1, progress="off", monitor="off", store=spec.get("store")
        ),
        reg,
    )
    Path(spec["out"]).write_text(
        json.dumps(
            {
                "compiles": compiles,
                "statuses": [e.status for e in report.entries],
                "complete": complete_entries(Path(spec["cache"])),
                "seconds": report.seconds,
                "store_refused": dict(report.store_refused),
            }
        )
    )


if __name__ == "__main__":
    main()
