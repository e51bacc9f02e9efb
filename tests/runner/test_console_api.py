"""The console's API additions on an embedded node, in-process: problems with spans and
scopes, runs read back with scores and app answers, run listing, hits per edge, simulate,
backtest, metric readers, review unclaim and claim expiry, draft If-Match."""

from __future__ import annotations

import time

import pytest
from fastapi.testclient import TestClient

from runner.api.app import create_app
from runner.demo import w3_definition
from runner.settings import Settings
from runner.state import entries

ready_timeout_s = 60


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    settings = Settings(data_dir=tmp_path_factory.mktemp("console-api"), port=8998,
                        tick_interval_ms=50, request_deadline_ms_default=1000)
    app = create_app(settings=settings)
    with TestClient(app) as client:
        svc = app.state.service
        key = svc.auth.create_key("tests")
        for role in ("analyst", "manager"):
            svc.auth.create_user(role, "pw", role)
        svc.wait_workflows(ready_timeout_s)
        client.headers["Authorization"] = f"Bearer {key}"
        yield client, svc


def as_(client, role):
    r = client.post("/v1/auth/token", json={"username": role, "password": "pw"})
    return {"Authorization": f"Bearer {r.json()['access_token']}"}


def order(client, event_id, **data):
    body = {"event_id": event_id, "type": "order",
            "data": {"card": "c-con", "customer": "u-con", "merchant": "m1", "country": "US",
                     "channel": "card-present", "amount": 1_000, **data}}
    r = client.post("/v1/events", json=body)
    assert r.status_code == 200, r.text
    return r.json()["runs"][0]


def wait_listed(client, headers, **params):
    for _ in range(100):  # runs are listed once flushed to DuckDB
        found = client.get("/v1/console/runs", params=params, headers=headers).json()
        if found:
            return found
        time.sleep(0.05)
    return []


def test_check_places_a_type_error_on_its_edge_with_its_span(api):
    client, _ = api
    wf = w3_definition()
    wf["nodes"][0]["edges"][0]["criteria"] = 'metrics.card_count_5m > 4 && event.amount > "x"'
    r = client.post("/v1/workflows/check", json=wf, headers=as_(client, "analyst"))
    assert r.status_code == 200, r.text
    (p,) = r.json()["problems"]
    assert (p["code"], p["node_id"], p["edge_id"]) == ("criteria_type", "event",
                                                       wf["nodes"][0]["edges"][0]["id"])
    a, b = p["span"]
    assert wf["nodes"][0]["edges"][0]["criteria"][a:b] == 'event.amount > "x"'
    scopes = r.json()["scopes"]
    assert scopes["event"]["scores"] == {} and "amount" in scopes["event"]["event"]
    assert "payment_abuse" in scopes["review"]["scores"]
    assert client.get("/v1/auth/me").json() == {"name": "tests", "kind": "client", "role": None}


def test_draft_if_match_conflict_is_409(api):
    client, _ = api
    manager = as_(client, "manager")
    wf = dict(w3_definition(), id="w_etag")
    assert client.post("/v1/workflows", json=wf, headers=manager).status_code == 201
    etag = client.get("/v1/workflows/w_etag/draft", headers=manager).headers["ETag"]
    r = client.put("/v1/workflows/w_etag/draft", json=dict(wf, name="a"),
                   headers={**manager, "If-Match": etag})
    assert r.status_code == 200 and r.headers["ETag"] != etag
    r = client.put("/v1/workflows/w_etag/draft", json=dict(wf, name="b"),
                   headers={**manager, "If-Match": etag})
    assert r.status_code == 409 and r.json()["detail"][0]["loc"][-1] == "If-Match"


def test_runs_keep_scores_apps_and_event_and_are_found(api):
    client, svc = api
    run = order(client, "con-1", card="c-find")
    analyst = as_(client, "analyst")
    found = wait_listed(client, analyst, card="c-find")
    assert [r["run_id"] for r in found] == [run["run_id"]]
    assert wait_listed(client, analyst, order="con-1", workflow_id="w3_demo",
                       decision=run["decision"])
    assert client.get("/v1/console/runs", params={"card": "c-find", "decision": "nope"},
                      headers=analyst).json() == []
    for unindexable in ({"order": "/"}, {"card": "a/b"}, {"customer": "€" * 200}):
        r = client.get("/v1/console/runs", params=unindexable, headers=analyst)
        assert r.status_code == 200 and r.json() == [], r.text  # no run has it: not a 500
    detail = client.get(f"/v1/console/runs/{run['run_id']}", headers=analyst).json()
    assert detail["event"]["data"]["card"] == "c-find" and detail["scores"]
    # read back from the run store: scores and app answers are kept
    for _ in range(100):
        stored = svc.run_store.get(run["run_id"])
        if stored is not None:
            break
        time.sleep(0.05)
    from runner.operations import view_of_record

    view = view_of_record(stored)
    assert view["scores"] == detail["scores"] and view["apps"] == detail["apps"]
    # counted although the run may still be in the apply buffer, not yet in DuckDB
    hits = client.get("/v1/console/workflows/w3_demo/hits", headers=analyst).json()
    assert sum(h["runs"] for h in hits if h["node_id"] == "event") >= 1


