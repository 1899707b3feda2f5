"""The CuTe monitor hooks: a raw cute.compile is reported, error mode refuses before tracing,
hooks chain with a wrapper installed before and uninstalling restores it exactly."""

from __future__ import annotations

import pytest
from warmkit_cutedsl import CuteDSLBackend, _hooks
from warmkit_cutedsl import _cute_api as api

from warmkit import RuntimeCompileError, monitor


def _raw_compile():
    cute = api.require_cute()
    from warmkit_cutedsl._vector_add_program import vector_add

    t = api.fake_tensor("float32", (512,), 16)
    return cute.compile(vector_add, t, t, t, 512, options=api.compile_options("sm_90a"))


def _events():
    return [e for e in monitor.events() if e.backend == "cutedsl"]


def test_a_raw_compile_is_reported_and_error_mode_refuses_before_lowering():
    owner, attr = api.backend_compile_hook_point()
    original = owner.__dict__[attr]
    lowered = []

    def counting(self, *args, **kwargs):  # installed below ours: sees what reaches CuTe
        lowered.append(1)
        return original(self, *args, **kwargs)

    setattr(owner, attr, counting)
    try:
        backend = CuteDSLBackend()
        monitor.arm("warn")
        backend.install_monitor()
        _raw_compile()
        (event,) = _events()
        assert event.kind == "compile" and event.kernel.endswith("vector_add") and event.seconds > 0
        assert lowered == [1]
        monitor.arm("error")
        with pytest.raises(RuntimeCompileError):
            _raw_compile()
        assert lowered == [1] and _events()[-1].kind == "refused"
        backend.uninstall_monitor()
        assert owner.__dict__[attr] is counting
    finally:
        setattr(owner, attr, original)


def test_hooks_chain_and_uninstall_restores_exactly():
    owner, attr = api.compile_hook_point()
    original = owner.__dict__[attr]
    seen = []

    def foreign(self, *args, **kwargs):
        seen.append("foreign")
        return original(self, *args, **kwargs)

    setattr(owner, attr, foreign)
    try:
        backend = CuteDSLBackend()
        monitor.arm("warn")
        backend.install_monitor()
        _raw_compile()
        assert seen == ["foreign"] and len(_events()) == 1
        backend.uninstall_monitor()
        assert owner.__dict__[attr] is foreign
        assert not _hooks.installed()
        _raw_compile()
        assert len(_events()) == 1
    finally:
        setattr(owner, attr, original)
