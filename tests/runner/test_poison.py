"""No poison entries (issue 15): whatever passes the API is applied or rejected by apply, alike on
every replica, and no order can stop a node. Embedded nodes through the real HTTP API; the
"replicas" are fresh state machines fed the node's own file log."""

from __future__ import annotations

import json
import math
from contextlib import contextmanager
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from replog.entry import Entry
from replog.filelog import FileLog
from runner.api.app import create_app
from runner.settings import Settings
from runner.state.machine import RunnerStateMachine

ready_timeout_s = 60
GOOD = {"card": "c-p", "customer": "u1", "merchant": "m1", "country": "US",
        "channel": "card-present", "amount": 1_000}


@contextmanager
def embedded(data: Path):
    app = create_app(settings=Settings(data_dir=data, port=8998, tick_interval_ms=50,
                                       request_deadline_ms_default=1000))
    with TestClient(app) as client:
        svc = app.state.service
        svc.auth.create_user("admin", "pw", "admin")
        key = svc.auth.create_key("tests")
        svc.wait_workflows(ready_timeout_s, poll_s=0.05)
        client.headers["Authorization"] = f"Bearer {key}"
        yield client, svc


def post(client: TestClient, event_id: str, data: dict):
    body = json.dumps({"event_id": event_id, "type": "order", "data": data}, allow_nan=True)
    return client.post("/v1/events", content=body.encode(),
                       headers={"content-type": "application/json"})


def assert_serving(client: TestClient, svc, event_id: str) -> dict:
    assert svc.node.failure is None
    assert client.get("/healthz").json()["status"] == "ok"
    r = post(client, event_id, {**GOOD, "card": f"c-{event_id}"})  # below the velocity rule
    assert r.status_code == 200, r.text
    (run,) = r.json()["runs"]
    assert run["state"] == "decided" and run["decision"] == "approve"
    return run


def admin(client: TestClient) -> dict:
    r = client.post("/v1/auth/token", json={"username": "admin", "password": "pw"})
    return {"Authorization": f"Bearer {r.json()['access_token']}"}


def read_log(log: FileLog) -> list[Entry]:
    """Every entry of the node's file log so far (the node may append more meanwhile)."""
    reader = log.open_reader(0)
    out: list[Entry] = []
    try:
        while records := reader.poll(0.0, 1000):
            out += [Entry.decode(data, offset) for offset, data in records]
    finally:
        reader.close()
    return out


def replica(log: list[Entry], into: Path) -> RunnerStateMachine:
    """A fresh state machine fed the same entries, as a follower would be."""
    sm = RunnerStateMachine(into)
    for entry in log:
        sm.apply(entry)
    return sm


def test_an_object_as_card_is_a_4xx_and_the_node_keeps_serving_and_replays(tmp_path):
    with embedded(tmp_path) as (client, svc):
        r = post(client, "poison-1", {**GOOD, "card": {"x": 1}})
        assert r.status_code == 422, r.text
        assert r.json()["detail"][0]["loc"] == ["body", "data", "card"]
        good = assert_serving(client, svc, "after-1")
        # a retry of the rejected event id with good data is decided, not a duplicate
        r = post(client, "poison-1", GOOD)
        assert r.status_code == 200 and not r.json()["duplicate"] and r.json()["runs"]
        seen = client.get("/internal/v1/rejections", headers=admin(client)).json()
        assert seen["recent"][0]["field"] == "data.card"
        assert client.get("/internal/v1/rejections").status_code in (401, 403)
        assert "railflow_entries_rejected_total" in client.get("/metrics").text
    with embedded(tmp_path) as (client, svc):  # the restart replays the poison entry too
        assert svc.node.failure is None
        assert client.get(f"/v1/runs/{good['run_id']}").json()["decision"] == "approve"
        assert_serving(client, svc, "after-restart")


# --------------------------------------------------------------------- the property test
big_ints = st.sampled_from([2**63 - 1, 2**63, 2**64 - 1, 2**64, -(2**63) - 1, 10**30])
texts = st.text(min_size=0, max_size=40) | st.sampled_from(["€" * 200, "x" * 5000, "\u0000",
                                                             "日本語", "\ud7ff"])
scalars = (st.none() | st.booleans() | st.integers() | big_ints | texts
           | st.floats(allow_nan=True, allow_infinity=True))
json_values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(texts, inner, max_size=4), max_leaves=12)


def deep(depth: int) -> object:
    value: object = 1
    for i in range(depth):
        value = [value] if i % 2 else {"d": value}
    return value


special = st.sampled_from([deep(20), deep(300), {str(i): i for i in range(250)}, math.nan,
                           math.inf, -math.inf])
values = json_values | special
payloads = st.fixed_dictionaries(
    {}, optional={"card": values, "merchant": values, "amount": values, "customer": values,
                  "country": values}).flatmap(
    lambda fixed: st.dictionaries(texts, values, max_size=6).map(lambda extra: {**extra, **fixed}))


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    data = tmp_path_factory.mktemp("poison")
    with embedded(data) as (client, svc):
        yield client, svc, data


counter = iter(range(10**9))


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.data_too_large])
@given(data=payloads)
def test_generated_payloads_never_stop_the_node(node, data):
    client, svc, _ = node
    n = next(counter)
    r = post(client, f"gen-{n}", data)
    assert r.status_code < 500, r.text
    if r.status_code != 200:
        detail = r.json()["detail"]
        assert isinstance(detail, list) and detail[0]["loc"], detail  # names the field
    assert svc.node.failure is None
    if n % 10 == 0:
        assert_serving(client, svc, f"good-{n}")


def test_replicas_fed_the_same_log_agree_and_a_normal_order_is_decided(node, tmp_path):
    client, svc, data = node
    assert_serving(client, svc, "good-final")
    log = read_log(svc.log)
    a, b = replica(log, tmp_path / "a"), replica(log, tmp_path / "b")
    try:
        assert a.applied_offset == b.applied_offset >= 0
        assert a.digest() == b.digest()
        assert a.rejections.recent() == b.rejections.recent()
        # the live node rejected exactly what the replicas rejected
        assert svc.sm.rejections.counts == a.rejections.counts
        live = svc.sm.rejections.recent()
        assert live and live == a.rejections.recent()[:len(live)]
    finally:
        a.close()
        b.close()
