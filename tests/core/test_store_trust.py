"""A shared store nobody can abuse: names that are paths, forged and moved entries, store trouble.

Each case breaks one defence on purpose and checks the outcome and the message.
The whole-fleet version, with real Triton entries, is in tests/triton_backend/test_fleet.py.
"""

from __future__ import annotations

import json
import logging
import os
import time

import pytest

import warmkit
from warmkit._cache.fleet import Fleet
from warmkit._cache.stores.base import (
    SIGNATURE,
    StoredEntry,
    entry_meta,
    open_store,
    signed_bytes,
    verify_entry,
)
from warmkit._cache.stores.directory_store import DirectoryStore

pytest.importorskip("cryptography")

FILES = {"k.cubin": b"\x7fELF" + bytes(range(256)), "k.json": b'{"name": "k"}'}


def declared(name: str) -> bool:
    return name in ("k.cubin", "k.json")


@pytest.fixture
def keys(tmp_path):
    from warmkit._cache.signing import generate_key

    return generate_key(tmp_path / "fleet.pem"), generate_key(tmp_path / "other.pem")


@pytest.fixture(params=["directory", "redis"])
def url(request, tmp_path):
    if request.param == "directory":
        return str(tmp_path / "store")
    return request.getfixturevalue("redis_server").url


@pytest.fixture
def trusted(keys, monkeypatch):
    """Trust configured, and this process publishes signed entries."""
    (private, public), _ = keys
    monkeypatch.setenv("WARMKIT_TRUST", str(public))
    monkeypatch.setenv("WARMKIT_SIGNING_KEY", str(private))
    return private, public


# -- names: an entry is data, never paths ------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("../x", "'../x' is not a plain file name"),
        ("/etc/x", "'/etc/x' is not a plain file name"),
        ("sub/k.cubin", "'sub/k.cubin' is not a plain file name"),
        (".bashrc", "'.bashrc' is not a plain file name"),
        ("..", "'..' is not a plain file name"),
        ("warmkit-entry.json", "is not a plain file name"),
        ("evil.so", "'evil.so' is not one its backend declares"),
    ],
)
def test_a_name_that_is_a_path_or_undeclared_is_refused(name, problem):
    files = FILES | {name: b"payload"}
    entry = StoredEntry("triton/abc", files, entry_meta("triton/abc", files))
    problems = verify_entry(entry, declared)
    assert len(problems) == 1 and problem in problems[0] and "entry triton/abc" in problems[0]
    # the same check without a backend's declaration still refuses every path
    if name != "evil.so":
        assert verify_entry(entry) == problems


def test_a_name_listed_only_in_the_manifest_is_refused_too():
    meta = entry_meta("triton/abc", FILES)
    meta["files"]["../../x"] = {"sha256": "0" * 64, "size": 1}
    assert (
        "'../../x' is not a plain file name"
        in verify_entry(StoredEntry("triton/abc", FILES, meta))[0]
    )


def test_a_link_in_a_directory_store_entry_is_never_followed(tmp_path):
    store = open_store(tmp_path / "store")
    store.put("triton/abc", FILES, entry_meta("triton/abc", FILES))
    secret = tmp_path / "secret"
    secret.write_bytes(b"host secret")
    os.symlink(secret, tmp_path / "store" / "entries" / "triton" / "abc" / "k.ptx")
    got = store.get("triton/abc")
    assert "k.ptx" not in got.files and got.odd == ("k.ptx",)
    assert "'k.ptx' is not a plain file (a link or directory)" in verify_entry(got)[0]


def test_a_refused_entry_is_deleted_counted_and_fetch_says_none(url, caplog):
    store = open_store(url)
    files = FILES | {"../escape": b"x"}
    store.put("triton/abc", FILES, entry_meta("triton/abc", files))  # manifest lists ../escape
    fleet = Fleet(url)
    with caplog.at_level(logging.ERROR, logger="warmkit"):
        assert fleet.fetch("triton/abc") is None
    assert store.get("triton/abc") is None
    assert "'../escape' is not a plain file name" in fleet.refused["triton/abc"]
    (msg,) = [r.getMessage() for r in caplog.records]
    assert "refusing entry triton/abc" in msg and str(fleet.url) in msg
    fleet.close()


# -- signatures --------------------------------------------------------------------------------


