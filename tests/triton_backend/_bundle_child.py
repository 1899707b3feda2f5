"""Child process of the bundle tests: warm up a manifest and report what Triton's compile listener saw.

    python -m triton_backend._bundle_child MANIFEST TARGET [BUNDLE]

Prints one JSON line: ``{"listener": [cache_hit, ...], "statuses": [...], "cache_dir": ...}``.
"""

from __future__ import annotations

import json
import sys

from triton import knobs

import warmkit


def main() -> None:
    manifest, target = sys.argv[1], sys.argv[2]
    bundle = sys.argv[3] if len(sys.argv) > 3 else None
    seen: list[bool] = []
    knobs.compilation.listener = lambda **kw: seen.append(bool(kw["cache_hit"]))
    registry = warmkit.WarmupRegistry.load(manifest)
    report = warmkit.warmup(
        warmkit.WarmupConfig(target=target, jobs=1, progress="off", bundle=bundle), registry
    )
    print(
        json.dumps(
            {
                "listener": seen,
                "statuses": [e.status for e in report.entries],
                "cache_dir": knobs.cache.dir,
            }
        )
    )


if __name__ == "__main__":
    main()
