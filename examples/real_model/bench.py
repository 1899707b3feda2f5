"""Time to first response of gen.py, with and without warmkit, on a GPU host: one command, fresh processes.

Rows (each the median of fresh processes: ``--runs``, default 5, for rows 2 and 4,
which take turns so that a slow minute lands on both, in reverse order every other
turn, each run's ``position`` in its turn kept in results.json; ``--other-runs``, default
``--runs``, for rows 1, 3 and 5):

1. cold: an empty ``TRITON_CACHE_DIR`` per process, no warmkit;
2. a warm Triton cache (primed by one uncounted run), no warmkit;
3. ``warmkit record -o run.json -- python gen.py``, an empty cache per process
   (the first recording becomes ``run.json``);
4. ``warmkit run -m run.json -- python gen.py`` on the warm cache of row 2, and
   the same with ``WARMKIT_TRITON_TORCH_START=1`` (the opt-in that makes
   torch's own one-time CUDA starts during the warmup; ``--no-opt-in`` leaves
   it out, for more turns of the others in a call), taking turns;
5. from a bundle: ``warmkit bundle build run.json --target cuda:90`` once, then
   per process an empty cache, ``warmkit bundle install`` (timed on its own) and
   ``warmkit run -m run.json -- python gen.py``.

With ``--compare SITE`` (another build of warmkit installed with its dependencies by
``pip install --target SITE``), row 4 has a twin that takes turns with rows 2 and 4:
``warmkit run`` with ``SITE`` as ``PYTHONPATH``, on the same warm cache (an A/B of a
change in one run).

Below the table, each row that took turns with row 2 is read turn by turn: the
median of its differences to row 2's run of the same turn, in how many turns it
was sooner, and the one-sided sign test's p of that many (the host's spread
from one process to the next is wider than what a warm restart saves, so the
rows' medians alone cannot tell).

Checks (exit 1 when one fails, each failure named): every run's TOKENS equal
the recorded run's; rows 4 and 5 see 0 JIT events and 0 compiles after start.
Writes into ``--out``: run.json, model.wkb, one log per process, results.json
and table.md (the markdown table it also prints).

Usage (examples/real_model/README.md; run_gpu.sh installs the wheels first)::

    python3 examples/real_model/bench.py --runs 5 --out out/real_model
"""

from __future__ import annotations

import argparse
import atexit
import json
import math
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
GEN = [sys.executable, str(HERE / "gen.py")]
TIMEOUT_S = 300
HOOK_LINE = re.compile(r"warmed \d+ key\(s\) of \S+ in ([0-9.]+)s")


class Bench:
    """The runs of one session: where they write, and how warmkit is called."""

    def __init__(self, out: Path, warmkit: list[str], gen: list[str]) -> None:
        self.out = out
        self.warmkit = warmkit
        self.workload = gen
        self.scratch = Path(tempfile.mkdtemp(prefix="real-model-"))
        # removed at exit, however the run ends
        atexit.register(shutil.rmtree, self.scratch, ignore_errors=True)
        self.failures: list[str] = []
        self.py_spy: str | None = None
        self.profile_runs = 1
        self.opt_in = True  # the WARMKIT_TRITON_TORCH_START row (--no-opt-in: more turns per call)
        self.pycache = False  # --pycache: one Python bytecode cache for every process
        self.compare: Path | None = None
        self._n = 0

    def cache(self) -> Path:
        self._n += 1
        return self.scratch / f"cache-{self._n}"  # absent: Triton creates it empty

    def wk(self, *args: str, cache: Path) -> float:
        """A warmkit command that is not the workload (build, install): its seconds."""
        t0 = time.perf_counter()
        self._call([*self.warmkit, *args], cache, f"warmkit-{args[0]}-{args[1]}-{self._n}")
        return time.perf_counter() - t0

    def gen(
        self, prefix: list[str], cache: Path, label: str, env: dict[str, str] | None = None
    ) -> dict:
        """One fresh process of gen.py (under ``prefix``, with ``env`` set); its parsed lines."""
        out, err = self._call([*prefix, *self.workload], cache, label, launch=True, env=env)
        got: dict = {"label": label}
        hook = HOOK_LINE.search(err)
        if hook:  # `warmkit run`'s startup hook: its warmup's seconds
            got["warmup_s"] = float(hook.group(1))
        for line in out.splitlines():
            word, _, rest = line.partition(" ")
            if word == "TOKENS":
                got["tokens"] = json.loads(rest)
            elif word in ("FIRST_RESPONSE_S", "STEADY_S", "MAIN_AT_S", "IMPORTS_S"):
                got[word.lower()] = float(rest)
            elif word in ("COMPILES", "JIT_EVENTS"):
                got[word.lower()] = int(rest.split()[0])
        if "tokens" not in got:
            raise SystemExit(f"bench: {label} printed no TOKENS line; see {self.out / label}.log")
        return got

    def _call(
        self,
        cmd: list[str],
        cache: Path,
        label: str,
        launch: bool = False,
        env: dict[str, str] | None = None,
    ) -> tuple[str, str]:
        env = dict(os.environ, **(env or {}), TRITON_CACHE_DIR=str(cache), HF_HUB_OFFLINE="1")
        if self.pycache:  # every row alike: the bytecode the first process compiles, the rest read
            env.pop("PYTHONDONTWRITEBYTECODE", None)
            env["PYTHONPYCACHEPREFIX"] = str(self.scratch / "pycache")
        if launch:  # the clock gen.py's FIRST_RESPONSE_S counts from: warmkit's start included
            env["REAL_MODEL_LAUNCH"] = repr(time.time())
        proc = subprocess.run(
            cmd,
            check=False,
            env=env,
            cwd=self.out,
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
        )
        log = self.out / f"{label}.log"
        log.write_text(f"$ {shlex.join(cmd)}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}")
        if proc.returncode != 0:
            raise SystemExit(
                f"bench: {label} exited {proc.returncode}: {shlex.join(cmd)}; see {log}"
            )
        return proc.stdout, proc.stderr


