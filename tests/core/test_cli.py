"""The ``warmkit`` command: list / plan / warmup, ``--json``, exit codes 0/1/2, one-line errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import warmkit
from warmkit import WarmupRegistry, monitor
from warmkit._cli.commands import main

from . import _kernels
from ._kernels import OtherKernel, PyKernel

TESTS_DIR = Path(__file__).resolve().parents[1]

P = PyKernel.CompileKey


@pytest.fixture
def manifest(tmp_path) -> Path:
    reg = WarmupRegistry()
    reg.add(PyKernel, n=[1, 2], flag=[False, True])
    reg.add(OtherKernel, m=warmkit.IntRange(0, 3))
    return reg.save(tmp_path / "warmup.json")


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    return lines[0]


# -- list ----------------------------------------------------------------------------------


def test_list_json_shows_backends_with_availability_version_and_distribution(capsys, fake_backend):
    fake_backend.add_dist(
        "acme-kernels", "1.2.0", kernels={"acme.py": f"{_kernels.__name__}:PyKernel"}
    )
    code, out, _err = run(capsys, "list", "--json")
    assert code == 0
    data = json.loads(out)
    backends = {b["name"]: b for b in data["backends"]}
    fake = backends["fake"]
    assert (fake["available"], fake["version"], fake["distribution"]) == (
        True,
        "9.9",
        "fake-backend",
    )
    assert fake["distribution_version"] == "2.0"
    assert fake["entry_point"] == f"{_kernels.__name__}:FakeBackend"
    tile = backends["tilelang"]
    assert tile["distribution"] in ("warmkit", "warmkit-tilelang")  # the stub, or its plugin
    if not tile["available"]:
        assert tile["install_hint"] == "pip install 'warmkit-tilelang[tilelang]'"
    kernels = {k["name"]: k for k in data["kernels"]}
    assert kernels["acme.py"]["distribution"] == "acme-kernels"
    assert kernels["acme.py"]["distribution_version"] == "1.2.0"
    assert [b["name"] for b in data["backends"]] == sorted(backends)


def test_list_isolates_a_broken_backend(capsys, plugin_site):
    plugin_site.add_module("wkp_cli_broken", "raise ImportError('needs libfoo')\n")
    plugin_site.add_dist(
        "broken",
        backends={"broken": "wkp_cli_broken:B", "fine": f"{_kernels.__name__}:FakeBackend"},
    )
    code, out, _err = run(capsys, "list", "--json")
    assert code == 0
    backends = {b["name"]: b for b in json.loads(out)["backends"]}
    assert backends["broken"]["available"] is False
    assert "needs libfoo" in backends["broken"]["reason"]
    assert backends["fine"]["available"] is True


def test_list_shows_conflicts(capsys, plugin_site):
    plugin_site.add_dist("one", backends={"dup": f"{_kernels.__name__}:FakeBackend"})
    plugin_site.add_dist("two", backends={"dup": f"{_kernels.__name__}:FakeBackend"})
    code, out, _err = run(capsys, "list", "--json")
    (dup,) = [b for b in json.loads(out)["backends"] if b["name"] == "dup"]
    assert code == 0 and dup["available"] is False and len(dup["conflicts"]) == 2


def test_list_text(capsys, fake_backend):
    code, out, _err = run(capsys, "list")
    assert code == 0
    assert out.startswith("backends:\n")
    assert "kernels:" in out
    (line,) = [x for x in out.splitlines() if x.strip().startswith("fake ")]
    assert "available 9.9" in line and "fake-backend 2.0" in line


def test_version_lists_plugins(capsys, fake_backend):
    code, out, _err = run(capsys, "--version")
    assert code == 0
    assert out.startswith(f"warmkit {warmkit.__version__}")
    assert "warmkit.backends fake: fake-backend 2.0" in out


# -- plan ----------------------------------------------------------------------------------


def test_plan_json_gives_keys_per_kernel(capsys, manifest):
    code, out, _err = run(capsys, "plan", str(manifest), "--json")
    assert code == 0
    planned = json.loads(out)
    modules = planned.pop("modules")  # what loading the manifest imported (a manifest names code)
    assert planned == {
        PyKernel.name: [repr(P(n, f)) for n in (1, 2) for f in (False, True)],
        "tests.other": [repr(OtherKernel.CompileKey(m)) for m in range(3)],
    }
    assert [m["module"] for m in modules] == [PyKernel.__module__]
    assert modules[0]["file"] == sys.modules[PyKernel.__module__].__file__
    assert _kernels.COMPILES == []


def test_plan_text(capsys, manifest):
    code, out, _err = run(capsys, "plan", str(manifest))
    assert code == 0
    assert f"{PyKernel.name}: 4 key(s)" in out
    assert out.rstrip().endswith("total: 7 key(s) in 2 kernel(s)")


# -- warmup --------------------------------------------------------------------------------


def test_warmup_json_compiles_every_key(capsys, manifest):
    code, out, _err = run(capsys, "warmup", str(manifest), "--json", "-j", "2")
    assert code == 0
    report = json.loads(out)
    assert report["totals"] == {
        "compiled": 7,
        "cached": 0,
        "waited": 0,
        "fetched": 0,
        "failed": 0,
        "skipped": 0,
        "keys": 7,
    }
    assert report["jobs"] == 2
    assert len(_kernels.COMPILES) == 7


def test_warmup_flags_reach_the_config(capsys, manifest):
    code, out, _err = run(
        capsys, "warmup", str(manifest), "--json", "--target", "cuda:90", "--monitor", "error"
    )
    assert code == 0
    report = json.loads(out)
    assert report["target"] == "cuda:90" and report["monitor"] == "error"
    assert {t for _n, _k, t in _kernels.COMPILES} == {"cuda:90"}
    assert monitor.mode() == "error"


def test_warmup_text_prints_the_table(capsys, manifest):
    code, out, _err = run(capsys, "warmup", str(manifest))
    assert code == 0
    assert out.splitlines()[0].split()[:3] == ["kernel", "backend", "keys"]
    assert any(line.startswith("total") for line in out.splitlines())


def test_warmup_failures_exit_1_with_the_report_and_one_line(capsys, manifest):
    PyKernel.fail_on = frozenset({P(1, True), P(2, False)})
    code, out, err = run(capsys, "warmup", str(manifest), "--json")
    assert code == 1
    report = json.loads(out)
    assert report["totals"]["failed"] == 2
    assert report["totals"]["compiled"] == 5  # collect: every key was attempted
    assert "2 key(s) failed" in err.splitlines()[-1]


def test_warmup_fail_fast_on_request(capsys, manifest):
    PyKernel.fail_on = frozenset({P(1, False)})
    code, out, _err = run(
        capsys, "warmup", str(manifest), "--json", "--on-error", "raise", "-j", "1"
    )
    assert code == 1
    assert json.loads(out)["totals"]["skipped"] == 6


# -- usage errors --------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["plan", "warmup"])
def test_missing_manifest_is_a_usage_error_in_one_line(capsys, tmp_path, command):
    code, out, err = run(capsys, command, str(tmp_path / "nope.json"))
    assert code == 2
    assert out == ""
    line = one_line(err)
    assert line.startswith("warmkit: error: ManifestError:")
    assert "nope.json" in line and "-v" in line


def test_unknown_kernel_in_a_manifest_is_a_usage_error(capsys, tmp_path):
    data = WarmupRegistry().to_dict() | {"registrations": [{"kernel": "acme.gone", "space": {}}]}
    path = tmp_path / "m.json"
    path.write_text(json.dumps(data))
    code, _out, err = run(capsys, "warmup", str(path))
    assert code == 2
    assert "acme.gone" in one_line(err)


def test_invalid_environment_is_a_usage_error_naming_the_variable(capsys, manifest, monkeypatch):
    monkeypatch.setenv("WARMKIT_MONITOR", "loud")
    code, _out, err = run(capsys, "warmup", str(manifest))
    assert code == 2
    assert "WARMKIT_MONITOR" in one_line(err)


@pytest.mark.parametrize(
    "argv",
    [["warmup"], ["plan"], ["frobnicate"], ["warmup", "m.json", "-j", "x"], ["list", "--bogus"]],
)
def test_bad_arguments_exit_2(capsys, argv):
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    assert "warmkit: error:" in capsys.readouterr().err


def test_no_command_prints_help_and_exits_2(capsys):
    code, _out, err = run(capsys)
    assert code == 2
    assert "usage:" in err


def test_bad_jobs_value_is_a_usage_error(capsys, manifest):
    code, _out, err = run(capsys, "warmup", str(manifest), "-j", "0")
    assert code == 2
    assert "jobs" in one_line(err)


@pytest.mark.parametrize("where", ["before", "after"])
def test_verbose_shows_the_traceback(capsys, tmp_path, where):
    args = ["plan", str(tmp_path / "nope.json")]
    argv = ["-v", *args] if where == "before" else [*args, "-v"]
    code, _out, err = run(capsys, *argv)
    assert code == 2
    assert "Traceback (most recent call last)" in err
    assert err.rstrip().splitlines()[-1].startswith("warmkit: error: ManifestError:")


# -- as a process --------------------------------------------------------------------------


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARMKIT_")}
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS_DIR), *extra.pop("path", "").split(os.pathsep)])
    return env | extra


def test_python_m_warmkit_list_json_and_exit_codes(manifest, tmp_path):
    def cli(*args):
        return subprocess.run(
            [sys.executable, "-m", "warmkit", *args],
            check=False,
            capture_output=True,
            text=True,
            env=_env(),
            timeout=120,
        )

    listed = cli("list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert {"tilelang", "cutedsl"} <= {b["name"] for b in json.loads(listed.stdout)["backends"]}

    done = cli("warmup", str(manifest), "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["totals"]["compiled"] == 7

    missing = cli("warmup", str(tmp_path / "nope.json"))
    assert missing.returncode == 2
    assert one_line(missing.stderr).startswith("warmkit: error: ManifestError")
    assert missing.stdout == ""


# -- operator's details -----------------------------------------------------------------


def test_help_lists_exit_codes_and_every_argument_has_help():
    import argparse

    from warmkit._cli.args import make_parser

    def walk(parser):
        yield parser
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub in action.choices.values():
                    yield from walk(sub)

    for parser in walk(make_parser()):
        assert "exit codes:" in parser.format_help() and "2  usage error" in parser.format_help()
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                continue
            assert action.help, f"{parser.prog}: {action.dest} has no help text"


def test_unknown_backend_name_on_the_command_line_exits_2(capsys, manifest):
    code, _out, err = run(capsys, "warmup", str(manifest), "--backends", "tritn")
    assert code == 2 and "'tritn'" in one_line(err)


def test_a_warmup_that_filters_out_every_key_exits_1(capsys, fake_backend, tmp_path):
    reg = WarmupRegistry()
    reg.add(_kernels.ScaleKernel, n=[1, 2])
    path = reg.save(tmp_path / "m.json")
    code, _out, err = run(capsys, "warmup", str(path), "--backends", "tilelang")
    assert code == 1 and "nothing was warmed up" in err


def test_a_closed_pipe_exits_0_quietly(manifest):
    script = (
        f"{sys.executable} -m warmkit plan {manifest} | head -c 1 >/dev/null; "
        'echo "rc=${PIPESTATUS[0]}"'
    )
    big = WarmupRegistry()
    big.add(PyKernel, n=warmkit.IntRange(1, 4000), flag=[False, True])
    big.save(manifest)
    res = subprocess.run(
        ["bash", "-c", script], capture_output=True, text=True, timeout=120, check=False, env=_env()
    )
    assert "rc=0" in res.stdout and "Traceback" not in res.stderr and res.stderr == ""


def test_plan_names_the_plugin_whose_tuning_plan_raises_in_one_line(
    capsys, fake_backend, tmp_path, monkeypatch
):
    from ._kernels import FakeBackend, ScaleKernel

    def tuning_plan(self, kernel, keys, target):
        raise IndexError("autotune table")

    monkeypatch.setattr(FakeBackend, "tuning_plan", tuning_plan, raising=False)
    reg = WarmupRegistry()
    reg.add(ScaleKernel, n=[1])
    code, _out, err = run(capsys, "plan", str(reg.save(tmp_path / "m.json")))
    assert code == 1
    line = one_line(err)
    assert line.startswith("warmkit: error: PluginError: IndexError: autotune table (raised")
    assert "raised by backend plugin 'fake' in its tuning_plan() hook" in line
