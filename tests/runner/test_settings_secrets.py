"""Cluster mode never runs on the built-in secrets; embedded mode needs no configuration."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from runner.nodes import cluster_secrets, secrets_env
from runner.settings import DEMO_SECRETS, Settings

STRONG = {name: f"{name}-0123456789abcdefghijklmnop" for name in DEMO_SECRETS}


def test_cluster_mode_refuses_default_secrets():
    with pytest.raises(ValidationError, match="RAILFLOW_APP_SECRET"):
        Settings(mode="cluster")
    for name in DEMO_SECRETS:
        weak = dict(STRONG, **{name: DEMO_SECRETS[name]})
        with pytest.raises(ValidationError, match=f"RAILFLOW_{name.upper()}"):
            Settings(mode="cluster", **weak)
    with pytest.raises(ValidationError, match="RAILFLOW_TOKEN_SECRET"):
        Settings(mode="cluster", **dict(STRONG, token_secret="short"))
    assert Settings(mode="cluster", **STRONG).cluster_secret == STRONG["cluster_secret"]


def test_embedded_mode_starts_with_no_configuration_and_a_private_cluster_key(tmp_path):
    a, b = Settings(data_dir=tmp_path / "a"), Settings(data_dir=tmp_path / "b")
    assert a.resolved_cluster_secret() != DEMO_SECRETS["cluster_secret"]
    assert a.checkpoint_key() == Settings(data_dir=tmp_path / "a").checkpoint_key()
    assert a.checkpoint_key() != b.checkpoint_key()


def test_the_node_launcher_gives_every_node_the_same_strong_secrets(tmp_path):
    env = secrets_env(tmp_path)
    assert env == secrets_env(tmp_path) and set(cluster_secrets(tmp_path)) == set(DEMO_SECRETS)
    overrides = {k.removeprefix("RAILFLOW_").lower(): v for k, v in env.items()}
    Settings(mode="cluster", **overrides)  # accepted
