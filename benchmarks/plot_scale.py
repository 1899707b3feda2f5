"""Draw B10's curve (``benchmarks/scale.py --out``) as a PNG: us per key and bytes per key against keys.

pip install 'warmkit[bench]'       # matplotlib
python benchmarks/plot_scale.py scale.json docs/img/scale.png
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def plot(doc: dict, out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")  # files only: no display on a build box
    import matplotlib.pyplot as plt

    results = doc["results"]
    goals = results["goals"]
    fig, (ax_t, ax_m) = plt.subplots(1, 2, figsize=(11, 4.2))
    for shape, marker in (
        ("declared", "o"),
        ("tuned", "v"),
        ("recorded", "s"),
        ("replayed", "^"),
        ("raw", "D"),
    ):
        rows = sorted((r for r in results["curve"] if r["shape"] == shape), key=lambda r: r["keys"])
        if not rows:
            continue
        keys = [r["keys"] for r in rows]
        series = (  # CPU time is in the table: on this box it sits on the wall line
            ("total", "-", "total (wall)"),
            ("warmup", "--", "warmup alone"),
        )
        for field, style, what in series:
            if field in rows[0]["us_per_key"]:
                ys = [r["us_per_key"][field] for r in rows]
                ax_t.plot(keys, ys, marker=marker, linestyle=style, label=f"{shape}: {what}")
        ax_m.plot(keys, [r["bytes_per_key"] for r in rows], marker=marker, label=shape)
    po = results.get("plan_only")
    if po:
        ax_t.plot(
            [po["keys"]],
            [po["us_per_key"]],
            marker="*",
            markersize=12,
            linestyle="",
            label="planning alone",
        )
    ax_t.axhline(
        goals["us_per_key"], color="red", linewidth=1, label=f"goal {goals['us_per_key']:.0f} us"
    )
    ax_m.axhline(
        goals["bytes_per_key"], color="red", linewidth=1, label=f"goal {goals['bytes_per_key']} B"
    )
    for ax, what in ((ax_t, "us per key (load + warmup + report)"), (ax_m, "peak bytes per key")):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("keys")
        ax.set_ylabel(what)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    machine = doc.get("machine", {})
    fig.suptitle(
        f"B10: warmkit's own cost per key (no-op backend, monitor off), {machine.get('cpus')} CPUs, "
        f"Python {machine.get('python')}"
    )
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("results", help="JSON written by benchmarks/scale.py --out")
    p.add_argument("png", help="the image to write")
    args = p.parse_args()
    print(f"wrote {plot(json.loads(Path(args.results).read_text()), Path(args.png))}")


if __name__ == "__main__":
    main()
