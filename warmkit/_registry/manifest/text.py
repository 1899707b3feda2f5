"""The manifest's text: how warmkit writes it, and a reader for exactly that text.

``manifest_text`` writes one line per recorded entry, ``["<id>", <spec>]``
with the spec as the canonical JSON the entry holds. ``split_written`` reads
a text in exactly that form back without parsing the recorded section as a
whole: a 100,000-entry manifest is mostly that section, and its JSON was
parsed, its specs encoded again (to check each id) and its entries checked
against the schema, all per entry (B10, ``docs/performance.md``). It only
splits: whoever calls it checks each entry's id against its spec text
(``entries.read_manifest``), and any text in another form (reformatted,
edited, of another writer) is parsed as JSON, the way it always was.

It knows the text's layout, not what a group holds: ``entries.written_groups``
makes the groups it writes, and reads the fields of those it splits.
"""

from __future__ import annotations

import json
import os
import re
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ..._exceptions import ManifestError

__all__ = [
    "manifest_text",
    "parse_manifest_text",
    "read_manifest_text",
    "split_written",
    "write_atomic",
]

_SECTION_OPEN = '\n  "recorded": [\n'
_SECTION_CLOSE = "\n  ]\n}\n"
_ENTRIES_OPEN = ', "entries": ['
_ENTRY_OPEN = '      ["'  # then the id (24 hex digits), '", ' and the spec
# An entry's line as manifest_text writes it (its id and its spec, which holds no newline),
# and a group's: its header, its entries' lines (all but the last with a comma), its
# close, and a comma when another group follows.
_ENTRY_LINE = rf'{re.escape(_ENTRY_OPEN)}([0-9a-f]{{24}})", (\{{[^\n]*\}})\]'
_ENTRY = re.compile(_ENTRY_LINE)
_GROUP = re.compile(
    rf"    (?P<header>\{{[^\n]*){re.escape(_ENTRIES_OPEN)}\n"
    rf"(?P<entries>(?:{_ENTRY_LINE},\n)*{_ENTRY_LINE})\n    \]\}}(?P<sep>,\n|\n)"
)


def manifest_text(data: Mapping[str, Any], groups: Iterable[tuple[Mapping[str, Any], Any]]) -> str:
    """The manifest file: ``data`` (without ``recorded``), then ``groups`` as its recorded section.

    ``groups``: per group, its header (the fields its entries share,
    ``entries.written_groups``) and its entries (``RecordedEntry``), each
    written on one line as ``["<id>", <spec>]``, the spec the canonical JSON
    the entry holds (nothing is decoded and encoded again). ``split_written``
    reads back each header and each entry's ``(id, spec text)``.

    Raises:
        ValueError: data that is not JSON (NaN included).
    """
    text = json.dumps(data, indent=2, allow_nan=False)
    parts = []
    for header, entries in groups:
        body = ",\n".join([f'{_ENTRY_OPEN}{e.id}", {e.spec_json}]' for e in entries])
        parts.append(f"    {json.dumps(header)[:-1]}{_ENTRIES_OPEN}\n{body}\n    ]}}")
    if not parts:
        return text + "\n"
    section = ",\n".join(parts)
    return f"{text[: text.rindex('}')].rstrip()},{_SECTION_OPEN}{section}{_SECTION_CLOSE}"


def split_written(
    text: str,
) -> tuple[dict[str, Any], list[tuple[dict[str, Any], list[tuple[str, str]]]]] | None:
    """A manifest's head and recorded groups, if ``text`` is exactly as ``manifest_text`` writes it.

    Returns ``(head, groups)``: ``head`` the manifest's data without
    ``recorded``, and per group its header fields (``entries`` left out) and
    its entries' ``(id, spec text)`` pairs, in order. None for any other text
    (no recorded section, an edit, another formatting): parse it as JSON then.
    Nothing is checked here beyond the form: not the ids, not the fields' types.
    """
    start = text.find(_SECTION_OPEN)
    if start < 1 or text[start - 1] != "," or not text.endswith(_SECTION_CLOSE):
        return None
    try:
        head = json.loads(text[: start - 1] + "\n}")
    except ValueError:
        return None
    if type(head) is not dict or "recorded" in head:
        return None
    body = text[start + len(_SECTION_OPEN) : len(text) - len(_SECTION_CLOSE) + 1]
    groups: list[tuple[dict[str, Any], list[tuple[str, str]]]] = []
    at, end, match = 0, len(body), _GROUP.match
    while at < end:
        # one group, its form checked line by line by the pattern (canonical JSON has no
        # newline), then its entries' pairs read from the lines it matched
        found = match(body, at)
        if found is None:
            return None
        try:
            header = json.loads(found["header"] + "}")
        except ValueError:
            return None
        if type(header) is not dict or "entries" in header:
            return None
        groups.append((header, _ENTRY.findall(found["entries"])))
        at = found.end()
        if (found["sep"] == "\n") != (at == end):  # a comma after every group but the last
            return None
    return (head, groups) if groups else None


def read_manifest_text(path: str | os.PathLike[str]) -> str:
    """The text of the manifest at ``path``.

    Raises:
        ManifestError: unreadable.
    """
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ManifestError(f"cannot read manifest: {exc.strerror or exc}", path=path) from exc


def parse_manifest_text(text: str, path: Any) -> Any:
    """The parsed JSON of a manifest's text (its format is checked by the reader).

    Raises:
        ManifestError: not JSON.
    """
    try:
        return json.loads(text)
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
