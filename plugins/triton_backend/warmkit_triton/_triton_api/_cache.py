"""Accessors for Triton's cache internals: directory, hash environment, entry and group-file layout, manager, ``triton_key()``."""

from __future__ import annotations

import contextlib
import json
import os
import pkgutil
import sys
import sysconfig
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from ._import import require_triton

# -- the cache ---------------------------------------------------------------------------------------


def cache_dir() -> str:
    """The absolute Triton cache directory in effect (``knobs.cache.dir``). Checked: 3.6.0, 3.9.0."""
    require_triton()
    from triton import knobs

    return os.path.abspath(knobs.cache.dir)


@contextlib.contextmanager
def cache_dir_scope(path: str | os.PathLike[str]) -> Iterator[None]:
    """Point Triton's cache at ``path`` for the block (``knobs.cache.scope()``). Checked: 3.6.0, 3.9.0."""
    require_triton()
    from triton import knobs

    with knobs.cache.scope():
        knobs.cache.dir = str(path)
        yield


def cache_invalidating_env() -> dict[str, str]:
    """The cache-invalidating environment variables that are set, sorted (part of every cache hash).

    ``triton._C.libtriton.get_cache_invalidating_env_vars``. Checked: 3.6.0, 3.9.0.
    """
    require_triton()
    from triton._C.libtriton import get_cache_invalidating_env_vars

    return dict(sorted(get_cache_invalidating_env_vars().items()))


#: The group files of a cache entry: ``__grp__<name>.json``, ``{"child_paths": {file: abs path}}``.
GROUP_FILE_PREFIX = "__grp__"
GROUP_FILE_GLOB = f"{GROUP_FILE_PREFIX}*.json"


def cache_entry_dir(cache: str | os.PathLike[str], hash_hex: str) -> str:
    """The directory of the entry with cache hash ``hash_hex``: its base32, unpadded. Checked: 3.6.0, 3.9.0."""
    import base64

    name = base64.b32encode(bytes.fromhex(hash_hex)).decode().rstrip("=")
    return os.path.join(cache, name)


def group_children(grp: Path) -> dict[str, str]:
    """The ``child_paths`` of one group file: file name -> absolute path. Checked: 3.6.0, 3.9.0.

    Raises:
        OSError: unreadable.
        ValueError: not JSON, or no ``child_paths`` object.
    """
    data = json.loads(Path(grp).read_text())
    children = data.get("child_paths") if isinstance(data, dict) else None
    if not isinstance(children, dict):
        raise ValueError(f"{Path(grp).name} has no child_paths object")  # noqa: TRY004 - bad data
    return dict(children)


def relocate_group_files(
    staged: str | os.PathLike[str], final: str | os.PathLike[str]
) -> list[str]:
    """Rewrite an entry's group files so their absolute paths point into ``final``.

    Returns the names of the group files rewritten, sorted. Checked: 3.6.0, 3.9.0.
    """
    staged_p, final_p = Path(staged), Path(final)
    groups = sorted(staged_p.glob(GROUP_FILE_GLOB))
    for grp in groups:
        data = json.loads(grp.read_text())
        children = data.get("child_paths", {})
        data["child_paths"] = {name: str(final_p / Path(p).name) for name, p in children.items()}
        tmp = grp.with_name(f".{grp.name}.tmp")
        tmp.write_text(json.dumps(data))
        os.replace(tmp, grp)
    return [g.name for g in groups]


def checked_cache_manager(check: Callable[[str], bool]) -> type:
    """A ``FileCacheManager`` subclass that calls ``check(entry_dir)`` before reading an entry as a hit.

    ``get_group(filename)`` is where Triton's lookup reads an entry; when the
    group file exists and ``check`` returns False, it is a miss (Triton
    compiles and writes the entry again). Checked: 3.6.0, 3.9.0.
    """
    from triton.runtime.cache import FileCacheManager

    class CheckedCacheManager(FileCacheManager):
        def get_group(self, filename: str) -> Any:
            if not os.path.exists(self._make_path(f"{GROUP_FILE_PREFIX}{filename}")):
                return None  # a miss, or an entry still being written
            if not check(self.cache_dir):
                os.makedirs(self.cache_dir, exist_ok=True)  # Triton writes the new entry here
                return None
            return super().get_group(filename)

    return CheckedCacheManager


def cache_manager_class() -> Any:
    """The cache manager class in effect (``knobs.cache.manager_class``; None = Triton's file cache).

    Checked: 3.6.0, 3.9.0.
    """
    from triton import knobs

    return knobs.cache.manager_class


