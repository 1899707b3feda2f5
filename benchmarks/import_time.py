"""B7: `import warmkit` plus plugin discovery in a fresh process (goal: <= 150 ms).

    python benchmarks/import_time.py [--out results.json] [--tiny]

Fresh-process measurements, each the median of --runs runs:
  * ``import warmkit`` (its names load on first use);
  * ``import warmkit`` and every name of ``warmkit.__all__`` (what the eager package cost);
  * ``import warmkit`` + discovery of both entry-point groups (no plugin imported);
  * the same + loading the Triton backend plugin (imports triton).
Subtracts the cost of starting an empty interpreter, measured the same way.
"""

from __future__ import annotations

import subprocess
import sys
import time

from _common import emit, parser, stats, table

SNIPPETS = {
    "python -c pass (baseline)": "pass",
    "import warmkit": "import warmkit",
    "import warmkit + every public name": (
        "import warmkit; [getattr(warmkit, n) for n in warmkit.__all__]"
    ),
    "import + discovery": (
        "import warmkit._plugin.discovery as p; p.discover(p.BACKENDS_GROUP); p.discover(p.KERNELS_GROUP)"
    ),
    "import + discovery + triton backend": (
        "import warmkit._plugin.discovery as p; p.discover(p.BACKENDS_GROUP); p.discover(p.KERNELS_GROUP); "
        "p.get_backend('triton')"
    ),
}


def _time(code: str, runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True)
        out.append(time.perf_counter() - t0)
    return out


def main() -> None:
    args = parser(__doc__.splitlines()[0]).parse_args()
    runs = 2 if args.tiny else max(args.runs, 5)
    results = {}
    for name, code in SNIPPETS.items():
        if args.tiny and "triton" in name:
            continue
        results[name] = stats(_time(code, runs))
    base = results["python -c pass (baseline)"]["median"]
    rows = []
    for name, s in results.items():
        net = (s["median"] - base) * 1e3
        rows.append(
            (
                name,
                f"{s['median'] * 1e3:.1f}",
                f"{s['min'] * 1e3:.1f}-{s['max'] * 1e3:.1f}",
                f"{net:.1f}",
            )
        )
        s["net_ms"] = net
    text = table(rows, ("B7 fresh process", "median ms", "min-max ms", "minus baseline ms"))
    text += "\ngoal: import warmkit + discovery <= 150 ms (net of interpreter start)"
    emit("B7-import", results, args.out, text)


if __name__ == "__main__":
    main()
