"""The manifest's ``recorded`` section: its entries, and their readers and writers.

A manifest (``warmkit.manifest``) has two sections: ``registrations``
(declared search spaces, ``document.py``) and ``recorded`` (exact
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

Version 2 writes the section in groups (``recorded_groups``): the fields
entries share (``GROUP_FIELDS``) once per group, then each entry's
``[id, spec]``. Version 1 (a flat list of entries) is still read. An entry's
id is derived from its contents (``_entry_id``), and checked on every read.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from ..._exceptions import ManifestError
from .codec import _canonical, _canonical_cached, _decode_canonical, _encode_parsed
from .format import unsupported_version
from .text import parse_manifest_text, read_manifest_text, split_written

__all__ = [
    "GROUP_FIELDS",
    "KINDS",
    "RecordedEntry",
    "parse_recorded",
    "read_manifest",
    "read_recorded",
    "recorded_groups",
    "written_groups",
]

KINDS = ("raw", "key")

# A version-2 group: the fields its entries share (the rest of RecordedEntry, but spec).
GROUP_FIELDS = ("backend", "kind", "kernel", "name", "target", "replayable")

_STR_OR_NONE = frozenset({str, type(None)})


@functools.lru_cache(maxsize=1024)
def _id_head(backend: str | None, kind: str, kernel: str) -> str:
    return f"[{','.join(map(_canonical, (backend, kind, kernel)))},"


def _entry_id(
    backend: str | None, kind: str, kernel: str, spec_json: str, target: str | None
) -> str:
    # = _canonical([backend, kind, kernel, spec, target]), spec_json spliced in (already canonical)
    ident = f"{_id_head(backend, kind, kernel)}{spec_json},{_canonical_cached(target)}]"
    return hashlib.sha256(ident.encode()).hexdigest()[:24]


_FIELD_TYPES: dict[str, tuple[type, ...]] = {
    "backend": (str, type(None)),
    "kind": (str,),
    "kernel": (str,),
    "name": (str,),
    "target": (str, type(None)),
    "replayable": (bool,),
    "spec": (dict,),
}


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
        return _decode_canonical(self.spec_json)

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

        ``keep``: the caller hands ``data`` over (it will never change it): a
        ``"key"`` entry keeps its parsed spec for :func:`resolve_recorded` (a raw
        entry's backend reads ``spec`` itself).

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
        for name, types in _FIELD_TYPES.items():
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
        if keep and entry.kind == "key":  # as _parse_groups: only a key entry's is read again
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
    """The ``recorded`` section of manifest data (absent = none), of either version.

    Version 1 lists entries; version 2 lists groups (:func:`recorded_groups`).
    ``keep``: as for ``RecordedEntry.from_dict`` (the data was just read from a file).

    Raises:
        ManifestError: not a list, a version this warmkit does not read, or a
            malformed entry or group (named by its index and kernel).
    """
    items = data.get("recorded", []) if isinstance(data, dict) else []
    if not isinstance(items, list):
        raise ManifestError("'recorded' must be a list", path=path)
    version = data.get("version") if isinstance(data, dict) else None
    if version == 2:
        return _parse_groups(items, path, keep)
    if version != 1 and items:
        raise unsupported_version(version, path)
    parse = RecordedEntry.from_dict
    return [parse(item, path=path, index=i, keep=keep) for i, item in enumerate(items)]


def _parse_groups(items: list[Any], path: Any, keep: bool) -> list[RecordedEntry]:
    """Version-2 groups into entries: each group checked once, each entry's id recomputed."""
    out: list[RecordedEntry] = []
    encode = _encode_parsed if keep else _canonical
    sha256 = hashlib.sha256
    for g, group in enumerate(items):
        t = _group_template(group, g, path)
        where = f"recorded group {g} (kernel {t.kernel!r})"
        head, tail = _id_parts(t)
        pairs: list[tuple[str, str]] = []
        parsed: list[Any] = []
        for j, item in enumerate(group["entries"]):
            if not (
                type(item) is list
                and len(item) == 2
                and type(item[0]) is str
                and type(item[1]) is dict
            ):
                raise ManifestError(
                    f"{where}, entry {j}: must be [id, spec] (a string and an object), "
                    f"got {json.dumps(item, default=repr)[:80]}",
                    path=path,
                )
            ident, spec = item
            try:
                spec_json = encode(spec if keep else dict(spec))
            except ValueError as exc:
                raise ManifestError(f"{where}, entry {j}: {exc}", path=path) from exc
            real = sha256(f"{head}{spec_json}{tail}".encode()).hexdigest()[:24]
            if real != ident:
                # The id is derived: a mismatch means the entry was edited or damaged.
                raise ManifestError(
                    f"{where}, entry {j}: id {ident!r} does not match its contents ({real!r}); "
                    "the entry was modified; re-record it",
                    path=path,
                )
            pairs.append((ident, spec_json))
            parsed.append(spec)
        # Only a "key" entry's parsed spec is read again (resolve_recorded); a raw entry's
        # backend reads entry.spec itself, so keeping its parse would only cost memory.
        _add_group(out, t, pairs, parsed if keep and t.kind == "key" else None)
    return out


