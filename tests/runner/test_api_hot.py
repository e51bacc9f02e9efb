"""The hot path (``runner.api.hot``) against its reference, the FastAPI routes of the same paths.

One embedded node serves two applications: the normal one (hot path on) and one with the hot
path off. Every answer must be the same, the OpenAPI document too; a valid order must be served
without FastAPI at all.
"""

from __future__ import annotations

import time

import httpx
import orjson
import pytest
from fastapi.testclient import TestClient

from runner import signing
from runner.api.app import create_app
from runner.api.hot import HotPath
from runner.settings import Settings

ready_timeout_s = 60


@pytest.fixture(scope="module")
def apps(tmp_path_factory):
    settings = Settings(data_dir=tmp_path_factory.mktemp("hot"), port=8998,
                        request_deadline_ms_default=1000)
    hot = create_app(settings=settings)
    with TestClient(hot) as hot_client:
        svc = hot.state.service
        reference = create_app(svc, manage=False, hot_path=False)
        ref_client = TestClient(reference)
        key = svc.auth.create_key("hot-tests")
        svc.auth.create_user("admin", "pw", "admin")
        svc.wait_workflows(ready_timeout_s)
        for c in (hot_client, ref_client):
            c.headers["Authorization"] = f"Bearer {key}"
        yield hot_client, ref_client, svc, key


def _order(event_id: str, **data) -> dict:
    return {"event_id": event_id, "type": "order",
            "data": {"card": "c-hot", "customer": "u1", "merchant": "m1", "country": "US",
                     "channel": "card-present", "amount": 1_000, **data}}


BAD_BODIES = [
    b'{"event_id":"","type":"order"}',
    b'{"event_id":"x/y","type":"order"}',
    b'{"event_id":"x\\n","type":"order"}',
    b'{"event_id":"x","type":"bad type!"}',
    b'{"event_id":"x","type":"order","ts":-1}',
    b'{"event_id":"x","type":"order","extra":1}',
    b'{"event_id":"x","type":"order","data":[]}',
    b'{"event_id":"x","type":"order","data":{"n":123456789012345678901234567890}}',
    b'{"type":"order"}',
    b"not json",
    b"",
    b"[1,2]",
    b'{"event_id":"x","type":"order","data":{"x":' + b"[" * 3000 + b"]" * 3000 + b"}}",
]


@pytest.mark.parametrize("body", BAD_BODIES, ids=range(len(BAD_BODIES)))
def test_bad_orders_get_the_reference_answer(apps, body):
    hot, ref, _, _ = apps
    headers = {"content-type": "application/json"}
    a = hot.post("/v1/events", content=body, headers=headers)
    b = ref.post("/v1/events", content=body, headers=headers)
    assert 400 <= a.status_code < 500
    assert (a.status_code, a.json()) == (b.status_code, b.json())


# Requests whose query or headers are wrong, each answered with a 4xx naming what.
BAD_REQUESTS = [
    ({"deadline_ms": "0"}, {}),
    ({"deadline_ms": "abc"}, {}),
    ({}, {"Authorization": "Bearer nope"}),
    ({}, {"Authorization": "Basic abc"}),
    ({}, {"Authorization": ""}),
    ({}, {"content-type": "text/plain"}),
]


@pytest.mark.parametrize("params,headers", BAD_REQUESTS)
def test_bad_requests_get_the_reference_answer(apps, params, headers):
    hot, ref, _, _ = apps
    body = _order("bad-request")
    a = hot.post("/v1/events", json=body, params=params, headers=headers)
    b = ref.post("/v1/events", json=body, params=params, headers=headers)
    assert 400 <= a.status_code < 500
    assert (a.status_code, a.json(), a.headers.get("www-authenticate")) == (
        b.status_code, b.json(), b.headers.get("www-authenticate"))


def test_an_order_answers_alike_on_both_paths(apps):
    hot, ref, _, _ = apps
    a = hot.post("/v1/events", json=_order("hot-1"), params={"deadline_ms": 500})
    assert a.status_code == 200, a.text
    b = ref.post("/v1/events", json=_order("hot-1"))
    assert b.status_code == 200 and b.json()["duplicate"]
    assert [r["run_id"] for r in a.json()["runs"]] == [r["run_id"] for r in b.json()["runs"]]
    first = a.json()
    assert not first["duplicate"] and first["runs"][0]["decision"] == "approve"
    # a console admin may post orders too: the route serves users' tokens
    token = hot.post("/v1/auth/token", json={"username": "admin", "password": "pw"}).json()
    r = hot.post("/v1/events", json=_order("hot-admin"),
                 headers={"Authorization": f"Bearer {token['access_token']}"})
    assert r.status_code == 200 and r.json()["runs"]


def test_the_openapi_document_is_the_reference(apps):
    hot, ref, _, _ = apps
    doc = hot.get("/openapi.json").json()
    assert doc == ref.get("/openapi.json").json()
    op = doc["paths"]["/v1/events"]["post"]
    assert op["requestBody"]["content"]["application/json"]["schema"]["$ref"].endswith("EventIn")
    assert "/v1/runs/{run_id}/apps/{node_id}" in doc["paths"]


@pytest.mark.anyio
async def test_a_valid_order_is_served_without_fastapi(apps):
    _, _, svc, key = apps

    async def no_fastapi(scope, receive, send):
        raise AssertionError(f"{scope['method']} {scope['path']} reached FastAPI")

    transport = httpx.ASGITransport(app=HotPath(no_fastapi, svc))
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        r = await client.post("/v1/events", json=_order("hot-bare"),
                              headers={"Authorization": f"Bearer {key}"})
        assert r.status_code == 200 and r.json()["runs"][0]["event_id"] == "hot-bare"
        body = orjson.dumps({"result": {"outcome": "accept"}})
        header = signing.sign(svc.settings.app_secret,
                              signing.callback_message("r_none", "review", body),
                              int(time.time() * 1000))
        r = await client.post("/v1/runs/r_none/apps/review", content=body,
                              headers={"content-type": "application/json",
                                       signing.HEADER: header})
        assert r.status_code == 404 and r.json()["detail"][0]["type"] == "not_found"


def test_app_callback_answers_alike(apps):
    hot, ref, svc, _ = apps
    for body in (b'{"result":{"outcome":"accept"}}', b'{"result":[]}', b'{"x":1}', b"nope",
                 b'{"result":{"n":123456789012345678901234567890}}'):
        header = signing.sign(svc.settings.app_secret,
                              signing.callback_message("r_x", "review", body),
                              int(time.time() * 1000))
        for sig in (header, None, "t=1,v1=00"):
            headers = {"content-type": "application/json"}
            if sig:
                headers[signing.HEADER] = sig
            a = hot.post("/v1/runs/r_x/apps/review", content=body, headers=headers)
            b = ref.post("/v1/runs/r_x/apps/review", content=body, headers=headers)
            assert 400 <= a.status_code < 500
            assert (a.status_code, a.json()) == (b.status_code, b.json()), body
