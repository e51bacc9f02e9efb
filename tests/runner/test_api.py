"""The HTTP API on an embedded node (file log, single node, RocksDB run store), in-process."""

from __future__ import annotations

import time

import orjson
import pytest
from fastapi.testclient import TestClient

from runner import signing
from runner.api.app import create_app
from runner.demo import w3_definition
from runner.scoring import demo_score
from runner.settings import Settings

ready_timeout_s = 60


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    data = tmp_path_factory.mktemp("embedded")
    settings = Settings(data_dir=data, port=8999, tick_interval_ms=50,
                        request_deadline_ms_default=1000)
    app = create_app(settings=settings)
    with TestClient(app) as client:
        svc = app.state.service
        key = svc.auth.create_key("tests")
        for role in ("analyst", "manager", "admin"):
            svc.auth.create_user(role, "pw", role)
        svc.wait_workflows(ready_timeout_s)
        client.headers["Authorization"] = f"Bearer {key}"
        yield client, svc


def token(client: TestClient, role: str) -> dict:
    r = client.post("/v1/auth/token", json={"username": role, "password": "pw"})
    assert r.status_code == 200, r.text
    return {"Authorization": f"Bearer {r.json()['access_token']}"}


def post_order(client, event_id: str, **data):
    body = {"event_id": event_id, "type": "order",
            "data": {"card": "c-api", "customer": "u1", "merchant": "m1", "country": "US",
                     "channel": "card-present", "amount": 1_000, **data}}
    return client.post("/v1/events", json=body)


def test_order_gets_a_decision_with_its_explanation(api):
    client, _ = api
    r = post_order(client, "api-1")
    assert r.status_code == 200, r.text
    (run,) = r.json()["runs"]
    assert run["decision"] == "approve" and run["workflow_id"] == "w3_demo"
    assert run["metrics"]["card_count_5m"] == 1
    assert run["explanation"] and run["path"][0]["trace"][0]["criteria"]
    assert client.get(f"/v1/runs/{run['run_id']}").json()["decision"] == "approve"
    assert [x["run_id"] for x in client.get("/v1/events/api-1/runs").json()] == [run["run_id"]]


def test_duplicate_event_id_answers_the_same_run(api):
    client, _ = api
    first = post_order(client, "api-dup").json()
    again = post_order(client, "api-dup", amount=99_999_999).json()
    assert again["duplicate"] and again["runs"][0]["run_id"] == first["runs"][0]["run_id"]
    assert again["runs"][0]["decision"] == first["runs"][0]["decision"]


def test_errors_are_4xx_naming_the_field(api):
    client, _ = api
    r = client.post("/v1/events", json={"event_id": "", "type": "order", "data": {}})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"][-1] == "event_id"
    r = client.post("/v1/events", json={"event_id": "x", "type": "bad type!"})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"][-1] == "type"
    assert client.get("/v1/runs/r_nope").status_code == 404
    assert client.get("/v1/events/nope/runs").status_code == 404
    r = client.post("/v1/events", json={"event_id": "x", "type": "order"},
                    headers={"Authorization": "Bearer wrong"})
    assert r.status_code == 401


def test_roles_guard_the_console_routes(api):
    client, _ = api
    assert client.get("/v1/workflows").status_code == 403  # a client key is not a user
    assert client.get("/v1/workflows", headers=token(client, "analyst")).status_code == 200
    r = client.post("/v1/workflows/w3_demo/publish", headers=token(client, "analyst"))
    assert r.status_code == 403
    r = client.delete("/v1/metrics/card_sum_5m", headers=token(client, "manager"))
    assert r.status_code == 403


def test_review_queue_claim_and_decide_resume_the_run(api):
    client, _ = api
    order = dict(amount=300_000, country="NG", card="c-rev", channel="card-not-present")
    assert 60 < demo_score({**order, "customer": "u1", "merchant": "m1"}) <= 80
    r = post_order(client, "api-review", **order)
    (run,) = r.json()["runs"]
    assert run["state"] == "waiting" and run["waiting_for"] == "review"
    analyst = token(client, "analyst")
    for _ in range(100):  # the queue lists tasks once they are flushed to DuckDB
        tasks = client.get("/v1/review/tasks", params={"queue": "manual_review"},
                           headers=analyst).json()
        if run["run_id"] in [t["run_id"] for t in tasks]:
            break
        time.sleep(0.05)
    assert run["run_id"] in [t["run_id"] for t in tasks]
    base = f"/v1/review/tasks/{run['run_id']}/review"
    assert client.post(base + "/claim", headers=analyst).status_code == 200
    r = client.post(base + "/decide", json={"outcome": "maybe"}, headers=analyst)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"][-1] == "outcome"
    r = client.post(base + "/decide", json={"outcome": "accept"}, headers=analyst)
    assert r.status_code == 200, r.text
    assert r.json()["decision"] == "approve" and r.json()["node_id"] == "approve_reviewed"
    assert client.post(base + "/claim", headers=analyst).status_code == 409