TORCH_START = "WARMKIT_TRITON_TORCH_START"  # the opt-in: torch's own CUDA starts in the warmup
WARM_ROW = "warm Triton cache, no warmkit"
RUN_ROW = "`warmkit run -m run.json`, warm cache"
START_ROW = f"{RUN_ROW}, `{TORCH_START}=1`"
COMPARE_ROW = f"{RUN_ROW}, the --compare installation"
TURN_ROWS = (RUN_ROW, START_ROW, COMPARE_ROW)  # the rows that take turns with WARM_ROW


def measure(
    b: Bench, runs: int, other: int, manifest: Path | None = None, seconds: float | None = None
) -> tuple[list[tuple[str, list[dict]]], dict]:
    """Every row's runs, in the module docstring's order, and the build/install seconds.

    With ``manifest`` (an earlier recording) nothing is recorded; rows of no run are left out.
    With ``seconds``, no turn after the first starts that the slowest turn so far says would
    end past it (a device call's limit: a cut call would bring back nothing).
    """
    started = time.monotonic()
    rows: list[tuple[str, list[dict]]] = []
    rows.append(
        ("cold: empty Triton cache, no warmkit", [b.gen([], b.cache(), f"cold-{i}") for i in range(other)])
    )  # fmt: skip
    warm = b.cache()
    b.gen([], warm, "warm-prime")
    recorded = []
    if manifest is None:
        for i in range(max(other, 1)):
            rec = [*b.warmkit, "record", "-o", f"rec-{i}.json", "--"]
            recorded.append(b.gen(rec, b.cache(), f"record-{i}"))
        shutil.copy(b.out / "rec-0.json", b.out / "run.json")
    else:
        shutil.copy(manifest, b.out / "run.json")
    replay = [*b.warmkit, "run", "-m", "run.json", "--"]
    b.gen(replay, warm, "run-prime")  # warmkit's own entries into the warm cache, uncounted
    warm_rows: list[dict] = []
    run_rows: list[dict] = []
    compare_rows: list[dict] = []
    start_rows: list[dict] = []
    slowest = 0.0
    for i in range(runs):  # taking turns: a slow minute of the host lands on both rows
        turn = time.monotonic()
        if i and seconds is not None and turn - started + slowest > seconds:
            print(f"bench: {i} turn(s) of {runs}: another would end past --seconds {seconds:g}")
            break
        turn_runs = [(warm_rows, [], f"warm-{i}", None), (run_rows, replay, f"run-{i}", None)]
        if b.opt_in:
            turn_runs.append((start_rows, replay, f"torch-start-{i}", {TORCH_START: "1"}))
        if b.compare is not None:  # the other installation, on the same warm cache
            turn_runs.append((compare_rows, replay, f"compare-{i}", {"PYTHONPATH": str(b.compare)}))
        # Every other turn in reverse: what a process leaves the next one (the page cache, the
        # driver's state, a busy minute starting) lands on each row as often first as last.
        for position, (row, prefix, label, env) in enumerate(turn_runs[:: -1 if i % 2 else 1]):
            row.append(b.gen(prefix, warm, label, env) | {"position": position})
        slowest = max(slowest, time.monotonic() - turn)
    rows.append((WARM_ROW, warm_rows))
    rows.append(("`warmkit record` (empty cache)", recorded))
    rows.append((RUN_ROW, run_rows))
    rows.append((START_ROW, start_rows))
    rows.append((COMPARE_ROW, compare_rows))
    build_s, bundled, install_s = None, [], []
    if other:
        build_s = b.wk(
            "bundle", "build", "run.json", "--target", "cuda:90", "-o", "model.wkb", cache=b.cache()
        )
    for i in range(other):
        cache = b.cache()
        install_s.append(b.wk("bundle", "install", "model.wkb", cache=cache))
        bundled.append(b.gen(replay, cache, f"bundle-{i}"))
    rows.append(("bundle installed into an empty cache, `warmkit run`", bundled))
    # Evidence, not rows: where `warmkit run`'s time goes beyond the plain warm run's; pairs
    # in turns, every other one reversed (profile-warm.txt, profile-warm-2.txt, ...).
    for i in range(b.profile_runs if b.py_spy else 0):
        pair = (("profile-warm", []), ("profile-run", replay))
        for label, prefix in pair[:: -1 if i % 2 else 1]:
            name = f"{label}-{i + 1}" if i else label
            spy = [b.py_spy, "record", "--subprocesses", "--idle", "--threads", "--nonblocking",
                   "--rate", "250", "--format", "raw", "-o", str(b.out / f"{name}.txt"), "--"]  # fmt: skip
            b.gen([*spy, *prefix], warm, name)
    return [r for r in rows if r[1]], {"bundle_build_s": build_s, "bundle_install_s": install_s}


