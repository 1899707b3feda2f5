"""Signatures of bundles and store entries: Ed25519 keys, signing, checking against trusted keys.

``bundle.json`` lists every file of a bundle with its sha256 and size, so a
signature over its exact bytes covers the whole bundle: install verifies the
signature first, then every file against the signed hashes.

A signed bundle carries ``bundle.sig`` next to ``bundle.json``::

    {"algorithm": "ed25519", "key_id": "ed25519:<16 hex>", "signature": "<base64>"}

A store entry (``warmkit._cache.stores.base``) carries the same document in its manifest,
over the manifest's canonical bytes (which list every file's sha256 and the
store key), signed by the publisher's ``WARMKIT_SIGNING_KEY``.

Trust is configured with public keys (PEM files): ``install_bundle(trust=...)``,
``warmkit bundle install --trust PUBKEY``, or ``WARMKIT_TRUST`` (comma-separated
paths; ``WARMKIT_BUNDLE_TRUST`` is its older name), for bundles and the store
alike. With trust configured, an unsigned bundle or entry, a bad signature, or
a signature by another key is refused. Without it, an unsigned bundle installs
(its hashes still checked), and ``inspect`` says so.

Uses ``cryptography`` (``pip install 'warmkit[sign]'``), imported only when a
signature is made or checked.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .. import _envs
from .._exceptions import BundleError

__all__ = [
    "INSTALL_HINT",
    "SIGNATURE_MEMBER",
    "describe",
    "generate_key",
    "key_id",
    "load_trusted",
    "sign",
    "trusted_keys",
    "verify",
]

SIGNATURE_MEMBER = "bundle.sig"
INSTALL_HINT = "pip install 'warmkit[sign]'  (or: pip install cryptography)"
_ALGORITHM = "ed25519"


def _crypto() -> Any:
    try:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ed25519
    except ImportError as exc:
        raise ImportError(
            f"bundle signatures need the 'cryptography' package ({exc}); install it with: "
            f"{INSTALL_HINT}"
        ) from exc
    return serialization, ed25519


def _raw_public(public_key: Any) -> bytes:
    serialization, _ = _crypto()
    return public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def key_id(public_key: Any) -> str:
    """A short, stable name of a public key: ``ed25519:`` + 16 hex digits of its sha256."""
    return f"{_ALGORITHM}:{hashlib.sha256(_raw_public(public_key)).hexdigest()[:16]}"


def generate_key(path: str | os.PathLike[str]) -> tuple[Path, Path]:
    """Write a new Ed25519 private key to ``path`` (PEM, mode 0600) and its public key to ``path.pub``.

    Returns:
        ``(private key path, public key path)``.

    Raises:
        FileExistsError: ``path`` exists (a key is never overwritten).
    """
    serialization, ed25519 = _crypto()
    private = Path(path)
    public = private.with_name(private.name + ".pub")
    key = ed25519.Ed25519PrivateKey.generate()
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    try:
        fd = os.open(private, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError as exc:
        raise FileExistsError(
            exc.errno, f"{private} exists; a key is never overwritten, choose another path"
        ) from exc
    with os.fdopen(fd, "wb") as f:
        f.write(pem)
    public.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return private, public


def _load(path: str | os.PathLike[str], *, private: bool) -> Any:
    serialization, ed25519 = _crypto()
    what = "private" if private else "public"
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise FileNotFoundError(f"cannot read {what} key {path}: {exc.strerror or exc}") from exc
    try:
        key = (
            serialization.load_pem_private_key(data, password=None)
            if private
            else serialization.load_pem_public_key(data)
        )
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{path} is not a PEM {what} key ({exc})") from exc
    want = ed25519.Ed25519PrivateKey if private else ed25519.Ed25519PublicKey
    if not isinstance(key, want):
        raise TypeError(
            f"{path} is a {type(key).__name__}, not an Ed25519 {what} key; make one with "
            "`warmkit bundle keygen KEY`"
        )
    return key


def sign(data: bytes, private_key_path: str | os.PathLike[str]) -> bytes:
    """The ``bundle.sig`` document for ``data`` (the exact bytes of ``bundle.json``)."""
    key = _load(private_key_path, private=True)
    doc = {
        "algorithm": _ALGORITHM,
        "key_id": key_id(key.public_key()),
        "signature": base64.b64encode(key.sign(data)).decode(),
    }
    return json.dumps(doc, sort_keys=True).encode()


def trusted_keys(explicit: Sequence[str | os.PathLike[str]] | None = None) -> list[str]:
    """The public key files to trust (bundles and store entries alike).

    Precedence: ``explicit`` if given, else ``WARMKIT_TRUST``, else its alias
    ``WARMKIT_BUNDLE_TRUST``. An empty list means no signature is checked (a
    variable set but empty is an error, not this).

    Raises:
        ValueError: a variable is set but empty, or both are set and differ
            (which one is meant cannot be guessed); the message names them.
    """
    if explicit:
        return [str(p) for p in explicit]
    trust = _envs.get("WARMKIT_TRUST")
    alias = _envs.get("WARMKIT_BUNDLE_TRUST")
    if trust is not None and alias is not None and trust != alias:
        raise ValueError(
            f"WARMKIT_TRUST={','.join(trust)!r} and WARMKIT_BUNDLE_TRUST={','.join(alias)!r} "
            "differ; set only WARMKIT_TRUST (WARMKIT_BUNDLE_TRUST is its older name)"
        )
    return list(trust or alias or ())


def load_trusted(trusted: Sequence[str]) -> dict[str, Any]:
    """``{key id: public key}`` of the trusted key files, read once.

    Raises:
        FileNotFoundError, ValueError, TypeError: a file is unreadable or not an
            Ed25519 public key; the message names it.
    """
    return {key_id(k): k for k in (_load(p, private=False) for p in trusted)}


def describe(signature: bytes | None) -> dict[str, Any]:
    """What ``inspect`` says of a bundle's signature, without checking it."""
    if signature is None:
        return {"signed": False}
    try:
        doc = json.loads(signature)
        return {"signed": True, "algorithm": doc.get("algorithm"), "key_id": doc.get("key_id")}
    except ValueError:
        return {"signed": True, "malformed": True}


