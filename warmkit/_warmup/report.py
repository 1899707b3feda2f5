"""What a warmup reports: one ``ReportEntry`` per key, gathered in a ``WarmupReport``."""

from __future__ import annotations

import functools
import json
import math
import re
import sys
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Literal, get_args

import attrs

__all__ = ["STATUSES", "ReportEntry", "ReportStatus", "WarmupReport"]

#: A key's outcome, in the order reports list them.
#: A key's outcome (``ReportEntry.status``): a plain string in the report's JSON and table.
#:
#: * ``compiled``: compiled by this warmup;
#: * ``cached``: already in memory, or a hit in the backend's persistent cache;
#: * ``waited``: another process of this host compiled it while this one waited (fleet);
#: * ``fetched``: fetched from the shared compile store (fleet, ``docs/fleet.md``);
#: * ``failed``: its compile raised (``ReportEntry.error``, ``exception``);
#: * ``skipped``: not compiled, ``error`` says why (a backend outside the allow-list or
#:   unavailable, an entry that cannot be replayed ...).
ReportStatus = Literal["compiled", "cached", "waited", "fetched", "failed", "skipped"]
#: every ``ReportStatus``, in the order of the report's table columns
STATUSES: tuple[ReportStatus, ...] = get_args(ReportStatus)


@attrs.frozen
class ReportEntry:
    """The outcome of one key.

    Attributes:
        kernel: the kernel's name.
        backend: its backend's name (None for a kernel with its own compile()).
        key: the compile key.
        status: a ``warmkit.ReportStatus``: ``compiled``, ``cached`` (already in memory, or
            a backend cache hit), ``waited``, ``fetched`` (fleet), ``failed`` or ``skipped``.
        seconds: wall time spent on this key.
        error: ``"Type: message"`` for a failed key, or why it was skipped.
        exception: the exception of a failed key (not serialised).
        tuning: for an autotuned key, what the backend did about tuning:
            ``"benchmarked"``, ``"stored"`` (a stored result was used),
            ``"single"`` (one config survived), ``"known-winners"`` (ahead of
            time: only known winners compiled) or ``"needs-device"`` (ahead of
            time: every config compiled, a GPU host still has to benchmark).
        kind: ``"declared"`` (from a registration) or ``"recorded"`` (a
            manifest's recorded entry, ``docs/record.md``).
    """

    kernel: str
    backend: str | None
    key: Any
    status: ReportStatus
    seconds: float = 0.0
    error: str | None = None
    exception: BaseException | None = attrs.field(default=None, eq=False, repr=False)
    tuning: str | None = None
    kind: str = "declared"

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "kernel": self.kernel,
            "backend": self.backend,
            "key": repr(self.key),
            "status": self.status,
            "seconds": round(self.seconds, 6),
            "error": self.error,
            "tuning": self.tuning,
        }


