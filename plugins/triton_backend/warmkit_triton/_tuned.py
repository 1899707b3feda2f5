"""Tuned results: benchmarking configs on scratch tensors, and storing the winners where bundles find them.

A tuned result (the winner and every config's timing) is stored per kernel
function (and its source digest), autotune key, config list, GPU model,
target and Triton version, as a small entry of the Triton cache directory,
``<cache>/warmkit-autotune-<sha256>/autotune.json``, sealed with its own
sha256. It therefore persists across restarts, travels in bundles (which pack
every cache entry), is installed with them, and is carried by anything that
copies cache entries. A damaged file is ignored with a warning naming it, and
the key is re-tuned.

With a fleet store (``WarmupConfig(store=...)``, docs/fleet.md) every result a
warmup tunes is published as store entry ``autotune/<sha256[:40]>``, and a
warmup that has no result locally fetches it from there (verified by the
store's per-file sha256 and by the result's own seal) before it benchmarks
anything, so one GPU of a model tunes a key for the whole fleet.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from warmkit import current_fleet
from warmkit._registry.manifest.text import write_atomic

from . import _triton_api as api

if TYPE_CHECKING:
    from ._stack import Derived, Stack

__all__ = [
    "INTERPRETER_MODEL",
    "RESULT_FILE",
    "RESULT_PREFIX",
    "ResultId",
    "benchmark",
    "describe_config",
    "find_result",
    "gpu_model",
    "known_winners",
    "result_id",
    "scan_results",
    "scratch",
    "store_result",
]

logger = logging.getLogger(__name__)

#: Tuned results are Triton-cache entries named ``<RESULT_PREFIX><sha256[:40]>/<RESULT_FILE>``.
RESULT_PREFIX = "warmkit-autotune-"
RESULT_FILE = "autotune.json"
_RESULT_FORMAT = "warmkit.autotune"
_RESULT_VERSION = 1
#: The "GPU model" of results measured under ``TRITON_INTERPRET=1`` (CPU tests).
INTERPRETER_MODEL = "triton-interpreter"


def describe_config(config: Any) -> dict[str, Any]:
    """A JSON-ready, stable description of one ``triton.Config``."""
    if config is None:
        return {}
    hook = config.pre_hook
    return {
        "kwargs": {k: _plain(v) for k, v in config.kwargs.items()},
        "num_warps": config.num_warps,
        "num_stages": config.num_stages,
        "num_ctas": config.num_ctas,
        "maxnreg": getattr(config, "maxnreg", None),
        "ir_override": getattr(config, "ir_override", None),
        "pre_hook": None if hook is None else f"{hook.__module__}.{hook.__qualname__}",
    }


def _plain(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return repr(value)


# -- scratch tensors and benchmarking -----------------------------------------------------------


def scratch(arg: Any, device: Any, generator: Any = None) -> Any:
    """A real tensor for one warmup argument (``WarmupTensor`` -> random contents); others as they are.

    Floats are standard normal, integers uniform in [0, 4), bools random:
    never all zeros, so a kernel whose speed depends on its data is not
    measured on a degenerate input. Shape, strides, dtype and alignment are
    the descriptor's.
    """
    from ._tensor import WarmupTensor

    if not isinstance(arg, WarmupTensor):
        return arg
    import torch

    dtype = arg.dtype if isinstance(arg.dtype, torch.dtype) else getattr(torch, str(arg.dtype))
    span = max(1, 1 + sum((s - 1) * abs(st) for s, st in zip(arg.shape, arg.stride())))
    offset = 0 if arg.aligned else max(1, 4 // arg.element_size())
    n = span + offset
    if dtype.is_floating_point:
        base = torch.randn(n, generator=generator).to(dtype)
    elif dtype == torch.bool:
        base = torch.randint(0, 2, (n,), generator=generator).bool()
    else:
        base = torch.randint(0, 4, (n,), generator=generator).to(dtype)
    base = base.to(device)
    return torch.as_strided(base, tuple(arg.shape), tuple(arg.stride()), offset)


def _wall_clock_bench(fn: Callable[[], Any], quantiles: Sequence[float]) -> list[float]:
    """Median-of-runs wall clock in ms, for the interpreter (Triton's do_bench needs a GPU driver)."""
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    times.sort()
    return [times[min(len(times) - 1, int(q * len(times)))] for q in quantiles]


_bench_lock = threading.Lock()  # one benchmark at a time: concurrent ones would skew each other


def benchmark(
    stack: Stack,
    candidates: Sequence[tuple[int, Any, Any, Derived]],
    args: Sequence[Any],
    grid: Any,
    device: Any,
    *,
    interpreted: bool,
) -> tuple[dict[int, list[float]], float]:
    """Time each candidate config on scratch tensors; return ``({index: [p50, p20, p80] ms}, seconds)``.

    Args:
        stack: the kernel's stack.
        candidates: ``(index, config, executor, derived)`` per compiled config.
        args: the warmup's positional arguments (``WarmupTensor``\\ s become scratch tensors).
        grid: the launch grid (a tuple or a callable of the bound arguments).
        device: where the scratch tensors live.
        interpreted: under ``TRITON_INTERPRET=1`` (no driver: wall-clock timing
            unless the autotuner has its own ``do_bench``).

    A config that runs out of resources or fails to launch times as infinity,
    as in Triton's autotuner.
    """
    import torch

    tuner = stack.tuner
    gen = torch.Generator().manual_seed(0)
    real_args = [scratch(a, device, gen) for a in args]
    bench = api.benchmarker(stack.autotuner, driver_available=not interpreted) or _wall_clock_bench
    timings: dict[int, list[float]] = {}
    t0 = time.perf_counter()
    with _bench_lock:
        for index, config, executor, derived in candidates:
            params = {k: scratch(v, device, gen) for k, v in derived.params.items()}
            full = {**dict(zip(stack.jit.arg_names, real_args)), **params, **derived.options}

            def call(
                executor: Any = executor,
                params: dict[str, Any] = params,
                config: Any = config,
                full: dict[str, Any] = full,
            ) -> None:
                if config is not None and config.pre_hook:
                    config.pre_hook(full)
                tuner.pre_hook(full)
                try:
                    executor(grid, *real_args, **params)
                except Exception as exc:  # noqa: BLE001 - the post_hook sees it, then it propagates
                    try:
                        tuner.post_hook(full, exception=exc)
                    finally:
                        raise
                tuner.post_hook(full, exception=None)

            try:
                result = bench(call, quantiles=(0.5, 0.2, 0.8))
            except Exception as exc:  # noqa: BLE001 - Triton's autotuner times these as inf too
                logger.warning(
                    "%s config %d (%s) failed while benchmarking: %s: %s",
                    stack.name,
                    index,
                    config,
                    type(exc).__name__,
                    exc,
                )
                result = [float("inf")] * 3
            timings[index] = [
                float(x) for x in (result if isinstance(result, (list, tuple)) else [result])
            ]
        if not interpreted and torch.cuda.is_available():
            torch.cuda.synchronize(device)
    return timings, time.perf_counter() - t0


def gpu_model(device: Any, *, interpreted: bool = False) -> str:
    """The GPU's model name (``"NVIDIA H200"``): results are only valid on the model they were measured on."""
    if interpreted:
        return INTERPRETER_MODEL
    import torch

    return str(torch.cuda.get_device_name(device))


# -- the results store ---------------------------------------------------------------------------


def _function_identity(jit: Any) -> tuple[str, str]:
    fn = getattr(jit, "fn", None)
    name = f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', '?')}"
    return name, api.function_cache_key(jit)


@attrs.frozen
class ResultId:
    """What a tuned result is valid for (everything that makes its entry name)."""

    function: str
    function_cache_key: str
    autotune_key: str
    configs: str  # sha256 of every config's description, in order
    gpu: str
    target: str
    triton_version: str

    def entry(self) -> str:
        text = json.dumps(attrs.asdict(self), sort_keys=True)
        return RESULT_PREFIX + hashlib.sha256(text.encode()).hexdigest()[:40]

    def same_kernel(self, other: ResultId) -> bool:
        return (
            self.function,
            self.function_cache_key,
            self.autotune_key,
            self.configs,
            self.target,
            self.triton_version,
        ) == (
            other.function,
            other.function_cache_key,
            other.autotune_key,
            other.configs,
            other.target,
            other.triton_version,
        )


def result_id(stack: Stack, tkey: tuple[Any, ...] | None, gpu: str, target: str) -> ResultId:
    name, digest = _function_identity(stack.jit)
    configs = json.dumps([describe_config(c) for c in stack.tuner.configs], sort_keys=True)
    return ResultId(
        function=name,
        function_cache_key=digest,
        autotune_key=repr(tkey),
        configs=hashlib.sha256(configs.encode()).hexdigest(),
        gpu=gpu,
        target=target,
        triton_version=str(api.triton_version()),
    )


def _seal(body: dict[str, Any]) -> str:
    text = json.dumps(body, sort_keys=True, default=repr)
    return json.dumps(
        {"body": body, "sha256": hashlib.sha256(text.encode()).hexdigest()},
        indent=1,
        sort_keys=True,
        default=repr,
    )


def _unseal(path: Path) -> dict[str, Any] | None:
    """A result file's body, or None (with a warning naming the file) when it is damaged."""
    try:
        text = path.read_text()
    except (OSError, ValueError) as exc:
        logger.warning("tuned result %s is unreadable (%s); ignoring it", path, exc)
        return None
    return _unseal_text(text, str(path))


def _unseal_text(text: str, where: str) -> dict[str, Any] | None:
    try:
        data = json.loads(text)
        body = data["body"]
        sealed = json.dumps(body, sort_keys=True, default=repr)
        ok = hashlib.sha256(sealed.encode()).hexdigest() == data["sha256"]
        ok = ok and body.get("format") == _RESULT_FORMAT and body.get("version") == _RESULT_VERSION
    except (ValueError, KeyError, TypeError) as exc:
        logger.warning("tuned result %s is unreadable (%s); ignoring it", where, exc)
        return None
    if not ok:
        logger.warning(
            "tuned result %s fails its checksum; ignoring it (it will be re-tuned)", where
        )
        return None
    return body


def _write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, text)


