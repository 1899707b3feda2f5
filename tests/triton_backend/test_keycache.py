"""The cross-process cache of ``triton_key()``: same value as Triton's own, hit in a new process, opt-out."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import triton.runtime.autotuner as tuner
import triton.runtime.cache as tc
from warmkit_triton import _keycache, _triton_api


def tritons_own():
    fn = tc.triton_key
    return getattr(fn, "__wrapped_original__", fn)


@pytest.fixture
def xdg(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    return tmp_path / "xdg"


def test_installed_and_equal_to_tritons_value(monkeypatch):
    monkeypatch.delenv(_keycache.ENV, raising=False)
    assert _keycache.install() is True  # idempotent: the backend usually did it already
    assert getattr(tc.triton_key, "_warmkit_key_cache", False)
    # the name the autotuner imported is patched too (Triton 3.6 and 3.9 both import it by name)
    assert tuner.triton_key is tc.triton_key
    assert tc.triton_key() == tritons_own()()


def test_stored_then_hit_with_the_same_value(xdg):
    original = tritons_own()
    value, how = _keycache._cached_key(original)
    assert (value, how) == (original(), "stored")
    data = json.loads(_keycache.cache_file().read_text())
    assert _keycache.cache_file() == xdg / "warmkit" / "triton-key.json"
    (entry,) = data["entries"].values()
    assert len(entry["libtriton_sha256"]) == 64 and entry["libtriton_sha256"] in value
    value2, how2 = _keycache._cached_key(original)
    assert (value2, how2) == (original(), "hit")


def test_entry_keyed_by_the_library_identity(xdg):
    original = tritons_own()
    _keycache._cached_key(original)
    ident = next(iter(json.loads(_keycache.cache_file().read_text())["entries"]))
    lib = _triton_api.libtriton_path()
    st = os.stat(lib)
    assert ident.split("|") == [
        os.path.realpath(lib),
        str(st.st_size),
        str(st.st_mtime_ns),
        str(st.st_ino),
        str(st.st_dev),
        tc.__version__,
    ]


def test_unreadable_cache_file_is_a_miss(xdg):
    path = _keycache.cache_file()
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    original = tritons_own()
    assert _keycache._cached_key(original) == (original(), "stored")
    assert _keycache._cached_key(original) == (original(), "hit")


def test_a_key_built_differently_is_not_cached(xdg, monkeypatch):
    """A Triton whose triton_key() is not what we compose: its own value, marked unusable."""
    original = tritons_own()
    real_compose = _triton_api.compose_triton_key
    monkeypatch.setattr(
        _triton_api, "compose_triton_key", lambda d: "other-scheme" + real_compose(d)
    )
    assert _keycache._cached_key(original) == (original(), "unusable")
    (entry,) = json.loads(_keycache.cache_file().read_text())["entries"].values()
    assert entry.get("unusable") and "libtriton_sha256" not in entry
    assert _keycache._cached_key(original) == (original(), "unusable")


def test_unwritable_cache_dir_still_gives_the_value(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))  # mkdir under a file fails
    original = tritons_own()
    assert _keycache._cached_key(original) == (original(), "stored")


def test_leaves_a_foreign_replacement_alone(monkeypatch):
    monkeypatch.setattr(tc, "triton_key", lambda: "someone-elses")
    assert _keycache.install() is False
    assert tc.triton_key() == "someone-elses"


_CHILD = textwrap.dedent(
    """
    import json, time
    from warmkit_triton._triton_api import require_triton
    require_triton()
    import triton.runtime.cache as tc
    from warmkit_triton import _keycache
    t0 = time.perf_counter()
    value = tc.triton_key()
    seconds = time.perf_counter() - t0
    own = getattr(tc.triton_key, "__wrapped_original__", tc.triton_key)
    print(json.dumps({
        "outcome": _keycache.outcome(),
        "patched": bool(getattr(tc.triton_key, "_warmkit_key_cache", False)),
        "equal": value == own(),
        "seconds": seconds,
    }))
    """
)


def _child(env: dict[str, str]) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", _CHILD],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_new_process_hits_and_matches_triton(tmp_path):
    env = {"XDG_CACHE_HOME": str(tmp_path / "xdg")}
    first = _child(env)
    assert first == first | {"outcome": "stored", "patched": True, "equal": True}
    second = _child(env)
    assert second == second | {"outcome": "hit", "patched": True, "equal": True}
    assert second["seconds"] < first["seconds"]


def test_opt_out(tmp_path):
    res = _child({"XDG_CACHE_HOME": str(tmp_path / "xdg"), _keycache.ENV: "0"})
    assert res == res | {"outcome": None, "patched": False, "equal": True}
    assert not (tmp_path / "xdg" / "warmkit").exists()


def test_threads_asking_at_once_hash_once(monkeypatch):
    """Parallel compile threads on a cold start: one computation, the others wait for it."""
    import threading
    import time

    calls: list[int] = []

    def slow(original):
        calls.append(1)
        time.sleep(0.2)
        return "the-key"

    monkeypatch.setattr(_keycache, "_compute", slow)
    fn = _keycache._make_cached(lambda: "the-key")
    got: list[str] = []
    threads = [threading.Thread(target=lambda: got.append(fn())) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == ["the-key"] * 8 and calls == [1]


@pytest.mark.parametrize(
    "edit,warned",
    [
        (lambda e: e.update(libtriton_sha256="0" * 64), True),  # 64 hex digits: looked valid
        (lambda e: e.update(libtriton_sha256="not hex"), True),
        (lambda e: e.pop("check"), False),  # written before the check existed: quietly redone
    ],
)
def test_an_edited_digest_is_recomputed_and_repaired_with_a_warning(xdg, caplog, edit, warned):
    original = tritons_own()
    _keycache._cached_key(original)
    path = _keycache.cache_file()
    data = json.loads(path.read_text())
    (entry,) = data["entries"].values()
    edit(entry)
    path.write_text(json.dumps(data))
    with caplog.at_level("WARNING", logger="warmkit_triton._keycache"):
        assert _keycache._cached_key(original) == (original(), "stored")  # Triton's own value
    if warned:
        (record,) = caplog.records
        assert (
            str(path) in record.getMessage() and "does not match its check" in record.getMessage()
        )
    else:
        assert not caplog.records
    caplog.clear()
    assert _keycache._cached_key(original) == (original(), "hit")  # repaired
    assert not caplog.records