def test_metrics_define_list_and_guarded_drop(api):
    client, _ = api
    manager, admin = token(client, "manager"), token(client, "admin")
    r = client.post("/v1/metrics", json={"text": "SELECT nonsense"}, headers=manager)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"][-1] == "text"
    text = "SELECT COUNT(*) AS device_count_1h FROM payments GROUP BY device RANGE 1 HOURS"
    r = client.post("/v1/metrics", json={"text": text}, headers=manager)
    assert r.status_code == 201, r.text
    assert r.json()["names"] == ["device_count_1h"]
    names = [m["name"] for m in client.get("/v1/metrics", headers=manager).json()]
    assert "device_count_1h" in names
    assert client.delete("/v1/metrics/card_count_5m", headers=admin).status_code == 409
    assert client.delete("/v1/metrics/device_count_1h", headers=admin).status_code == 200
    assert client.delete("/v1/metrics/device_count_1h", headers=admin).status_code == 404


def test_workflow_draft_publish_diff_rollback(api):
    client, _ = api
    manager = token(client, "manager")
    wf = w3_definition()
    wf["id"], wf["name"] = "w3_copy", "copy"
    r = client.post("/v1/workflows", json=wf, headers=manager)
    assert r.status_code == 201 and r.json()["problems"] == []
    assert client.post("/v1/workflows", json=wf, headers=manager).status_code == 409
    assert client.post("/v1/workflows/w3_copy/publish", headers=manager).json()["version"] == 1
    wf["nodes"][0]["edges"][0]["criteria"] = "metrics.card_count_5m > 9"
    r = client.put("/v1/workflows/w3_copy/draft", json=wf, headers=manager)
    assert r.status_code == 200
    assert client.post("/v1/workflows/w3_copy/publish", headers=manager).json()["version"] == 2
    diff = client.get("/v1/workflows/w3_copy/diff", params={"from": 1, "to": 2},
                      headers=manager).json()
    assert [c["edge_id"] for c in diff["criteria_changed"]] == ["block_card_velocity"]
    r = client.post("/v1/workflows/w3_copy/rollback", json={"version": 1}, headers=manager)
    assert r.json()["version"] == 3
    assert [v["version"] for v in client.get("/v1/workflows/w3_copy/versions",
                                            headers=manager).json()] == [1, 2, 3]
    bad = dict(wf, root="nowhere")
    r = client.post("/v1/workflows/validate", json=bad, headers=manager)
    assert r.status_code == 200 and not r.json()["valid"]
    # two workflows on "order" now: one run each, and rollback restored velocity > 4
    runs = post_order(client, "api-two").json()["runs"]
    assert sorted(r["workflow_id"] for r in runs) == ["w3_copy", "w3_demo"]
    assert {r["workflow_version"] for r in runs if r["workflow_id"] == "w3_copy"} == {3}


def _callback(client, svc, run_id: str, node_id: str, body: bytes, signed_for=None):
    message = signing.callback_message(*(signed_for or (run_id, node_id)), body)
    header = signing.sign(svc.settings.app_secret, message, int(time.time() * 1000))
    return client.post(f"/v1/runs/{run_id}/apps/{node_id}", content=body,
                       headers={"content-type": "application/json", signing.HEADER: header})


def test_app_callback_needs_a_valid_signature(api):
    client, svc = api
    body = orjson.dumps({"result": {"outcome": "accept"}})
    r = client.post("/v1/runs/r_x/apps/review", content=body,
                    headers={"content-type": "application/json"})
    assert r.status_code == 401
    assert _callback(client, svc, "r_x", "review", body, signed_for=("r_y", "review")
                     ).status_code == 401  # a signature for another run does not carry over
    assert _callback(client, svc, "r_x", "review", body).status_code == 404


def test_an_app_callback_cannot_decide_a_review(api):
    client, svc = api
    order = dict(amount=300_000, country="NG", card="c-rev2", channel="card-not-present")
    runs = post_order(client, "api-review-app", **order).json()["runs"]
    (run,) = [r for r in runs if r["workflow_id"] == "w3_demo"]
    assert run["waiting_for"] == "review"
    for _ in range(100):
        r = _callback(client, svc, run["run_id"], "review",
                      orjson.dumps({"result": {"outcome": "accept"}}))
        if r.status_code != 404:  # the task is in DuckDB
            break
        time.sleep(0.05)
    assert r.status_code == 403 and r.json()["detail"][0]["loc"][-1] == "node_id"
    assert client.get(f"/v1/runs/{run['run_id']}").json()["state"] == "waiting"


