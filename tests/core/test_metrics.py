"""warmkit.metrics: Prometheus names and values, fed by the monitor and the warmup report."""

from __future__ import annotations

import builtins
from collections.abc import Iterator

import prometheus_client
import pytest

import warmkit
from warmkit import metrics, monitor

from ._kernels import PyKernel


@pytest.fixture
def prom() -> Iterator[prometheus_client.CollectorRegistry]:
    metrics.disable()
    reg = prometheus_client.CollectorRegistry()
    metrics.enable(reg)
    yield reg
    metrics.disable()


def test_names_and_values(prom: prometheus_client.CollectorRegistry, registry) -> None:
    kernel = PyKernel()
    kernel.register_warmup(n=[1, 2], flag=[True])
    PyKernel.fail_on = frozenset()
    report = warmkit.warmup(warmkit.WarmupConfig(monitor="warn", progress="off"), registry)
    assert prom.get_sample_value("warmkit_warmup_seconds") == pytest.approx(report.seconds)
    assert prom.get_sample_value("warmkit_warmup_keys", {"status": "compiled"}) == 2
    assert prom.get_sample_value("warmkit_warmup_keys", {"status": "failed"}) == 0

    kernel.get_or_compile(PyKernel.CompileKey(9, False))  # a runtime compile after warmup
    labels = {"kernel": PyKernel.name, "backend": "-", "kind": "compile"}
    assert prom.get_sample_value("warmkit_runtime_compiles_total", labels) == 1
    monitor.record(kernel="k", key="x", backend="triton", seconds=0.1, kind="disk_hit")
    monitor.record(kernel="k", key="y", backend="triton", seconds=0.1, kind="disk_hit")
    monitor.record(kernel="k", key="z", backend="triton", seconds=0.0, kind="load")
    k = {"kernel": "k", "backend": "triton"}
    assert prom.get_sample_value("warmkit_runtime_compiles_total", k | {"kind": "disk_hit"}) == 2
    assert prom.get_sample_value("warmkit_runtime_compiles_total", k | {"kind": "load"}) == 1
    monitor.arm("error")
    with pytest.raises(warmkit.RuntimeCompileError):
        kernel.get_or_compile(PyKernel.CompileKey(10, False))
    refused = {"kernel": PyKernel.name, "backend": "-", "kind": "refused"}
    assert prom.get_sample_value("warmkit_runtime_compiles_total", refused) == 1
    text = prometheus_client.generate_latest(prom).decode()
    assert "# TYPE warmkit_runtime_compiles_total counter" in text


def test_disabled_metrics_cost_nothing_and_enable_is_idempotent() -> None:
    metrics.disable()
    monitor.arm("warn")
    monitor.record(kernel="k", key="x", backend=None, seconds=0.0, kind="compile")  # no error
    reg = prometheus_client.CollectorRegistry()
    assert metrics.enable(reg) is metrics.enable(reg)
    metrics.disable()


def test_missing_prometheus_client_gives_the_install_hint(monkeypatch) -> None:
    metrics.disable()
    real = builtins.__import__

    def fake(name, *args, **kwargs):
        if name == "prometheus_client":
            raise ImportError("No module named 'prometheus_client'")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", fake)
    with pytest.raises(ImportError, match=r"pip install 'warmkit\[metrics\]'"):
        metrics.enable()
