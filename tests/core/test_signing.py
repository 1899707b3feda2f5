"""Signed bundles (warmkit._cache.signing): keygen, sign, trust; tampering and untrusted keys refused."""

from __future__ import annotations

import json

import pytest

import warmkit
from warmkit import BundleError
from warmkit._cli.commands import main

from ._bundle_backend import BundleBackend
from .test_bundle import TARGET, entries, reg, rewrite, site  # noqa: F401 -- fixtures

pytest.importorskip("cryptography")


@pytest.fixture
def keys(tmp_path):
    from warmkit._cache.signing import generate_key

    return generate_key(tmp_path / "signer.pem"), generate_key(tmp_path / "other.pem")


@pytest.fixture
def signed(site, reg, keys, tmp_path):  # noqa: F811
    (private, _public), _ = keys
    out = tmp_path / "signed.wkb"
    warmkit.build_bundle(reg, out, target=TARGET, progress="off", sign=private)
    BundleBackend.log.clear()
    return out


@pytest.fixture
def unsigned(site, reg, tmp_path):  # noqa: F811
    out = tmp_path / "unsigned.wkb"
    warmkit.build_bundle(reg, out, target=TARGET, progress="off")
    return out


def test_a_signed_bundle_installs_under_trust_and_says_by_whom(signed, keys):
    (_private, public), _ = keys
    info = warmkit.inspect_bundle(signed)
    assert info["signature"]["signed"] and info["signature"]["key_id"].startswith("ed25519:")
    res = warmkit.install_bundle(signed, trust=[public])
    assert len(res.installed) == 6 and res.signed_by == info["signature"]["key_id"]


def test_without_trust_an_unsigned_bundle_installs_and_inspect_says_unsigned(unsigned):
    assert warmkit.inspect_bundle(unsigned)["signature"] == {"signed": False}
    res = warmkit.install_bundle(unsigned)
    assert len(res.installed) == 6 and res.signed_by is None


def test_with_trust_an_unsigned_bundle_is_refused(unsigned, keys, monkeypatch):
    (_private, public), _ = keys
    with pytest.raises(BundleError, match="unsigned, but signed bundles are required"):
        warmkit.install_bundle(unsigned, trust=[public])
    monkeypatch.setenv("WARMKIT_BUNDLE_TRUST", str(public))
    with pytest.raises(BundleError, match="unsigned"):
        warmkit.install_bundle(unsigned)
    assert entries(BundleBackend.root) == set()


def test_a_bundle_changed_after_signing_is_refused(signed, keys, tmp_path):
    """The attacker rewrites an entry *and* its sha256 in bundle.json: the signature catches it."""
    import hashlib

    (_private, public), _ = keys
    evil = b"attacker's cubin"
    listed = warmkit.inspect_bundle(signed)["backends"]["fakebundle"]["entries"]
    victim = next(e["path"] for e in listed if e["path"].endswith("payload.bin"))

    def member(name, data):
        return evil if name == f"backends/fakebundle/{victim}" else data

    def meta(doc):
        for e in doc["backends"]["fakebundle"]["entries"]:
            if e["path"] == victim:
                e.update(sha256=hashlib.sha256(evil).hexdigest(), size=len(evil))

    bad = rewrite(signed, tmp_path / "evil.wkb", member=member, meta=meta)
    with pytest.raises(BundleError, match="changed after it was signed"):
        warmkit.install_bundle(bad, trust=[public])
    assert entries(BundleBackend.root) == set()


def test_a_bundle_signed_by_another_key_is_refused(signed, keys):
    _, (_other_private, other_public) = keys
    with pytest.raises(BundleError, match="not trusted"):
        warmkit.install_bundle(signed, trust=[other_public])


def test_bad_keys_fail_before_compiling(site, reg, tmp_path, keys):  # noqa: F811
    (_private, public), _ = keys
    with pytest.raises(ValueError, match="not a PEM private key"):
        warmkit.build_bundle(reg, tmp_path / "k.wkb", target=TARGET, progress="off", sign=public)
    with pytest.raises(FileNotFoundError, match="nope.pem"):
        warmkit.build_bundle(
            reg, tmp_path / "k.wkb", target=TARGET, progress="off", sign=tmp_path / "nope.pem"
        )
    assert BundleBackend.log == [] and not (tmp_path / "k.wkb").exists()


def test_cli_keygen_sign_trust(site, reg, tmp_path, capsys):  # noqa: F811
    manifest = reg.save(tmp_path / "warmup.json")
    key = tmp_path / "k.pem"
    assert main(["bundle", "keygen", str(key)]) == 0
    assert (key.stat().st_mode & 0o777) == 0o600 and (tmp_path / "k.pem.pub").exists()
    assert main(["bundle", "keygen", str(key)]) == 2  # never overwrites a key
    out = tmp_path / "k.wkb"
    argv = ["bundle", "build", str(manifest), "--target", TARGET, "-o", str(out)]
    assert main([*argv, "--sign", str(key)]) == 0
    capsys.readouterr()
    assert main(["bundle", "inspect", str(out)]) == 0
    assert "signature: by key ed25519:" in capsys.readouterr().out
    assert main(["bundle", "install", str(out), "--trust", f"{key}.pub", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["signed_by"].startswith("ed25519:")
    assert main([*argv]) == 0  # rebuilt unsigned
    capsys.readouterr()
    assert main(["bundle", "install", str(out), "--trust", f"{key}.pub"]) == 1
    assert "unsigned" in capsys.readouterr().err
