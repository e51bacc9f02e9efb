"""Sift event bodies into Railflow events, and runs into Sift's shapes (pure functions)."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest
from sift.utils import DecimalEncoder

from replog.errors import AppendTimeout, NotLeader, Overloaded
from runner.api.sift import _as_sift
from runner.sift import present, translate
from runner.sift.codes import SiftError
from runner.sift.config import SiftSettings
from runner.sift.ratelimit import RateLimiter

CFG = SiftSettings()


def body(**fields) -> dict:
    return {"$type": "$create_order", "$api_key": "k", "$user_id": "u1", **fields}


def test_reserved_fields_map_onto_order_fields_and_custom_fields_stay():
    sift_type, event = translate.to_event(body(
        **{"$order_id": "o1", "$amount": 15_230_000, "$currency_code": "usd",
           "$billing_address": {"$country": "ca", "$region": "QC", "$city": "Montréal"},
           "$shipping_address": {"$address_1": "1 Main St", "$country": "US"},
           "$payment_methods": [{"$payment_type": "$credit_card", "$card_bin": "542486",
                                 "$card_last4": "4444"}],
           "$ip": "1.2.3.4", "$browser": {"$user_agent": "UA"},
           "$transaction_type": "$sale", "$transaction_status": "$success",
           "loyalty_tier": "gold"}), CFG)
    assert sift_type == "$create_order"
    assert event["event_id"] == "sift.create_order.o1" and event["type"] == "order"
    data = event["data"]
    assert data["customer"] == "u1" and data["order_id"] == "o1"
    assert data["amount"] == 1523 and data["amount_micros"] == 15_230_000
    assert data["currency"] == "USD" and data["country"] == "CA" and data["region"] == "QC"
    assert data["shipping_country"] == "US" and data["shipping_address"].startswith("1 main st")
    assert data["card"] == "542486:4444" and data["payment_type"] == "credit_card"
    assert data["ip"] == "1.2.3.4" and data["user_agent"] == "UA"
    assert data["transaction_type"] == "sale" and data["transaction_status"] == "success"
    assert data["loyalty_tier"] == "gold" and data["merchant"] == "site"


def test_a_decimal_amount_arrives_as_a_one_string_array():
    wire = json.loads(json.dumps(body(**{"$amount": Decimal("1500000.5")}), cls=DecimalEncoder))
    assert wire["$amount"] == ["1500000.5"]
    _, event = translate.to_event(wire, CFG)
    assert event["data"]["amount_micros"] == 1_500_000 and event["data"]["amount"] == 150
    _, yen = translate.to_event(body(**{"$amount": 2_000_000_000, "$currency_code": "JPY"}),
                                CFG)
    assert yen["data"]["amount"] == 2000
    with pytest.raises(SiftError) as exc:
        translate.to_event(body(**{"$amount": ["many"]}), CFG)
    assert exc.value.status == 53
    with pytest.raises(SiftError):
        translate.to_event(body(**{"$amount": 1.5}), CFG)


@pytest.mark.parametrize(("fields", "status"), [
    ({"$type": None}, 55), ({"$user_id": None}, 55), ({"$bogus": 1}, 105),
    ({"a.b": 1}, 52), ({"": 1}, 52),
    ({"$billing_address": "x"}, 53), ({"$payment_methods": {"$card_bin": 1}}, 53)])
def test_bad_bodies_get_sift_codes(fields, status):
    with pytest.raises(SiftError) as exc:
        translate.to_event(body(**fields), CFG)
    assert exc.value.status == status and exc.value.http_status == 400


def test_bodies_must_be_small_json_objects():
    assert translate.parse_body(b'{"a": 1}') == {"a": 1}
    for raw, status in ((b"[1]", 56), (b"{", 56), (b'{"a": "' + b"x" * 300_000 + b'"}', 57)):
        with pytest.raises(SiftError) as exc:
            translate.parse_body(raw)
        assert exc.value.status == status


def test_a_session_id_stands_in_for_the_user():
    _, event = translate.to_event({"$type": "$login", "$session_id": "s1"}, CFG)
    assert event["type"] == "sift_login" and "customer" not in event["data"]


def test_event_ids_name_the_order_once_and_never_hold_a_slash():
    a = translate.event_id_of("$create_order", {"$order_id": "o/1"}, CFG)
    assert a == "sift.create_order.o%2F1"
    assert translate.event_id_of("$transaction", {"$transaction_id": "t1"}, CFG) \
        == "sift.transaction.t1"
    assert translate.event_id_of("$transaction", {"$order_id": "o1"}, CFG) \
        == "sift.transaction.o1"
    long_id = translate.event_id_of("$create_order", {"$order_id": "x" * 500}, CFG)
    assert long_id.startswith("sift.create_order.=h") and len(long_id) <= 200
    one = translate.event_id_of("$login", {"$user_id": "u", "$ip": "1"}, CFG)
    assert one == translate.event_id_of("$login", {"$user_id": "u", "$ip": "1",
                                                   "$api_key": "other"}, CFG)
    assert one != translate.event_id_of("$login", {"$user_id": "u", "$ip": "2"}, CFG)
    assert present.entity_of(None, a, CFG) == {"type": "order", "id": "o/1"}
    assert present.entity_of(None, one, CFG)["type"] == "user"


def test_configured_event_types_and_abuse_types():
    cfg = SiftSettings(event_types={"$create_order": "checkout"},
                       workflow_abuse_types={"w": ["promo_abuse"], "*": ["payment_abuse"]})
    assert translate.to_event(body(), cfg)[1]["type"] == "checkout"
    assert translate.event_type_of("my-event", cfg) == "my_event"
    assert cfg.abuse_types_of("w") == ["promo_abuse"]
    assert cfg.abuse_types_of("other") == ["payment_abuse"]


def test_a_run_becomes_a_workflow_status_newest_first():
    definition = {"name": "W", "event_type": "order", "nodes": [
        {"id": "event", "kind": "event"}, {"id": "score", "kind": "score", "name": "Scorer"},
        {"id": "review", "kind": "review_queue", "outcomes": ["accept", "reject"]},
        {"id": "ok", "kind": "decision", "action": "approve", "name": "Looks OK"}]}
    step = {"trace": [], "default_taken": False}
    run = {"run_id": "r1", "event_id": "sift.create_order.o1", "workflow_id": "w",
           "workflow_version": 3, "state": "decided", "node_id": "ok",
           "path": [{**step, "node_id": "event", "edge_id": "e1", "next_node_id": "score"},
                    {**step, "node_id": "score", "edge_id": "to_review",
                     "next_node_id": "review"},
                    {**step, "node_id": "review", "edge_id": "accepted", "next_node_id": "ok"}],
           "scores": {"payment_abuse": 72.0}, "metrics": {"n": 2}, "updated_ts": 5}
    status = present.workflow_status(run, definition, CFG, {"order_id": "o1"})
    assert status["state"] == "finished" and status["config"] == {"id": "w", "version": "3"}
    assert [h["app"] for h in status["history"]] == ["decision", "review_queue", "scorer",
                                                     "event"]
    assert status["history"][0]["config"] == {"decision_id": "ok"}
    assert status["route"] == {"name": "to_review"}
    assert present.scores([run], CFG, None)["payment_abuse"] == {
        "score": 0.72, "reasons": [{"name": "n", "value": "2"}]}
    assert present.latest_decisions([run], CFG)["payment_abuse"]["decision"] == {"id": "ok"}
    (config,) = present.decision_configs([("w", definition)], CFG, "order", None)
    assert config["id"] == "ok" and config["category"] == "ACCEPT"
    assert present.review_outcome("accept", ["accept", "reject"], CFG) == "accept"
    assert present.review_outcome("looks_ok", ["accept"], SiftSettings(
        decision_outcomes={"looks_ok": "accept"})) == "accept"


def test_rate_limiter_refills():
    limiter = RateLimiter(rate_per_s=1.0, burst=2)
    assert limiter.allow("k", 0.0) and limiter.allow("k", 0.0)
    assert not limiter.allow("k", 0.0)
    assert limiter.allow("k", 1.0) and limiter.allow("other", 1.0)
    assert RateLimiter(0, 1).allow("k")


@pytest.mark.parametrize(("exc", "http", "status"), [
    (NotLeader("no leader", None), 503, -3), (AppendTimeout("slow"), 504, -3),
    (Overloaded("full"), 429, 60),
    (RuntimeError("bug"), 500, -1)])
def test_server_failures_become_sift_errors(exc, http, status):
    err = _as_sift(exc)
    assert (err.http_status, err.status) == (http, status)
    assert err.body()["status"] == status and err.body()["error_message"]