def store_key(rid: ResultId) -> str:
    """The fleet-store key of ``rid``'s result: ``autotune/<sha256[:40]>``."""
    return "autotune/" + rid.entry().removeprefix(RESULT_PREFIX)


def store_result(
    directory: str | os.PathLike[str],
    rid: ResultId,
    *,
    kernel: str,
    configs: Sequence[Any],
    timings: Mapping[int, Sequence[float]],
    winner: int,
    seconds: float,
) -> Path:
    """Write one tuned result atomically into ``directory`` (a Triton cache); return its path."""
    body = {
        "format": _RESULT_FORMAT,
        "version": _RESULT_VERSION,
        "id": attrs.asdict(rid),
        "kernel": kernel,
        "configs": [describe_config(c) for c in configs],
        "timings_ms": {str(i): list(t) for i, t in sorted(timings.items())},
        "winner": winner,
        "winner_config": describe_config(configs[winner]),
        "bench_seconds": round(seconds, 6),
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }
    path = Path(directory) / rid.entry() / RESULT_FILE
    text = _seal(body)
    _write_atomic(path, text)
    fleet = current_fleet()
    if fleet is not None and fleet.publish(
        store_key(rid), {RESULT_FILE: text.encode()}, kernel=kernel
    ):
        logger.info("kernel %s: tuned result published as %s", kernel, store_key(rid))
    return path


