"""``warmkit._plugin.cuda``: the early CUDA start of a device warmup, and each DSL backend's use of it.

On a host without an NVIDIA driver; the driver's side (the context made, then given
back) is ``tests/triton_backend/test_gpu.py``.
"""

from __future__ import annotations

import threading

import pytest

from warmkit._plugin import cuda


def _has_libcuda() -> bool:
    try:
        cuda._libcuda()
    except OSError:
        return False
    return True


def _cuda_start_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "warmkit-cuda-start"]


@pytest.fixture
def starts(monkeypatch):
    """Each early start asked for, as ``["start 0", "release 0", ...]``, in order."""
    calls: list[str] = []

    def start_context(device: int):
        calls.append(f"start {device}")
        return lambda: calls.append(f"release {device}") or True

    monkeypatch.setattr(cuda, "start_context", start_context)
    monkeypatch.setattr(cuda, "_torch_cuda_started", lambda: False)
    return calls


@pytest.mark.skipif(_has_libcuda(), reason="this host has an NVIDIA driver")
def test_the_early_start_is_a_no_op_without_a_driver():
    # A device warmup on a host without libcuda starts nothing and fails nothing: the
    # warmup's own first use of the device says there is none, per key.
    release = cuda.start_context(0)
    assert release() is False
    assert not _cuda_start_threads()
    assert cuda.cuda_capability() is None
    with cuda.early_context(True):
        pass
    assert not _cuda_start_threads()


def test_a_device_warmup_starts_device_0_and_gives_it_back_at_its_end(starts):
    with cuda.early_context(True):
        assert starts == ["start 0"]
    assert starts == ["start 0", "release 0"]
    with pytest.raises(KeyError), cuda.early_context(True):  # a failed warmup gives it back too
        raise KeyError("x")
    assert starts[2:] == ["start 0", "release 0"]


def test_no_start_ahead_of_time_or_once_torchs_cuda_has_started(starts, monkeypatch):
    with cuda.early_context(False):  # ahead of time: no device to load into
        pass
    monkeypatch.setattr(cuda, "_torch_cuda_started", lambda: True)
    with cuda.early_context(True):  # torch made the context: nothing to start early
        pass
    assert starts == []


@pytest.mark.parametrize("plugin", ["warmkit_tilelang", "warmkit_cutedsl"])
def test_each_dsl_backends_device_warmup_starts_cuda_beside_its_imports(plugin, starts):
    # TileLang's first key imports TileLang, TVM and torch (2.8 s on an H100): the
    # driver's start runs beside that import, not after it. Ahead of time, nothing.
    module = pytest.importorskip(plugin)
    backend = getattr(
        module, "TileLangBackend" if plugin == "warmkit_tilelang" else "CuteDSLBackend"
    )()
    with backend.compile_scope(None, 4):
        assert starts == ["start 0"]
    assert starts == ["start 0", "release 0"]
    with backend.compile_scope("cuda:90", 4):
        pass
    assert starts == ["start 0", "release 0"]
