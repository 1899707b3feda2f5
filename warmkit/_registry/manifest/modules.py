"""A manifest names code: the modules loading it imports, where each comes from, and which are refused.

A manifest names its kernels as entry points (code an installed distribution
declares) or as ``module:attr`` paths, and loading it *imports* those modules:
a manifest must be trusted like code. ``WARMKIT_MANIFEST_MODULES`` (and
``warmkit --manifest-modules``) decides which modules a manifest may import:

* ``installed`` (default): a module found where an operator puts code:
  site-packages (installed distributions, editable ones included), a ``.pth``
  entry, or ``PYTHONPATH`` (even where that is the current directory); or one
  already imported (importing it again runs nothing). Refused: a module found
  in the current directory or in the running script's directory, where a
  manifest's author could leave a file beside the manifest, including one
  that shadows an installed name.
* ``any``: every module (the behaviour before this check).

Only the top-level package is looked up before the import (``find_spec`` of
a top-level name runs no code); a refused module is a ``ManifestError`` that
names the module, its file, and how to allow it.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import re
import sys
import urllib.parse
from collections.abc import Iterable
from typing import Any

import attrs

from ... import _envs
from ..._exceptions import ManifestError

__all__ = ["MODES", "ModuleOrigin", "check_kernel_ref", "manifest_modules"]

#: Values of ``WARMKIT_MANIFEST_MODULES``.
MODES = ("installed", "any")

#: A ``module:attr`` path, as ``_plugins.load_kernel`` reads one.
_MODULE_PATH = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*\Z")


@attrs.frozen
class ModuleOrigin:
    """One module a manifest imports.

    Attributes:
        module: the module's dotted name.
        file: where it is (or would be) loaded from; None if it cannot be found.
        distribution: the installed distribution that provides its top-level
            package, if one does.
        refused: why ``installed`` mode refuses it; None if it is allowed.
    """

    module: str
    file: str | None
    distribution: str | None
    refused: str | None = None


def _untrusted_dirs() -> dict[str, str]:
    """The directories a manifest's modules must not come from, each with its description."""
    cwd = os.path.realpath(os.getcwd())
    dirs = {cwd: "the current directory"}
    if not sys.flags.safe_path and sys.argv and sys.argv[0] not in ("", "-c", "-m"):
        script_dir = os.path.realpath(os.path.dirname(os.path.abspath(sys.argv[0])))
        dirs.setdefault(script_dir, "the running script's directory")
    # A directory the operator put on PYTHONPATH is trusted, even where they run from it.
    for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep):
        if entry:
            dirs.pop(os.path.realpath(entry), None)
    return dirs


def _roots(spec: Any) -> list[str]:
    """The ``sys.path`` directories a top-level module's spec was found in."""
    if spec.submodule_search_locations:
        return [os.path.dirname(os.path.realpath(p)) for p in spec.submodule_search_locations]
    if spec.origin and os.path.isabs(spec.origin):
        return [os.path.dirname(os.path.realpath(spec.origin))]
    return []  # built in, frozen: part of Python


def _distribution(top: str, file: str | None) -> str | None:
    """The installed distribution(s) providing top-level ``top`` (found at ``file``)."""
    names = importlib.metadata.packages_distributions().get(top)
    if names:
        return ", ".join(sorted(set(names)))
    if file is None:
        return None
    # An editable install lists a .pth or a finder, not its modules: its source directory
    # (direct_url.json, PEP 610) holds the file.
    real = os.path.realpath(file)
    for dist in importlib.metadata.distributions():
        try:
            info = json.loads(dist.read_text("direct_url.json") or "null")
        except ValueError:
            continue
        url = info.get("url", "") if isinstance(info, dict) else ""
        if info and info.get("dir_info", {}).get("editable") and url.startswith("file://"):
            root = os.path.realpath(urllib.parse.unquote(url[len("file://") :]))
            if real.startswith(root + os.sep):
                return str(dist.metadata["Name"])
    return None


def origin(module: str) -> ModuleOrigin:
    """Where ``module`` comes from, and whether ``installed`` mode refuses it (imports nothing new)."""
    top = module.partition(".")[0]
    loaded = sys.modules.get(module)
    if loaded is not None:
        file = getattr(loaded, "__file__", None)
        return ModuleOrigin(module, file, _distribution(top, file))
    try:
        spec = importlib.util.find_spec(top)  # a top-level name: no code runs
    except (ImportError, ValueError):
        spec = None
    if spec is None:
        return ModuleOrigin(module, None, None)
    file = spec.origin if spec.origin and os.path.isabs(spec.origin) else None
    refused = None
    if top not in sys.modules:  # an imported package's submodules come from where it did
        untrusted = _untrusted_dirs()
        where = next((untrusted[r] for r in _roots(spec) if r in untrusted), None)
        if where is not None:
            refused = f"found in {where}"
    return ModuleOrigin(module, file, _distribution(top, file), refused)


def check_kernel_ref(ref: Any, path: Any = None) -> None:
    """Refuse a manifest's ``module:attr`` kernel whose module ``WARMKIT_MANIFEST_MODULES`` does not allow.

    Called before the module is imported. An entry-point name is always
    allowed: an installed distribution declares it.

    Raises:
        ManifestError: the module is refused; the message names the module,
            its file, where it was found and how to allow it.
    """
    if not isinstance(ref, str) or not _MODULE_PATH.match(ref):
        return
    module = ref.partition(":")[0]
    if module in sys.modules or _envs.get("WARMKIT_MANIFEST_MODULES") == "any":
        return
    found = origin(module)
    if found.refused is None:
        return
    raise ManifestError(
        f"kernel {ref!r}: its module {module!r} ({found.file}) was {found.refused}, not where "
        "installed code lives; loading a manifest imports the modules it names, so a manifest "
        "may not bring its own code. Install the package (pip install), put its directory on "
        "PYTHONPATH, import the module before loading the manifest, or allow any module with "
        "WARMKIT_MANIFEST_MODULES=any (warmkit --manifest-modules any) if you trust the manifest "
        "like code",
        path=path,
    )


def manifest_modules(refs: Iterable[str]) -> list[ModuleOrigin]:
    """The modules the kernels ``refs`` (a loaded manifest's) come from, once each, in order."""
    from ..._plugin.discovery import load_kernel

    seen: dict[str, ModuleOrigin] = {}
    for ref in refs:
        try:
            module = load_kernel(ref).__module__
        except Exception:  # noqa: BLE001 -- the manifest's load reported it; list the name
            module = ref.partition(":")[0]
        if module not in seen:
            seen[module] = origin(module)
    return list(seen.values())