def _valid_for(body: dict[str, Any], rid: ResultId, stack: Stack, path: Path | str) -> int | None:
    winner = body.get("winner")
    configs = stack.tuner.configs
    if ResultId(**body["id"]) != rid or not isinstance(winner, int):
        return None
    if not 0 <= winner < len(configs) or describe_config(configs[winner]) != body.get(
        "winner_config"
    ):
        logger.warning("tuned result %s names a config the kernel does not have; ignoring it", path)
        return None
    return winner


#: Extra directories searched for results (the cache in effect before a bundle build redirected it).
lookup_dirs: list[str] = []


def _copy_into(path: Path, directory: str | os.PathLike[str]) -> None:
    """Copy a result entry into ``directory`` (atomically), so a bundle built from it carries it."""
    here = Path(directory) / path.parent.name / RESULT_FILE
    if here != path:
        _write_atomic(here, path.read_text())


def find_result(
    stack: Stack, rid: ResultId, directory: str | os.PathLike[str]
) -> tuple[int, dict[str, Any]] | None:
    """The stored winner index and result body for ``rid``: from ``directory``, ``lookup_dirs``, the fleet store.

    A result found outside ``directory`` is copied into it (one fetched from
    the store only when the fleet is not read-only), so a bundle built from
    ``directory`` carries it and the next start finds it locally.
    """
    for base in [str(directory), *reversed(lookup_dirs)]:
        path = Path(base) / rid.entry() / RESULT_FILE
        if not path.is_file():
            continue
        body = _unseal(path)
        if body is None:
            continue
        winner = _valid_for(body, rid, stack, path)
        if winner is None:
            continue
        _copy_into(path, directory)
        return winner, body
    return _fetch_result(stack, rid, directory)


