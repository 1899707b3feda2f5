"""Ahead-of-time compiles: targets, the target-reporting driver, and what an AOT cache is valid for.

An AOT compile runs the kernel's own ``JITFunction.warmup`` (Triton's JIT path:
its binder, its specialization, its attrs, its options) while Triton's active
driver reports the *declared* target instead of a live GPU. The cache entry it
writes therefore has exactly the hash the GPU runtime will look up, provided
the runtime uses the same Triton wheel, CPython ABI, ptxas, cache-relevant
environment and cache directory path (see :func:`validity_record`).

The driver swap is scoped to the compiling thread: while any AOT compile runs,
Triton's ``driver.active`` is a small router that answers with the AOT driver
in threads (contexts) that are compiling ahead of time and with the real
driver everywhere else, so a live GPU in the same process keeps working.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import hashlib
import json
import logging
import os
import platform
import re
import subprocess
import sys
import sysconfig
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import attrs

import warmkit

from . import _triton_api as api
from ._triton_api import require_triton

__all__ = [
    "AOT_RECORD",
    "AotArtifact",
    "AotDriver",
    "Target",
    "aot_driver",
    "check_aot_cache",
    "describe_entry",
    "fingerprint",
    "parse_target",
    "prepare_entries",
    "relocate_cache_entry",
    "validate_target",
    "validity_record",
    "write_entry_record",
]

logger = logging.getLogger(__name__)

#: File an AOT compile writes into each Triton cache entry it produced.
AOT_RECORD = "warmkit-aot.json"

ACCEPTED_TARGETS = "'cuda:<compute capability>' such as 'cuda:80', 'cuda:90', 'cuda:100' (also 'sm_90', 'cuda:9.0')"


@attrs.frozen
class Target:
    """A parsed compile target.

    Attributes:
        backend: Triton's backend name (``"cuda"``).
        arch: the compute capability as Triton writes it (``90`` for sm_90).
        warp_size: threads per warp (32 on NVIDIA).
    """

    backend: str
    arch: int
    warp_size: int = 32

    def __str__(self) -> str:
        return f"{self.backend}:{self.arch}"

    def gpu_target(self) -> Any:
        """The ``triton.backends.compiler.GPUTarget`` for this target."""
        return api.gpu_target(self.backend, self.arch, self.warp_size)


def parse_target(target: str | warmkit.Target) -> Target:
    """Parse a target string such as ``"cuda:90"``.

    Args:
        target: ``"cuda:<cc>"`` (``cuda:80``, ``cuda:90``, ``cuda:100`` ...),
            ``"sm_90"``/``"sm90"``, or ``"cuda:9.0"``.

    Raises:
        ValueError: any other string; the message names it and the accepted forms.
        TypeError: not a string.
    """
    if not isinstance(target, (str, warmkit.Target)):
        raise TypeError(
            f"Triton target must be a string, one of {ACCEPTED_TARGETS}; got {target!r}"
        )
    try:
        parsed = warmkit.Target.parse(target)
        ok = parsed.platform == "cuda" and not parsed.feature  # Triton picks sm_90a itself
    except ValueError:
        ok = False
    if not ok:
        raise ValueError(f"unknown Triton target {target!r}; accepted: {ACCEPTED_TARGETS}")
    cc = parsed.capability
    if cc < 70:
        raise ValueError(
            f"unknown Triton target {target!r}: compute capability {cc} is below 70, which Triton "
            f"does not support; accepted: {ACCEPTED_TARGETS}"
        )
    return Target("cuda", cc)


@functools.lru_cache(maxsize=8)
def _ptxas_archs(path: str) -> frozenset[int]:
    """The ``sm_XY`` values a ptxas accepts for ``--gpu-name`` (from its ``--help``)."""
    out = subprocess.run(
        [path, "--help"], capture_output=True, text=True, timeout=30, check=False
    ).stdout
    return frozenset(int(m) for m in re.findall(r"'sm_(\d+)[af]?'", out))


def validate_target(target: str) -> Target:
    """``parse_target``, then check that the ptxas Triton would use can compile for it.

    Without this, ``cuda:999`` parses and ptxas fails per key with thousands of
    lines (a PTX dump) and half-written cache entries.

    Raises:
        ValueError: a malformed target, or one that ptxas does not support; the
            message names the accepted targets.
        TypeError: not a string.
    """
    tgt = parse_target(target)
    path = api.ptxas_path(tgt.arch)  # not its version: warmkit.prepare() calls this early
    try:
        archs = _ptxas_archs(str(path)) if path and os.path.isfile(path) else frozenset()
    except (OSError, subprocess.SubprocessError) as exc:  # cannot tell here; the compile will say
        logger.debug("cannot list the archs of ptxas %s for %s: %s", path, tgt, exc)
        return tgt
    if archs and tgt.arch not in archs:
        supported = ", ".join(f"cuda:{a}" for a in sorted(archs) if a >= 70)
        raise ValueError(
            f"unknown Triton target {target!r}: the ptxas Triton uses ({path}) cannot compile "
            f"for sm_{tgt.arch}; supported: {supported}"
        )
    return tgt


class AotDriver:
    """A Triton driver with no GPU that reports a declared target.

    It provides what ``JITFunction.warmup`` asks of a driver
    (``get_current_target``, ``get_current_device``, ``get_current_stream``)
    and nothing that needs a device; anything else raises a clear error.

    Args:
        target: the declared target.
    """

    def __init__(self, target: Target) -> None:
        self.target = target
        self._gpu_target = target.gpu_target()
        # A device id of its own, so the JITFunction's per-device binder and
        # in-memory cache for this target never mix with a real device 0's.
        self.device = f"warmkit-aot:{target}"

    def get_current_target(self) -> Any:
        return self._gpu_target

    def get_current_device(self) -> str:
        return self.device

    def get_current_stream(self, device: Any = None) -> int:
        return 0

    def set_current_device(self, device: Any) -> None:
        return None

    def get_device_capability(self, device: Any = None) -> tuple[int, int]:
        return divmod(self.target.arch, 10)

    @staticmethod
    def is_active() -> bool:
        return False

    def __getattr__(self, name: str) -> Any:
        raise RuntimeError(
            f"warmkit-triton: Triton asked the ahead-of-time driver for {name!r} while compiling "
            f"for {self.target} without a GPU; an AOT compile cannot load or launch kernels"
        )


_current_aot: contextvars.ContextVar[AotDriver | None] = contextvars.ContextVar(
    "warmkit_triton_aot_driver", default=None
)


class _RoutingDriver:
    """Stands in Triton's active-driver slot (``api.installed_driver``) while AOT compiles run."""

    def __init__(self, previous: Any) -> None:
        self._previous = previous

    def _pick(self) -> Any:
        aot = _current_aot.get()
        if aot is not None:
            return aot
        if self._previous is None:
            self._previous = api.default_driver()  # raises as Triton would when there is no GPU
        return self._previous

    def __getattr__(self, name: str) -> Any:
        return getattr(self._pick(), name)


