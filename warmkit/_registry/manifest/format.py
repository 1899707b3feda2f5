"""The manifest's format: its name, the version written, the versions read, the header check.

A manifest is ``{"format": MANIFEST_FORMAT, "version": N, ...}``; everything
else in it is read only after ``check_header`` accepted those two fields and
``schema.validate_manifest`` the whole document.
"""

from __future__ import annotations

from typing import Any

from ..._exceptions import ManifestError

__all__ = [
    "MANIFEST_FORMAT",
    "MANIFEST_VERSION",
    "READ_VERSIONS",
    "check_header",
    "unsupported_version",
]

MANIFEST_FORMAT = "warmkit.manifest"
MANIFEST_VERSION = 2  # the version written; 2 groups the recorded section by kernel
READ_VERSIONS = (1, 2)  # the versions read


def unsupported_version(version: Any, path: Any) -> ManifestError:
    """The error for a manifest of a version this warmkit does not read."""
    return ManifestError(
        f"manifest version {version!r} is not supported (this warmkit reads versions "
        f"{', '.join(map(str, READ_VERSIONS))}); re-record it with this warmkit",
        path=path,
    )


def check_header(data: Any, path: Any, *, refusal: str = "") -> None:
    """Refuse a document that is not a manifest of a version this warmkit reads.

    ``refusal`` ends the not-a-manifest message (what the caller will not do with it).
    """
    if not isinstance(data, dict) or data.get("format") != MANIFEST_FORMAT:
        raise ManifestError(
            f"not a warmkit manifest (format must be {MANIFEST_FORMAT!r}){refusal}", path=path
        )
    if data.get("version") not in READ_VERSIONS:
        raise unsupported_version(data.get("version"), path)
