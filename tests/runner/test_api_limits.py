"""Size limits at the API: what the log or the run store cannot take is a 4xx naming the field.

Bodies are bounded before they are read whole (Content-Length, then a streamed count); an
event's entry by ``event_bytes_max``; lookup values (event id, card, customer, order id) in
UTF-8 bytes, as the run store limits them; field names, strings and nesting by
``runner.limits``.
"""

from __future__ import annotations

import asyncio
import time

import orjson
import pytest
from fastapi.testclient import TestClient

from runner import limits, signing
from runner.api.app import create_app
from runner.api.hot import HotPath
from runner.errors import RequestInvalid
from runner.runstore import keys
from runner.runstore.base import RunRecord
from runner.settings import Settings
from runner.state.machine import event_bytes_max


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    settings = Settings(data_dir=tmp_path_factory.mktemp("limits"), port=8997,
                        request_deadline_ms_default=500)
    app = create_app(settings=settings)
    with TestClient(app) as client:
        svc = app.state.service
        client.headers["Authorization"] = f"Bearer {svc.auth.create_key('limits')}"
        yield client, svc


def _loc(r) -> list:
    return r.json()["detail"][0]["loc"]


def _post(client, event_id="lim-1", **data):
    return client.post("/v1/events", json={"event_id": event_id, "type": "order", "data": data})


def test_a_long_multibyte_event_id_is_refused_in_bytes(api):
    client, svc = api
    event_id = "€" * 200  # 200 characters (within the schema), 600 bytes (beyond the store)
    r = _post(client, event_id, card="c1")
    assert r.status_code == 422 and _loc(r) == ["body", "event_id"], r.text
    # the node is up (its LeaderStarted applied) and nothing of the refused event is queued
    assert svc.node.wait_applied(0, 10) and svc.executor.store_backlog() == 0


@pytest.mark.parametrize("field", ["card", "customer", "order_id"])
def test_lookup_values_are_refused_in_bytes(api, field):
    client, _ = api
    r = _post(client, f"lim-{field}", **{field: "€" * 200})
    assert r.status_code == 422 and _loc(r) == ["body", "data", field], r.text
    ok = _post(client, f"lim-{field}-ok", **{field: "€" * 100})
    assert ok.status_code == 200, ok.text


def test_an_event_larger_than_event_bytes_max_is_413(api):
    client, _ = api
    chunk = "x" * (limits.value_bytes_max - 100)
    data = {f"f{i}": chunk for i in range(event_bytes_max // len(chunk) + 1)}
    r = _post(client, "lim-big", **data)
    assert r.status_code == 413 and _loc(r) == ["body", "data"], r.text


def test_field_names_strings_and_depth_are_bounded(api):
    client, _ = api
    r = _post(client, "lim-key", **{"k" * (limits.key_bytes_max + 1): 1})
    assert r.status_code == 422 and _loc(r) == ["body", "data"], r.text
    r = _post(client, "lim-str", note="y" * (limits.value_bytes_max + 1))
    assert r.status_code == 422 and _loc(r) == ["body", "data", "note"], r.text
    deep: dict = {}
    cur = deep
    for _ in range(limits.depth_max + 1):
        cur["a"] = {}
        cur = cur["a"]
    r = _post(client, "lim-deep", nested=deep)
    assert r.status_code == 422 and _loc(r)[:3] == ["body", "data", "nested"], r.text


def test_app_results_are_bounded(api):
    client, svc = api
    body = orjson.dumps({"result": {"k" * (limits.key_bytes_max + 1): 1}})
    header = signing.sign(svc.settings.app_secret, signing.callback_message("r_x", "review", body),
                          int(time.time() * 1000))
    r = client.post("/v1/runs/r_x/apps/review", content=body,
                    headers={"content-type": "application/json", signing.HEADER: header})
    assert r.status_code == 422 and _loc(r) == ["body", "result"], r.text


def test_a_declared_body_over_the_limit_is_refused_unread(api):
    _, svc = api
    sent: list[dict] = []

    async def receive():
        raise AssertionError("the body was read")

    async def send(message):
        sent.append(message)

    async def app(scope, receive, send):
        raise AssertionError("reached the application")

    scope = {"type": "http", "method": "POST", "path": "/v1/events", "query_string": b"",
             "headers": [(b"content-length", str(limits.event_body_bytes_max + 1).encode())]}
    asyncio.run(HotPath(app, svc)(scope, receive, send))
    assert sent[0]["status"] == 413
    assert orjson.loads(sent[1]["body"])["detail"][0]["loc"] == ["body"]


def test_a_streamed_body_is_counted_as_it_arrives(api):
    _, svc = api
    chunk = b"x" * 65_536
    reads = []

    async def receive():
        reads.append(1)
        return {"type": "http.request", "body": chunk, "more_body": True}  # never ends

    sent: list[dict] = []

    async def send(message):
        sent.append(message)

    async def app(scope, receive, send):
        raise AssertionError("reached the application")

    scope = {"type": "http", "method": "PUT", "path": "/v1/workflows/w/draft",
             "query_string": b"", "headers": [(b"transfer-encoding", b"chunked")]}
    asyncio.run(HotPath(app, svc)(scope, receive, send))
    assert sent[0]["status"] == 413
    assert len(reads) == limits.request_bytes_max // len(chunk) + 1


def test_the_run_store_skips_index_values_it_cannot_hold():
    """A run already in a log (before the API checked bytes) must still be storable."""
    run = RunRecord(run_id="r1", event_id="€" * 200, event_type="order", workflow_id="w",
                    workflow_version=1, state="decided",
                    event={"data": {"card": "€" * 200, "customer": "u1"}})
    values = run.index_values()
    assert values == [("customer", "u1")]
    for kind, value in values:
        keys.index_key(kind, value, run.run_id)


def _refusal(value) -> tuple[str, str] | None:
    try:
        limits.check_fields(value, "data")
    except RequestInvalid as exc:
        return exc.field, str(exc)
    return None


def _nest(levels: int, leaf, key: bool = True):
    for _ in range(levels):
        leaf = {"a": leaf} if key else [leaf]
    return leaf


@pytest.mark.parametrize("key", [True, False])
def test_check_fields_names_the_field_at_the_depth_limit(key):
    """A string leaf one level past ``depth_max`` is refused as too deep, naming its path;
    one level less passes, long strings are refused where they are, in dicts and lists."""
    step = "a" if key else "0"
    assert _refusal(_nest(limits.depth_max, "x", key)) is None
    assert _refusal(_nest(limits.depth_max, {}, key)) is None
    field, message = _refusal(_nest(limits.depth_max + 1, "x", key))
    assert field == "data" + f".{step}" * (limits.depth_max + 1) and "nested deeper" in message
    field, message = _refusal(_nest(limits.depth_max + 1, {}, key))
    assert field == "data" + f".{step}" * (limits.depth_max + 1) and "nested deeper" in message
    long = "é" * (limits.value_bytes_max // 2 + 1)  # short in characters, long in bytes
    field, message = _refusal(_nest(3, long, key))
    assert field == "data" + f".{step}" * 3 and "string longer" in message
    assert _refusal(_nest(3, "é" * (limits.value_bytes_max // 2), key)) is None
    assert _refusal({"ok": ["s", {"t": "u"}, 1, None], "n": 2.5}) is None
