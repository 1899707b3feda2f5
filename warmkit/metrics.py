"""Prometheus metrics for serving engines (optional extra: ``pip install 'warmkit[metrics]'``).

vLLM and SGLang already serve Prometheus metrics; ``enable()`` registers
warmkit's next to theirs (in ``prometheus_client``'s default registry, or the
one given), so an engine's ``/metrics`` endpoint shows them:

* ``warmkit_runtime_compiles_total{kernel,backend,kind}`` (counter): every
  monitor event after warmup; ``kind`` is ``compile`` (a real compile),
  ``disk_hit`` (loaded from the backend's persistent cache), ``load`` (a
  module load with no compile) or ``refused`` (error mode);
* ``warmkit_warmup_seconds`` (gauge): the wall time of the last warmup;
* ``warmkit_warmup_keys{status}`` (gauge): the last warmup's keys by status
  (``compiled``, ``cached``, ``failed``, ``skipped``);
* ``warmkit_store_refused_total{kind}`` (counter): shared-store entries refused
  (unsigned or wrongly signed under trust, undeclared file names, corrupt);
  ``kind`` is the entry key's kind (``triton``, ...).

Example::

    import warmkit.metrics
    warmkit.metrics.enable()          # before warmkit.warmup(...)
"""

from __future__ import annotations

import logging
import threading
from typing import Any

__all__ = ["INSTALL_HINT", "disable", "enable", "enabled"]

logger = logging.getLogger(__name__)

INSTALL_HINT = "pip install 'warmkit[metrics]'  (or: pip install prometheus_client)"

_lock = threading.Lock()
_metrics: dict[str, Any] | None = None


def enable(registry: Any = None) -> dict[str, Any]:
    """Create warmkit's metrics in ``registry`` (default: prometheus_client's) and start updating them.

    Calling it again returns the metrics already enabled.

    Args:
        registry: a ``prometheus_client.CollectorRegistry``; None = the default one.

    Returns:
        The metric objects by name.

    Raises:
        ImportError: ``prometheus_client`` is not installed (the message has the install hint).
    """
    global _metrics
    try:
        import prometheus_client as prom
    except ImportError as exc:
        raise ImportError(f"warmkit.metrics needs prometheus_client: {INSTALL_HINT}") from exc
    with _lock:
        if _metrics is not None:
            return _metrics
        kwargs = {} if registry is None else {"registry": registry}
        _metrics = {
            "warmkit_runtime_compiles_total": prom.Counter(
                "warmkit_runtime_compiles",
                "JIT events after warmup: real compiles, disk-cache hits, module loads, refusals",
                ["kernel", "backend", "kind"],
                **kwargs,
            ),
            "warmkit_warmup_seconds": prom.Gauge(
                "warmkit_warmup_seconds", "Wall time of the last warmkit warmup", **kwargs
            ),
            "warmkit_warmup_keys": prom.Gauge(
                "warmkit_warmup_keys",
                "Keys of the last warmkit warmup, by status",
                ["status"],
                **kwargs,
            ),
            "warmkit_store_refused_total": prom.Counter(
                "warmkit_store_refused",
                "Shared-store entries refused: unsigned, wrongly signed, undeclared names, corrupt",
                ["kind"],
                **kwargs,
            ),
        }
        return _metrics


def disable() -> None:
    """Stop updating the metrics (they stay registered where they were created)."""
    global _metrics
    with _lock:
        _metrics = None


def enabled() -> bool:
    """Whether ``enable()`` is in force."""
    return _metrics is not None


def observe_event(kernel: str, backend: str | None, kind: str) -> None:
    """Count one monitor event (called by ``warmkit.monitor``)."""
    m = _metrics
    if m is not None:
        m["warmkit_runtime_compiles_total"].labels(kernel, backend or "-", kind).inc()


def observe_store_refusal(kind: str) -> None:
    """Count one refused store entry (called by ``warmkit._cache.fleet``)."""
    m = _metrics
    if m is not None:
        m["warmkit_store_refused_total"].labels(kind).inc()


def observe_report(report: Any) -> None:
    """Publish a warmup report's duration and keys by status (called by ``warmkit.warmup``)."""
    m = _metrics
    if m is None:
        return
    m["warmkit_warmup_seconds"].set(report.seconds)
    for status, n in report.totals().items():
        if status != "keys":
            m["warmkit_warmup_keys"].labels(status).set(n)
