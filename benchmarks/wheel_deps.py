"""The wheels a GPU host without network needs: packages' Requires-Dist, resolved recursively.

    python benchmarks/wheel_deps.py [--python 3.12] [--host-has torch,triton,...] ROOT [ROOT ...]

Prints one ``name==version`` per line: every distribution the ROOTs require,
directly or not (their ``Requires-Dist`` read from this environment's
installed metadata, markers evaluated for CPython ``--python`` on Linux
x86_64, extras not followed), minus what the GPU host already has
(``--host-has``; default :data:`GPU_HOST_HAS`) and minus the ROOTs that are
this repository's own packages (built from source, not downloaded). The
versions are the ones installed here, so the GPU host runs what was tested
here. A requirement not installed here is an error naming it and who needs
it: a wheel list must never silently miss one (``jsonschema`` once did, and
the TileLang GPU test failed on the GPU host).

``benchmarks/dsl_wheels.sh`` feeds the list to ``pip download``.
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import re
import sys

from packaging.markers import default_environment
from packaging.requirements import Requirement

#: What the H200 image has (docs/benchmarks.md, dsl_wheels.sh): never shipped.
GPU_HOST_HAS = [
    *("torch", "triton", "transformers", "numpy", "cuda-bindings", "cuda-pathfinder"),
    *("cloudpickle", "ml-dtypes", "psutil", "tqdm", "attrs", "typing-extensions", "filelock"),
    *("jinja2", "markupsafe", "sympy", "mpmath", "networkx", "fsspec", "setuptools", "pip"),
    *("packaging", "pyyaml", "requests", "urllib3", "idna", "certifi", "charset-normalizer"),
    *("huggingface-hub", "safetensors", "tokenizers", "regex", "hf-xet"),
]
#: This repository's packages: wheels built from the source tree.
OWN = ("warmkit", "warmkit-triton", "warmkit-tilelang", "warmkit-cutedsl", "warmkit-blocktable")


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def resolve(roots: list[str], python: str, host_has: set[str]) -> dict[str, str]:
    """``{name: version}`` of every dependency of ``roots`` to ship (see the module docstring).

    Raises:
        SystemExit: a requirement is not installed here (the message names it and its dependent).
    """
    env = default_environment() | {
        "python_version": python,
        "python_full_version": f"{python}.0",
        "sys_platform": "linux",
        "platform_system": "Linux",
        "platform_machine": "x86_64",
        "implementation_name": "cpython",
        "platform_python_implementation": "CPython",
        "extra": "",
    }
    out: dict[str, str] = {}
    todo = [(canonical(r), "the command line") for r in roots]
    seen: set[str] = set()
    while todo:
        name, needed_by = todo.pop()
        if name in seen or name in host_has:
            continue
        seen.add(name)
        try:
            dist = md.distribution(name)
        except md.PackageNotFoundError:
            raise SystemExit(
                f"wheel_deps.py: {name} (required by {needed_by}) is not installed here; install "
                "it, or add it to --host-has if the GPU host has it"
            ) from None
        if name not in OWN:
            out[name] = dist.version
        for text in dist.requires or []:
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate(env):
                todo.append((canonical(req.name), name))
    return dict(sorted(out.items()))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("roots", nargs="+", help="distributions to ship, with their dependencies")
    p.add_argument("--python", default="3.12", help="the GPU host's CPython (markers)")
    p.add_argument("--host-has", default=",".join(GPU_HOST_HAS), help="comma-separated")
    a = p.parse_args()
    host = {canonical(n) for n in a.host_has.split(",") if n}
    for name, version in resolve(a.roots, a.python, host).items():
        print(f"{name}=={version}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
