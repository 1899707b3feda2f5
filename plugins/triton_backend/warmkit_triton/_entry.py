"""The on-disk Triton cache entry, in one place: what it holds, its records, trusting and moving it.

* **What an entry is**: its complete files (``complete_entry``), the names allowed
  in it (``ENTRY_FILE``), its hash (``entry_hash``);
* **its records**: the validity record of the host that built it
  (``validity_record``, ``warmkit-aot.json`` written by ``write_entry_record``),
  the flat ``fingerprint`` a bundle compares, and the integrity record
  (``record_entry``, ``warmkit._cache.integrity``);
* **trusting it**: the structural check (``verify_cache_entry``), the verifying
  cache manager (``verifying``), why a recorded entry is stale here
  (``describe_entry``, ``check_aot_cache``);
* **moving it**: ``relocate_cache_entry``, and building its launchers on the
  serving host (``prepare_entries``).

Triton trusts whatever its cache holds: a truncated ``.cubin`` is a disk hit
that fails (or computes garbage) only when the GPU loads it, and a truncated
metadata ``.json`` fails every later compile of that kernel with a bare
``JSONDecodeError``. So while warmkit compiles, Triton's cache manager is
a checked subclass of its file cache (``_triton_api.checked_cache_manager``): before Triton reads an entry as a hit, the
entry is checked (its ``warmkit-integrity.json`` when warmkit wrote it, and
:func:`verify_cache_entry` always); a bad entry is quarantined with a warning
naming it (``warmkit._cache.integrity``), and Triton compiles a fresh one.

A user's own ``TRITON_CACHE_MANAGER`` (e.g. a remote cache) is left alone:
warmkit then verifies nothing at lookup and says so at DEBUG level.
"""

from __future__ import annotations

import base64
import contextlib
import fnmatch
import json
import logging
import os
import platform
import re
import sys
import sysconfig
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from warmkit._cache.integrity import quarantine, verify_entry_stamped, write_record

from . import _triton_api as api
from ._aot import AotArtifact, Target, cache_dir, parse_target, real_driver, triton_key_digest

__all__ = [
    "AOT_RECORD",
    "CHECKED_FIELDS",
    "ENTRY_FILE",
    "check_aot_cache",
    "complete_entry",
    "describe_entry",
    "entry_dir",
    "entry_file_allowed",
    "entry_hash",
    "fingerprint",
    "is_metadata",
    "prepare_entries",
    "record_entry",
    "relocate_cache_entry",
    "sound_entry",
    "validity_fields",
    "validity_record",
    "verify_cache_entry",
    "verifying",
    "write_entry_record",
]

logger = logging.getLogger(__name__)

AOT_RECORD = "warmkit-aot.json"


entry_dir = api.cache_entry_dir


def complete_entry(directory: Path) -> dict[str, Path] | None:
    """The files of the complete entry in ``directory`` (as Triton's ``get_group`` decides), or None.

    Complete means a ``__grp__*.json`` whose every listed file exists; the
    warmkit AOT record is included when present. ``os.listdir`` and
    ``os.path.isfile`` on the listed strings, not ``Path.glob`` and a ``Path`` per
    file before the check: ~25 us less of each warm key (CPU box).
    """
    try:
        names = os.listdir(directory)
    except OSError:  # no such entry (Path.glob found nothing there either)
        return None
    for name in sorted(n for n in names if fnmatch.fnmatchcase(n, api.GROUP_FILE_GLOB)):
        grp = directory / name
        try:
            children = api.group_children(grp)
        except (OSError, ValueError):
            continue
        # a str each: os.path.isfile would take an int for a file descriptor
        if children and all(isinstance(c, str) and os.path.isfile(c) for c in children.values()):
            paths = {q.name: q for q in map(Path, children.values())}
            files = {grp.name: grp, **paths}
            record = directory / AOT_RECORD
            if record.is_file():
                files[AOT_RECORD] = record
            return files
    return None


#: The names a Triton cache entry's files have: the group file, one file per compile stage
#: of the kernel (``<name>.<stage>``; CUDA and ROCm stages), and warmkit's AOT record. A
#: store entry holding any other name is refused (``FleetCapable.entry_file_allowed``).
ENTRY_FILE = re.compile(
    rf"^(?:{re.escape(api.GROUP_FILE_PREFIX)}[A-Za-z_][A-Za-z0-9_]*\.json"
    r"|[A-Za-z_][A-Za-z0-9_]*\.(?:json|source|ttir|ttgir|llir|ptx|cubin|amdgcn|hsaco|spv|ttgir_tlx)"
    rf"|{re.escape(AOT_RECORD)})$"
)


def entry_file_allowed(name: str) -> bool:
    """Whether ``name`` is a file name a Triton cache entry holds (``ENTRY_FILE``)."""
    return ENTRY_FILE.match(name) is not None


def entry_hash(directory: str | os.PathLike[str]) -> str | None:
    """The cache hash (hex sha256) an entry directory is named by (base32); None if not one."""
    name = Path(directory).name
    try:
        digest = base64.b32decode(name + "=" * (-len(name) % 8)).hex()
    except ValueError:
        return None
    return digest if len(digest) == 64 else None