def test_health_and_prometheus(api):
    client, _ = api
    h = client.get("/healthz").json()
    assert h["role"] == "leader" and h["status"] == "ok" and h["applied_offset"] >= 0
    assert h["problems"] == []  # log, election, run store and apply all working
    text = client.get("/metrics").text
    assert "railflow_decisions_total" in text and "railflow_event_seconds_bucket" in text


def test_demo_score_app(api):
    client, _ = api
    body = {"event": {"data": {"amount": 900_000, "country": "NG", "channel": "card-not-present"}}}
    r = client.post("/demo/score", json=body)
    assert r.status_code == 200 and r.json()["result"]["payment_abuse"] > 80
    assert client.post("/demo/score", json=body, headers={"Authorization": ""}).status_code == 401


def test_internal_routes_need_the_cluster_secret_or_an_admin(api):
    client, svc = api
    bare = {"Authorization": ""}
    for method, path in (("POST", "/internal/v1/round-trip"), ("GET", "/internal/v1/digests"),
                         ("GET", "/internal/v1/threads")):
        assert client.request(method, path, headers=bare).status_code == 401
        assert client.request(method, path).status_code == 401  # a client key is not enough
        signed = signing.internal_headers(svc.settings.resolved_cluster_secret(), method, path)
        assert client.request(method, path, headers={**bare, **signed}).status_code == 200
        other = signing.internal_headers(svc.settings.resolved_cluster_secret(), method,
                                         "/internal/v1/elsewhere")
        assert client.request(method, path, headers={**bare, **other}).status_code == 401
        assert client.request(method, path, headers=token(client, "admin")).status_code == 200


def test_internal_threads_names_this_process_threads(api):
    client, svc = api
    path = "/internal/v1/threads"
    signed = signing.internal_headers(svc.settings.resolved_cluster_secret(), "GET", path)
    body = client.get(path, headers={"Authorization": "", **signed}).json()
    import os
    import threading
    assert body["pid"] == os.getpid()
    named = {t["id"]: t["name"] for t in body["threads"]}
    assert named[threading.main_thread().native_id] == "MainThread"
    assert all(os.path.exists(f"/proc/{os.getpid()}/task/{tid}") for tid in named)


def test_forwarding_needs_the_cluster_secret_an_allowed_kind_and_no_replay(api):
    client, svc = api
    from runner import forwarder
    from runner.state import entries

    def send(kind: str, payload: dict, secret: str, body: bytes | None = None):
        body = body or forwarder.encode_request(kind, entries.encode(payload), 5,
                                                svc.node.my_writer_id)
        header = signing.sign(secret, body, int(time.time() * 1000))
        return body, client.post(forwarder.PATH, content=body, headers={signing.HEADER: header})

    cluster = svc.settings.resolved_cluster_secret()
    event = {"event_id": "api-fwd", "type": "order", "data": {"card": "c-fwd", "amount": 5}}
    assert send(entries.EVENT_RECEIVED, event, svc.settings.app_secret)[1].status_code == 401
    assert send(entries.TICK, {}, cluster)[1].status_code == 400
    assert send(entries.EFFECTS_DONE, {"stored": []}, cluster)[1].status_code == 400
    assert send("replog.LeaderStarted", {}, cluster)[1].status_code == 400
    body, r = send(entries.EVENT_RECEIVED, event, cluster)
    assert r.status_code == 200 and r.json()["offset"] >= 0
    assert send("", {}, cluster, body=body)[1].status_code == 401  # the same request again


def test_a_webhook_outside_the_allow_list_or_with_an_unknown_secret_is_refused(api):
    client, _ = api
    manager = token(client, "manager")
    wf = w3_definition()
    wf["id"], wf["name"] = "w3_hook", "hook"
    hook = {"id": "notify", "kind": "webhook", "url": "http://169.254.169.254/latest",
            "secret_ref": "hook"}
    wf["nodes"].append(hook)
    r = client.post("/v1/workflows", json=wf, headers=manager)
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["loc"][1:] == ["nodes", "notify", "url"]


def test_sign_in_is_throttled_per_user(api):
    client, svc = api
    svc.auth.create_user("victim", "right-pw", "analyst")
    for _ in range(5):
        r = client.post("/v1/auth/token", json={"username": "victim", "password": "guess"})
        assert r.status_code == 401
    r = client.post("/v1/auth/token", json={"username": "victim", "password": "right-pw"})
    assert r.status_code == 429 and int(r.headers["Retry-After"]) > 0
