"""B9: compile once per fleet. H hosts x R ranks warm the 32-key synthetic manifest through one store.

    python benchmarks/fleet.py [--hosts 2] [--ranks 2] [--store redis|dir|none] [--target cuda:90]
                               [--tiny] [--out b9.json]

Every rank is a fresh process; a "host" is a cache directory of its own, and
its ranks share it. All ranks are released at one instant. Reported:

* the real compiles of the whole fleet (Triton's compile listener in every
  process), against K (the goal) and H*R*K (every rank compiling everything);
* the fleet's wall time (release to the last rank done) against one cold
  warmup of one process;
* the median time of a key fetched from the store by a new host, against a
  local disk hit (the same key in a warm cache).

``--store redis`` starts a loopback ``redis-server`` (127.0.0.1, a free port,
a temporary directory), stopped at the end. ``--target`` defaults to the local
GPU when there is one (device compiles), else ``cuda:90`` (ahead of time).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _common import emit, parser, table


def child(spec_path: str) -> int:
    spec = json.loads(Path(spec_path).read_text())
    os.environ["TRITON_CACHE_DIR"] = spec["cache"]
    from triton import knobs

    import warmkit

    compiles: list[str] = []
    knobs.compilation.listener = lambda **kw: (
        None if kw["cache_hit"] else compiles.append(kw["metadata"]["hash"])
    )
    reg = warmkit.WarmupRegistry.load(spec["manifest"])
    Path(spec["ready"]).write_text("")
    while not Path(spec["go"]).exists():
        time.sleep(0.002)
    report = warmkit.warmup(
        warmkit.WarmupConfig(
            target=spec["target"], jobs=1, progress="off", monitor="off", store=spec["store"]
        ),
        reg,
    )
    Path(spec["out"]).write_text(
        json.dumps(
            {
                "compiles": compiles,
                "done": time.time(),
                "seconds": report.seconds,
                "entries": [[e.status, e.seconds] for e in report.entries],
            }
        )
    )
    return 0


def run_ranks(
    scratch: Path,
    tag: str,
    ranks: list[Path],
    manifest: Path,
    target: str | None,
    store: str | None,
) -> dict[str, Any]:
    """Start one process per cache dir in ``ranks``, release them together, collect their results."""
    work = scratch / tag
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARMKIT_")}
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    procs = []
    for i, cache in enumerate(ranks):
        spec = {
            "cache": str(cache),
            "manifest": str(manifest),
            "target": target,
            "store": store,
            "ready": str(work / f"{i}.ready"),
            "go": str(work / "go"),
            "out": str(work / f"{i}.json"),
        }
        (work / f"{i}.spec").write_text(json.dumps(spec))
        procs.append(
            (
                subprocess.Popen(
                    [sys.executable, __file__, "--child", str(work / f"{i}.spec")],
                    env=env,
                    stderr=subprocess.PIPE,
                    text=True,
                ),
                spec,
            )
        )
    while not all(Path(s["ready"]).exists() for _, s in procs):
        for p, _ in procs:
            if p.poll() is not None:
                raise RuntimeError(f"a rank died before starting: {p.communicate()[1][-2000:]}")
        time.sleep(0.01)
    t0 = time.time()
    (work / "go").write_text("")
    results = []
    for p, spec in procs:
        _, err = p.communicate(timeout=1800)
        if p.returncode != 0:
            raise RuntimeError(f"a rank failed: {err[-3000:]}")
        results.append(json.loads(Path(spec["out"]).read_text()))
    compiles = [h for r in results for h in r["compiles"]]
    statuses: dict[str, int] = {}
    for r in results:
        for status, _ in r["entries"]:
            statuses[status] = statuses.get(status, 0) + 1
    return {
        "wall_s": max(r["done"] for r in results) - t0,
        "compiles": len(compiles),
        "distinct_compiles": len(set(compiles)),
        "statuses": statuses,
        "ranks": results,
    }


def _per_key(result: dict[str, Any], status: str) -> list[float]:
    return [s for r in result["ranks"] for st, s in r["entries"] if st == status]


def main() -> int:
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        return child(sys.argv[2])
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--hosts", type=int, default=None, help="default 2 (--tiny: 1)")
    p.add_argument("--ranks", type=int, default=2, help="processes per host (sharing its cache)")
    p.add_argument("--store", choices=("redis", "dir", "none"), default=None, help="default redis")
    p.add_argument("--target", default=None, help="default: the local GPU, else cuda:90")
    args = p.parse_args()
    # --tiny is a smoke run: every process costs a Triton import, so as few as show each path.
    args.hosts = args.hosts or (1 if args.tiny else 2)
    args.store = args.store or ("dir" if args.tiny else "redis")

    from synthetic_kernels import write_manifest
    from warmkit_triton import TritonBackend

    target = args.target or TritonBackend().default_target() or "cuda:90"
    if target == TritonBackend().default_target():
        target = None  # device compiles on this GPU
    server = None
    with tempfile.TemporaryDirectory(prefix="warmkit-b9-") as tmp:
        scratch = Path(tmp)
        manifest = write_manifest(scratch / "warmup.json", tiny=args.tiny)
        try:
            if args.store == "redis":
                sys.path.insert(0, str(HERE.parent / "tests"))
                from redis_server import RedisServer

                server = RedisServer().start()
                store: str | None = server.url
            elif args.store == "dir":
                store = str(scratch / "store")
            else:
                store = None
            cold = run_ranks(scratch, "cold", [scratch / "cold-cache"], manifest, target, None)
            k = cold["compiles"]
            hosts = [scratch / f"host{h}" for h in range(args.hosts)]
            fleet = run_ranks(
                scratch,
                "fleet",
                [h for h in hosts for _ in range(args.ranks)],
                manifest,
                target,
                store,
            )
            fetch = hit = None
            if store is not None:
                # A new host against the full store, then the same host again (local disk hits).
                new = run_ranks(
                    scratch, "new-host", [scratch / "new-host"], manifest, target, store
                )
                fetch = statistics.median(_per_key(new, "fetched") or [float("nan")])
            again = run_ranks(scratch, "warm", [hosts[0]], manifest, target, store)
            hit = statistics.median(_per_key(again, "cached") or [float("nan")])
        finally:
            if server is not None:
                server.close()
    n = args.hosts * args.ranks
    results = {
        "hosts": args.hosts,
        "ranks_per_host": args.ranks,
        "store": args.store,
        "target": target or "this GPU",
        "keys": k,
        "fleet_compiles": fleet["compiles"],
        "fleet_distinct_compiles": fleet["distinct_compiles"],
        "no_store_compiles_HRK": n * k,
        "fleet_statuses": fleet["statuses"],
        "fleet_wall_s": fleet["wall_s"],
        "cold_one_process_wall_s": cold["wall_s"],
        "fleet_over_cold": fleet["wall_s"] / cold["wall_s"],
        "fetch_per_key_ms": None if fetch is None else fetch * 1e3,
        "disk_hit_per_key_ms": hit * 1e3,
    }
    rows = [
        (
            "real compiles (fleet)",
            f"{fleet['compiles']}",
            f"goal K={k}; without a store H*R*K={n * k}",
        ),
        ("fleet statuses", json.dumps(fleet["statuses"]), ""),
        ("fleet wall", f"{fleet['wall_s']:.2f} s", f"one cold warmup {cold['wall_s']:.2f} s"),
        (
            "per key: fetched",
            "-" if fetch is None else f"{fetch * 1e3:.2f} ms",
            f"local disk hit {hit * 1e3:.2f} ms",
        ),
    ]
    text = table(rows, (f"B9 {args.hosts} hosts x {args.ranks} ranks, store={args.store}", "", ""))
    emit("B9 fleet", results, args.out, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