def verify_cache_entry(entry: str | os.PathLike[str]) -> list[str]:
    """Structural problems of one Triton cache entry; empty when it is sound.

    Every group file (``__grp__<name>.json``) must parse and list its files;
    each listed file must exist in the entry and be non-empty, and each
    ``.json`` among them must parse as an object. An entry without a group
    file (Triton's launcher and utility caches) needs non-empty files.
    """
    root = Path(entry)
    problems: list[str] = []
    groups = sorted(root.glob(api.GROUP_FILE_GLOB))
    listed: set[str] = set()
    for grp in groups:
        try:
            children = api.group_children(grp)
        except (OSError, ValueError) as exc:
            problems.append(f"group file {grp.name} is unreadable ({type(exc).__name__}: {exc})")
            continue
        listed.update(Path(p).name for p in children.values())
    for path in sorted(root.iterdir()):
        if not path.is_file() or path.name.startswith(("warmkit-", ".")):
            continue
        if groups and path.name not in listed and not path.name.startswith(api.GROUP_FILE_PREFIX):
            continue  # not part of the kernel (Triton never reads it)
        if path.stat().st_size == 0:
            problems.append(f"{path.name} is empty")
        elif is_metadata(path.name):
            try:
                if not isinstance(json.loads(path.read_text()), dict):
                    problems.append(f"metadata {path.name} is not a JSON object")
            except (OSError, ValueError) as exc:
                problems.append(f"metadata {path.name} does not parse ({exc})")
    for name in sorted(listed):
        if not (root / name).is_file():
            problems.append(f"{name} is listed by the group file but missing")
    return problems


def is_metadata(name: str) -> bool:
    """Whether an entry's file ``name`` is the kernel's metadata (not the group file, not warmkit's)."""
    return (
        name.endswith(".json")
        and not name.startswith(api.GROUP_FILE_PREFIX)
        and not name.startswith("warmkit-")
    )


def record_entry(entry: str | os.PathLike[str]) -> None:
    """Record a freshly compiled entry's sha256s and sizes (``warmkit-integrity.json``).

    A failure to write is logged, not raised: the compile itself succeeded,
    and an entry without a record still gets the structural check.
    """
    root = Path(entry)
    if not root.is_dir():
        return  # a remote cache manager: nothing local to record
    try:
        write_record(root)
    except OSError as exc:
        logger.warning("%s", exc)


def sound_entry(entry: str) -> bool:
    """Whether an entry may be read as a hit; a bad one is quarantined (with a warning naming it).

    An entry unchanged since a full check passed is not hashed again (``verify_entry_stamped``).
    """
    problems = verify_entry_stamped(entry, verify_cache_entry)
    if problems:
        quarantine(entry, problems)
        return False
    return True


_lock = threading.Lock()
_users = 0
_cls: type | None = None


def custom_cache_manager() -> bool:
    """Whether a cache manager other than warmkit's verifying one is in effect (``TRITON_CACHE_MANAGER``)."""
    cls = api.cache_manager_class()
    return cls is not None and cls is not _cls


@contextlib.contextmanager
def verifying() -> Iterator[None]:
    """Make Triton's cache verify entries before each hit, for the block (refcounted, process-wide)."""
    global _users, _cls
    with _lock:
        if _users == 0:
            if api.cache_manager_class() is None:
                _cls = _cls or api.checked_cache_manager(sound_entry)
                api.set_cache_manager_class(_cls)
            else:
                logger.debug(
                    "TRITON_CACHE_MANAGER=%s is set: cache entries are not verified at lookup",
                    api.cache_manager_class(),
                )
        _users += 1
    try:
        yield
    finally:
        with _lock:
            _users -= 1
            if _users == 0 and _cls is not None and api.cache_manager_class() is _cls:
                api.set_cache_manager_class(None)


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
    triton = api.require_triton()
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
    try:
        # Compared as data, through the C encoder (json's pure-Python one, which indent
        # needs, was 0.1 ms of every warm key): a warm key's record is there already.
        if path.is_file() and _same_json(path.read_text(), data):
            return path
        tmp = entry / f".{AOT_RECORD}.{os.getpid()}.{threading.get_ident()}.tmp"
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True, default=str))
        os.replace(tmp, path)
    except OSError as exc:
        logger.warning("could not write AOT record %s: %s", path, exc)
        return None
    return path


def _same_json(text: str, data: Mapping[str, Any]) -> bool:
    """Whether ``text`` parses to what ``data`` serializes to (``default=str``, as written)."""
    try:
        return bool(json.loads(text) == json.loads(json.dumps(data, default=str)))
    except ValueError:
        return False


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
    from warmkit._cache.integrity import verify_cache

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
        # makes cuda_utils once, before the launchers; on a host without a GPU, real_driver
        # says so without Triton's driver selection, whose AMD backend imports torch (1.5 s)
        real_driver()
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
    from warmkit._cache.integrity import update_record

    groups = api.relocate_group_files(staged, final)
    update_record(Path(staged), groups)


def fingerprint(target: Target | None) -> dict[str, str]:
    """The fields that must be equal where a cache is built and where it is used (flat strings)."""
    rec = _cached_record(target) if target is not None else None
    if rec is None:
        triton = api.require_triton()
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
    return validity_fields(rec["target"], rec)


def validity_fields(target: Any, validity: Mapping[str, Any]) -> dict[str, str]:
    """A build's validity record (``validity`` of an entry's record) as the fingerprint's flat strings.

    The one spelling of these fields: a bundle's fingerprint and ``explain``'s
    factors of an entry compare them with each other.
    """
    return {
        "target": str(target),
        "triton_version": str(validity["triton_version"]),
        "triton_key_sha256": str(validity["triton_key_sha256"]),
        "python_abi": f"{validity['python']['cache_tag']}/{validity['python']['soabi']}",
        "ptxas": str(validity["ptxas"].get("version")),
        "env": json.dumps(validity["env"], sort_keys=True),
    }
