"""End to end: a throwaway plugin distribution, pip-installed into a temp venv, seen by the CLI.

The venv is made without pip and sees the outer environment's packages (warmkit,
pip, hatchling) through a ``.pth`` file, so the install is fast and offline:
``pip install --no-deps --no-build-isolation --no-index``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import pytest

from warmkit._plugin import discovery as plugins

PYPROJECT = """
[build-system]
requires = ["hatchling>=1.18"]
build-backend = "hatchling.build"

[project]
name = "wk-e2e-plugin"
version = "0.3.0"
requires-python = ">=3.11"
dependencies = ["warmkit"]

[project.entry-points."warmkit.backends"]
e2e-echo = "wk_e2e_plugin:EchoBackend"

[project.entry-points."warmkit.kernels"]
"e2e.echo" = "wk_e2e_plugin:EchoKernel"

[tool.hatch.build.targets.wheel]
packages = ["wk_e2e_plugin"]
"""

PLUGIN = '''
"""A backend whose compile is plain Python, and a kernel that uses it."""

import contextlib
import os

import attrs

import warmkit


class Executor:
    def __init__(self, key, target):
        self.key, self.target = key, target


class EchoBackend:
    name = "e2e-echo"

    def available(self):
        return warmkit.BackendStatus(ok=True, reason="echo", version="0.3.0")

    def default_target(self):
        return "cpu"

    def parallelism(self, target):
        return 2

    def compile_scope(self, target, jobs):
        return contextlib.nullcontext()

    def compile(self, kernel, key, target):
        with open(os.environ["WK_E2E_LOG"], "a") as log:
            log.write(f"{kernel.name} {key!r} {target}\\n")
        return Executor(key, target)

    def install_monitor(self):
        pass

    def uninstall_monitor(self):
        pass


class EchoKernel(warmkit.JitKernel):
    backend = "e2e-echo"
    name = "e2e.echo"

    @attrs.frozen
    class CompileKey:
        block: int
        dtype: str

    def dispatch(self, *, n, dtype="f16"):
        return self.CompileKey(block=min(1024, 1 << max(n - 1, 0).bit_length()), dtype=dtype)
'''

RECORD = """
import sys
import warmkit
from wk_e2e_plugin import EchoKernel

registry = warmkit.WarmupRegistry()
with registry.activate():
    for layer in range(61):
        EchoKernel().register_warmup(n=[1, 100, 1000], dtype=["f16", "f32"])
registry.save(sys.argv[1])
"""


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> tuple[Path, dict[str, str], Path]:
    """A venv with the throwaway plugin installed; returns (python, env, log file)."""
    root = tmp_path_factory.mktemp("e2e")
    src = root / "plugin"
    (src / "wk_e2e_plugin").mkdir(parents=True)
    (src / "pyproject.toml").write_text(PYPROJECT)
    (src / "wk_e2e_plugin" / "__init__.py").write_text(textwrap.dedent(PLUGIN))

    env_dir = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env_dir)], check=True)
    python = env_dir / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WARMKIT_", "PYTHON", "PIP_"))}
    env |= {
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        "PIP_NO_INPUT": "1",
        "PYTHONNOUSERSITE": "1",
        "WK_E2E_LOG": str(root / "compiles.log"),
    }
    inner_site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
        env=env,
    ).stdout.strip()
    outer_site = sysconfig.get_paths()["purelib"]
    (Path(inner_site) / "_outer_env.pth").write_text(
        f"import site; site.addsitedir({outer_site!r})\n"
    )
    install = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation"]
        + ["--no-index", str(src)],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert install.returncode == 0, install.stdout + install.stderr
    assert list(Path(inner_site).glob("wk_e2e_plugin-0.3.0.dist-info"))
    return python, env, root / "compiles.log"


def _cli(venv, *args: str) -> subprocess.CompletedProcess[str]:
    python, env, _log = venv
    return subprocess.run(
        [str(python), "-m", "warmkit", *args],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def test_warmkit_list_sees_the_installed_plugin(venv):
    done = _cli(venv, "list", "--json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    backends = {b["name"]: b for b in data["backends"]}
    echo = backends["e2e-echo"]
    assert echo["available"] is True
    assert (echo["distribution"], echo["distribution_version"]) == ("wk-e2e-plugin", "0.3.0")
    assert echo["entry_point"] == "wk_e2e_plugin:EchoBackend"
    assert {"tilelang", "cutedsl"} <= set(backends)  # the core's own stubs too
    kernels = {k["name"]: k for k in data["kernels"]}
    assert kernels["e2e.echo"]["distribution"] == "wk-e2e-plugin"
    # the outer environment never saw it
    assert "e2e-echo" not in [i.name for i in plugins.discover(plugins.BACKENDS_GROUP)]


def test_a_manifest_recorded_in_one_process_warms_up_in_another(venv, tmp_path):
    python, env, log = venv
    manifest = tmp_path / "warmup.json"
    subprocess.run([str(python), "-c", RECORD, str(manifest)], check=True, env=env, timeout=120)
    data = json.loads(manifest.read_text())
    assert [r["kernel"] for r in data["registrations"]] == ["e2e.echo"]  # 61 layers, one entry

    planned = _cli(venv, "plan", str(manifest), "--json")
    assert planned.returncode == 0, planned.stderr
    keys = json.loads(planned.stdout)["e2e.echo"]
    assert len(keys) == 6

    log.unlink(missing_ok=True)
    done = _cli(venv, "warmup", str(manifest), "--json", "-j", "2")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["totals"] == {
        "compiled": 6,
        "cached": 0,
        "waited": 0,
        "fetched": 0,
        "failed": 0,
        "skipped": 0,
        "keys": 6,
    }
    assert [e["key"] for e in report["entries"]] == keys
    assert {(e["kernel"], e["backend"]) for e in report["entries"]} == {("e2e.echo", "e2e-echo")}
    compiled = log.read_text().splitlines()
    assert sorted(compiled) == sorted(f"e2e.echo {k} None" for k in keys)

    targeted = _cli(venv, "warmup", str(manifest), "--json", "--target", "cuda:90")
    assert targeted.returncode == 0, targeted.stderr
    assert json.loads(targeted.stdout)["target"] == "cuda:90"
    assert sum(line.endswith(" cuda:90") for line in log.read_text().splitlines()) == 6


def test_the_allow_list_hides_the_plugin_from_the_cli(venv, tmp_path):
    python, env, _log = venv
    manifest = tmp_path / "warmup.json"
    subprocess.run([str(python), "-c", RECORD, str(manifest)], check=True, env=env, timeout=120)
    env_none = env | {"WARMKIT_PLUGINS": ""}
    listed = subprocess.run(
        [str(python), "-m", "warmkit", "list", "--json"],
        check=True,
        capture_output=True,
        text=True,
        env=env_none,
        timeout=120,
    )
    assert json.loads(listed.stdout) == {"backends": [], "kernels": []}
    refused = subprocess.run(
        [str(python), "-m", "warmkit", "warmup", str(manifest)],
        check=False,
        capture_output=True,
        text=True,
        env=env_none,
        timeout=120,
    )
    assert refused.returncode == 2
    assert "WARMKIT_PLUGINS" in refused.stderr and "e2e.echo" in refused.stderr
