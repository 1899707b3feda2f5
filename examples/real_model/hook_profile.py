"""Where ``warmkit run``'s startup hook spends its time: imports, or warmkit's own work.

The hook's warmup imports the recorded kernels' modules (Liger's, which pull in
torch and transformers): the same modules the command imports right after, so
that part only moves. The issue's goal counts the rest, the hook's own work
beyond the imports. This reads a py-spy profile of one ``warmkit run`` process
(bench.py ``--profile``: ``profile-run.txt``, py-spy's ``--format raw``, taken
with ``--threads --idle``) and splits its samples:

* the main thread inside the hook (below ``sitecustomize``, before the command's
  first line): under an import (of warmkit's own modules, its work; or of
  others, the command's, as far as the command imports them itself: gen.py
  imports torch, Triton and Liger), waiting on warmkit's threads, or neither
  (warmkit's own work: its top frames are listed);
* the main thread in the command (``gen.py`` on the stack);
* each of warmkit's threads (``warmkit-*``): waiting on an import another thread
  makes, importing, or neither (its innermost frames are listed).

Usage::

    python3 examples/real_model/hook_profile.py out/real_model/profile-run.txt [--rate 250]
    python3 examples/real_model/hook_profile.py profile-run.txt --against profile-warm.txt

Prints seconds (samples over the rate) per part; nothing is imported from warmkit. With
``--against``, the main thread's seconds of each profile by kind of work (:func:`phases`),
wherever in the process it ran: a plain run's and a ``warmkit run``'s side by side say
which work the hook adds rather than moves.
"""

from __future__ import annotations

import argparse
import collections
from collections.abc import Iterator
from pathlib import Path

IMPORTING = ("_find_and_load (", "import_module (", "_gcd_import (")
# A thread's innermost Python frame when it is blocked in C on an import another thread makes:
# importlib's module lock, or the recorded kernels' lock around their import (a C-level
# ``Lock.acquire`` shows no frame of its own, so ``function_for`` is the innermost).
WAITING_ON_IMPORT = (
    "_ModuleLock.acquire",
    "_lock_unlock_module",
    "RecordedTritonKernel.function_for",
)
# The main thread blocked until warmkit's threads finish their keys (an older runner's way;
# since session 20's runner the main thread runs warm keys itself): their parts say what.
WAITING_ON_THREADS = ("Condition.wait (", "Event.wait (", "Thread.join (")


def _name(frame: str) -> str:
    """``func (path:line)`` -> ``func (file)``: one entry per function, not per line."""
    func, _, where = frame.partition(" (")
    return f"{func} ({where.rsplit(':', 1)[0].rsplit('/', 1)[-1]})" if where else func


def _samples(lines: list[str]) -> Iterator[tuple[bool, str, list[str], int]]:
    """py-spy raw lines -> (main thread?, thread, outermost..innermost frames, samples)."""
    for line in lines:
        stack, _, count = line.rstrip("\n").rpartition(" ")
        if stack and count.isdigit():
            process, thread, *frames = stack.split(";")
            yield _main_thread(process, thread), thread, frames, int(count)


def split(lines: list[str], command: str = "gen.py") -> dict[str, collections.Counter]:
    """The samples of each part (module docstring), by the part's top frames."""
    parts: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for main, thread, frames, n in _samples(lines):
        if main:
            if not frames:
                parts["main: no Python frame (interpreter start, exec, exit)"]["-"] += n
            elif any(command in f for f in frames):
                parts["main: the command"]["-"] += n
            elif not any("sitecustomize.py" in f for f in frames):
                parts["main: before the hook"][_name(frames[-1])] += n
            else:
                # below warmkit's sitecustomize.py module (site's own import of it is above)
                at = max(i for i, f in enumerate(frames) if "sitecustomize.py" in f)
                hook = frames[at + 1 :]
                cut = next((i for i, f in enumerate(hook) if f.startswith(IMPORTING)), None)
                if cut is not None:
                    # whose module: warmkit's own count as its work, not as the command's imports
                    first = next((f for f in hook[cut:] if f.startswith("<module> (")), "")
                    own = "warmkit" in first.partition("(")[2]
                    part = "warmkit's own modules" if own else ""
                    parts[f"main: the hook, importing {part}".rstrip()][
                        _name(hook[cut - 1]) if cut else "-"
                    ] += n
                elif hook and hook[-1].startswith(WAITING_ON_THREADS):
                    top = " < ".join(_name(f) for f in reversed(hook[-3:]))
                    parts["main: the hook, waiting on warmkit's threads"][top] += n
                else:
                    top = " < ".join(_name(f) for f in reversed(hook[-3:]))
                    parts["main: the hook, warmkit's own work"][top] += n
        elif "warmkit-" in thread:
            label = thread.split(": ", 1)[-1]
            if frames and frames[-1].startswith(WAITING_ON_IMPORT):
                parts[f"{label}: waiting on an import"]["-"] += n
            elif any(f.startswith(IMPORTING) for f in frames):
                parts[f"{label}: importing"]["-"] += n
            else:
                leaf = " < ".join(_name(f) for f in reversed(frames[-2:])) if frames else "-"
                parts[f"{label}: other"][leaf] += n
    return parts


# What a main-thread sample is doing, by a frame anywhere on its stack (the first kind listed
# wins): the device work a `warmkit run` moves into its hook, whichever stage makes it.
DEVICE_WORK = (
    ("torch: CUDA start (torch.cuda._lazy_init)", "torch", "_lazy_init"),
    ("Triton: kernel loads and launchers (_init_handles)", "triton", "_init_handles"),
    ("Triton: driver set-up (its CUDA driver object)", "triton", "_create_driver"),
)