def test_a_signed_entry_round_trips(url, trusted):
    fleet = Fleet(url)
    assert fleet.publish("triton/abc", FILES, kernel="k") is True
    meta = open_store(url).get("triton/abc").meta
    assert meta[SIGNATURE]["key_id"].startswith("ed25519:")
    assert fleet.fetch("triton/abc") == FILES and fleet.refused == {}
    fleet.close()


def test_a_forged_entry_with_valid_sha256s_is_refused(url, trusted, caplog):
    store = open_store(url)
    forged = FILES | {"k.cubin": b"\x7fELF attacker's code"}
    store.put("triton/abc", forged, entry_meta("triton/abc", forged))  # unsigned
    fleet = Fleet(url)
    with caplog.at_level(logging.ERROR, logger="warmkit"):
        assert fleet.fetch("triton/abc") is None
    why = fleet.refused["triton/abc"]
    assert "store entry triton/abc is unsigned, but signed" in why and "WARMKIT_SIGNING_KEY" in why
    assert store.get("triton/abc") is None  # deleted: the next publisher replaces it
    fleet.close()


def test_an_entry_signed_by_an_untrusted_key_is_refused(url, keys, monkeypatch):
    (_private, public), (other, _) = keys
    monkeypatch.setenv("WARMKIT_SIGNING_KEY", str(other))
    Fleet(url).publish("triton/abc", FILES)
    monkeypatch.delenv("WARMKIT_SIGNING_KEY")
    monkeypatch.setenv("WARMKIT_TRUST", str(public))
    fleet = Fleet(url)
    assert fleet.fetch("triton/abc") is None
    assert "which is not trusted" in fleet.refused["triton/abc"]


def test_a_signed_entry_changed_after_signing_is_refused(url, trusted):
    Fleet(url).publish("triton/abc", FILES)
    store = open_store(url)
    meta = dict(store.get("triton/abc").meta)
    forged = FILES | {"k.cubin": b"\x7fELF other"}
    meta["files"] = entry_meta("triton/abc", forged)["files"]  # sha256s that match the forgery
    store.delete("triton/abc")
    store.put("triton/abc", forged, meta)
    fleet = Fleet(url)
    assert fleet.fetch("triton/abc") is None
    assert "does not match its files and key" in fleet.refused["triton/abc"]


def test_a_validly_signed_entry_moved_to_another_key_is_refused(url, trusted):
    Fleet(url).publish("triton/aaa", FILES)
    store = open_store(url)
    good = store.get("triton/aaa")
    # moved as it is: its manifest names the key it was signed for
    store.put("triton/bbb", good.files, good.meta)
    fleet = Fleet(url)
    assert fleet.fetch("triton/bbb") is None
    assert "manifest is for 'triton/aaa'" in fleet.refused["triton/bbb"]
    # moved with its manifest's key rewritten: the signature no longer matches
    store.put("triton/ccc", good.files, dict(good.meta) | {"key": "triton/ccc"})
    assert fleet.fetch("triton/ccc") is None
    assert "does not match its files and key" in fleet.refused["triton/ccc"]
    assert fleet.fetch("triton/aaa") == FILES  # the original still serves


def test_the_signature_covers_the_key():
    meta = entry_meta("triton/aaa", FILES)
    assert signed_bytes(meta) != signed_bytes(meta | {"key": "triton/bbb"})
    assert signed_bytes(meta) == signed_bytes(meta | {SIGNATURE: {"x": 1}})


def test_without_trust_an_unsigned_entry_is_served(url):
    store = open_store(url)
    store.put("triton/abc", FILES, entry_meta("triton/abc", FILES))
    assert Fleet(url).fetch("triton/abc") == FILES


# -- trust settings that cannot be misread -----------------------------------------------------


@pytest.mark.parametrize("var", ["WARMKIT_TRUST", "WARMKIT_BUNDLE_TRUST"])
def test_an_empty_trust_setting_is_an_error(var, monkeypatch, tmp_path):
    monkeypatch.setenv(var, "")
    with pytest.raises(ValueError, match=f"{var}='' is invalid: empty: name one or more"):
        Fleet(str(tmp_path / "s"))


def test_an_unreadable_trust_file_is_an_error_naming_it(monkeypatch, tmp_path):
    missing = tmp_path / "nope.pub"
    monkeypatch.setenv("WARMKIT_TRUST", str(missing))
    with pytest.raises(ValueError, match=f"cannot read public key {missing}"):
        Fleet(str(tmp_path / "s"))