@attrs.frozen
class WarmupReport:
    """What ``warmkit.warmup`` did, key by key.

    Attributes:
        enabled: False if warmup was disabled (nothing else is filled then).
        entries: one ``ReportEntry`` per planned key, in compile order.
        seconds: total wall time.
        target: the configured target (None = current device).
        jobs: the parallelism used.
        monitor: the mode the monitor was armed with (``"off"`` if not armed).
        store_refused: shared-store entries refused during the warmup (their
            keys then compiled locally): ``{store key: why}`` (unsigned or
            wrongly signed under ``WARMKIT_TRUST``, undeclared file names, corrupt).
        cancelled: True when SIGINT (Ctrl-C) interrupted the warmup; keys it
            never finished are ``skipped`` with the reason.

    Timings: ``seconds`` is wall-clock time for the whole warmup; each entry's
    ``seconds`` is that key's own time, so per-kernel sums in ``table()``
    add up time spent in parallel and may exceed the total.
    """

    enabled: bool
    entries: tuple[ReportEntry, ...] = ()
    seconds: float = 0.0
    target: str | None = None
    jobs: int = 1
    monitor: str = "off"
    cancelled: bool = False
    store_refused: Mapping[str, str] = attrs.field(factory=dict)

    def count(self, status: ReportStatus) -> int:
        return self._counts.get(status, 0)

    @functools.cached_property
    def _counts(self) -> dict[str, int]:
        # Counted once: a warmup's summary asks for every status, over 100,000 entries.
        counts: dict[str, int] = {}
        for e in self.entries:
            counts[e.status] = counts.get(e.status, 0) + 1
        return counts

    @property
    def ok(self) -> bool:
        return self.count("failed") == 0

    @property
    def warm(self) -> bool:
        """True when warmup ran, nothing failed, and it did not skip every key it planned.

        A warmup whose backend allow-list filtered out every key compiled
        nothing: it is not warm, and the monitor was not armed.
        """
        return (
            self.enabled
            and self.ok
            and not self.cancelled
            and not (self.entries and self.count("skipped") == len(self.entries))
        )

    @property
    def failures(self) -> tuple[ReportEntry, ...]:
        return tuple(e for e in self.entries if e.status == "failed")

    @property
    def needs_tuning(self) -> tuple[ReportEntry, ...]:
        """Autotuned keys compiled ahead of time with no known winner: a GPU host must benchmark them."""
        return tuple(e for e in self.entries if e.tuning == "needs-device")

    def totals(self) -> dict[str, int]:
        return {s: self.count(s) for s in STATUSES} | {"keys": len(self.entries)}

    def _head(self) -> dict[str, Any]:
        return {
            "enabled": self.enabled,
            "seconds": round(self.seconds, 6),
            "target": self.target,
            "jobs": self.jobs,
            "monitor": self.monitor,
            "cancelled": self.cancelled,
            "totals": self.totals(),
            "store_refused": dict(self.store_refused),
        }

    def to_dict(self) -> dict[str, Any]:
        return self._head() | {"entries": [e.to_dict() for e in self.entries]}

    def to_json(self, **kwargs: Any) -> str:
        """The report as JSON: indented, one entry per line; ``kwargs`` go to ``json.dumps`` instead."""
        if kwargs:
            return json.dumps(self.to_dict(), **({"indent": 2} | kwargs))
        # json's C encoder runs only without indent, and json.dumps builds one per call
        # (5 us an entry): each line is ``json.dumps(entry.to_dict())``, spelled out
        # with json's own string encoder (tests/core/test_report.py checks they agree).
        head = json.dumps(self._head(), indent=2)[:-2]
        body = ",\n".join(_entry_lines(self.entries))
        return f'{head},\n  "entries": [\n{body}\n  ]\n}}'

    def table(self) -> str:
        """A readable per-kernel table with totals."""
        if not self.enabled:
            return "warmup disabled (WARMKIT_ENABLED=0 or WarmupConfig(enabled=False))"
        rows: dict[tuple[str, str], dict[str, float]] = {}
        by_kernel: dict[tuple[str, str, str | None], dict[str, float]] = {}
        for e in self.entries:  # ~0.3 us an entry: a label is made per kernel, not per entry
            r = by_kernel.get((e.kernel, e.kind, e.backend))
            if r is None:
                label = e.kernel if e.kind == "declared" else f"{e.kernel} [{e.kind}]"
                r = rows.get((label, e.backend or "-"))
                if r is None:
                    r = rows[label, e.backend or "-"] = dict.fromkeys((*STATUSES, "s"), 0.0)
                by_kernel[e.kernel, e.kind, e.backend] = r
            r[e.status] += 1
            r["s"] += e.seconds
        head = ("kernel", "backend", "keys", *STATUSES, "seconds")
        body = [
            (
                k,
                b,
                str(int(sum(r[s] for s in STATUSES))),
                *(str(int(r[s])) for s in STATUSES),
                f"{r['s']:.3f}",
            )
            for (k, b), r in rows.items()
        ]
        t = self.totals()
        body.append(
            ("total", "", str(t["keys"]), *(str(t[s]) for s in STATUSES), f"{self.seconds:.3f}")
        )
        widths = [max(len(row[i]) for row in (head, *body)) for i in range(len(head))]
        lines = [
            "  ".join(
                c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))
            )
            for row in (head, *body)
        ]
        lines.insert(1, "  ".join("-" * w for w in widths))
        lines.insert(len(lines) - 1, "  ".join("-" * w for w in widths))
        lines.extend(failure_lines(self.failures, "FAILED "))
        tuning = self.needs_tuning
        if tuning:
            lines.append(
                f"NEEDS TUNING ON A DEVICE: {len(tuning)} autotuned key(s) of "
                f"{_names(e.kernel for e in tuning)}: every config compiled, no known winner; "
                "a warmup on the GPU host benchmarks them once (--json gives each key's "
                "'tuning')"
            )
        lines.append(
            f"seconds: per kernel, the sum of its keys' compile times (they overlap with "
            f"jobs={self.jobs}); total, wall-clock"
        )
        if self.cancelled:
            lines.append("CANCELLED (SIGINT): keys not compiled are listed as skipped")
        for e in self.entries:
            if e.kind == "recorded" and e.status == "skipped":
                lines.append(f"SKIPPED {e.kernel} (recorded): {e.error}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()


# "kernel 'NAME': " starts most backend errors; without it, one cause reads the same for
# every kernel it failed (no target on a CPU host, TRITON_INTERPRET, a store down).
_KERNEL_PREFIX = re.compile(r"kernel '[^']*'(?: key [^:]*)?: ")


def _cause(error: str | None) -> str:
    return _KERNEL_PREFIX.sub("", error or "", count=1)


def _names(kernels: Iterable[str], most: int = 3) -> str:
    distinct = list(dict.fromkeys(kernels))
    shown = ", ".join(distinct[:most])
    more = f" and {len(distinct) - most} more" if len(distinct) > most else ""
    return f"{len(distinct)} kernel(s) ({shown}{more})"


def failure_lines(failures: Iterable[ReportEntry], lead: str, most: int = 3) -> list[str]:
    """The failed keys, one cause once: ``lead`` + a line per distinct cause.

    A cause shared by several keys (the same error once the ``kernel '...':``
    prefix is dropped) is one line naming how many keys of which kernels, and
    one line with the first ``most`` keys.
    """
    groups: dict[str, list[ReportEntry]] = {}
    for e in failures:
        groups.setdefault(_cause(e.error), []).append(e)
    lines = []
    for cause, group in groups.items():
        if len(group) == 1:
            lines.append(f"{lead}{group[0].kernel} {group[0].key!r}: {group[0].error}")
            continue
        lines.append(f"{lead}{len(group)} key(s) of {_names(e.kernel for e in group)}: {cause}")
        keys = ", ".join(f"{e.kernel} {e.key!r}" for e in group[:most])
        more = f" and {len(group) - most} more" if len(group) > most else ""
        lines.append(f"    keys: {keys}{more}")
    return lines


class LineProgress:
    """Progress for a stderr that is not a terminal (a CI log): one line per 10 % or 10 s.

    A bar redrawn with carriage returns is noise in a log file, and silence
    until the end looks like a hang; this writes ``warmkit warmup: 40/96
    key(s) (41%) after 12.3s`` at most once per tenth of the keys or per
    ``every`` seconds, whichever comes first. Same ``update``/``close`` as tqdm.
    """

    def __init__(self, total: int, every: float = 10.0, file: Any = None) -> None:
        self.total, self.every, self.file = total, every, file or sys.stderr
        self.done = self._last_done = 0
        self._start = self._last = time.monotonic()
        self._next = max(1, math.ceil(total / 10))

    def update(self, n: int = 1) -> None:
        self.done += n
        now = time.monotonic()
        if self.done >= self._next or now - self._last >= self.every:
            self._line(now)
            while self._next <= self.done:
                self._next += max(1, math.ceil(self.total / 10))

    def close(self) -> None:
        if self.done and self._last_done != self.done:
            self._line(time.monotonic())

    def _line(self, now: float) -> None:
        self._last, self._last_done = now, self.done
        pct = 100 * self.done // max(self.total, 1)
        self.file.write(
            f"warmkit warmup: {self.done}/{self.total} key(s) ({pct}%) after "
            f"{now - self._start:.1f}s\n"
        )
        self.file.flush()


def progress_bar(total: int, setting: str) -> Any:
    """A warmup's progress display (``update(n)``, ``close()``), or None.

    ``"on"``, or ``"auto"`` on a terminal: a tqdm bar; ``"auto"`` elsewhere (a
    CI log): :class:`LineProgress`; never on a non-zero rank, nor for 0 keys.
    """
    from .. import _envs

    if not total or setting == "off" or _envs.rank() != 0:
        return None
    if setting == "on" or sys.stderr.isatty():
        from tqdm import tqdm

        return tqdm(total=total, desc="warmkit warmup", unit="key", file=sys.stderr)
    return LineProgress(total)


_encode_str = json.encoder.encode_basestring_ascii  # what json.dumps uses (ensure_ascii)


def _json(v: Any) -> str:
    if type(v) is str:
        return _encode_str(v)
    if v is None:
        return "null"
    return json.dumps(v)


def _entry_lines(entries: tuple[ReportEntry, ...]) -> Iterator[str]:
    """``"    " + json.dumps(e.to_dict())`` for each entry, without a dict and an encoder per entry.

    The fields around the key repeat over thousands of entries (kernel,
    status ...): their JSON is made once per distinct value.
    """
    heads: dict[tuple[Any, ...], str] = {}
    tails: dict[tuple[Any, ...], str] = {}
    for e in entries:
        k = (e.kind, e.kernel, e.backend)
        head = heads.get(k)
        if head is None:
            head = heads[k] = (
                f'    {{"kind": {_json(e.kind)}, "kernel": {_json(e.kernel)}, '
                f'"backend": {_json(e.backend)}, "key": '
            )
        t = (e.status, e.error, e.tuning)
        tail = tails.get(t)
        if tail is None:
            tail = tails[t] = f'{_json(e.error)}, "tuning": {_json(e.tuning)}}}'
        seconds = round(e.seconds, 6)
        number = (
            float.__repr__(seconds)
            if type(seconds) is float and math.isfinite(seconds)
            else json.dumps(seconds)
        )
        yield f'{head}{_encode_str(repr(e.key))}, "status": {_json(e.status)}, "seconds": {number}, "error": {tail}'