def _reference(rows: list[tuple[str, list[dict]]]) -> list[int]:
    """The recorded run's tokens; with a given recording, the first warm run's."""
    named = dict(rows)
    first = named.get("`warmkit record` (empty cache)") or named[WARM_ROW]
    return first[0]["tokens"]


def check(b: Bench, rows: list[tuple[str, list[dict]]]) -> None:
    """Same tokens as the recorded run everywhere; nothing compiled after start under `warmkit run`."""
    reference = _reference(rows)
    for name, runs in rows:
        for r in runs:
            if r["tokens"] != reference:
                b.failures.append(f"{r['label']}: TOKENS differ from the recorded run's")
            if name.startswith(("`warmkit run", "bundle")):
                if r.get("jit_events") != 0:
                    b.failures.append(
                        f"{r['label']}: JIT_EVENTS {r.get('jit_events')} (expected 0)"
                    )
                if r.get("compiles") != 0:
                    b.failures.append(f"{r['label']}: COMPILES {r.get('compiles')} (expected 0)")


def _before_model(r: dict) -> float | None:
    if "main_at_s" not in r:
        return None
    return r["main_at_s"] + r["imports_s"]


def _median(runs: list[dict], value) -> float:
    got = [v for v in map(value, runs) if v is not None]
    return statistics.median(got) if got else float("nan")


