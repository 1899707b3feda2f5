"""``warmkit_triton._cuda`` and the early CUDA start on a host without an NVIDIA driver (GPU: ``test_gpu.py``)."""

from __future__ import annotations

import ctypes
import threading

import pytest
from warmkit_triton import _cuda


def _has_libcuda() -> bool:
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return True


pytestmark = pytest.mark.skipif(_has_libcuda(), reason="this host has an NVIDIA driver")


def test_the_device_target_is_none_without_a_driver():
    assert _cuda.capability() is None


def test_a_device_warmup_without_a_driver_fails_its_keys_as_before(tmp_path, monkeypatch):
    # The early start must not turn "no device" into a hang or a different error.
    import warmkit
    from triton_backend._kernels import Add

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    reg = warmkit.WarmupRegistry()
    with reg.activate():
        Add().register_warmup(dtype="float32", n=[4096])
    config = warmkit.WarmupConfig(progress="off", monitor="off", on_error="collect", jobs=1)
    with pytest.raises(warmkit.WarmupError, match="no GPU is visible to Triton") as info:
        warmkit.warmup(config, reg)
    assert [e.status for e in info.value.report.entries] == ["failed"]
    assert not [t for t in threading.enumerate() if t.name == "warmkit-cuda-start"]