def test_an_unreadable_signing_key_is_an_error_naming_it(monkeypatch, tmp_path):
    missing = tmp_path / "nope.pem"
    monkeypatch.setenv("WARMKIT_SIGNING_KEY", str(missing))
    with pytest.raises(ValueError, match=f"cannot read private key {missing}"):
        Fleet(str(tmp_path / "s"))


def test_trust_and_its_alias(keys, monkeypatch):
    from warmkit._cache.signing import trusted_keys

    (_, public), (_, other) = keys
    monkeypatch.setenv("WARMKIT_BUNDLE_TRUST", str(public))
    assert trusted_keys() == [str(public)]  # the old name keeps working
    monkeypatch.setenv("WARMKIT_TRUST", str(public))
    assert trusted_keys() == [str(public)]  # both, equal: fine
    assert trusted_keys([other]) == [str(other)]  # an explicit list wins
    monkeypatch.setenv("WARMKIT_TRUST", str(other))
    with pytest.raises(ValueError, match="WARMKIT_TRUST=.* and WARMKIT_BUNDLE_TRUST=.* differ"):
        trusted_keys()


# -- the store's own trouble never fails a key -------------------------------------------------


def test_redis_out_of_memory_degrades_with_one_warning(redis_server, caplog):
    client = redis_server.client()
    client.config_set("maxmemory-policy", "noeviction")
    client.config_set("maxmemory", 1)
    fleet = Fleet(redis_server.url)
    with caplog.at_level(logging.WARNING, logger="warmkit"):
        assert fleet.publish("triton/a", FILES) is False
        assert fleet.publish("triton/b", FILES) is False
        assert fleet.store is None  # the rest of the warmup compiles locally
    (msg,) = [r.getMessage() for r in caplog.records]
    assert msg.startswith(f"warmkit store {redis_server.url}: unreachable or failing (OutOfMemory")
    assert "this warmup compiles locally" in msg


def test_redis_out_of_memory_with_store_required_names_the_store(redis_server):
    client = redis_server.client()
    client.config_set("maxmemory-policy", "noeviction")
    client.config_set("maxmemory", 1)
    fleet = Fleet(redis_server.url, store_required=True)
    with pytest.raises(warmkit.StoreUnavailableError, match="OutOfMemoryError") as info:
        fleet.publish("triton/a", FILES)
    assert info.value.url == redis_server.url and redis_server.url in str(info.value)


def test_a_wrong_type_at_an_entry_is_an_unreadable_entry_deleted(redis_server, caplog):
    client = redis_server.client()
    client.set("warmkit:entry:triton/abc", b"not a hash")
    fleet = Fleet(redis_server.url)
    with caplog.at_level(logging.WARNING, logger="warmkit"):
        assert fleet.fetch("triton/abc") is None
    assert fleet.store is not None  # the store still works for every other key
    assert client.exists("warmkit:entry:triton/abc") == 0
    assert "unreadable manifest" in fleet.refused["triton/abc"]
    assert fleet.publish("triton/abc", FILES) is True  # and the good result takes its place


def test_an_unreadable_manifest_is_deleted_so_the_good_result_is_republished(url):
    store = open_store(url)
    store.put("triton/abc", FILES, entry_meta("triton/abc", FILES))
    if isinstance(store, DirectoryStore):
        (store.root / "entries" / "triton" / "abc" / DirectoryStore.META).write_text("{trunc")
    else:
        redis = __import__("redis").Redis.from_url(url)
        redis.hset("warmkit:entry:triton/abc", "meta", b"{trunc")
    fleet = Fleet(url)
    assert fleet.fetch("triton/abc") is None
    assert store.get("triton/abc") is None
    assert fleet.publish("triton/abc", FILES) is True
    assert fleet.fetch("triton/abc") == FILES


def test_a_malformed_port_is_a_store_error_at_open():
    with pytest.raises(warmkit.StoreError, match="malformed store URL") as info:
        open_store("redis://127.0.0.1:notaport/0")
    assert not isinstance(info.value, warmkit.StoreUnavailableError)


def test_an_infinite_lease_is_a_config_error(monkeypatch, tmp_path):
    monkeypatch.setenv("WARMKIT_LEASE_SECONDS", "inf")
    with pytest.raises(
        ValueError, match="WARMKIT_LEASE_SECONDS='inf' is invalid: expected a finite"
    ):
        Fleet(str(tmp_path / "s"))