def verify(
    data: bytes,
    signature: bytes | None,
    trusted: Sequence[str] | dict[str, Any],
    *,
    path: Any = None,
    what: str = "bundle",
    error: Callable[..., Exception] | None = None,
) -> str | None:
    """Check ``data`` (``bundle.json``'s bytes, or a store entry's manifest) against its signature.

    Args:
        data: the exact bytes that were signed.
        signature: the signature document (``sign``'s output), or None when unsigned.
        trusted: public key files, or ``load_trusted``'s result.
        path: what the error names (a bundle path).
        what: what the messages call the signed thing (``"bundle"``, ``"store entry triton/…"``).
        error: makes the exception from a message; default ``BundleError(message, path=path)``.

    Returns:
        The signing key's id, or None when no key is trusted (nothing to check).

    Raises:
        BundleError: (or ``error``'s) trust is configured and the data is
            unsigned, its signature is malformed or invalid, or made by a key
            not trusted.
    """
    if not trusted:
        return None

    def fail(message: str) -> Exception:
        return error(message) if error is not None else BundleError(message, path=path)

    if signature is None:
        raise fail(
            f"{what} is unsigned, but signed {what.split()[0]}s are required (trusted keys: "
            f"{', '.join(trusted)}); "
            + (
                "sign it with `warmkit bundle build --sign KEY`"
                if what == "bundle"
                else "publishers sign entries with WARMKIT_SIGNING_KEY"
            )
        )
    try:
        doc = json.loads(signature)
        if doc.get("algorithm") != _ALGORITHM:
            raise ValueError(f"algorithm {doc.get('algorithm')!r} is not {_ALGORITHM!r}")
        raw = base64.b64decode(doc["signature"], validate=True)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise fail(f"{what} signature is malformed ({exc})") from exc
    from cryptography.exceptions import InvalidSignature

    keys = trusted if isinstance(trusted, dict) else load_trusted(trusted)
    key = keys.get(doc.get("key_id"))
    if key is None:
        raise fail(
            f"{what} is signed by key {doc.get('key_id')!r}, which is not trusted (trusted: "
            f"{', '.join(sorted(keys))})"
        )
    try:
        key.verify(raw, data)
    except InvalidSignature as exc:
        signed = "bundle.json" if what == "bundle" else "its files and key"
        raise fail(
            f"{what} signature by key {doc['key_id']} does not match {signed}: it was changed "
            "after it was signed; refusing it"
        ) from exc
    return str(doc["key_id"])
