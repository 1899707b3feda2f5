"""A store nobody can abuse, with real Triton AOT entries for cuda:90 and a real redis-server.

Each attack is made on purpose against entries a real warmup published: names
that are paths, a forged cubin with valid sha256s, a validly signed entry moved
to another key, store trouble (OOM, WRONGTYPE, unreadable manifests). The last
test is the issue's fleet: two "hosts" (separate caches, separate processes)
with trust configured, every attack at once, one compile per key.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from pathlib import Path

import pytest
from triton import knobs
from warmkit_triton import TritonBackend

import warmkit
from warmkit._cache.stores.base import open_store

from ._fleet_child import complete_entries
from .test_fleet import K, run_ranks, warm

pytestmark = [pytest.mark.filterwarnings("ignore:TRITON_DEFAULT_FP_FUSION"), pytest.mark.slow]

pytest.importorskip("cryptography")


@pytest.fixture
def keys(tmp_path):
    from warmkit._cache.signing import generate_key

    return generate_key(tmp_path / "fleet.pem"), generate_key(tmp_path / "attacker.pem")


def _entries(client) -> list[str]:
    return sorted(k.decode().removeprefix("warmkit:entry:") for k in client.keys("warmkit:entry:*"))


def _rewrite(client, key: str, files: dict[str, bytes], meta: dict) -> None:
    """Replace entry ``key`` with ``files`` and ``meta`` (what a writer of the Redis could do)."""
    name = f"warmkit:entry:{key}"
    client.delete(name)
    client.hset(
        name, mapping={"meta": json.dumps(meta), **{f"file:{n}": d for n, d in files.items()}}
    )


def _read(client, key: str) -> tuple[dict[str, bytes], dict]:
    raw = client.hgetall(f"warmkit:entry:{key}")
    files = {k[5:].decode(): v for k, v in raw.items() if k.startswith(b"file:")}
    return files, json.loads(raw[b"meta"])


def _with_files(meta: dict, files: dict[str, bytes]) -> dict:
    """``meta`` listing ``files`` with their true sha256s: an entry that passes its own hashes."""
    listed = {
        n: {"sha256": hashlib.sha256(d).hexdigest(), "size": len(d)} for n, d in files.items()
    }
    return meta | {"files": listed}


def _forge(client, key: str) -> None:
    """A different cubin, with a manifest of valid sha256s (and the old signature, if any)."""
    files, meta = _read(client, key)
    files["add_kernel.cubin"] = files["add_kernel.cubin"][:-64] + b"\x00" * 64
    _rewrite(client, key, files, _with_files(meta, files))


def _escape(client, key: str, outside: Path) -> None:
    """An entry whose file names are paths out of the cache (each listed with a valid sha256)."""
    files, meta = _read(client, key)
    files[f"../../../../../..{outside}/rel"] = b"owned"
    files[f"{outside}/abs"] = b"owned"
    _rewrite(client, key, files, _with_files(meta, files))


def _move(client, source: str, dest: str) -> None:
    """A validly signed entry served as another key (its manifest's key rewritten to match)."""
    files, meta = _read(client, source)
    _rewrite(client, dest, files, meta | {"key": dest})


def test_an_entry_with_path_names_is_refused_and_nothing_lands_outside(
    tmp_path, monkeypatch, redis_server, caplog
):
    warm(tmp_path / "a", monkeypatch, store=redis_server.url)
    client = redis_server.client()
    victim = _entries(client)[0]
    outside = tmp_path / "outside"
    outside.mkdir()
    _escape(client, victim, outside)
    with caplog.at_level(logging.ERROR, logger="warmkit"):
        report = warm(tmp_path / "b", monkeypatch, store=redis_server.url)
    assert report.totals()["compiled"] == 1 and report.totals()["fetched"] == K - 1
    assert list(report.store_refused) == [victim]
    assert "is not a plain file name" in report.store_refused[victim]
    assert list(outside.iterdir()) == []  # nothing written outside the cache
    assert not list(tmp_path.rglob("rel")) and not list(tmp_path.rglob("abs"))
    msgs = [r.getMessage() for r in caplog.records if "refusing entry" in r.getMessage()]
    assert len(msgs) == 1 and victim in msgs[0] and redis_server.url in msgs[0]
    # deleted, and the local compile republished in its place
    files, _ = _read(client, victim)
    assert sorted(files) == sorted(TritonBackend().entry_files(victim.split("/")[1]))


def test_an_undeclared_name_is_refused(tmp_path, monkeypatch, redis_server):
    warm(tmp_path / "a", monkeypatch, store=redis_server.url)
    client = redis_server.client()
    victim = _entries(client)[0]
    files, meta = _read(client, victim)
    files["add_kernel.so"] = b"\x7fELF a launcher nobody asked for"
    _rewrite(client, victim, files, _with_files(meta, files))
    report = warm(tmp_path / "b", monkeypatch, store=redis_server.url)
    assert report.totals()["compiled"] == 1
    assert "'add_kernel.so' is not one its backend declares" in report.store_refused[victim]


def test_with_trust_forged_and_moved_entries_are_refused_and_compiled_here(
    tmp_path, monkeypatch, redis_server, keys
):
    (private, public), _ = keys
    monkeypatch.setenv("WARMKIT_SIGNING_KEY", str(private))
    monkeypatch.setenv("WARMKIT_TRUST", str(public))
    warm(tmp_path / "a", monkeypatch, store=redis_server.url)
    client = redis_server.client()
    forged, moved, source = _entries(client)[:3]
    _forge(client, forged)
    _move(client, source, moved)
    report = warm(tmp_path / "b", monkeypatch, store=redis_server.url)
    assert report.totals()["compiled"] == 2 and report.totals()["fetched"] == K - 2
    assert sorted(report.store_refused) == sorted([forged, moved])
    for key in (forged, moved):
        assert "signature by key ed25519:" in report.store_refused[key]
        assert "does not match its files and key" in report.store_refused[key]
        # never installed: what is here is this host's own compile, the republished entry
        digest = key.split("/")[1]
        here = TritonBackend().entry_files(digest)["add_kernel.cubin"].read_bytes()
        assert _read(client, key)[0]["add_kernel.cubin"] == here
    assert warmkit._cache.stores.base.verify_entry(open_store(redis_server.url).get(forged)) == []


def test_with_store_required_a_refused_entry_fails_its_key_naming_the_store(
    tmp_path, monkeypatch, redis_server, keys
):
    (private, public), _ = keys
    monkeypatch.setenv("WARMKIT_SIGNING_KEY", str(private))
    warm(tmp_path / "a", monkeypatch, store=redis_server.url)
    monkeypatch.setenv("WARMKIT_TRUST", str(public))
    client = redis_server.client()
    victim = _entries(client)[0]
    files, meta = _read(client, victim)
    meta.pop("signature")
    _rewrite(client, victim, files, meta)
    with pytest.raises(warmkit.WarmupError) as info:
        warm(tmp_path / "b", monkeypatch, store=redis_server.url, store_required=True)
    cause = info.value.__cause__
    assert isinstance(cause, warmkit.StoreError) and cause.key == victim
    assert str(cause).startswith(f"store {redis_server.url}: entry {victim} of kernel")
    assert "is unsigned" in str(cause) and "store_required" in str(cause)


def test_redis_out_of_memory_compiles_locally_with_one_warning(
    tmp_path, monkeypatch, redis_server, caplog
):
    client = redis_server.client()
    client.config_set("maxmemory-policy", "noeviction")
    client.config_set("maxmemory", 1)
    with caplog.at_level(logging.WARNING, logger="warmkit"):
        report = warm(tmp_path / "a", monkeypatch, store=redis_server.url)
    assert report.ok and report.totals()["compiled"] == K
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "OutOfMemoryError" in warnings[0]
    assert warnings[0].startswith(f"warmkit store {redis_server.url}: unreachable or failing")


def test_wrong_type_and_unreadable_manifests_are_deleted_and_republished(
    tmp_path, monkeypatch, redis_server
):
    warm(tmp_path / "a", monkeypatch, store=redis_server.url)
    client = redis_server.client()
    wrong, unreadable = _entries(client)[:2]
    client.delete(f"warmkit:entry:{wrong}")
    client.set(f"warmkit:entry:{wrong}", b"a plain string")
    client.hset(f"warmkit:entry:{unreadable}", "meta", b"{not json")
    report = warm(tmp_path / "b", monkeypatch, store=redis_server.url)
    assert report.ok and report.totals()["compiled"] == 2 and report.totals()["fetched"] == K - 2
    assert sorted(report.store_refused) == sorted([wrong, unreadable])
    store = open_store(redis_server.url)
    for key in (wrong, unreadable):  # the good local result took the bad entry's place
        assert warmkit._cache.stores.base.verify_entry(store.get(key)) == []
    third = warm(tmp_path / "c", monkeypatch, store=redis_server.url)
    assert third.totals()["fetched"] == K


def test_two_hosts_with_trust_refuse_every_attack_and_compile_each_key_once(
    tmp_path, monkeypatch, redis_server, keys
):
    """The issue's fleet: forged, ``../``-named and moved entries, refused by both hosts."""
    (private, public), _ = keys
    trust = {"WARMKIT_TRUST": str(public), "WARMKIT_SIGNING_KEY": str(private)}
    # The attacker's material: entries as a real warmup publishes them (signed), then tampered.
    for k, v in trust.items():
        monkeypatch.setenv(k, v)
    seeded: list[str] = []
    knobs.compilation.listener = lambda **kw: seeded.append(kw["metadata"]["hash"])
    warm(tmp_path / "seed", monkeypatch, store=redis_server.url)
    knobs.compilation.listener = None
    client = redis_server.client()
    every = _entries(client)
    forged, escaped, moved, source = every[:4]
    outside = tmp_path / "outside"
    outside.mkdir()
    _forge(client, forged)
    _escape(client, escaped, outside)
    _move(client, source, moved)
    for key in every:  # only the attacks are left: each key is compiled by the fleet
        if key not in (forged, escaped, moved):
            client.delete(f"warmkit:entry:{key}")
    ranks = [(f"h{h}r{r}", tmp_path / f"host{h}") for h in range(2) for r in range(2)]
    results = run_ranks(tmp_path, ranks, store=redis_server.url, **trust)
    compiles = [h for r in results for h in r["compiles"]]
    assert len(compiles) == K and len(set(compiles)) == K, compiles  # one compile per key
    refused = {k for r in results for k in r["store_refused"]}
    assert refused == {forged, escaped, moved}
    reasons = {k: v for r in results for k, v in r["store_refused"].items()}
    assert "does not match its files and key" in reasons[forged]
    assert "is not a plain file name" in reasons[escaped]
    assert "does not match its files and key" in reasons[moved]
    assert list(outside.iterdir()) == [] and not list(tmp_path.rglob("rel"))
    for r in results:
        assert len(r["complete"]) == K
    # every entry in the store now is this fleet's own, signed and intact
    store = open_store(redis_server.url)
    for key in _entries(client):
        entry = store.get(key)
        assert warmkit._cache.stores.base.verify_entry(entry) == [] and "signature" in entry.meta
    assert sorted(complete_entries(tmp_path / "host0")) == sorted(
        complete_entries(tmp_path / "host1")
    )


def _verify(cache: Path, capsys) -> tuple[int, dict]:
    from warmkit._cli.commands import main

    code = main(["cache", "verify", "--json", "--cache-dir", f"triton={cache}"])
    return code, json.loads(capsys.readouterr().out)["triton"]


def test_cache_verify_rechecks_the_signature_of_entries_from_a_store(
    tmp_path, monkeypatch, redis_server, keys, capsys
):
    (_private, public), (attacker, _) = keys
    monkeypatch.setenv("WARMKIT_SIGNING_KEY", str(attacker))  # a writer the fleet never trusted
    warm(tmp_path / "a", monkeypatch, store=redis_server.url)
    monkeypatch.delenv("WARMKIT_SIGNING_KEY")
    fetched = warm(tmp_path / "b", monkeypatch, store=redis_server.url)  # no trust: served
    assert fetched.totals()["fetched"] == K
    code, result = _verify(tmp_path / "b", capsys)
    assert result["bad"] == {} and code == 0  # without trust, the sha256s hold
    monkeypatch.setenv("WARMKIT_TRUST", str(public))
    code, result = _verify(tmp_path / "b", capsys)
    assert code == 1 and len(result["bad"]) == K
    for problems in result["bad"].values():
        assert any("which is not trusted" in p for p in problems)
    # an entry compiled here has no store provenance: nothing to re-check
    code, result = _verify(tmp_path / "a", capsys)
    assert code == 0 and result["bad"] == {}


def test_cache_verify_finds_a_fetched_binary_changed_after_install(
    tmp_path, monkeypatch, redis_server, keys, capsys
):
    (private, public), _ = keys
    monkeypatch.setenv("WARMKIT_SIGNING_KEY", str(private))
    monkeypatch.setenv("WARMKIT_TRUST", str(public))
    warm(tmp_path / "a", monkeypatch, store=redis_server.url)
    warm(tmp_path / "b", monkeypatch, store=redis_server.url)
    code, result = _verify(tmp_path / "b", capsys)
    assert code == 0 and result["bad"] == {}  # signed, relocated group files included
    digest = _entries(redis_server.client())[0].split("/")[1]
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "b"))
    entry = TritonBackend().entry_dir(digest)
    cubin = entry / "add_kernel.cubin"
    cubin.write_bytes(cubin.read_bytes()[:-8] + b"\x00" * 8)
    warmkit._cache.integrity.write_record(entry)  # even with its local record rewritten to match
    code, result = _verify(tmp_path / "b", capsys)
    (problems,) = result["bad"].values()
    assert code == 1 and any(
        "add_kernel.cubin sha256" in p and "signed in store entry triton/" in p for p in problems
    )


def test_a_stale_directory_lease_is_taken_over_not_waited_for(tmp_path, monkeypatch, caplog):
    store = tmp_path / "store"
    warm(tmp_path / "a", monkeypatch, store=str(store))
    keys = list(open_store(store).keys())
    fresh = tmp_path / "store2"
    leases = open_store(fresh)
    old = time.time() - 60  # not renewed for two lifetimes: its holder is gone
    for key in keys:  # each claims another hour (a clock ahead, or a file left by hand)
        path = leases._lease(key)
        path.write_text(json.dumps({"token": "dead", "expires": time.time() + 3600}))
        os.utime(path, (old, old))
    monkeypatch.setenv("WARMKIT_WAIT_SECONDS", "1")
    with caplog.at_level(logging.WARNING, logger="warmkit"):
        report = warm(tmp_path / "b", monkeypatch, store=str(fresh))
    assert report.ok and report.totals()["compiled"] == K
    assert not [r for r in caplog.records if "WARMKIT_WAIT_SECONDS" in r.getMessage()]
    assert sorted(open_store(fresh).keys()) == sorted(keys)  # each taken over and published
