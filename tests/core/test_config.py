"""``WarmupConfig``: defaults, validation, normalisation (``from_env`` is in ``test_envs.py``)."""

from __future__ import annotations

import attrs
import pytest

import warmkit
from warmkit import WarmupConfig


def test_config_defaults_match_the_issue():
    c = WarmupConfig()
    assert (c.enabled, c.monitor, c.jobs, c.target, c.on_error, c.progress, c.backends) == (
        True,
        "warn",
        None,
        None,
        "raise",
        "auto",
        None,
    )
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        c.jobs = 3  # type: ignore[misc]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"monitor": "loud"},
        {"on_error": "ignore"},
        {"progress": "yes"},
        {"jobs": 0},
        {"jobs": -1},
        {"jobs": 1.5},
        {"jobs": True},
        {"enabled": "no"},
    ],
)
def test_config_rejects_bad_values(kwargs):
    with pytest.raises((ValueError, TypeError)):
        WarmupConfig(**kwargs)


def test_config_backends_is_a_normalised_allow_list():
    assert WarmupConfig(backends="triton, fake").backends == ("fake", "triton")
    assert WarmupConfig(backends=["b", "a", "a"]).backends == ("a", "b")
    assert WarmupConfig(backends=[]).backends == ()


# -- WARMKIT_* variables an explicit WarmupConfig ignores: one WARNING naming them ------------


@pytest.fixture
def fresh_warnings(monkeypatch):
    from warmkit._warmup import config as _config

    monkeypatch.setattr(_config, "_warned", set())
    for name in _config.ENV_FIELDS.values():
        monkeypatch.delenv(name, raising=False)


def _warnings(caplog):
    return [r for r in caplog.records if r.levelname == "WARNING" and "not applied" in r.message]


def test_set_variables_an_explicit_config_ignores_are_one_warning_naming_them(
    fresh_warnings, monkeypatch, caplog
):
    import warmkit

    monkeypatch.setenv("WARMKIT_STORE", "/srv/store")
    monkeypatch.setenv("WARMKIT_READ_ONLY", "1")
    monkeypatch.setenv("WARMKIT_MONITOR", "error")  # the config's own value: applied
    monkeypatch.setenv("WARMKIT_JOBS", "many")  # does not parse: not applied either
    config = WarmupConfig(monitor="error", progress="off")
    with caplog.at_level("WARNING"):
        warmkit.warmup(config, warmkit.WarmupRegistry())
        warmkit.warmup(config, warmkit.WarmupRegistry())  # said once, not per warmup
    (record,) = _warnings(caplog)
    message = record.getMessage()
    assert "WARMKIT_STORE" in message and "WARMKIT_READ_ONLY" in message
    assert "WARMKIT_JOBS" in message and "WARMKIT_MONITOR" not in message
    assert "WarmupConfig.from_env(" in message and "are set but not applied" in message


def test_a_config_from_env_never_warns_even_with_overrides(fresh_warnings, monkeypatch, caplog):
    import warmkit

    monkeypatch.setenv("WARMKIT_STORE", "/srv/store")
    monkeypatch.setenv("WARMKIT_MONITOR", "warn")
    config = WarmupConfig.from_env(monitor="error", store=None, progress="off")
    with caplog.at_level("WARNING"):
        warmkit.warmup(config, warmkit.WarmupRegistry())
    assert _warnings(caplog) == []
    # the same values given by hand: the variables are not applied, and that is said
    assert WarmupConfig.from_env().store == "/srv/store"
    from warmkit._warmup.config import unapplied_variables

    assert unapplied_variables(WarmupConfig(monitor="error")) == (
        "WARMKIT_MONITOR",
        "WARMKIT_STORE",
    )


def test_target_takes_a_string_or_a_warmkit_target():
    assert WarmupConfig(target="sm_90a").target == "sm_90a"  # a string as given
    assert WarmupConfig(target=warmkit.Target.parse("sm_90a")).target == "cuda:90a"
    assert WarmupConfig().target is None
