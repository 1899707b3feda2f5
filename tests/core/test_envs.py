"""Every ``WARMKIT_*`` variable: parsed, validated (errors name the variable), documented."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import attrs
import pytest

import warmkit
from warmkit import WarmupConfig, _envs
from warmkit._envs import ENVIRONMENT

from ._kernels import PyKernel

ROOT = Path(__file__).resolve().parents[2]

#: variable -> [(raw, parsed)]
VALID = {
    "WARMKIT_ENABLED": [
        ("1", True),
        ("true", True),
        ("YES", True),
        (" on ", True),
        ("0", False),
        ("false", False),
        ("no", False),
        ("off", False),
    ],
    "WARMKIT_MONITOR": [("off", "off"), ("warn", "warn"), ("ERROR", "error")],
    "WARMKIT_JOBS": [("4", 4), (" 1 ", 1), ("auto", None), ("", None)],
    "WARMKIT_TARGET": [("cuda:90", "cuda:90"), ("  sm_80 ", "sm_80"), ("", None)],
    "WARMKIT_ON_ERROR": [("raise", "raise"), ("collect", "collect")],
    "WARMKIT_PROGRESS": [("auto", "auto"), ("on", "on"), ("off", "off")],
    "WARMKIT_BACKENDS": [("triton", ("triton",)), ("b, a,,a", ("a", "b")), ("", ())],
    "WARMKIT_BUNDLE": [("kernels.wkb", "kernels.wkb"), (" /b/k.wkb ", "/b/k.wkb"), ("", None)],
    "WARMKIT_COMPILE_TIMEOUT": [("30", 30.0), (" 0.5 ", 0.5), ("off", None), ("", None)],
    "WARMKIT_BUNDLE_TRUST": [("/k/a.pub, /k/b.pub", ("/k/a.pub", "/k/b.pub"))],
    "WARMKIT_TRUST": [("/k/a.pub, /k/b.pub", ("/k/a.pub", "/k/b.pub")), ("k.pub", ("k.pub",))],
    "WARMKIT_SIGNING_KEY": [(" /k/fleet.pem ", "/k/fleet.pem")],
    "WARMKIT_PLUGINS": [("triton,blocktable.slot_mapping", ("blocktable.slot_mapping", "triton"))],
    "WARMKIT_MAX_POINTS": [("10", 10), ("1_000_000", 1_000_000)],
    "WARMKIT_RANK": [("0", 0), ("3", 3), (" 7 ", 7)],
    "WARMKIT_RECORD": [("run-{rank}.json", "run-{rank}.json"), ("", None)],
    "WARMKIT_MANIFEST": [(" m.json ", "m.json"), ("", None)],
    "WARMKIT_COMMAND_PID": [("4242", "4242"), ("", None)],
    "WARMKIT_PYTHON": [("/venv/bin/python", "/venv/bin/python"), ("", None)],
    "WARMKIT_MANIFEST_MODULES": [("installed", "installed"), (" ANY ", "any")],
    "WARMKIT_COMPILE_PROCESSES": [("auto", "auto"), (" ON ", "on"), ("off", "off")],
    "WARMKIT_STORE": [("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"), ("", None)],
    "WARMKIT_STORE_REQUIRED": [("1", True), ("off", False)],
    "WARMKIT_STORE_PASSWORD": [("s3cret", "s3cret"), ("", None)],
    "WARMKIT_READ_ONLY": [("1", True), ("0", False)],
    "WARMKIT_WAIT_SECONDS": [("300", 300.0), ("0.5", 0.5)],
    "WARMKIT_LEASE_SECONDS": [("30", 30.0), ("2.5", 2.5)],
}

INVALID = {
    "WARMKIT_ENABLED": ["maybe", "2", ""],  # empty is a mistake, not "off"
    "WARMKIT_MONITOR": ["loud", ""],
    "WARMKIT_MANIFEST_MODULES": ["all", ""],
    "WARMKIT_JOBS": ["0", "-2", "many"],
    "WARMKIT_ON_ERROR": ["ignore"],
    "WARMKIT_PROGRESS": ["yes"],
    "WARMKIT_MAX_POINTS": ["0", "lots"],
    "WARMKIT_RANK": ["first"],
    "WARMKIT_COMPILE_TIMEOUT": ["0", "-1", "soon"],
    "WARMKIT_COMPILE_PROCESSES": ["threads", ""],
    "WARMKIT_STORE_REQUIRED": ["", "sometimes"],
    "WARMKIT_READ_ONLY": ["", "ro"],
    "WARMKIT_WAIT_SECONDS": ["0", "-1", "long"],
    "WARMKIT_LEASE_SECONDS": ["0", "never", "inf", "-5", "nan"],
    # an empty trust list once turned signature checks off without a word
    "WARMKIT_TRUST": ["", " , "],
    "WARMKIT_BUNDLE_TRUST": ["", ","],
    "WARMKIT_SIGNING_KEY": [""],
}

FIELD_VARS = {f.name: f"WARMKIT_{f.name.upper()}" for f in attrs.fields(WarmupConfig)}


def _plugin_tables() -> dict[str, dict[str, warmkit.EnvVar]]:
    """Each plugin package's own table, ``<package>/_envs.py``'s ``ENVIRONMENT``, found on disk."""
    tables = {}
    for path in sorted(ROOT.glob("plugins/*/warmkit_*/_envs.py")):
        package = path.parent.name
        try:
            tables[package] = importlib.import_module(f"{package}._envs").ENVIRONMENT
        except ImportError as exc:  # pragma: no cover - the README installs every plugin
            pytest.fail(f"{package} is not installed ({exc}); install it as the README says")
    return tables


PLUGIN_TABLES = _plugin_tables()
ALL_VARIABLES = {**ENVIRONMENT, **{n: v for t in PLUGIN_TABLES.values() for n, v in t.items()}}


def test_every_variable_has_test_cases():
    assert set(VALID) == set(ENVIRONMENT)


@pytest.mark.parametrize(
    ("name", "raw", "expected"),
    [(name, raw, exp) for name, cases in VALID.items() for raw, exp in cases],
)
def test_variable_parses(monkeypatch, name, raw, expected):
    monkeypatch.setenv(name, raw)
    assert _envs.get(name) == expected


@pytest.mark.parametrize(
    ("name", "raw"), [(name, raw) for name, raws in INVALID.items() for raw in raws]
)
def test_invalid_value_is_value_error_naming_the_variable(monkeypatch, name, raw):
    monkeypatch.setenv(name, raw)
    with pytest.raises(ValueError) as info:
        _envs.get(name)
    assert name in str(info.value)
    assert repr(raw) in str(info.value)


@pytest.mark.parametrize("name", sorted(ENVIRONMENT))
def test_unset_variable_gives_its_default(name):
    assert _envs.get(name) == ENVIRONMENT[name].default


def test_unknown_variable_is_key_error():
    with pytest.raises(KeyError):
        _envs.get("WARMKIT_NOPE")


def test_every_config_field_has_a_variable_with_the_same_default():
    for field in attrs.fields(WarmupConfig):
        var = FIELD_VARS[field.name]
        assert var in ENVIRONMENT, f"WarmupConfig.{field.name} has no {var}"
        assert ENVIRONMENT[var].default == field.default, var


def test_from_env_reads_every_field(monkeypatch):
    env = {
        "WARMKIT_ENABLED": "0",
        "WARMKIT_MONITOR": "error",
        "WARMKIT_JOBS": "3",
        "WARMKIT_TARGET": "cuda:90",
        "WARMKIT_ON_ERROR": "collect",
        "WARMKIT_PROGRESS": "off",
        "WARMKIT_BACKENDS": "triton,fake",
        "WARMKIT_BUNDLE": "kernels.wkb",
        "WARMKIT_COMPILE_TIMEOUT": "12.5",
        "WARMKIT_RECORD": "run-{rank}.json",
        "WARMKIT_STORE": "redis://127.0.0.1:6379/0",
        "WARMKIT_STORE_REQUIRED": "1",
        "WARMKIT_READ_ONLY": "1",
    }
    assert set(env) == set(FIELD_VARS.values())
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert WarmupConfig.from_env() == WarmupConfig(
        enabled=False,
        monitor="error",
        jobs=3,
        target="cuda:90",
        on_error="collect",
        progress="off",
        backends=("fake", "triton"),
        bundle="kernels.wkb",
        compile_timeout=12.5,
        record="run-{rank}.json",
        store="redis://127.0.0.1:6379/0",
        store_required=True,
        read_only=True,
    )
    assert WarmupConfig.from_env(jobs=None, monitor="off", record=None).jobs is None


def test_from_env_without_variables_is_the_default_config():
    assert WarmupConfig.from_env() == WarmupConfig()


def test_from_env_error_names_the_variable(monkeypatch):
    monkeypatch.setenv("WARMKIT_MONITOR", "loud")
    with pytest.raises(ValueError, match="WARMKIT_MONITOR"):
        WarmupConfig.from_env()
    with pytest.raises(ValueError, match="WARMKIT_MONITOR"):
        warmkit.warmup()


def test_max_points_variable_is_the_default_budget(monkeypatch):
    monkeypatch.setenv("WARMKIT_MAX_POINTS", "3")
    with pytest.raises(ValueError, match="4 points"):
        PyKernel().get_warmup_keys(n=[1, 2, 3, 4])
    assert len(PyKernel().get_warmup_keys(n=[1, 2, 3])) == 3


@pytest.mark.parametrize(
    ("env", "expected"),
    [({}, 0), ({"RANK": "2"}, 2), ({"WARMKIT_RANK": "1", "RANK": "2"}, 1), ({"RANK": "x"}, 0)],
)
def test_rank(monkeypatch, env, expected):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert _envs.rank() == expected


def test_every_variable_the_code_reads_is_in_the_table():
    mentioned = set()
    for path in (ROOT / "warmkit").rglob("*.py"):
        mentioned |= set(re.findall(r"\bWARMKIT_[A-Z_]+[A-Z]\b", path.read_text()))
    assert mentioned <= set(ENVIRONMENT), mentioned - set(ENVIRONMENT)


def test_each_plugin_declares_its_variables_in_its_own_table():
    assert "warmkit_triton" in PLUGIN_TABLES
    for package, table in PLUGIN_TABLES.items():
        prefix = "WARMKIT_" + package.removeprefix("warmkit_").upper() + "_"
        assert all(name.startswith(prefix) for name in table), (package, sorted(table))
        assert all(isinstance(v, warmkit.EnvVar) for v in table.values())
        assert not set(table) & set(ENVIRONMENT)
        mentioned = set()
        for path in (ROOT / "plugins").glob(f"*/{package}/**/*.py"):
            mentioned |= set(re.findall(r"\bWARMKIT_[A-Z_]+[A-Z]\b", path.read_text()))
        own = {m for m in mentioned if m.startswith(prefix)}
        assert own <= set(table), f"{package} reads {own - set(table)} outside its table"
        assert mentioned <= set(table) | set(ENVIRONMENT), mentioned - set(table) - set(ENVIRONMENT)


@pytest.mark.parametrize(
    "name",
    sorted(n for n, v in ALL_VARIABLES.items() if v.parse is ENVIRONMENT["WARMKIT_ENABLED"].parse),
)
def test_every_boolean_variable_follows_the_one_rule(monkeypatch, name):
    var = ALL_VARIABLES[name]
    for raw, want in (("1", True), ("YES", True), (" on ", True), ("0", False), ("off", False)):
        monkeypatch.setenv(name, raw)
        assert var.read(name) is want, (name, raw)
    for raw in ("", "2", "maybe"):
        monkeypatch.setenv(name, raw)
        with pytest.raises(ValueError, match=name):
            var.read(name)
    monkeypatch.delenv(name)
    assert var.read(name) is var.default


def test_no_variable_parses_booleans_its_own_way():
    """Every table's boolean variables use EnvVar.flag's parser (the names say what is a flag)."""
    flags = {
        "WARMKIT_ENABLED",
        "WARMKIT_TRITON_VERIFY",
        "WARMKIT_TRITON_PRIME",
        "WARMKIT_TRITON_KEY_CACHE",
    }
    rule = ENVIRONMENT["WARMKIT_ENABLED"].parse
    assert {n for n in flags if n in ALL_VARIABLES and ALL_VARIABLES[n].parse is rule} == flags


def test_mode_literals_are_defined_once():
    assert warmkit.monitor.MODES is _envs.MONITOR_MODES
    assert attrs.fields(WarmupConfig).on_error.default in _envs.ON_ERROR_MODES
    literal = re.compile(r"""\(\s*["'](off|raise|auto)["'],\s*["']""")
    for path in (ROOT / "warmkit").rglob("*.py"):
        if path.name != "_envs.py":
            assert not literal.search(path.read_text()), f"{path.name} spells a mode tuple again"


# -- docs/configuration.md -----------------------------------------------------------------


def _doc_rows() -> dict[str, list[str]]:
    text = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| `") and cells:
            rows[cells[0].strip("`")] = cells
    return rows


def _doc_default(value) -> str:
    if value is None:
        return "unset"
    if value is True:
        return "`1`"
    if value is False:
        return "`0`"
    return f"`{value}`"


def test_configuration_doc_lists_every_variable_with_its_default():
    rows = _doc_rows()
    for name, var in ALL_VARIABLES.items():
        assert name in rows, f"docs/configuration.md does not list {name}"
        assert rows[name][1] == _doc_default(var.default), name


def test_configuration_doc_lists_every_config_field_with_default_and_variable():
    rows = _doc_rows()
    for field in attrs.fields(WarmupConfig):
        assert field.name in rows, f"docs/configuration.md does not list WarmupConfig.{field.name}"
        _name, default, var, _meaning = rows[field.name]
        assert default == f"`{field.default!r}`".replace("'", '"'), field.name
        assert var == f"`{FIELD_VARS[field.name]}`"