def test_simulate_writes_nothing_and_backtest_counts_changes(api):
    client, svc = api
    for i in range(5):
        order(client, f"con-bt-{i}", card=f"c-bt-{i}", amount=1_000 + i)
    analyst = as_(client, "analyst")
    wait_listed(client, analyst, card="c-bt-4")
    wf = w3_definition()
    # the newest runs may still be in the apply buffer: the backtest replays them too
    r = client.post("/v1/console/simulate", headers=analyst, json={
        "workflow": wf, "event": {"event_id": "sim", "type": "order",
                                  "data": {"card": "x", "customer": "y", "merchant": "m",
                                           "country": "US", "channel": "card-present",
                                           "amount": 10}}})
    assert r.status_code == 200, r.text
    assert r.json()["decision"] == "approve" and r.json()["path"][0]["node_id"] == "event"
    # nothing was written: no event, no run (a submitted event would have made one)
    assert client.get("/v1/events/sim/runs").status_code == 404
    assert client.get("/v1/console/runs", params={"card": "x"}, headers=analyst).json() == []
    # a draft that blocks everything changes every approved run
    blocking = w3_definition()
    for n in blocking["nodes"]:
        if n["kind"] == "decision":
            n["action"] = "block"
    r = client.post("/v1/console/backtest", json={"workflow": blocking, "limit": 50},
                    headers=analyst)
    assert r.status_code == 200, r.text
    bt = r.json()
    assert bt["runs"] >= 5 and bt["changed"] >= 5
    assert any(c["before"] == "approve" and c["after"] == "block" for c in bt["matrix"])
    assert bt["samples"] and bt["hits"]
    r = client.post("/v1/console/simulate", headers=analyst,
                    json={"workflow": wf, "run_id": bt["samples"][0]["run_id"]})
    assert r.status_code == 200 and r.json()["decision"] == bt["samples"][0]["before"]
    bad = dict(wf, root="nowhere")
    r = client.post("/v1/console/backtest", json={"workflow": bad}, headers=analyst)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"][-1] == "workflow"
    readers = client.get("/v1/console/metrics/readers", headers=analyst).json()
    assert "w3_demo" in readers["card_count_5m"]


def test_review_unclaim_and_claim_expiry(api):
    client, svc = api
    run = order(client, "con-rev", amount=300_000, country="NG", card="c-rev", customer="u1",
                channel="card-not-present")
    assert run["waiting_for"] == "review"
    analyst, manager = as_(client, "analyst"), as_(client, "manager")
    base = f"/v1/review/tasks/{run['run_id']}/review"
    for _ in range(100):
        tasks = client.get("/v1/review/tasks", headers=analyst).json()
        if run["run_id"] in [t["run_id"] for t in tasks]:
            break
        time.sleep(0.05)
    assert client.post(base + "/claim", headers=analyst).status_code == 200
    task = next(t for t in client.get("/v1/review/tasks", headers=analyst).json()
                if t["run_id"] == run["run_id"])
    assert task["claimed_by"] == "analyst" and task["claim_expires_ts"] > time.time() * 1000
    assert task["outcome"] is None
    assert client.post(base + "/unclaim", headers=analyst).status_code == 200
    assert client.post(base + "/claim", headers=manager).status_code == 200
    assert client.post(base + "/claim", headers=analyst).status_code == 409
    # a claim whose time is up may be taken over (log time decides, in apply)
    payload = {"run_id": run["run_id"], "node_id": "review", "user": "manager", "ttl_ms": 1}
    svc.node.submit(entries.REVIEW_CLAIMED, entries.encode(payload), 10).result(10)
    time.sleep(0.01)
    assert client.post(base + "/claim", headers=analyst).status_code == 200
    r = client.post(base + "/decide", json={"outcome": "accept"}, headers=analyst)
    assert r.status_code == 200 and r.json()["decision"] == "approve"