def _fetch_result(
    stack: Stack, rid: ResultId, directory: str | os.PathLike[str]
) -> tuple[int, dict[str, Any]] | None:
    fleet = current_fleet()
    if fleet is None:
        return None
    key = store_key(rid)
    files = fleet.fetch(key)  # verified against the store's sha256s; a bad entry is deleted
    if files is None:
        return None
    where = f"store entry {key}"
    if RESULT_FILE not in files:
        logger.warning(
            "tuned result %s has no %s; ignoring it (it will be re-tuned)", where, RESULT_FILE
        )
        return None
    text = files[RESULT_FILE].decode("utf-8", "replace")
    body = _unseal_text(text, where)
    winner = None if body is None else _valid_for(body, rid, stack, where)
    if body is None or winner is None:
        return None
    if not fleet.read_only:
        _write_atomic(Path(directory) / rid.entry() / RESULT_FILE, text)
    logger.info("kernel %s: tuned result fetched from the store (%s)", body.get("kernel"), key)
    return winner, body


def scan_results(directory: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Every intact tuned result under one cache directory (damaged ones are skipped with a warning)."""
    return [body for body, _path in _scan(directory)]


def _scan(directory: str | os.PathLike[str]) -> list[tuple[dict[str, Any], Path]]:
    base = Path(directory)
    if not base.is_dir():
        return []
    out = []
    for entry in sorted(base.iterdir()):
        path = entry / RESULT_FILE
        if entry.name.startswith(RESULT_PREFIX) and path.is_file():
            body = _unseal(path)
            if body is not None:
                out.append((body, path))
    return out


def known_winners(
    stack: Stack, rid: ResultId, directory: str, *, copy: bool = False
) -> dict[str, int]:
    """GPU model -> winner index, for every model with a result for ``rid``'s kernel, key and target.

    Args:
        copy: copy each result found outside ``directory`` into it (a bundle build carries them).
    """
    out: dict[str, int] = {}
    for base in [directory, *reversed(lookup_dirs)]:
        for body, path in _scan(base):
            try:
                other = ResultId(**body["id"])
            except TypeError:
                continue
            if other.same_kernel(rid) and other.gpu not in out:
                winner = _valid_for(body, other, stack, path)
                if winner is not None:
                    out[other.gpu] = winner
                    if copy:
                        _copy_into(path, directory)
    return out
