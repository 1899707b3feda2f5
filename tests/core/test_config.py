"""``WarmupConfig``: defaults, validation, normalisation (``from_env`` is in ``test_envs.py``)."""

from __future__ import annotations

import attrs
import pytest

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
