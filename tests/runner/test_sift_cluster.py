"""Sift's official client against two runner nodes on the real cluster (Kafka log, ZooKeeper
election, HBase run store): events and decisions sent to the follower reach the leader's log."""

from __future__ import annotations

import time
import uuid

import httpx
import pytest
import sift

from runner.nodes import NodeCluster, free_base_port
from runner.scoring import demo_score
from runner.sift.config import SiftSettings
from runner.sift.translate import to_event

pytestmark = pytest.mark.cluster
settle_timeout_s = 90


@pytest.fixture(scope="module")
def nodes(tmp_path_factory):
    tag = uuid.uuid4().hex[:8]
    c = NodeCluster(tmp_path_factory.mktemp("sift-nodes"), f"rf-sift-{tag}", 2,
                    base_port=free_base_port(2),
                    env={"RAILFLOW_HBASE_TABLE": f"railflow_runs_sift_{tag}"})
    c.start()
    leader = c.wait_ready()
    deadline = time.monotonic() + settle_timeout_s
    while time.monotonic() < deadline:  # the leader preloads the demo workflow
        r = httpx.post(leader.url + "/v1/events",
                       headers={"Authorization": f"Bearer {c.api_key}"},
                       json={"event_id": f"warm-{tag}", "type": "order", "data": {}})
        if r.status_code == 200 and r.json()["runs"]:
            break
        time.sleep(0.5)
    yield c
    c.stop()


def _client(c: NodeCluster, url: str) -> sift.Client:
    return sift.Client(api_key=c.api_key, api_url=url, account_id="acct", timeout=30)


def _order(order_id: str, last4: str, **custom) -> dict:
    return {"$user_id": "u-cl", "$order_id": order_id, "$amount": 10_000_000,
            "$currency_code": "USD", "$billing_address": {"$country": "US"},
            "$payment_methods": [{"$card_bin": "422222", "$card_last4": last4}],
            "merchant": f"m-{order_id}", **custom}


def _review_order(order_id: str) -> dict:
    """An order the demo model scores in (60, 80]: the W3 workflow sends it to review."""
    for n in range(10_000):
        props = _order(order_id, f"{n:04d}", **{
            "$amount": 3_000_000_000, "$billing_address": {"$country": "NG"},
            "channel": "card-not-present"})
        _, event = to_event({"$type": "$create_order", **props}, SiftSettings())
        if 60 < demo_score(event["data"]) <= 80:
            return props
    raise AssertionError("no card gives a review score")


def test_track_and_review_through_a_follower(nodes):
    leader = nodes.leader()
    follower = next(n for n in nodes.nodes.values() if n is not leader)
    via_follower, via_leader = _client(nodes, follower.url), _client(nodes, leader.url)
    statuses = []
    for i in range(5):
        r = via_follower.track("$create_order", _order(f"cl-vel-{i}", "8888"),
                               return_workflow_status=True, return_route_info=True)
        assert r.api_status == 0, r.body
        statuses.append(r.body["score_response"]["workflow_statuses"][0])
    assert statuses[4]["route"] == {"name": "block_card_velocity"}
    assert statuses[4]["history"][0]["config"] == {"decision_id": "block_velocity"}
    again = via_leader.get_workflow_status(statuses[4]["id"]).body
    assert again["history"] == statuses[4]["history"]

    review = _review_order("cl-review")
    r = via_follower.track("$create_order", review, return_workflow_status=True)
    (status,) = r.body["score_response"]["workflow_statuses"]
    assert status["history"][0]["app"] == "review_queue"
    r = via_follower.apply_order_decision("u-cl", "cl-review", {
        "decision_id": "accept", "source": "MANUAL_REVIEW", "analyst": "a@example.com"})
    assert r.http_status_code == 200
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        done = via_leader.get_workflow_status(status["id"]).body
        if done["state"] == "finished":
            break
        time.sleep(0.1)
    assert done["history"][0]["config"] == {"decision_id": "approve_reviewed"}