def _package(frame: str) -> str:
    """``func (torch/nn/x.py:3)`` -> ``torch``; the standard library's frozen modules -> ``python``.

    py-spy writes a file's path relative to the ``sys.path`` entry it was found
    under (``torch/nn/x.py``, ``gen.py``), else in full.
    """
    path = frame.partition(" (")[2].rsplit(":", 1)[0]
    parts = path.split("/")
    if path.startswith("<frozen"):
        return "python"
    if not path.startswith("/"):
        return parts[0].removesuffix(".py")
    for marker in ("site-packages", "dist-packages", "site"):
        at = [i for i, part in enumerate(parts[:-1]) if part == marker]
        if at:  # the folder right after the last such marker
            return parts[at[-1] + 1].removesuffix(".py")
    if "/lib/python3" in path:
        return "python"
    return parts[-1].removesuffix(".py")


def phase(frames: list[str]) -> str:
    """The kind of work of one main-thread sample (outermost..innermost frames): see :func:`phases`."""
    if not frames:
        return "no Python frame (interpreter start, exec, exit)"
    for kind, package, name in DEVICE_WORK:  # torch's CUDA start wins where Triton's load makes it
        if any(f.partition(" (")[0].endswith(name) and _package(f) == package for f in frames):
            return kind
    hook = max((i for i, f in enumerate(frames) if "sitecustomize.py" in f), default=-1)
    below = frames[hook + 1 :]  # site's own import of sitecustomize is not an import to count
    if any(f.startswith(IMPORTING) for f in below):
        module = next((f for f in reversed(below) if f.startswith("<module> (")), below[-1])
        return f"import: {_package(module)}"
    if hook >= 0:
        return "the hook: warmkit's own work"
    ours = [f for f in frames if _package(f) == "gen"]
    if ours:
        return f"the command: {ours[-1].partition(' (')[0]}"
    if any(_package(f) == "warmkit" for f in frames):
        return "warmkit run's CLI (before it execs the command)"
    return f"other: {_package(frames[-1])}"


def phases(lines: list[str]) -> collections.Counter:
    """The main thread's samples of a whole process, by kind of work, for two profiles side by side.

    A plain run and a ``warmkit run`` of the same command make the same
    imports and the same device work (torch's CUDA start, Triton's driver and
    kernel loads) at different stages: this counts each kind wherever it
    happens, so the difference of two profiles says which kind the hook adds,
    not only where the time moved. Device work is matched first (it often runs
    inside an import or the command), then imports by the innermost module's
    package, then the stage (the hook's own work, the command's functions).
    """
    kinds: collections.Counter = collections.Counter()
    for main, _thread, frames, n in _samples(lines):
        if main:
            kinds[phase(frames)] += n
    return kinds


def _main_thread(process: str, thread: str) -> bool:
    """``thread (1244): MainThread``, or ``thread (1244)`` of process 1244.

    py-spy leaves some samples' thread unnamed (before ``threading`` is imported,
    and ~3 % of the main thread's later ones in session 25's profiles, a
    ``cuInit`` among them): the process's own id is its main thread.
    """
    if "MainThread" in thread:
        return True
    pid = process.removeprefix("process ").split(":", 1)[0]
    return thread.strip() == f"thread ({pid})"


def _phases_table(profiles: list[Path], rate: float) -> str:
    counts = [phases(p.read_text().splitlines()) for p in profiles]
    kinds = sorted(set().union(*counts), key=lambda k: -max(c[k] for c in counts))
    head = " | ".join(p.name for p in profiles)
    rows = [f"| kind of work (main thread) | {head} | last minus first (s) |"]
    rows.append("|---|" + "---|" * (len(profiles) + 1))
    for kind in [*kinds, "total"]:
        n = [sum(c.values()) if kind == "total" else c[kind] for c in counts]
        cells = " | ".join(f"{x / rate:.2f}" for x in n)
        rows.append(f"| {kind} | {cells} | {(n[-1] - n[0]) / rate:+.2f} |")
    return "\n".join(rows)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("profile", type=Path, help="py-spy --format raw output of a `warmkit run`")
    p.add_argument(
        "--against",
        type=Path,
        nargs="+",
        metavar="PROFILE",
        help="instead: the main thread's seconds by kind of work (phases()) of these profiles "
        "(say, bench.py's profile-warm.txt) and PROFILE, side by side",
    )
    p.add_argument("--rate", type=float, default=250.0, help="py-spy's --rate (default 250)")
    p.add_argument("--top", type=int, default=5, help="top frames listed per part (default 5)")
    p.add_argument("--command", default="gen.py", help="a file on the command's stacks")
    a = p.parse_args()
    if a.against:
        print(_phases_table([*a.against, a.profile], a.rate))
        return
    parts = split(a.profile.read_text().splitlines(), a.command)
    print("| part | samples | seconds |\n|---|---|---|")
    for name in sorted(parts, key=lambda k: -sum(parts[k].values())):
        n = sum(parts[name].values())
        print(f"| {name} | {n} | {n / a.rate:.2f} |")
    for name, frames in sorted(parts.items()):
        if "own work" in name or name.endswith("other"):
            print(f"\n{name}:")
            for top, n in frames.most_common(a.top):
                print(f"  {n:5d}  {top}")


if __name__ == "__main__":
    main()