_router_lock = threading.Lock()
_router_users = 0
_router: _RoutingDriver | None = None
_router_saved: Any = None


def _acquire_router() -> None:
    global _router_users, _router, _router_saved
    with _router_lock:
        if _router_users == 0:
            _router_saved = api.installed_driver()
            _router = _RoutingDriver(_router_saved)
            api.set_installed_driver(_router)
        _router_users += 1


def _release_router() -> None:
    global _router_users, _router, _router_saved
    with _router_lock:
        _router_users -= 1
        if _router_users == 0:
            if api.installed_driver() is _router:
                api.set_installed_driver(_router_saved)
            else:
                logger.warning(
                    "Triton's active driver was replaced during an AOT compile; leaving it as it is"
                )
            _router = None
            _router_saved = None


@contextlib.contextmanager
def routing() -> Iterator[None]:
    """Keep the routing driver installed for the duration of a block (refcounted)."""
    require_triton()
    _acquire_router()
    try:
        yield
    finally:
        _release_router()


@contextlib.contextmanager
def aot_driver(drv: AotDriver) -> Iterator[None]:
    """Make ``drv`` Triton's active driver in this thread/context for the block."""
    with routing():
        token = _current_aot.set(drv)
        try:
            yield
        finally:
            _current_aot.reset(token)


