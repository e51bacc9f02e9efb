"""Sift's official Python client (``sift`` 6.1.0) against an embedded node served by uvicorn.

The node runs the demo W3 workflow (score, block above 90, review above 60, block a card's
fifth order in 5 minutes); the client only has its base URL changed.
"""

from __future__ import annotations

import socket
import threading
import time
from decimal import Decimal

import httpx
import pytest
import sift
import uvicorn
from sift.client import ApiException

from runner.api.app import create_app
from runner.scoring import demo_score
from runner.service import Service
from runner.settings import Settings
from runner.sift.config import SiftSettings
from runner.sift.ratelimit import RateLimiter
from runner.sift.translate import to_event

ready_timeout_s = 60
ACCOUNT = "acct-1"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    port = _free_port()
    settings = Settings(data_dir=tmp_path_factory.mktemp("sift"), port=port,
                        tick_interval_ms=50, request_deadline_ms_default=3000)
    service = Service(settings)
    key = service.auth.create_key("sift-tests")
    app = create_app(service)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port,
                                           log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + ready_timeout_s
    while time.monotonic() < deadline:  # up, and the demo workflow published
        try:
            if (httpx.get(url + "/healthz").json()["status"] == "ok"
                    and service.wait_workflows(0)):
                break
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    yield {"url": url, "key": key, "app": app}
    server.should_exit = True
    thread.join(timeout=20)


@pytest.fixture(scope="module")
def client(node):
    return sift.Client(api_key=node["key"], api_url=node["url"], account_id=ACCOUNT, timeout=15)


def order(order_id: str, user_id: str, last4: str, amount: int | Decimal = 25_000_000,
          country: str = "US", **custom) -> dict:
    return {"$user_id": user_id, "$order_id": order_id, "$amount": amount,
            "$currency_code": "USD", "$ip": "10.0.0.1",
            "$billing_address": {"$name": "A", "$city": "Town", "$country": country},
            "$payment_methods": [{"$payment_type": "$credit_card", "$card_bin": "411111",
                                  "$card_last4": last4}],
            "merchant": f"m-{order_id}", **custom}


def score_of(properties: dict) -> int:
    _, event = to_event({"$type": "$create_order", **properties}, SiftSettings())
    return demo_score(event["data"])


def find_last4(lo: int, hi: int, **kwargs) -> tuple[dict, str]:
    """An order (and its card's last4) whose demo score falls in (lo, hi]."""
    for n in range(10_000):
        last4 = f"{n:04d}"
        props = order(last4=last4, **kwargs)
        if lo < score_of(props) <= hi:
            return props, last4
    raise AssertionError("no card gives a score in range")


def track(client, props: dict):
    r = client.track("$create_order", props, return_workflow_status=True,
                     return_route_info=True)
    assert r.http_status_code == 200 and r.api_status == 0, r.body
    (status,) = r.body["score_response"]["workflow_statuses"]
    return r, status


def decision_of(status: dict) -> str | None:
    top = status["history"][0]
    return top["config"].get("decision_id") if top["app"] == "decision" else None


def test_approve_block_and_review_decisions(client):
    props, _ = find_last4(-1, 40, order_id="s-ok", user_id="u-ok")
    r, status = track(client, props)
    assert status["state"] == "finished" and decision_of(status) == "approve"
    assert status["route"] == {"name": "approve_otherwise"}
    assert status["config"]["id"] == "w3_demo" and status["abuse_types"] == ["payment_abuse"]
    assert status["entity"] == {"type": "order", "id": "s-ok"}
    assert [h["app"] for h in status["history"]] == ["decision", "scorer", "event"]
    score = r.body["score_response"]["scores"]["payment_abuse"]["score"]
    assert 0 <= score <= 0.4

    props, _ = find_last4(90, 100, order_id="s-block", user_id="u-block", country="NG",
                          amount=900_000_000, channel="card-not-present", is_fraud=True)
    _, status = track(client, props)
    assert decision_of(status) == "block_high_score"
    assert status["route"] == {"name": "block_above_90"}

    props, _ = find_last4(60, 80, order_id="s-review", user_id="u-review", country="NG",
                          amount=3_000_000_000, channel="card-not-present")
    _, status = track(client, props)
    assert status["state"] == "running" and status["route"] == {"name": "review_above_60"}
    top = status["history"][0]
    assert top["app"] == "review_queue" and top["state"] == "running"
    assert [b["id"] for b in top["config"]["buttons"]] == ["accept", "reject"]