def test_a_stale_directory_lease_is_taken_over_within_its_lifetime(tmp_path):
    store = open_store(tmp_path / "s")
    path = store._lease("triton/abc")
    # a dead holder's lease claiming an hour (a clock ahead, or a hand-made file) ...
    path.write_text(json.dumps({"token": "dead", "expires": time.time() + 3600}))
    assert store.acquire("triton/abc", ttl=30) is None  # fresh: a live holder's
    old = time.time() - 31  # ... not renewed for longer than a lease's lifetime
    os.utime(path, (old, old))
    assert not store.holds_lease("triton/abc")
    assert store.acquire("triton/abc", ttl=30) is not None


def test_trust_without_a_signing_key_publishes_nothing(url, keys, monkeypatch, caplog):
    (_, public), _ = keys
    monkeypatch.setenv("WARMKIT_TRUST", str(public))
    with caplog.at_level(logging.INFO, logger="warmkit"):
        fleet = Fleet(url)
    assert fleet.publish("triton/abc", FILES) is False  # every trusting host would refuse it
    assert open_store(url).get("triton/abc") is None
    assert any("WARMKIT_SIGNING_KEY is not" in r.getMessage() for r in caplog.records)


def test_a_refusal_is_counted_in_the_metrics(url, trusted):
    prom = pytest.importorskip("prometheus_client")
    from warmkit import metrics

    registry = prom.CollectorRegistry()
    metrics.disable()
    metrics.enable(registry)
    try:
        store = open_store(url)
        store.put("triton/abc", FILES, entry_meta("triton/abc", FILES))  # unsigned
        assert Fleet(url).fetch("triton/abc") is None
        assert registry.get_sample_value("warmkit_store_refused_total", {"kind": "triton"}) == 1
    finally:
        metrics.disable()


def test_an_empty_bundle_trust_is_an_error_not_no_checks(monkeypatch, tmp_path):
    monkeypatch.setenv("WARMKIT_BUNDLE_TRUST", "")
    with pytest.raises(ValueError, match="WARMKIT_BUNDLE_TRUST='' is invalid: empty"):
        warmkit.install_bundle(tmp_path / "any.wkb")


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("redis://127.0.0.1:notaport/0", "Port could not be cast to integer value as 'notaport'"),
        ("redis://127.0.0.1:6379/zero", "database 'zero' is not a number"),
        ("http://example.invalid/x", "unknown scheme 'http'"),
    ],
)
def test_a_store_url_that_can_never_work_is_a_config_error(url, problem):
    with pytest.raises(ValueError, match="store '") as info:
        warmkit.WarmupConfig(store=url)
    assert problem in str(info.value) and url.split("/")[2].split(":")[0] in str(info.value)


def test_a_password_is_never_shown_in_a_config_error():
    with pytest.raises(ValueError) as info:
        warmkit.WarmupConfig(store="redis://user:hunter2@127.0.0.1:bad/0")
    assert "hunter2" not in str(info.value) and "***" in str(info.value)


@pytest.mark.parametrize(
    "listed", [{"k.cubin": "x"}, {"k.cubin": {"sha256": "ab"}}, {"k.cubin": 3}]
)
def test_a_manifest_whose_file_records_are_malformed_is_refused_not_raised(listed):
    meta = entry_meta("triton/abc", FILES) | {"files": listed}
    (problem,) = verify_entry(StoredEntry("triton/abc", FILES, meta))
    assert problem == "entry triton/abc: unreadable manifest (a file without its sha256 and size)"


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("{not json", "unreadable store provenance warmkit-store.json"),
        ('{"key": "triton/abc", "meta": 3}', "malformed store provenance warmkit-store.json"),
        ('{"meta": {"files": {}}}', "malformed store provenance warmkit-store.json (KeyError"),
    ],
)
def test_cache_verify_reports_a_damaged_provenance_record(tmp_path, text, problem):
    from warmkit._cache.fleet import PROVENANCE, provenance_problems

    (tmp_path / PROVENANCE).write_text(text)
    (found,) = provenance_problems(object(), tmp_path, {})
    assert found.startswith(problem)
    assert provenance_problems(object(), tmp_path / "elsewhere", {}) == []  # none: compiled here