# -- what a cache entry is valid for ---------------------------------------------------------


def triton_key_digest() -> str:
    """sha256 of ``triton_key()``: Triton's own fingerprint of its wheel (version, sources, libtriton)."""
    return hashlib.sha256(api.triton_key().encode("utf-8")).hexdigest()


def cache_dir() -> str:
    """The absolute Triton cache directory in effect (``TRITON_CACHE_DIR`` or ``~/.triton/cache``)."""
    return api.cache_dir()


def validity_record(target: Target | str) -> dict[str, Any]:
    """Everything a Triton cache entry's hash depends on besides the kernel itself.

    An entry compiled here is found by a runtime only when all of these match:

    * ``triton_version`` and ``triton_key_sha256``: the hash covers the whole
      wheel, including ``libtriton.so``, so even the cp311 and cp312 wheels of
      one version differ;
    * ``python``: the CPython ABI (``cache_tag``, ``soabi``), for that reason;
    * ``ptxas``: the version string of the ptxas Triton uses for this arch;
    * ``env``: the cache-invalidating environment variables that are *set*
      (setting one to its default value still changes the hash);
    * ``cache_dir`` (informational): group files store absolute paths, so a
      runtime must use the same path, or relocate the entries (warmkit bundles
      do; see :func:`relocate_cache_entry`); a plain copy misses, or silently
      reads the original files while they exist.

    Args:
        target: the target the entries were compiled for.
    """
    triton = require_triton()
    tgt = parse_target(target) if isinstance(target, str) else target
    return {
        "target": str(tgt),
        "triton_version": triton.__version__,
        "triton_key_sha256": triton_key_digest(),
        "python": {
            "implementation": sys.implementation.name,
            "cache_tag": sys.implementation.cache_tag,
            "soabi": sysconfig.get_config_var("SOABI"),
            "version": platform.python_version(),
        },
        "platform": {"system": platform.system(), "machine": platform.machine()},
        "ptxas": api.ptxas_info(tgt.arch),
        "env": api.cache_invalidating_env(),
        "cache_dir": cache_dir(),
        "remote_cache_backend": os.environ.get("TRITON_REMOTE_CACHE_BACKEND"),
        "cache_manager": os.environ.get("TRITON_CACHE_MANAGER"),
        "fp_fusion_env": os.environ.get("TRITON_DEFAULT_FP_FUSION"),
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


@attrs.frozen
class AotArtifact:
    """What an ahead-of-time compile returns: a record of a cache entry, not a launchable kernel.

    Attributes:
        kernel: the kernel's name.
        key: the warmkit compile key.
        target: the target string, e.g. ``"cuda:90"``.
        hash: Triton's cache hash of the entry (hex sha256).
        name: the compiled function's name.
        cache_dir: the Triton cache directory it was written to.
        cache_hit: True when the entry already existed on disk.
        launcher: what building its C launcher needs (``_triton_api.launcher_recipe``);
            ``warmkit bundle install`` builds it on the GPU host (``prepare_entries``).
    """

    kernel: str
    key: Any
    target: str
    hash: str
    name: str
    cache_dir: str
    cache_hit: bool = False
    launcher: dict[str, Any] | None = attrs.field(default=None, eq=False, repr=False)
    #: the function's identity it was compiled with (``_pins.pins_of``), for ``warmkit explain``
    identity: dict[str, Any] | None = attrs.field(default=None, eq=False, repr=False)

    @property
    def entry_dir(self) -> str:
        """The entry's directory inside the cache (Triton names it by the base32 hash)."""
        from ._cache import entry_dir

        return entry_dir(self.cache_dir, self.hash)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(
            f"kernel {self.kernel!r} key {self.key!r} was compiled ahead of time for {self.target}; "
            "an AOT artifact cannot launch. At runtime on the GPU, warm up for the device "
            "(target=None): the cache entry makes that a disk hit."
        )


_record_cache: dict[str, dict[str, Any]] = {}
_record_lock = threading.Lock()


def _cached_record(target: Target) -> dict[str, Any]:
    """``validity_record`` without ``created``, memoized per target and environment."""
    memo = json.dumps([str(target), cache_dir(), sorted(api.cache_invalidating_env().items())])
    with _record_lock:
        rec = _record_cache.get(memo)
        if rec is None:
            rec = validity_record(target)
            rec.pop("created", None)
            _record_cache[memo] = rec
        return rec


def write_entry_record(artifact: AotArtifact, target: Target) -> Path | None:
    """Write ``<entry>/warmkit-aot.json``: the validity record and what the entry is.

    The record lives inside the entry's own directory (Triton ignores files it
    does not know there), so it travels with the entry through a copy or a
    warmkit bundle, and concurrent warmups never contend for one file.

    Returns:
        The record's path, or None when the entry directory does not exist
        (e.g. a remote cache manager).
    """
    entry = Path(artifact.entry_dir)
    if not entry.is_dir():
        logger.debug("no local cache entry %s for %s; record not written", entry, artifact.kernel)
        return None
    # Without the cache directory: a bundle built in a temporary directory and installed
    # again must give byte-identical records (identity), and relocation makes it moot.
    validity = {k: v for k, v in _cached_record(target).items() if k != "cache_dir"}
    data = {
        "format": 1,
        "validity": validity,
        "kernel": artifact.kernel,
        "key": repr(artifact.key),
        "name": artifact.name,
        "target": artifact.target,
        "hash": artifact.hash,
    }
    if artifact.launcher is not None:
        data["launcher"] = artifact.launcher
    if artifact.identity is not None:
        data["identity"] = artifact.identity
    path = entry / AOT_RECORD
    text = json.dumps(data, indent=1, sort_keys=True, default=str)
    try:
        if path.exists() and path.read_text() == text:
            return path
        tmp = entry / f".{AOT_RECORD}.{os.getpid()}.{threading.get_ident()}.tmp"
        tmp.write_text(text)
        os.replace(tmp, path)
    except OSError as exc:
        logger.warning("could not write AOT record %s: %s", path, exc)
        return None
    return path


#: The fields of a validity record that decide whether a runtime finds the entry.
CHECKED_FIELDS = ("triton_version", "triton_key_sha256", "python", "ptxas", "env")


def describe_entry(directory: str | os.PathLike[str]) -> dict[str, Any]:
    """An entry's kernel, target, and why it is stale here (``warmkit cache info``).

    Stale means the entry's warmkit AOT record says it was built by another
    Triton wheel, CPython ABI, ptxas or cache-relevant environment than
    this process has: Triton here would never look it up. An entry without
    a record (Triton wrote it on its own) is named by its function and
    never called stale, since nothing says what built it.
    """
    d = Path(directory)
    groups = sorted(d.glob(api.GROUP_FILE_GLOB))
    info: dict[str, Any] = {
        "kernel": groups[0].name[len(api.GROUP_FILE_PREFIX) : -len(".json")] if groups else "?",
        "target": None,
        "stale": None,
    }
    try:
        data = json.loads((d / AOT_RECORD).read_text())
        recorded, target = data["validity"], data["target"]
    except (OSError, ValueError, KeyError, TypeError):
        return info
    info["kernel"], info["target"] = data.get("kernel", info["kernel"]), target
    try:
        here = _cached_record(parse_target(target))
    except ValueError as exc:
        return info | {"stale": f"unknown target {target!r} ({exc})"}
    for field in CHECKED_FIELDS:
        if recorded.get(field) != here.get(field):
            return info | {"stale": f"{field} {recorded.get(field)!r}, here {here.get(field)!r}"}
    return info


def check_aot_cache(cache: str | os.PathLike[str] | None = None) -> list[str]:
    """Say why entries of an AOT-filled Triton cache would not be found by this process.

    For every entry that carries a warmkit AOT record, compares the record with
    this process (Triton wheel, CPython ABI, ptxas, cache-relevant
    environment), and checks that the entry's group file points inside this
    directory (a copied or moved cache misses, or silently reads the original).
    Every entry, recorded or not, is also verified: its recorded sha256s and
    sizes (``warmkit-integrity.json``), parseable metadata, non-empty binaries.

    Args:
        cache: the cache directory; default the one in effect (``TRITON_CACHE_DIR``).

    Returns:
        One line per problem; empty when every recorded entry is usable here.
    """
    from warmkit._integrity import verify_cache

    from ._cache import verify_cache_entry

    directory = Path(cache) if cache is not None else Path(cache_dir())
    directory = directory.resolve()
    # Corruption first: a truncated binary would be a "hit" that fails on the GPU.
    problems = [
        f"{Path(entry).name}: corrupt entry ({'; '.join(found)}); warmkit's next warmup "
        "quarantines and recompiles it (or run: warmkit cache verify --quarantine)"
        for entry, found in verify_cache(directory, verify_cache_entry).items()
    ]
    records = sorted(directory.glob(f"*/{AOT_RECORD}"))
    if not records:
        return [
            *problems,
            f"no warmkit AOT records under {directory}: it was not filled by a warmkit AOT warmup",
        ]
    here: dict[str, dict[str, Any]] = {}
    for path in records:
        entry = path.parent
        try:
            data = json.loads(path.read_text())
            recorded = data["validity"]
            tgt = data["target"]
        except (OSError, ValueError, KeyError) as exc:
            problems.append(f"{path}: unreadable record ({exc})")
            continue
        if tgt not in here:
            here[tgt] = _cached_record(parse_target(tgt))
        for field in CHECKED_FIELDS:
            if recorded.get(field) != here[tgt].get(field):
                problems.append(
                    f"[{tgt}] {entry.name}: {field} differs: built with {recorded.get(field)!r}, "
                    f"this process has {here[tgt].get(field)!r}"
                )
        for grp in entry.glob(api.GROUP_FILE_GLOB):
            try:
                paths = api.group_children(grp).values()
            except (OSError, ValueError):
                problems.append(f"[{tgt}] {entry.name}: unreadable group file {grp.name}")
                continue
            outside = [p for p in paths if Path(p).parent.resolve() != entry.resolve()]
            if outside:
                problems.append(
                    f"[{tgt}] {entry.name}: {grp.name} points outside the entry ({outside[0]}): the "
                    "cache was copied or moved; Triton will recompile (or read the original files "
                    "while they exist). Use relocate_cache_entry() or a warmkit bundle."
                )
    return problems


def prepare_entries(directory: str | os.PathLike[str], entries: Sequence[str]) -> str:
    """Build the C launchers of installed entries on this host, as their first loads would.

    An entry compiled ahead of time (on a host without the GPU) carries its
    cubin but not the gcc-built modules Triton makes at the first load:
    ``cuda_utils`` and, on 3.6, one launcher per signature (0.3-0.6 s on the
    H200 host, most of a CPU-built bundle's warmup). ``bundle install`` on the
    GPU host builds them here, each distinct one once, in parallel, into
    Triton's cache, from the signature the AOT record keeps
    (``_triton_api.build_launcher``). Entries without a record (compiled on a
    GPU, or by an older warmkit) are counted, not guessed.

    Returns:
        A one-line summary (built, or why not).

    Raises:
        RuntimeError: gcc or the import of a built launcher failed.
    """
    t0 = time.perf_counter()
    recipes: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}
    without = 0
    for name in entries:
        entry = Path(directory) / name
        try:
            record = json.loads((entry / AOT_RECORD).read_text())
            recipe = record.get("launcher")
            metadata = json.loads((entry / f"{record['name']}.json").read_text())
        except (OSError, ValueError, KeyError, TypeError):
            recipe = None
        if not isinstance(recipe, dict):
            without += 1
            continue
        ident = json.dumps([recipe, metadata.get("tensordesc_meta")], sort_keys=True)
        recipes.setdefault(ident, (recipe, metadata))
    tail = f"; {without} entr(ies) without a launcher recipe" if without else ""
    if not recipes:
        return f"no launcher to build{tail}"
    try:
        api.default_driver()  # makes cuda_utils once, before the launchers
    except Exception as exc:  # noqa: BLE001 - no GPU driver here is a fact to report
        return (
            f"{len(recipes)} launcher(s) not built: no CUDA driver on this host ({exc}); "
            f"Triton builds them at the first device load{tail}"
        )
    with ThreadPoolExecutor(min(len(recipes), os.cpu_count() or 1)) as pool:
        list(
            pool.map(lambda r: api.build_launcher(*r), recipes.values())
        )  # gcc runs outside the GIL
    return (
        f"{len(recipes)} launcher(s) built or found in Triton's cache for {len(entries)} "
        f"entr(ies) in {time.perf_counter() - t0:.2f}s{tail}"
    )