def cache_is_redirected() -> bool:
    """Whether entries may live elsewhere than the cache directory, or hash differently.

    True with ``TRITON_REMOTE_CACHE_BACKEND`` (``knobs.cache.remote_manager_class``)
    or a stages inspection hook (``knobs.runtime.add_stages_inspection_hook``,
    which 3.9 adds to the hashed key). Checked: 3.6.0, 3.9.0.
    """
    from triton import knobs

    return (
        knobs.cache.remote_manager_class is not None
        or getattr(knobs.runtime, "add_stages_inspection_hook", None) is not None
    )


def set_cache_manager_class(cls: Any) -> None:
    """Set ``knobs.cache.manager_class``; None goes back to the environment's. Checked: 3.6.0, 3.9.0."""
    from triton import knobs

    if cls is None:
        del knobs.cache.manager_class
    else:
        knobs.cache.manager_class = cls


# -- triton_key() ------------------------------------------------------------------------------------


def triton_key() -> str:
    """Triton's fingerprint of its wheel (``triton.runtime.cache.triton_key()``). Checked: 3.6.0, 3.9.0."""
    require_triton()
    from triton.runtime import cache

    return str(cache.triton_key())


def triton_key_function() -> Any:
    """The function ``triton.runtime.cache.triton_key`` now names (Triton's, or a replacement).

    Checked: 3.6.0, 3.9.0.
    """
    import triton.runtime.cache as tc

    return getattr(tc, "triton_key", None)


def is_tritons_triton_key(fn: Any) -> bool:
    """Whether ``fn`` is Triton's own memoized ``triton_key`` (not someone else's replacement).

    Checked: 3.6.0, 3.9.0 (an ``functools.lru_cache`` of a function named ``triton_key``).
    """
    inner = getattr(fn, "__wrapped__", None)
    code = getattr(inner, "__code__", None)
    return (
        code is not None
        and code.co_name == "triton_key"
        and getattr(fn, "__module__", None) == "triton.runtime.cache"
        and hasattr(fn, "cache_info")
    )


def replace_triton_key(current: Any, new: Any, modules: Sequence[str] | None = None) -> list[str]:
    """Make every loaded ``triton.*`` module that holds ``current`` as ``triton_key`` hold ``new``.

    ``get_cache_key`` calls the module attribute; ``triton.runtime.autotuner``
    imported the name. Returns the modules changed. Checked: 3.6.0, 3.9.0.

    Args:
        current: the function to replace (only where it is still there).
        new: its replacement.
        modules: only these module names (default: every ``triton.*`` module).
    """
    changed = []
    names = list(sys.modules) if modules is None else list(modules)
    for name in names:
        mod = sys.modules.get(name)
        if (
            mod is not None
            and (name == "triton" or name.startswith("triton."))
            and getattr(mod, "triton_key", None) is current
        ):
            mod.triton_key = new  # type: ignore[attr-defined]  # a function Triton defines there
            changed.append(name)
    return changed


def _triton_root() -> str:
    import triton.runtime.cache as tc

    return os.path.dirname(os.path.dirname(os.path.abspath(tc.__file__)))


def libtriton_path() -> Path:
    """The shared library ``triton_key()`` hashes (``triton/_C/libtriton.<ext>``). Checked: 3.6.0, 3.9.0."""
    ext = sysconfig.get_config_var("EXT_SUFFIX").split(".")[-1]
    return Path(_triton_root(), "_C", f"libtriton.{ext}")


def _file_sha(path: str) -> str:
    import hashlib

    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def _package_shas(directory: str, prefix: str) -> list[str]:
    """sha256 of every module Triton's key walks under ``directory``, in its walk order."""
    out = []
    for info in pkgutil.walk_packages([directory], prefix=prefix):
        spec = info.module_finder.find_spec(info.name)  # type: ignore[call-arg]
        if spec is None or spec.origin is None:  # Triton's key hashes every module's file
            raise ImportError(f"no file for module {info.name} under {directory}")
        out.append(_file_sha(spec.origin))
    return out


def compose_triton_key(libtriton_sha: str) -> str:
    """``triton_key()``'s value with ``libtriton_sha`` in place of the library's digest.

    The layout: version, then ``-``-joined sha256 of ``runtime/cache.py``, of
    each module of ``compiler`` and ``backends``, of ``libtriton``, of each
    module of ``language``. Checked: 3.6.0, 3.9.0.
    """
    import triton.runtime.cache as tc

    root = _triton_root()
    parts = [_file_sha(tc.__file__)]
    parts += _package_shas(os.path.join(root, "compiler"), "triton.compiler.")
    parts += _package_shas(os.path.join(root, "backends"), "triton.backends.")
    parts.append(libtriton_sha)
    parts += _package_shas(os.path.join(root, "language"), "triton.language.")
    return f"{tc.__version__}" + "-".join(parts)