def table(rows: list[tuple[str, list[dict]]], extra: dict) -> str:
    lines = [
        (
            "| run | N | first response, median (s) | min-max (s) | before the model, median (s) "
            "| hook's warmup (s) | steady generate, median (s) | compiles | JIT events "
            "| tokens = recorded |"
        ),
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    reference = _reference(rows)
    for name, runs in rows:
        first = [r["first_response_s"] for r in runs]
        events = {r.get("jit_events", "-") for r in runs}
        lines.append(
            f"| {name} | {len(runs)} | {statistics.median(first):.2f} | {min(first):.2f}-{max(first):.2f} "
            f"| {_median(runs, _before_model):.2f} "
            f"| {_median(runs, lambda r: r.get('warmup_s')):.2f} "
            f"| {statistics.median(r['steady_s'] for r in runs):.3f} "
            f"| {','.join(str(c) for c in sorted({r['compiles'] for r in runs}))} "
            f"| {','.join(str(e) for e in sorted(events, key=str))} "
            f"| {all(r['tokens'] == reference for r in runs)} |"
        )
    lines.append(
        "\nbefore the model: launch to the end of gen.py's imports (MAIN_AT_S + IMPORTS_S); "
        "under `warmkit run` it holds the hook's warmup, whose CUDA start and loads the plain "
        "command pays after it: the turn-by-turn table below compares both parts"
    )
    lines += paired(rows)
    install = extra["bundle_install_s"]
    if install:
        lines.append(
            f"\nbundle build (once, on this host): {extra['bundle_build_s']:.1f} s; "
            f"bundle install, median: {statistics.median(install):.2f} s (not in the row's first "
            "response)"
        )
    return "\n".join(lines)


def paired(rows: list[tuple[str, list[dict]]]) -> list[str]:
    """Each row that took turns with the warm row, read turn by turn against it.

    Run i of such a row and run i of the warm row ran in the same turn, one after the other.
    The sign test's p is the chance of being sooner in that many turns or more if each turn
    were a coin toss: what says whether "sooner" is shown.
    """
    named = dict(rows)
    warm = named.get(WARM_ROW, [])
    lines = [
        "",
        (
            "| row, minus the warm run of the same turn | turns | first response: median of the "
            "differences (s) | sooner in | sign test, one-sided p | before the model (s) "
            "| after it (s) |"
        ),
        "|---|---|---|---|---|---|---|",
    ]
    for name in TURN_ROWS:
        pairs = list(zip(named.get(name, []), warm))
        if not pairs:
            continue
        n = len(pairs)
        diff = [r["first_response_s"] - w["first_response_s"] for r, w in pairs]
        sooner = sum(d < 0 for d in diff)
        p = sum(math.comb(n, k) for k in range(sooner, n + 1)) / 2**n
        timed = [(r, w) for r, w in pairs if None not in (_before_model(r), _before_model(w))]
        before = [_before_model(r) - _before_model(w) for r, w in timed]
        after = [
            r["first_response_s"] - w["first_response_s"] - b for (r, w), b in zip(timed, before)
        ]
        cells = [f"{statistics.median(x):+.2f}" if x else "-" for x in (diff, before, after)]
        lines.append(
            f"| {name} | {n} | {cells[0]} | {sooner} of {n} | {p:.3f} | {cells[1]} | {cells[2]} |"
        )
    return lines if len(lines) > 3 else []


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument(
        "--runs", type=int, default=5, help="fresh processes of rows 2 and 4 (default 5)"
    )
    p.add_argument(
        "--other-runs", type=int, default=None,
        help="fresh processes of rows 1, 3 and 5 (default: --runs)",
    )  # fmt: skip
    p.add_argument("--out", type=Path, default=Path("out/real_model"), help="where results go")
    p.add_argument(
        "--warmkit", default=f"{shlex.quote(sys.executable)} -m warmkit",
        help="how to call warmkit (default: this Python's -m warmkit)",
    )  # fmt: skip
    p.add_argument(
        "--gen", default=shlex.join(GEN),
        help="the workload command (default: this Python's gen.py; another, for a smoke run of "
        "this script where there is no GPU)",
    )  # fmt: skip
    p.add_argument(
        "--manifest", type=Path,
        help="an earlier recording to replay (e.g. the committed run.json): nothing is recorded",
    )  # fmt: skip
    p.add_argument(
        "--compare", type=Path, metavar="SITE",
        help="another build of warmkit, its plugins and their dependencies (pip install --target "
        "SITE): one more row, `warmkit run` with SITE as PYTHONPATH, taking turns with the others "
        "on the same warm cache (the A/B of a change, in one run)",
    )  # fmt: skip
    p.add_argument(
        "--profile", metavar="PY_SPY",
        help="py-spy's path: also profile one warm run with and one without warmkit "
        "(profile-run.txt, profile-warm.txt: collapsed stacks)",
    )  # fmt: skip
    p.add_argument(
        "--profile-runs", type=int, default=1, metavar="N",
        help="with --profile: N such pairs, taking turns (profile-run-2.txt, ...; default 1)",
    )  # fmt: skip
    p.add_argument(
        "--pycache", action="store_true",
        help="every process with one Python bytecode cache (PYTHONPYCACHEPREFIX in the scratch "
        "folder, PYTHONDONTWRITEBYTECODE unset): where the packages ship no bytecode and the "
        "host forbids writing it, each process compiles its imports' bytecode (3.5-4 s of "
        "the 10-12 s of session 25's H100 host), the widest part of the runs' spread",
    )  # fmt: skip
    p.add_argument(
        "--no-opt-in", action="store_true",
        help="leave out the WARMKIT_TRITON_TORCH_START row (more turns of the others per call)",
    )  # fmt: skip
    p.add_argument(
        "--seconds", type=float, metavar="S",
        help="start no turn of the rows after the first that would end more than S seconds after "
        "the start, by the slowest turn so far (the rows' N says how many ran); the bundle rows "
        "and --profile's runs come after the turns, outside S",
    )  # fmt: skip
    a = p.parse_args()
    a.out = a.out.resolve()
    a.out.mkdir(parents=True, exist_ok=True)
    b = Bench(a.out, shlex.split(a.warmkit), shlex.split(a.gen))
    b.py_spy, b.profile_runs, b.opt_in = a.profile, a.profile_runs, not a.no_opt_in
    b.pycache = a.pycache
    b.compare = a.compare.resolve() if a.compare else None
    other = a.runs if a.other_runs is None else a.other_runs
    rows, extra = measure(b, a.runs, other, a.manifest.resolve() if a.manifest else None, a.seconds)
    check(b, rows)
    text = table(rows, extra)
    print(text)
    (a.out / "table.md").write_text(text + "\n")
    (a.out / "results.json").write_text(
        json.dumps({"rows": rows, **extra, "pycache": b.pycache, "failures": b.failures}, indent=1)
    )
    for f in b.failures:
        print(f"FAIL {f}")
    raise SystemExit(1 if b.failures else 0)


if __name__ == "__main__":
    main()
