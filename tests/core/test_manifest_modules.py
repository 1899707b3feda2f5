"""A manifest names code: loading it imports its modules; one from the current directory is refused."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

import warmkit
from warmkit._registry.manifest.modules import manifest_modules, origin

EVIL = textwrap.dedent(
    """
    import pathlib, attrs, warmkit
    pathlib.Path(__file__).with_name("RAN").write_text("the manifest's module ran")

    class K(warmkit.JitKernel["K.CompileKey"]):
        name = "evil.K"

        @attrs.frozen
        class CompileKey:
            n: int

        def dispatch(self, *, n):
            return self.CompileKey(n)

        def compile(self, key):
            return object()
    """
)


@pytest.fixture
def planted(tmp_path, monkeypatch):
    """A manifest beside a module of its own, ``evil_mm``, in the current directory."""
    (tmp_path / "evil_mm.py").write_text(EVIL)
    manifest = tmp_path / "m.json"
    manifest.write_text(
        json.dumps(
            {
                "format": "warmkit.manifest",
                "version": 1,
                "registrations": [{"kernel": "evil_mm:K", "space": {"n": 1}}],
            }
        )
    )
    monkeypatch.delenv("WARMKIT_MANIFEST_MODULES", raising=False)
    env = {
        k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "WARMKIT_MANIFEST_MODULES")
    }
    return tmp_path, manifest, env


def _cli(env, cwd, *args):
    return subprocess.run(
        [sys.executable, "-m", "warmkit", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_cli_refuses_a_module_from_the_current_directory_before_it_runs(planted):
    tmp, _manifest, env = planted
    out = _cli(env, tmp, "plan", "m.json")
    assert out.returncode == 2, out.stderr
    assert not (tmp / "RAN").exists()  # refused before the import: none of its code ran
    err = out.stderr
    assert "ManifestError" in err and "'evil_mm'" in err and str(tmp / "evil_mm.py") in err
    assert "found in the current directory" in err
    assert "WARMKIT_MANIFEST_MODULES=any" in err and "--manifest-modules any" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_any_allows_it_and_plan_lists_each_module_with_its_distribution(planted):
    tmp, _manifest, env = planted
    out = _cli(env, tmp, "plan", "m.json", "--manifest-modules", "any")
    assert out.returncode == 0, out.stderr
    assert (tmp / "RAN").exists()
    assert "modules this manifest imports" in out.stdout
    assert f"evil_mm  (no installed distribution)  {tmp / 'evil_mm.py'}" in out.stdout
    (tmp / "RAN").unlink()
    out = _cli(dict(env, WARMKIT_MANIFEST_MODULES="any"), tmp, "plan", "m.json", "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["modules"] == [
        {"module": "evil_mm", "distribution": None, "file": str(tmp / "evil_mm.py")}
    ]
    # a directory the operator put on PYTHONPATH is trusted, even the current one
    (tmp / "RAN").unlink()
    out = _cli(dict(env, PYTHONPATH=str(tmp)), tmp, "plan", "m.json")
    assert out.returncode == 0, out.stderr


def test_registry_load_applies_the_same_default(planted, monkeypatch):
    tmp, manifest, _env = planted
    monkeypatch.chdir(tmp)
    monkeypatch.syspath_prepend(str(tmp))
    monkeypatch.delenv("PYTHONPATH", raising=False)
    with pytest.raises(warmkit.ManifestError, match="found in the current directory") as info:
        warmkit.WarmupRegistry.load(manifest)
    assert str(manifest) in str(info.value) and "evil_mm" not in sys.modules
    monkeypatch.setenv("WARMKIT_MANIFEST_MODULES", "any")
    try:
        assert [r.kernel_cls.name for r in warmkit.WarmupRegistry.load(manifest)] == ["evil.K"]
    finally:
        sys.modules.pop("evil_mm", None)


def test_an_installed_module_names_its_distribution():
    import warmkit_blocktable

    found = origin("warmkit_blocktable")
    assert found.refused is None and found.distribution == "warmkit-blocktable"
    assert found.file == warmkit_blocktable.__file__
    (listed,) = manifest_modules(["warmkit_blocktable:ComputeSlotMappingKernel"])
    kernel_module = warmkit_blocktable.ComputeSlotMappingKernel.__module__
    assert listed.module == kernel_module and listed.distribution == "warmkit-blocktable"