def test_a_card_past_four_orders_in_five_minutes_is_blocked(client):
    decisions = []
    for i in range(5):
        _, status = track(client, order(f"s-vel-{i}", "u-vel", last4="7777",
                                        amount=10_000_000))
        decisions.append((decision_of(status), status["route"]["name"]))
    assert decisions[3][1] != "block_card_velocity"
    assert decisions[4] == ("block_velocity", "block_card_velocity")


def test_workflow_status_agrees_with_the_events_reply(client):
    _, status = track(client, order("s-status", "u-status", last4="1212",
                                    amount=5_000_000))
    again = client.get_workflow_status(status["id"])
    assert again.http_status_code == 200 and again.body["id"] == status["id"]
    assert again.body["history"] == status["history"]
    assert again.body["state"] == status["state"] and again.body["route"] == status["route"]


def test_a_review_decided_with_apply_order_decision_resumes_the_run(client):
    props, _ = find_last4(60, 80, order_id="s-rev2", user_id="u/rev 2", country="NG",
                          amount=3_000_000_000, channel="card-not-present")
    _, status = track(client, props)
    assert status["state"] == "running"
    with pytest.raises(ApiException) as bad:  # not one of the review's buttons
        client.apply_order_decision("u/rev 2", "s-rev2", {
            "decision_id": "maybe", "source": "MANUAL_REVIEW", "analyst": "a@example.com"})
    assert bad.value.http_status_code == 400 and bad.value.api_status == 53
    r = client.apply_order_decision("u/rev 2", "s-rev2", {
        "decision_id": "accept", "source": "MANUAL_REVIEW", "analyst": "a@example.com",
        "description": "called the customer"})
    assert r.http_status_code == 200
    assert r.body["entity"] == {"type": "order", "id": "s-rev2"}
    assert r.body["decision"] == {"id": "accept"}
    done = client.get_workflow_status(status["id"]).body
    assert done["state"] == "finished" and decision_of(done) == "approve_reviewed"
    assert [h["app"] for h in done["history"]][:2] == ["decision", "review_queue"]
    latest = client.get_order_decisions("s-rev2").body["decisions"]
    assert latest["payment_abuse"]["decision"]["id"] == "approve_reviewed"


def test_a_user_decision_resolves_the_users_waiting_review(client, node):
    props, _ = find_last4(60, 80, order_id="s-userdec", user_id="u-userdec", country="NG",
                          amount=3_000_000_000, channel="card-not-present")
    _, status = track(client, props)
    assert status["state"] == "running"
    door = node["app"].state.sift
    for _ in range(100):  # the user's runs are found through the run store's index
        if door.user_runs("u-userdec"):
            break
        time.sleep(0.05)
    r = client.apply_user_decision("u-userdec", {
        "decision_id": "reject", "source": "MANUAL_REVIEW", "analyst": "a@example.com"})
    assert r.http_status_code == 200 and r.body["entity"] == {"type": "user",
                                                              "id": "u-userdec"}
    done = client.get_workflow_status(status["id"]).body
    assert done["state"] == "finished" and decision_of(done) == "block_reviewed"
    for _ in range(100):
        latest = client.get_user_decisions("u-userdec").body["decisions"]
        if latest:
            break
        time.sleep(0.05)
    assert latest["payment_abuse"]["decision"]["id"] == "block_reviewed"


def test_wrong_key_raises_status_51(node):
    wrong = sift.Client(api_key="not-a-key", api_url=node["url"], account_id=ACCOUNT)
    with pytest.raises(ApiException) as exc:
        wrong.track("$create_order", order("s-wrong", "u", last4="0000"))
    assert exc.value.http_status_code == 400 and exc.value.api_status == 51
    with pytest.raises(ApiException) as exc:
        wrong.get_workflow_status("r_whatever")
    assert exc.value.api_status == 51


def test_missing_fields_and_unknown_reserved_fields(client):
    with pytest.raises(ApiException) as exc:
        client.track("$create_order", {"$order_id": "s-nouser"})
    assert exc.value.http_status_code == 400 and exc.value.api_status == 55
    assert "$user_id" in exc.value.api_error_message
    with pytest.raises(ApiException) as exc:
        client.track("$create_order", {"$user_id": "u", "$not_a_field": 1})
    assert exc.value.api_status == 105 and "$not_a_field" in exc.value.api_error_message
    r = httpx.post(client.url + "/v205/events", content=b"{nope",
                   headers={"content-type": "application/json"})
    assert r.status_code == 400 and r.json()["status"] == 56


