"""``warmkit_triton._torch_start`` (``WARMKIT_TRITON_TORCH_START``) on a CPU host; the GPU side: ``test_gpu.py``."""

from __future__ import annotations

import logging
import threading

import pytest
import torch
from warmkit_triton import _envs, _torch_start

pytestmark = [
    pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU side"),
    pytest.mark.filterwarnings("ignore:TRITON_DEFAULT_FP_FUSION"),
]


def test_the_starts_are_real_torch_ops_that_run_on_a_device():
    # the op list itself, on the one device this host has: shapes and dtypes torch accepts
    _torch_start.warm("cpu")


def test_it_is_off_unless_asked_for(monkeypatch):
    monkeypatch.delenv("WARMKIT_TRITON_TORCH_START", raising=False)
    assert _envs.get("WARMKIT_TRITON_TORCH_START") is False
    monkeypatch.setenv("WARMKIT_TRITON_TORCH_START", "1")
    assert _envs.get("WARMKIT_TRITON_TORCH_START") is True


def test_a_failed_start_is_said_once_and_the_release_says_so(caplog):
    # no CUDA here: torch refuses the device; one warning names the variable, nothing raises
    with caplog.at_level(logging.WARNING, logger="warmkit_triton._torch_start"):
        release = _torch_start.start(0)
        assert release() is False
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1, warnings
    assert "WARMKIT_TRITON_TORCH_START" in warnings[0] and "device 0" in warnings[0]
    assert not [t for t in threading.enumerate() if t.name == "warmkit-torch-start"]


def _warmup(monkeypatch, tmp_path, target=None):
    import warmkit
    from triton_backend._kernels import Add

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    reg = warmkit.WarmupRegistry()
    with reg.activate():
        Add().register_warmup(dtype="float32", n=[4096])
    config = warmkit.WarmupConfig(
        progress="off", monitor="off", on_error="collect", jobs=1, target=target
    )
    return warmkit.warmup(config, reg)


def _said(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "warmkit_triton._torch_start"]


def test_a_warmup_without_a_device_says_once_that_nothing_was_started(
    tmp_path, monkeypatch, caplog
):
    # the flag asks for torch's starts on the warmup's device; with none, nothing starts,
    # and the setting is not silently dropped: one warning per process, not per warmup
    import warmkit

    monkeypatch.setattr(_torch_start, "_said", [])
    monkeypatch.setenv("WARMKIT_TRITON_TORCH_START", "1")
    with caplog.at_level(logging.WARNING, logger="warmkit_triton._torch_start"):
        for _ in range(2):
            with pytest.raises(warmkit.WarmupError, match="no GPU is visible to Triton"):
                _warmup(monkeypatch, tmp_path)
    (said,) = _said(caplog)
    assert said.startswith("WARMKIT_TRITON_TORCH_START is set, but no GPU is visible")
    assert not [t for t in threading.enumerate() if t.name == "warmkit-torch-start"]


def test_an_ahead_of_time_warmup_starts_nothing_and_says_nothing(tmp_path, monkeypatch, caplog):
    # it loads into no device, so the variable does not apply: a compile worker (always
    # ahead of time) of a device warmup that made the starts must not warn about them
    monkeypatch.setattr(_torch_start, "_said", [])
    monkeypatch.setenv("WARMKIT_TRITON_TORCH_START", "1")
    with caplog.at_level(logging.WARNING, logger="warmkit_triton._torch_start"):
        report = _warmup(monkeypatch, tmp_path, target="cuda:90")
    assert [e.status for e in report.entries] in (["compiled"], ["cached"])
    assert _said(caplog) == []
    assert not [t for t in threading.enumerate() if t.name == "warmkit-torch-start"]


def test_without_the_flag_nothing_is_said(tmp_path, monkeypatch, caplog):
    import warmkit

    monkeypatch.setattr(_torch_start, "_said", [])
    monkeypatch.delenv("WARMKIT_TRITON_TORCH_START", raising=False)
    with (
        caplog.at_level(logging.WARNING, logger="warmkit_triton._torch_start"),
        pytest.raises(warmkit.WarmupError, match="no GPU is visible to Triton"),
    ):
        _warmup(monkeypatch, tmp_path)  # a device warmup, no GPU: would warn with the flag
    assert _said(caplog) == []