def _id_parts(t: RecordedEntry) -> tuple[str, str]:
    """What comes before and after the spec in the text an id hashes (``_entry_id``)."""
    return _id_head(t.backend, t.kind, t.kernel), f",{_canonical(t.target)}]"


def _add_group(
    out: list[RecordedEntry],
    t: RecordedEntry,
    pairs: list[tuple[str, str]],
    parsed: list[Any] | None,
) -> None:
    """Append a checked group's entries: ``t`` holds their fields, each id matches its spec."""
    new = object.__new__
    # The slots' own setters: the group's fields were checked by RecordedEntry() once (t).
    slots = RecordedEntry.__dict__
    fields = (*GROUP_FIELDS, "reason", "spec_json", "_parsed", "id")
    (
        s_backend,
        s_kind,
        s_kernel,
        s_name,
        s_target,
        s_replayable,
        s_reason,
        s_spec,
        s_parsed,
        s_id,
    ) = (slots[f].__set__ for f in fields)
    backend, kind, kernel, name, target = t.backend, t.kind, t.kernel, t.name, t.target
    replayable, reason = t.replayable, t.reason
    for i, (ident, spec_json) in enumerate(pairs):
        entry = new(RecordedEntry)
        s_backend(entry, backend)
        s_kind(entry, kind)
        s_kernel(entry, kernel)
        s_name(entry, name)
        s_target(entry, target)
        s_replayable(entry, replayable)
        s_reason(entry, reason)
        s_spec(entry, spec_json)
        s_parsed(entry, None if parsed is None else parsed[i])
        s_id(entry, ident)
        out.append(entry)


def read_manifest(path: str | os.PathLike[str]) -> tuple[Any, list[RecordedEntry] | None]:
    """The manifest at ``path``: its data, and its recorded entries if its text is as written.

    For a text exactly as ``manifest_text`` writes it (``_manifest.split_written``),
    each entry's id is checked against its spec's text as written, which is
    the canonical JSON the id was made from: nothing is parsed and encoded
    again, and a ``"key"`` group's specs are parsed in one call. The data's
    ``recorded`` groups then list no entries (for the schema's check of their
    fields). Otherwise, or if any field or id does not check out, the entries
    are None: ``parse_recorded(data)`` reads the section and reports what is wrong.

    Raises:
        ManifestError: unreadable or not JSON.
    """
    text = read_manifest_text(path)
    split = split_written(text)
    if split is not None and split[0].get("version") == 2:
        head, groups = split
        entries = _written_entries(groups, path)
        if entries is not None:
            return head | {"recorded": [{**h, "entries": []} for h, _ in groups]}, entries
    return parse_manifest_text(text, path), None