def test_decimal_amount_and_slash_ids(client, node):
    props = order("s/dec 1", "u/1", last4="3434", amount=Decimal("15230000.4"))
    _, status = track(client, props)
    assert status["entity"] == {"type": "order", "id": "s/dec 1"}
    door = node["app"].state.sift
    for _ in range(100):  # the run store holds the event once the run's write lands
        data = door.event_data(status["id"])
        if data is not None:
            break
        time.sleep(0.05)
    assert data["amount"] == 1523 and data["amount_micros"] == 15230000
    assert data["customer"] == "u/1" and data["card"] == "411111:3434"
    assert data["merchant"] == "m-s/dec 1" and data["country"] == "US"
    assert client.get_workflow_status(status["id"]).body["entity"]["id"] == "s/dec 1"
    latest = client.get_order_decisions("s/dec 1").body["decisions"]
    assert latest["payment_abuse"]["decision"]["id"] == decision_of(status)
    r = client.apply_order_decision("u/1", "s/dec 1", {
        "decision_id": "block_reviewed", "source": "CHARGEBACK"})
    assert r.http_status_code == 200 and r.body["entity"]["id"] == "s/dec 1"


def test_the_same_order_twice_is_one_run(client, node):
    props = order("s-twice", "u-twice", last4="5656", amount=7_000_000)
    _, first = track(client, props)
    _, second = track(client, {**props, "$amount": 99_000_000})
    assert first["id"] == second["id"] and first["history"] == second["history"]
    runs = httpx.get(f"{node['url']}/v1/events/sift.create_order.s-twice/runs",
                     headers={"Authorization": f"Bearer {node['key']}"}).json()
    assert [r["run_id"] for r in runs] == [first["id"]]
    # one model, two doors: /v1/events sees the Sift event as the same event
    again = httpx.post(f"{node['url']}/v1/events", json={
        "event_id": "sift.create_order.s-twice", "type": "order", "data": {}},
        headers={"Authorization": f"Bearer {node['key']}"}).json()
    assert again["duplicate"] and [r["run_id"] for r in again["runs"]] == [first["id"]]


def test_flags_versions_and_decision_catalogue(client, node):
    props = order("s-flags", "u-flags", last4="9898", amount=3_000_000)
    r = client.track("$transaction", {**props, "$transaction_id": "t-1",
                                      "$transaction_type": "$sale"},
                     return_score=True, abuse_types=["payment_abuse"],
                     force_workflow_run=True, include_warnings=True, version="204")
    assert r.http_status_code == 200 and r.body["warnings"]["count"] == 0
    assert "workflow_statuses" not in r.body["score_response"]
    assert "payment_abuse" in r.body["score_response"]["scores"]
    r = client.track("$create_order", order("s-other", "u", last4="1111"),
                     return_workflow_status=True, abuse_types=["account_abuse"])
    assert r.body["score_response"]["workflow_statuses"] == []
    r = client.track("$create_order", order("s-noroute", "u", last4="1112"),
                     return_workflow_status=True)
    assert "route" not in r.body["score_response"]["workflow_statuses"][0]
    page = client.get_decisions("order", limit=2)
    assert page.http_status_code == 200 and len(page.body["data"]) == 2
    assert page.body["has_more"] and "from=2" in page.body["next_ref"]
    ids = {d["id"] for d in client.get_decisions("order", limit=100).body["data"]}
    assert {"approve", "block_velocity", "approve_reviewed"} <= ids
    assert client.get_user_decisions("u-block").http_status_code == 200


def test_unserved_endpoints_answer_sift_json(client):
    for call in (lambda: client.score("u1"), lambda: client.label("u1", {"$is_bad": True}),
                 lambda: client.get_session_decisions("u1", "s1"),
                 lambda: client.get_workflow_status("r_missing")):
        with pytest.raises(ApiException) as exc:
            call()
        assert exc.value.http_status_code == 404 and exc.value.api_status == 53
        assert exc.value.api_error_message


def test_rate_limit_answers_429_with_status_60(node):
    limited = sift.Client(api_key=node["key"], api_url=node["url"], account_id=ACCOUNT,
                          timeout=15)
    door = node["app"].state.sift
    saved = door.limiter
    door.limiter = RateLimiter(rate_per_s=0.001, burst=1)  # as RAILFLOW_SIFT_RATE_LIMIT_*
    try:
        limited.track("$create_order", order("s-rl-1", "u-rl", last4="4242"))
        with pytest.raises(ApiException) as exc:
            limited.track("$create_order", order("s-rl-2", "u-rl", last4="4242"))
        assert exc.value.http_status_code == 429 and exc.value.api_status == 60
    finally:
        door.limiter = saved
