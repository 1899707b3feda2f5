"""Stores: atomic entries, verification that breaks on purpose, leases that expire, and degrading."""

from __future__ import annotations

import sys
import threading
import time

import pytest

import warmkit
from warmkit._cache.stores.base import StoredEntry, entry_meta, open_store, verify_entry
from warmkit._cache.stores.directory_store import DirectoryStore
from warmkit._cache.stores.redis_store import RedisStore

FILES = {"k.cubin": b"\x7fELF" + bytes(range(256)) * 4, "k.json": b'{"name": "k"}'}


@pytest.fixture(params=["directory", "redis"])
def store(request, tmp_path):
    if request.param == "directory":
        yield open_store(tmp_path / "store")
    else:
        server = request.getfixturevalue("redis_server")
        s = open_store(server.url)
        yield s
        s.close()


def put(store, key="triton/abc", files=FILES, **info):
    return store.put(key, files, entry_meta(key, files, **info))


def test_open_store_picks_the_kind(tmp_path, redis_server):
    assert isinstance(open_store(tmp_path / "s"), DirectoryStore)
    assert isinstance(open_store(f"file://{tmp_path}/s2"), DirectoryStore)
    assert isinstance(open_store(redis_server.url), RedisStore)
    with pytest.raises(warmkit.StoreError, match="unknown store scheme 'http'"):
        open_store("http://example.invalid/x")


def test_password_is_never_shown(redis_server):
    s = open_store("redis://user:hunter2@127.0.0.1:1/0")
    assert "hunter2" not in s.url and "hunter2" not in repr(s)


def test_put_get_round_trip_and_first_publisher_wins(store):
    assert put(store, kernel="k") is True
    got = store.get("triton/abc")
    assert got is not None and dict(got.files) == FILES and got.meta["kernel"] == "k"
    assert verify_entry(got) == []
    assert put(store, files={"k.cubin": b"other"}) is False
    assert dict(store.get("triton/abc").files) == FILES
    assert list(store.keys()) == ["triton/abc"]
    assert store.get("triton/missing") is None


def test_delete_with_meta_removes_only_that_entry(store):
    put(store)
    stale = dict(store.get("triton/abc").meta) | {"created": 0}
    store.delete("triton/abc", stale)  # republished meanwhile: not the one judged bad, kept
    assert store.get("triton/abc") is not None
    store.delete("triton/abc", store.get("triton/abc").meta)
    assert store.get("triton/abc") is None


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (lambda f: f | {"k.cubin": f["k.cubin"][:-7]}, "k.cubin has 1021 bytes"),  # truncated
        (
            lambda f: (
                f | {"k.cubin": f["k.cubin"][:9] + bytes([f["k.cubin"][9] ^ 1]) + f["k.cubin"][10:]}
            ),
            "k.cubin sha256",
        ),  # one bit flipped
        (lambda f: {"k.json": f["k.json"]}, "k.cubin is missing"),
        (lambda f: f | {"extra.so": b"x"}, "extra.so is not in its manifest"),
    ],
)
def test_verify_entry_finds_every_kind_of_damage(change, problem):
    good = StoredEntry("triton/abc", FILES, entry_meta("triton/abc", FILES))
    assert verify_entry(good) == []
    bad = StoredEntry("triton/abc", change(dict(FILES)), good.meta)
    problems = verify_entry(bad)
    assert problems and problem in problems[0] and "triton/abc" in problems[0]


def test_verify_entry_refuses_a_manifest_for_another_key():
    meta = entry_meta("triton/other", FILES)
    assert "manifest is for" in verify_entry(StoredEntry("triton/abc", FILES, meta))[0]


def test_redis_entry_is_one_hash_written_at_once(redis_server):
    """A reader polling during many publishes sees all of an entry or none of it."""
    store = open_store(redis_server.url)
    seen: list[int] = []
    stop = threading.Event()

    def reader():
        while not stop.is_set():
            for i in range(20):
                got = store.get(f"triton/e{i}")
                if got is not None:
                    seen.append(len(verify_entry(got)))

    t = threading.Thread(target=reader)
    t.start()
    try:
        for i in range(20):
            put(store, f"triton/e{i}")
        # the reader polls on until it has read 20 entries: a loaded machine
        # can finish the publishes before its first poll (CI saw no read at all once)
        deadline = time.monotonic() + 30
        while len(seen) < 20 and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        stop.set()
        t.join()
    assert len(seen) >= 20 and set(seen) == {0}


def test_lease_is_exclusive_renewable_and_expires(store):
    lease = store.acquire("triton/abc", ttl=0.5)
    assert lease is not None and store.holds_lease("triton/abc")
    assert store.acquire("triton/abc", ttl=0.5) is None
    assert lease.renew() is True
    time.sleep(0.7)  # the holder "died": nothing renewed it
    assert not store.holds_lease("triton/abc")
    taker = store.acquire("triton/abc", ttl=5)
    assert taker is not None
    assert lease.renew() is False  # the old holder learns it lost the lease
    lease.release()  # and releasing it does not free the taker's
    assert store.holds_lease("triton/abc")
    taker.release()
    assert not store.holds_lease("triton/abc")


def test_unreachable_redis_is_store_unavailable(redis_server):
    store = open_store(redis_server.url)
    redis_server.stop()
    with pytest.raises(warmkit.StoreUnavailableError, match="unreachable") as info:
        store.get("triton/abc")
    assert info.value.url == redis_server.url


def test_redis_store_without_the_client_gives_the_install_hint(monkeypatch):
    monkeypatch.setitem(sys.modules, "redis", None)
    with pytest.raises(warmkit.StoreError, match=r"pip install 'warmkit\[redis\]'"):
        open_store("redis://127.0.0.1:6379/0")


def test_invalid_keys_are_refused(tmp_path):
    store = open_store(tmp_path / "s")
    for key in ("../etc", "triton/../../x", "", "a b"):
        with pytest.raises(ValueError, match="invalid"):
            store.get(key)
