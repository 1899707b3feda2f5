"""What a store holds and how it is named: ``StoredEntry``, entry keys, file names, store URLs.

The lowest module of ``stores/``: the interface (``base``) and every backend
(``redis_store``, ``directory_store``) import it and it imports none of them,
so ``base.open_store`` can import a backend without an import cycle.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import attrs

__all__ = ["META_FILE", "StoredEntry"]

_KEY_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)*$")
_FILE_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]*$")
#: The manifest's file name in a directory store's entry: no file of an entry may take it.
META_FILE = "warmkit-entry.json"


def _check_key(key: str) -> str:
    if not isinstance(key, str) or not _KEY_RE.match(key) or len(key) > 300:
        raise ValueError(
            f"store entry key {key!r} is invalid: use '<kind>/<id>' of letters, digits, '.', '_', '-'"
        )
    return key


@attrs.frozen
class StoredEntry:
    """One entry as read from a store (not yet verified).

    Attributes:
        key: the entry key, e.g. ``"triton/<hash>"``.
        files: file name -> content.
        meta: the manifest written with it (``entry_meta``).
        odd: members that are not plain files (links, directories, names
            that are not text); an entry with any is refused.
        raw_meta: the manifest's bytes as stored: ``delete(key, raw_meta)``
            removes exactly this entry, however its writer spelled the JSON.
    """

    key: str
    files: Mapping[str, bytes]
    meta: Mapping[str, Any]
    odd: tuple[str, ...] = ()
    raw_meta: bytes | None = attrs.field(default=None, repr=False)


def _redact(url: str) -> str:
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)[1]
    user = f"{parts.username}:***@" if parts.username else ":***@"
    return urlunsplit(parts._replace(netloc=user + netloc))
