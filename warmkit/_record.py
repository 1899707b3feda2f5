"""Recorded entries: what a real run compiled at runtime, kept in the manifest for the next start.

A manifest (``warmkit.manifest``, see ``_registry``) has two sections:
``registrations`` (declared search spaces) and ``recorded`` (exact
specializations seen at runtime). Each recorded entry is a
:class:`RecordedEntry`:

* ``kind="raw"``: a function the backend JIT-compiled without a warmkit
  wrapper (a raw ``@triton.jit`` kernel); ``spec`` is the backend's own,
  lossless description of the specialization, and only the backend
  (``Backend.recorded_kernel``) knows how to replay it;
* ``kind="key"``: a wrapped kernel's ``CompileKey`` that warmup did not cover;
  ``spec`` holds the key's fields, replayed by the core.

An entry that another process cannot replay (a function defined in
``__main__`` or in a closure ...) is recorded anyway, with ``replayable=False``
and the ``reason``; warmup lists it as a skipped row, never drops it.

A :class:`Recorder` appends entries to one file. Writes are deduplicated (by
``RecordedEntry.id``), serialised across processes with a ``filelock`` lock
beside the file, and atomic (a temporary file, then ``os.replace``), so several
ranks may record into one path, or into a ``{rank}`` pattern, and a reader
never sees a half-written manifest.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import logging
import math
import os
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import attrs

from ._exceptions import ManifestError

__all__ = [
    "RecordedEntry",
    "Recorder",
    "active_recorder",
    "decode_value",
    "encode_value",
    "read_recorded",
    "resolve_recorded",
    "start_recording",
    "stop_recording",
]

logger = logging.getLogger(__name__)

KINDS = ("raw", "key")
MANIFEST_FORMAT = "warmkit.manifest"
MANIFEST_VERSION = 1

_lock = threading.Lock()
_active: Recorder | None = None


# One encoder, not json.dumps(..., sort_keys=True): with options, dumps builds an encoder
# per call, a third of the cost of reading a recorded entry.
_encode_canonical = json.JSONEncoder(sort_keys=True, separators=(",", ":"), allow_nan=False).encode


def _canonical(data: Any) -> str:
    return _encode_canonical(data)


def _parsed_encoder() -> Any:
    """``_encode_canonical`` for data parsed from JSON, with json's C encoder made once.

    ``JSONEncoder.encode`` builds a C encoder per call (half its cost for a small
    spec). Parsed JSON has no cycles, so this one keeps no markers; it is the
    same encoder otherwise (tests/core/test_record.py checks the two agree).
    """
    from json import encoder

    c_make = getattr(encoder, "c_make_encoder", None)
    if c_make is None:  # an interpreter without json's C accelerator
        return _encode_canonical
    default = json.JSONEncoder().default  # its TypeError, as json.dumps raises it
    make = c_make(
        None, default, encoder.encode_basestring_ascii, None, ":", ",", True, False, False
    )

    def encode(data: Any) -> str:
        return "".join(make(data, 0))

    sample = {"b": [1, 2.5, None, True, "\u00e9\n"], "a": {"z": -0.0, "y": "x"}}
    if encode(sample) != _encode_canonical(sample):  # another json: keep the plain one
        return _encode_canonical
    return encode


_encode_parsed = _parsed_encoder()
_STR_OR_NONE = frozenset({str, type(None)})


# A recording repeats a few kernels, backends and targets over thousands of entries.
_canonical_cached = functools.lru_cache(maxsize=1024)(_canonical)


@functools.lru_cache(maxsize=1024)
def _id_head(backend: str | None, kind: str, kernel: str) -> str:
    return f"[{','.join(map(_canonical, (backend, kind, kernel)))},"


def _entry_id(
    backend: str | None, kind: str, kernel: str, spec_json: str, target: str | None
) -> str:
    # = _canonical([backend, kind, kernel, spec, target]): spec_json is already
    # canonical, so it is spliced in rather than parsed and dumped again.
    ident = f"{_id_head(backend, kind, kernel)}{spec_json},{_canonical_cached(target)}]"
    return hashlib.sha256(ident.encode()).hexdigest()[:24]


@attrs.frozen
class RecordedEntry:
    """One specialization a run compiled at runtime.

    Attributes:
        backend: the backend that compiled it (``"triton"``), or None for a
            kernel with its own ``compile()``.
        kind: ``"raw"`` (a function the backend specializes) or ``"key"`` (a
            wrapped kernel's ``CompileKey``).
        kernel: how to find the function again: ``"package.module:qualname"``
            for a raw function, the kernel's manifest reference for a key.
        name: a readable name for reports (the function's full name, or the
            kernel's ``name``).
        spec_json: the specialization as canonical JSON (``spec`` decodes it).
        target: the target it was compiled for (``"cuda:90"``), if known.
        replayable: False when another process cannot reproduce it.
        reason: why it cannot be replayed (set exactly when ``replayable`` is False).
    """

    backend: str | None
    kind: str = attrs.field(validator=attrs.validators.in_(KINDS))
    kernel: str
    name: str
    spec_json: str
    target: str | None = None
    replayable: bool = True
    reason: str | None = None
    # The spec as parsed from a manifest that load() read (no copy for resolve_recorded).
    _parsed: Any = attrs.field(init=False, default=None, eq=False, repr=False, hash=False)

    def __attrs_post_init__(self) -> None:
        if self.replayable == (self.reason is not None):
            raise ValueError(
                f"recorded entry for {self.name!r}: a reason is given exactly when it is not "
                f"replayable (replayable={self.replayable}, reason={self.reason!r})"
            )

    @classmethod
    def make(
        cls,
        *,
        backend: str | None,
        kind: str,
        kernel: str,
        name: str,
        spec: Mapping[str, Any],
        target: str | None = None,
        reason: str | None = None,
    ) -> RecordedEntry:
        """An entry from JSON-ready ``spec`` data; ``reason`` makes it unreplayable.

        Raises:
            ValueError: ``spec`` is not JSON data (NaN included: encode it first).
        """
        return cls(
            backend, kind, kernel, name, _canonical(dict(spec)), target, reason is None, reason
        )

    @property
    def spec(self) -> dict[str, Any]:
        """The specialization's JSON data (a fresh copy)."""
        return json.loads(self.spec_json)

    @functools.cached_property
    def id(self) -> str:
        """A stable identity: equal for the same kernel, specialization and target."""
        return _entry_id(self.backend, self.kind, self.kernel, self.spec_json, self.target)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id,
            "backend": self.backend,
            "kind": self.kind,
            "kernel": self.kernel,
            "name": self.name,
            "target": self.target,
            "replayable": self.replayable,
            "spec": self.spec,
        }
        if self.reason is not None:
            out["reason"] = self.reason
        return out

    @classmethod
    def from_dict(
        cls, data: Any, *, path: Any = None, index: int = 0, keep: bool = False
    ) -> RecordedEntry:
        """Parse one entry of a manifest's ``recorded`` list.

        ``keep``: the caller hands ``data`` over (it will never change it): the
        entry keeps its parsed spec for :func:`resolve_recorded`.

        Raises:
            ManifestError: a missing or mistyped field, naming the entry.
        """
        if type(data) is dict:
            t, get = type, data.get
            if (
                t(get("kind")) is str
                and t(get("kernel")) is str
                and t(get("name")) is str
                and t(get("replayable")) is bool
                and t(get("spec")) is dict
                and t(get("backend", 0)) in _STR_OR_NONE
                and t(get("target", 0)) in _STR_OR_NONE
            ):
                return cls._from_checked(data, path, index, keep)
        cls._check_fields(data, path, index)
        return cls._from_checked(data, path, index, keep)

    @staticmethod
    def _check_fields(data: Any, path: Any, index: int) -> None:
        where = f"recorded entry {index}"
        if not isinstance(data, dict):
            raise ManifestError(f"{where} must be an object, got {type(data).__name__}", path=path)
        fields = {
            "backend": (str, type(None)),
            "kind": (str,),
            "kernel": (str,),
            "name": (str,),
            "target": (str, type(None)),
            "replayable": (bool,),
            "spec": (dict,),
        }
        for name, types in fields.items():
            if name not in data:
                raise ManifestError(f"{where}: missing field {name!r}", path=path)
            if not isinstance(data[name], types):
                raise ManifestError(
                    f"{where} ({data.get('name')!r}): field {name!r} has type "
                    f"{type(data[name]).__name__}",
                    path=path,
                )

    @classmethod
    def _from_checked(
        cls, data: dict[str, Any], path: Any, index: int, keep: bool
    ) -> RecordedEntry:
        try:
            spec = data["spec"]
            # Parsed JSON is plain data, so its canonical form comes from the shared
            # encoder; other data (from_dict of Python objects) is copied and checked.
            spec_json = (_encode_parsed if keep else _canonical)(spec if keep else dict(spec))
            entry = cls(
                data["backend"],
                data["kind"],
                data["kernel"],
                data["name"],
                spec_json,
                data["target"],
                data["replayable"],
                None if data["replayable"] else data.get("reason") or "(no reason recorded)",
            )
        except ValueError as exc:
            where = f"recorded entry {index}"
            raise ManifestError(f"{where} ({data.get('name')!r}): {exc}", path=path) from exc
        if keep:
            object.__setattr__(entry, "_parsed", spec)
        # Computed here, not through the cached property's lookup (2 us an entry).
        ident = _entry_id(entry.backend, entry.kind, entry.kernel, spec_json, entry.target)
        object.__setattr__(entry, "id", ident)
        if "id" in data and data["id"] != ident:
            # The id is derived: a mismatch means the entry was edited or damaged.
            raise ManifestError(
                f"recorded entry {index} ({entry.name!r}): id {data['id']!r} does not match its contents "
                f"({entry.id!r}); the entry was modified; re-record it",
                path=path,
            )
        return entry


def parse_recorded(data: Any, *, path: Any = None, keep: bool = False) -> list[RecordedEntry]:
    """The ``recorded`` section of manifest data (absent = none).

    ``keep``: as for ``RecordedEntry.from_dict`` (the data was just read from a file).

    Raises:
        ManifestError: not a list, or a malformed entry.
    """
    items = data.get("recorded", []) if isinstance(data, dict) else []
    if not isinstance(items, list):
        raise ManifestError("'recorded' must be a list", path=path)
    parse = RecordedEntry.from_dict
    return [parse(item, path=path, index=i, keep=keep) for i, item in enumerate(items)]


def read_recorded(path: str | os.PathLike[str]) -> list[RecordedEntry]:
    """The recorded entries of the manifest at ``path``.

    Raises:
        ManifestError: unreadable, not a manifest, or a malformed entry.
    """
    return parse_recorded(read_manifest_data(path), path=path, keep=True)


def expand_path(path: str | os.PathLike[str], rank: int | None = None) -> Path:
    """``path`` with ``{rank}`` replaced by this process's rank (``WARMKIT_RANK``, else ``RANK``)."""
    from . import _envs

    text = os.fspath(path)
    if "{rank}" in text:
        text = text.replace("{rank}", str(_envs.rank() if rank is None else rank))
    return Path(text)


class Recorder:
    """Appends recorded entries to one manifest file, safely across threads and processes.

    Args:
        path: the manifest to write; ``{rank}`` is replaced by the rank.

    Raises:
        ManifestError: from ``add``, when the existing file is not a manifest
            (it is left untouched).
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = expand_path(path).absolute()
        self._seen: set[str] = set()
        self._lock = threading.Lock()
        self._warned: set[str] = set()
        self.added = 0

    def __repr__(self) -> str:
        return f"<Recorder {self.path}>"

    def add(self, entry: RecordedEntry) -> bool:
        """Record ``entry`` unless this process already did; returns True if it was new here.

        An unreplayable entry logs a warning naming the kernel and the reason
        (once per kernel).
        """
        ident = entry.id
        with self._lock:
            if ident in self._seen:
                return False
            self._seen.add(ident)
            if not entry.replayable and entry.name not in self._warned:
                self._warned.add(entry.name)
                logger.warning(
                    "kernel %s compiled at runtime cannot be replayed in another process: %s; "
                    "it is recorded in %s with this reason",
                    entry.name,
                    entry.reason,
                    self.path,
                )
            try:
                self._merge([entry])
            except BaseException:
                self._seen.discard(ident)  # nothing was written: a later event may retry
                raise
            self.added += 1
        return True

    def add_safely(self, make: Any) -> None:
        """Build an entry with ``make()`` and ``add`` it; never raises.

        Hooks call this from inside a compile: a recording failure must not
        break the user's launch, so it is logged as an error naming the file.
        """
        try:
            entry = make()
            if entry is not None:
                self.add(entry)
        except Exception:
            logger.exception("warmkit: could not record a runtime compile into %s", self.path)

    def add_many(self, entries: Iterable[RecordedEntry]) -> int:
        """Record several entries in one locked write; returns how many were new here."""
        with self._lock:
            new = [e for e in entries if e.id not in self._seen]
            if new:
                self._merge(new)
                self._seen.update(e.id for e in new)
                self.added += len(new)
        return len(new)

    def _merge(self, entries: list[RecordedEntry]) -> None:
        from filelock import FileLock

        from ._version import __version__

        self.path.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(self.path) + ".lock"):
            data: dict[str, Any]
            if self.path.exists():
                data = read_manifest_data(self.path)
                if not isinstance(data, dict) or data.get("format") != MANIFEST_FORMAT:
                    raise ManifestError(
                        f"not a warmkit manifest (format must be {MANIFEST_FORMAT!r}); refusing "
                        "to record into it: choose another path",
                        path=self.path,
                    )
                existing = data.get("recorded", [])
                if not isinstance(existing, list):
                    raise ManifestError("'recorded' must be a list", path=self.path)
            else:
                data = {
                    "format": MANIFEST_FORMAT,
                    "version": MANIFEST_VERSION,
                    "warmkit_version": __version__,
                    "registrations": [],
                }
                existing = []
            have = {item.get("id") for item in existing if isinstance(item, dict)}
            added = [e.to_dict() for e in entries if e.id not in have]
            if not added:
                return
            data["recorded"] = existing + added
            write_atomic(self.path, json.dumps(data, indent=2, allow_nan=False) + "\n")


def read_manifest_data(path: str | os.PathLike[str]) -> Any:
    """The parsed JSON of the manifest at ``path`` (its format is checked by the reader).

    Raises:
        ManifestError: unreadable or not JSON.
    """
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ManifestError(f"cannot read manifest: {exc.strerror or exc}", path=path) from exc
    except json.JSONDecodeError as exc:
        raise ManifestError(f"invalid JSON: {exc}", path=path) from exc


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file in its directory and ``os.replace``."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        raise OSError(exc.errno, f"cannot write {path}: {exc.strerror or exc}") from exc
    finally:
        tmp.unlink(missing_ok=True)


def start_recording(path: str | os.PathLike[str]) -> Recorder:
    """Record every runtime JIT event from now on into ``path`` (``{rank}`` allowed).

    Recording sees what the monitor sees: arm it (``warmkit.monitor.arm``, or
    ``WarmupConfig(record=PATH)``, which does both).

    Raises:
        ImportError: ``filelock`` is missing (a core dependency: reinstall warmkit).
    """
    global _active
    import filelock  # noqa: F401 - fail here, not inside a compile hook

    rec = Recorder(path)
    with _lock:
        _active = rec
    logger.info("warmkit: recording runtime compiles into %s", rec.path)
    return rec


def stop_recording() -> Recorder | None:
    """Stop recording; returns the recorder that was active, if any."""
    global _active
    with _lock:
        rec, _active = _active, None
    return rec


def active_recorder() -> Recorder | None:
    """The recorder in force, or None when nothing is being recorded."""
    return _active


def encode_value(v: Any) -> Any:
    """A plain value as JSON data: tuples and non-finite floats tagged (``decode_value`` undoes it)."""
    if isinstance(v, tuple):
        return {"tuple": [encode_value(x) for x in v]}
    if isinstance(v, float) and not math.isfinite(v):
        return {"float": repr(v)}
    return v


def decode_value(v: Any) -> Any:
    """The value ``encode_value`` encoded.

    Raises:
        ValueError: an unknown tag.
        TypeError: a bare list (alternatives are tagged).
    """
    if isinstance(v, dict):
        if set(v) == {"tuple"}:
            return tuple(decode_value(x) for x in v["tuple"])
        if set(v) == {"float"}:
            return float(v["float"])
        raise ValueError(f"unknown value encoding {v!r}")
    if isinstance(v, list):
        raise TypeError(
            f"a bare list {v!r} is not a value; alternatives are encoded as {{'list': [...]}}"
        )
    return v


def encode_key(key: Any) -> dict[str, Any]:
    """A ``CompileKey``'s fields as JSON data (tuples and non-finite floats tagged).

    Raises:
        TypeError: a field that is not plain data (it could not be rebuilt elsewhere).
    """
    if attrs.has(type(key)):
        names = [f.name for f in attrs.fields(type(key))]
    elif dataclasses.is_dataclass(key):
        names = [f.name for f in dataclasses.fields(key)]
    elif hasattr(type(key), "_fields"):
        names = list(type(key)._fields)
    else:
        raise TypeError(f"key {key!r} is not an attrs, dataclass or NamedTuple CompileKey")
    out = {}
    for name in names:
        value = getattr(key, name)
        _check_plain_value(name, value)
        out[name] = encode_value(value)
    return out


def _check_plain_value(name: str, value: Any) -> None:
    if isinstance(value, tuple):
        for v in value:
            _check_plain_value(name, v)
        return
    if value is not None and type(value) not in (bool, int, float, str):
        raise TypeError(
            f"field {name!r} is a {type(value).__name__} ({value!r:.80}), not plain data "
            "(None, bool, int, float, str or tuples of them)"
        )


def decode_key(cls: type, fields: Mapping[str, Any]) -> Any:
    """Rebuild ``cls.CompileKey`` from ``encode_key`` data."""
    return cls.CompileKey(
        **{k: v if type(v) in _AS_IS else decode_value(v) for k, v in fields.items()}
    )


_AS_IS = frozenset({str, int, bool, float, type(None)})  # values decode_value returns unchanged


def key_entry(cls: type, key: Any, target: str | None = None) -> RecordedEntry:
    """The recorded entry for a wrapped kernel's key that warmup did not cover."""
    from ._plugins import kernel_ref

    reason = None
    ref = kernel_ref(cls)
    try:
        fields = encode_key(key)
    except TypeError as exc:
        fields, reason = {"repr": repr(key)}, f"its key cannot be saved: {exc}"
    if reason is None and (cls.__module__ == "__main__" or "<locals>" in cls.__qualname__):
        reason = (
            f"kernel class {cls.__qualname__} is defined in {cls.__module__!r}"
            + (" inside a function" if "<locals>" in cls.__qualname__ else "")
            + ": another process cannot import it; move it into a module"
        )
    return RecordedEntry.make(
        backend=cls.backend,
        kind="key",
        kernel=ref,
        name=cls.name,
        spec={"key": fields},
        target=target,
        reason=reason,
    )


@attrs.frozen
class RecordedItem:
    """A recorded entry resolved for warmup: its kernel and key, or why it cannot be warmed.

    Attributes:
        entry: the recorded entry.
        kernel: a kernel instance (None when ``error`` is set or not replayable).
        key: the key to compile.
        error: why the entry could not even be planned (its module does not
            import, its backend is missing ...).
    """

    entry: RecordedEntry
    kernel: Any = None
    key: Any = None
    error: BaseException | None = None


def resolve_recorded(entries: Iterable[RecordedEntry]) -> list[RecordedItem]:
    """Turn recorded entries into (kernel, key) pairs for warmup, one failure per entry.

    A ``"key"`` entry loads its kernel class; a ``"raw"`` one asks its backend
    (``Backend.recorded_kernel(entry)``), which defers importing the function
    to the compile, so a stale entry fails as that entry's key.
    """
    from ._backend import RecordReplay
    from ._exceptions import BackendNotImplementedError
    from ._plugins import get_backend, load_kernel

    items = []
    # One lookup and one instance per kernel, not per entry: resolving a ref scans every
    # installed distribution's entry points (~50 ms), and a recording has an entry per key.
    kernels: dict[str, Any] = {}
    for entry in entries:
        if not entry.replayable:
            items.append(RecordedItem(entry))
            continue
        try:
            if entry.kind == "key":
                kernel = kernels.get(entry.kernel)
                if kernel is None:
                    kernel = kernels[entry.kernel] = load_kernel(entry.kernel)()
                spec = entry._parsed if entry._parsed is not None else entry.spec
                key = decode_key(type(kernel), spec["key"])
            else:
                if entry.backend is None:
                    raise ValueError("a raw recorded entry must name its backend")
                backend = get_backend(entry.backend, kernel=entry.name)
                if not isinstance(backend, RecordReplay):
                    raise BackendNotImplementedError(
                        entry.backend, f"backend {entry.backend!r} cannot replay recorded kernels"
                    )
                kernel, key = backend.recorded_kernel(entry)
        except Exception as exc:  # noqa: BLE001 - reported as this entry's failure
            items.append(RecordedItem(entry, error=exc))
            continue
        items.append(RecordedItem(entry, kernel, key))
    return items