def _written_entries(
    groups: list[tuple[dict[str, Any], list[tuple[str, str]]]], path: Any
) -> list[RecordedEntry] | None:
    """The entries of ``split_written``'s groups, each id checked; None at the first doubt."""
    out: list[RecordedEntry] = []
    sha256 = hashlib.sha256
    for g, (header, pairs) in enumerate(groups):
        try:
            t = _group_template({**header, "entries": []}, g, path)
        except ManifestError:
            return None  # parse_recorded says what is wrong with it
        head, tail = _id_parts(t)
        for ident, spec in pairs:
            if sha256(f"{head}{spec}{tail}".encode()).hexdigest()[:24] != ident:
                return None  # edited, damaged, or re-spaced: parse_recorded decides
        parsed = None
        if t.kind == "key":
            # Each spec hashed to its id, so each is the canonical JSON of one object, unless
            # an id was made for other text on purpose: then the JSON reader refuses the file.
            try:
                parsed = json.loads(f"[{','.join(spec for _, spec in pairs)}]")
            except ValueError:
                return None
            if len(parsed) != len(pairs) or not all(type(p) is dict for p in parsed):
                return None
        _add_group(out, t, pairs, parsed)
    return out


def _group_template(group: Any, g: int, path: Any) -> RecordedEntry:
    """A group's shared fields, checked as one entry with no spec would be."""
    if type(group) is not dict:
        raise ManifestError(
            f"recorded group {g} must be an object, got {type(group).__name__}", path=path
        )
    kernel = group.get("kernel")
    where = f"recorded group {g} (kernel {kernel!r})"
    fields = {**_FIELD_TYPES, "reason": (str, type(None)), "entries": (list,)}
    del fields["spec"]
    unknown = sorted(set(group) - set(fields))
    if unknown:
        raise ManifestError(f"{where}: unknown field(s) {', '.join(map(repr, unknown))}", path=path)
    for name, types in fields.items():
        if name not in group and name != "reason":
            raise ManifestError(f"{where}: missing field {name!r}", path=path)
        if not isinstance(group.get(name), types):
            raise ManifestError(
                f"{where}: field {name!r} has type {type(group[name]).__name__}, expected "
                f"{' or '.join('null' if t is type(None) else t.__name__ for t in types)}",
                path=path,
            )
    replayable = group["replayable"]
    # Unlike version 1, a replayable group with a reason is refused: it was edited.
    reason = group.get("reason") if replayable else group.get("reason") or "(no reason recorded)"
    try:
        d = group  # (g is the group's index)
        return RecordedEntry(
            d["backend"], d["kind"], d["kernel"], d["name"], "{}", d["target"], replayable, reason
        )
    except ValueError as exc:
        raise ManifestError(f"{where}: {exc}", path=path) from exc


def read_recorded(path: str | os.PathLike[str]) -> list[RecordedEntry]:
    """The recorded entries of the manifest at ``path``.

    Raises:
        ManifestError: unreadable, not a manifest, or a malformed entry.
    """
    data, entries = read_manifest(path)
    return entries if entries is not None else parse_recorded(data, path=path, keep=True)


def written_groups(
    entries: Iterable[RecordedEntry],
) -> list[tuple[dict[str, Any], list[RecordedEntry]]]:
    """The version-2 ``recorded`` section as ``text.manifest_text`` writes it.

    Per group of entries that share ``GROUP_FIELDS`` (and ``reason``), in the
    order its first entry came: its header ``{backend, kind, kernel, name,
    target, replayable[, reason]}`` and its entries, in their order.
    """
    groups: dict[tuple[Any, ...], list[RecordedEntry]] = {}
    for e in entries:
        head = (e.backend, e.kind, e.kernel, e.name, e.target, e.replayable, e.reason)
        members = groups.get(head)
        if members is None:
            members = groups[head] = []
        members.append(e)
    out = []
    for head, members in groups.items():
        header = dict(zip(GROUP_FIELDS, head, strict=False))
        if head[-1] is not None:
            header["reason"] = head[-1]
        out.append((header, members))
    return out


def recorded_groups(entries: Iterable[RecordedEntry]) -> list[dict[str, Any]]:
    """The version-2 ``recorded`` section as JSON data: ``written_groups`` with specs decoded.

    Each group is ``{backend, kind, kernel, name, target, replayable[, reason],
    entries: [[id, spec], ...]}``, in the order its first entry came; its
    entries keep their order.
    """
    return [
        header | {"entries": [[e.id, e.spec] for e in members]}
        for header, members in written_groups(entries)
    ]
