"""Which node writes a checkpoint first: the leader waits longest after each capture. The
delay is set where the node's role changes (``Node.on_role``), not by a periodic thread."""

from __future__ import annotations

import time

from fastapi.testclient import TestClient

from runner.api.app import create_app
from runner.settings import LEADER_WRITE_DELAY_S, Settings

settle_timeout_s = 30


def test_a_follower_waits_the_base_delay_and_a_cluster_leader_longer(tmp_path):
    cluster = Settings(data_dir=tmp_path, mode="cluster", checkpoint_write_delay_s=1.5,
                       app_secret="a" * 32, token_secret="t" * 32, cluster_secret="c" * 32)
    assert cluster.checkpoint_write_delay(is_leader=False) == 1.5
    assert cluster.checkpoint_write_delay(is_leader=True) == 1.5 + LEADER_WRITE_DELAY_S
    embedded = Settings(data_dir=tmp_path, checkpoint_write_delay_s=1.5)
    assert embedded.checkpoint_write_delay(is_leader=True) == 1.5  # no one to wait for
    chosen = Settings(data_dir=tmp_path, checkpoint_leader_write_delay_s=0.25)
    assert chosen.checkpoint_write_delay(is_leader=True) == 0.25
    assert chosen.checkpoint_write_delay(is_leader=False) == 0.0


def _wait_for_delay(svc, delay_s: float) -> None:
    deadline = time.monotonic() + settle_timeout_s
    while time.monotonic() < deadline and svc.checkpointer.write_delay_s != delay_s:
        time.sleep(0.05)


def test_a_node_that_leads_gives_its_checkpointer_the_leaders_delay(tmp_path):
    settings = Settings(data_dir=tmp_path, port=8996, tick_interval_ms=50,
                        checkpoint_write_delay_s=0.5, checkpoint_leader_write_delay_s=2.5)
    app = create_app(settings=settings)
    with TestClient(app):
        svc = app.state.service
        _wait_for_delay(svc, 3.0)
        assert svc.node.is_leader
        assert svc.checkpointer.write_delay_s == 3.0


def test_the_delay_follows_the_role_without_waiting_for_housekeeping(tmp_path):
    """The housekeeping thread sleeps a minute here: the leader's delay comes from the node's
    role change, and a node that stops leading gives it back at once."""
    settings = Settings(data_dir=tmp_path, port=8997, tick_interval_ms=60_000,
                        effects_confirm_interval_ms=60_000, checkpoint_write_delay_s=0.5,
                        checkpoint_leader_write_delay_s=2.5)
    app = create_app(settings=settings)
    with TestClient(app):
        svc = app.state.service
        _wait_for_delay(svc, 3.0)
        assert svc.node.is_leader and svc.checkpointer.write_delay_s == 3.0
        svc.node.election.stop()  # the embedded election deposes its node
        assert not svc.node.is_leader
        assert svc.checkpointer.write_delay_s == 0.5
