"""The core's fleet through its own test backend (``fakefleet``) and a real redis-server.

The Triton backend's fleet tests (``tests/triton_backend/test_fleet*.py``) run the
same paths with real compiles; these need no Triton: two "hosts" are two cache
roots warmed in turn against one store.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

import warmkit

from . import _fleet_backend
from ._fleet_backend import FILES, FleetBackend, FleetKernel

TARGET = "fake:1"
NS = [1, 2, 3]


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    _fleet_backend.reset()
    yield
    _fleet_backend.reset()


def warm_host(root: Path, store: str, **config: object) -> warmkit.WarmupReport:
    """Warm ``NS`` as a fresh process on the host whose cache is ``root`` would."""
    return _fleet_backend.warm_host(root, NS, store=store, **config)


def entry_keys() -> list[str]:
    backend = FleetBackend()
    return sorted(backend.entry_key(FleetKernel(), FleetKernel.CompileKey(n), TARGET) for n in NS)


def test_a_second_host_fetches_each_key_from_the_store_and_compiles_none(tmp_path, redis_server):
    first = warm_host(tmp_path / "a", redis_server.url)
    assert [e.status for e in first.entries] == ["compiled"] * 3
    assert [hit for *_, hit in FleetBackend.log] == [False] * 3
    client = redis_server.client()
    # each compiled entry was published under its backend and key; no lease is left behind
    assert sorted(client.keys("warmkit:entry:*")) == [
        f"warmkit:entry:fakefleet/{k}".encode() for k in entry_keys()
    ]
    assert client.keys("warmkit:lease:*") == []

    second = warm_host(tmp_path / "b", redis_server.url)
    assert [e.status for e in second.entries] == ["fetched"] * 3
    # the backend loaded each fetched entry as a cache hit: nothing compiled on host b
    assert [hit for *_, hit in FleetBackend.log] == [True] * 3
    # each entry was relocated into b's cache (its index names b's path), not left pointing at a
    assert sorted(final.name for _staged, final in FleetBackend.relocated) == entry_keys()
    for key in entry_keys():
        entry = tmp_path / "b" / key
        assert json.loads((entry / "index.json").read_text())["self"] == str(entry)
        assert (entry / "payload.bin").read_bytes() == (
            tmp_path / "a" / key / "payload.bin"
        ).read_bytes()
        assert {p.name for p in entry.iterdir()} >= set(FILES)
        assert (entry / "warmkit-store.json").is_file()  # provenance, for `cache verify`


def test_a_host_warmed_again_finds_its_own_cache_and_fetches_nothing(tmp_path, redis_server):
    warm_host(tmp_path / "a", redis_server.url)
    again = warm_host(tmp_path / "a", redis_server.url)
    assert [e.status for e in again.entries] == ["cached"] * 3
    assert FleetBackend.relocated == []


def test_an_entry_holding_a_file_the_backend_does_not_accept_is_refused_and_deleted(
    tmp_path, redis_server
):
    warm_host(tmp_path / "a", redis_server.url)
    client = redis_server.client()
    victim = f"warmkit:entry:fakefleet/{entry_keys()[0]}"
    # the entry's payload renamed to a file name this backend's entries never hold
    payload = client.hget(victim, "file:payload.bin")
    assert payload is not None
    client.hdel(victim, "file:payload.bin")
    client.hset(victim, "file:evil.so", payload)

    second = warm_host(tmp_path / "b", redis_server.url)
    by_key = {e.key.n: e.status for e in second.entries}
    bad_n = next(
        n
        for n in NS
        if FleetBackend().entry_key(FleetKernel(), FleetKernel.CompileKey(n), TARGET)
        == entry_keys()[0]
    )
    assert by_key.pop(bad_n) == "compiled"  # refused: host b compiled it itself
    assert sorted(by_key.values()) == ["fetched", "fetched"]
    assert not list((tmp_path / "b").rglob("evil.so"))  # not one byte of it written
    # the refused entry was replaced in the store by host b's own compile
    assert client.hexists(victim, "file:payload.bin") and not client.hexists(victim, "file:evil.so")
