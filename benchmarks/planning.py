"""B6: expand 1,000,000 search points into keys (goal: <= 3 s on the 2-core box).

    python benchmarks/planning.py [--out results.json] [--tiny]

Times ``get_warmup_keys`` over a 100 x 100 x 100 space of a kernel whose
dispatch does typical work (a helper call, a conditional, a key build), and
the same through ``WarmupRegistry.plan()``.
"""

from __future__ import annotations

import time

import attrs
from _common import emit, parser, stats, table

import warmkit


def _pow2_class(n: int) -> int:
    return 1 if n == 1 else 16 if n % 16 == 0 else 2


class Planned(warmkit.JitKernel):
    @attrs.frozen
    class CompileKey:
        block_m: int
        block_n: int
        stride_class: int
        dtype: str

    def dispatch(self, *, m, n, stride, dtype="float16"):
        block_m = 64 if m >= 64 else 16
        return self.CompileKey(block_m, min(n, 128), _pow2_class(stride), dtype)

    def compile(self, key):
        return key


def main() -> None:
    args = parser(__doc__.splitlines()[0]).parse_args()
    side = 10 if args.tiny else 100
    space = {
        "m": warmkit.IntRange(1, side + 1),
        "n": warmkit.IntRange(1, side + 1),
        "stride": warmkit.IntRange(1, side + 1),
    }
    points = side**3
    kernel = Planned()
    expand, plan = [], []
    for _ in range(max(args.runs, 1 if args.tiny else 5)):
        t0 = time.perf_counter()
        keys = kernel.get_warmup_keys(**space)
        expand.append(time.perf_counter() - t0)
        registry = warmkit.WarmupRegistry()
        registry.add(kernel, **space)
        t0 = time.perf_counter()
        registry.plan()
        plan.append(time.perf_counter() - t0)
    results = {
        "points": points,
        "keys": len(keys),
        "get_warmup_keys_s": stats(expand),
        "plan_s": stats(plan),
        "points_per_s": points / stats(expand)["median"],
        "goal_s": 3.0,
    }
    rows = [
        (
            what,
            f"{points:,}",
            f"{s['median']:.3f}",
            f"{s['min']:.3f}-{s['max']:.3f}",
            f"{points / s['median']:,.0f}",
        )
        for what, s in (
            ("get_warmup_keys", results["get_warmup_keys_s"]),
            ("registry.plan", results["plan_s"]),
        )
    ]
    text = table(rows, ("B6 planning", "points", "median s", "min-max s", "points/s"))
    text += f"\n{len(keys)} unique keys; goal <= 3 s for 1,000,000 points"
    emit("B6-planning", results, args.out, text)


if __name__ == "__main__":
    main()