def relocate_cache_entry(staged: str | os.PathLike[str], final: str | os.PathLike[str]) -> None:
    """Rewrite an entry's group files so their absolute paths point into ``final``.

    Triton's ``__grp__<name>.json`` lists its files by absolute path; an entry
    moved to another directory is otherwise a miss.

    Args:
        staged: the entry's directory now.
        final: the directory it will have (may not exist yet).
    """
    from warmkit._integrity import update_record

    groups = api.relocate_group_files(staged, final)
    update_record(Path(staged), groups)


def fingerprint(target: Target | None) -> dict[str, str]:
    """The fields that must be equal where a cache is built and where it is used (flat strings)."""
    rec = _cached_record(target) if target is not None else None
    if rec is None:
        triton = require_triton()
        rec = {
            "target": "none",
            "triton_version": triton.__version__,
            "triton_key_sha256": triton_key_digest(),
            "python": {
                "cache_tag": sys.implementation.cache_tag,
                "soabi": sysconfig.get_config_var("SOABI"),
            },
            "ptxas": {"version": None},
            "env": api.cache_invalidating_env(),
        }
    return {
        "target": str(rec["target"]),
        "triton_version": str(rec["triton_version"]),
        "triton_key_sha256": str(rec["triton_key_sha256"]),
        "python_abi": f"{rec['python']['cache_tag']}/{rec['python']['soabi']}",
        "ptxas": str(rec["ptxas"].get("version")),
        "env": json.dumps(rec["env"], sort_keys=True),
    }


def real_driver() -> Any:
    """Triton's driver for this process's device, never the AOT router; raises when there is no GPU."""
    active = api.installed_driver()
    if active is None or isinstance(active, _RoutingDriver):
        return api.default_driver()
    return active


def require_device(name: str) -> None:
    """Raise, naming ``name`` and how to compile without a GPU, when Triton sees no GPU.

    Raises:
        RuntimeError: no GPU driver is active (the message says which target to give).
    """
    try:
        real_driver()
    except Exception as exc:
        raise RuntimeError(
            f"kernel {name!r}: no GPU is visible to Triton ({exc}). To compile ahead of time "
            "on this host, give a target: WARMKIT_TARGET=cuda:90 in the environment (any "
            "warmkit command, `warmkit run` too), `--target cuda:90` of `warmkit warmup`, "
            "`plan` or `bundle build`, or warmkit.WarmupConfig(target='cuda:90') in Python; "
            "to run kernels on CPU set TRITON_INTERPRET=1 before importing them"
        ) from exc
