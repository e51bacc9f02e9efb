"""Three runner nodes on the real cluster (Kafka, ZooKeeper, HBase, S3): the W3 workflow,
reviews, timeouts, duplicates, schemathesis, and kill -9 of the leader under traffic."""

from __future__ import annotations

import concurrent.futures
import itertools
import signal
import time
import uuid

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, settings

from infra import endpoints
from runner.demo import OrderGenerator, w3_definition
from runner.nodes import NodeCluster, free_base_port
from runner.runstore.hbase import HBaseRunStore
from runner.scoring import demo_score

pytestmark = pytest.mark.cluster
settle_timeout_s = 60


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    tag = uuid.uuid4().hex[:8]
    c = NodeCluster(tmp_path_factory.mktemp("nodes"), f"rf-test-{tag}", 3,
                    base_port=free_base_port(3),
                    env={"RAILFLOW_HBASE_TABLE": f"railflow_runs_test_{tag}",
                         "RAILFLOW_TICK_INTERVAL_MS": "100"})
    c.start()
    c.hbase_table = f"railflow_runs_test_{tag}"
    leader = c.wait_ready()
    deadline = time.monotonic() + settle_timeout_s
    while time.monotonic() < deadline:  # the leader preloads the demo workflow
        r = httpx.post(leader.url + "/v1/events", headers=auth(c),
                       json={"event_id": f"warm-{tag}", "type": "order", "data": {}})
        if r.status_code == 200 and r.json()["runs"]:
            break
        time.sleep(0.5)
    yield c
    c.stop()


def auth(c: NodeCluster) -> dict:
    return {"Authorization": f"Bearer {c.api_key}"}


def admin(c: NodeCluster, url: str) -> dict:
    r = httpx.post(url + "/v1/auth/token", json={"username": "demo", "password": c.password})
    return {"Authorization": f"Bearer {r.json()['access_token']}"}


def followers(c: NodeCluster) -> list:
    leader = c.leader()
    return [n for n in c.nodes.values() if n.alive() and n is not leader]


def post(c, url: str, event_id: str, deadline_ms: int | None = None, etype="order", **data):
    body = {"event_id": event_id, "type": etype,
            "data": {"card": "c-cl", "customer": "u", "merchant": "m", "country": "US",
                     "channel": "card-present", "amount": 1_000, **data}}
    params = {"deadline_ms": deadline_ms} if deadline_ms else None
    return httpx.post(url + "/v1/events", json=body, headers=auth(c), params=params, timeout=30)


def test_w3_velocity_metric_blocks_the_fifth_payment_through_a_follower(cluster):
    url = followers(cluster)[0].url
    card = f"card-{uuid.uuid4().hex[:6]}"
    seen = []
    for i in range(5):
        r = post(cluster, url, f"vel-{card}-{i}", card=card)
        assert r.status_code == 200, r.text
        (run,) = r.json()["runs"]
        seen.append((run["metrics"]["card_count_5m"], run["node_id"]))
    assert [n for n, _ in seen] == [1, 2, 3, 4, 5]
    assert [d for _, d in seen][-1] == "block_velocity"
    assert all(d != "block_velocity" for _, d in seen[:4])
    risky = dict(amount=900_000, country="NG", channel="card-not-present", is_fraud=True,
                 card=f"{card}-x")
    (run,) = post(cluster, url, f"risky-{card}", **risky).json()["runs"]
    assert run["decision"] == "block" and run["scores"]["payment_abuse"] > 90


def test_review_decided_on_one_node_resumes_the_run_everywhere(cluster):
    nodes = [n for n in cluster.nodes.values() if n.alive()]
    order = dict(amount=300_000, country="NG", card="c-rev", channel="card-not-present")
    assert 60 < demo_score({**order, "customer": "u", "merchant": "m"}) <= 80
    (run,) = post(cluster, nodes[0].url, f"rev-{uuid.uuid4().hex}", **order).json()["runs"]
    assert run["waiting_for"] == "review"
    headers = admin(cluster, nodes[1].url)
    base = f"{nodes[1].url}/v1/review/tasks/{run['run_id']}/review"
    assert httpx.post(base + "/claim", headers=headers).status_code == 200
    r = httpx.post(base + "/decide", json={"outcome": "reject"}, headers=headers)
    assert r.status_code == 200, r.text
    assert r.json()["node_id"] == "block_reviewed"
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        got = httpx.get(f"{nodes[2].url}/v1/runs/{run['run_id']}", headers=auth(cluster)).json()
        if got["state"] == "decided":
            break
        time.sleep(0.1)
    assert got["decision"] == "block"


def test_app_timeout_takes_the_default_edge(cluster):
    url = cluster.leader().url
    headers = admin(cluster, url)
    wf = w3_definition(scorer="no_such_app")  # an outside app that never answers
    wf["id"], wf["event_type"] = "w3_timeout", "checkout"
    for node in wf["nodes"]:
        if node["kind"] == "score":
            node["timeout_ms"] = 300
    wf["event_schema"] = {"card": "string", "amount": "int", "country": "string",
                          "customer": "string", "merchant": "string", "channel": "string"}
    r = httpx.post(url + "/v1/workflows", json=wf, headers=headers)
    assert r.status_code == 201, r.text
    assert httpx.post(url + "/v1/workflows/w3_timeout/publish", headers=headers).status_code == 200
    r = post(cluster, followers(cluster)[0].url, f"to-{uuid.uuid4().hex}", deadline_ms=5000,
             etype="checkout", card="c-to")
    (run,) = r.json()["runs"]
    assert run["state"] == "decided", run
    assert run["path"][-1]["node_id"] == "score" and run["path"][-1]["default_taken"]
    assert run["node_id"] == "approve"


def test_duplicate_event_on_two_nodes_is_one_run(cluster):
    a, b = [n.url for n in cluster.nodes.values() if n.alive()][:2]
    event_id = f"dup-{uuid.uuid4().hex}"
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(lambda u: post(cluster, u, event_id).json(), [a, b, a, b]))
    assert len({ans["runs"][0]["run_id"] for ans in answers}) == 1
    assert sum(not ans["duplicate"] for ans in answers) == 1
    store = HBaseRunStore(endpoints.HBASE_THRIFT_HOST, endpoints.HBASE_THRIFT_PORT,
                          cluster.hbase_table)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and not store.lookup("order", event_id):
        time.sleep(0.2)
    assert len(store.lookup("order", event_id)) == 1


@pytest.fixture(scope="module")
def openapi(cluster):
    # The workflow operations (deep discriminated-union bodies) take minutes to generate on a
    # loaded machine; test_api_schema covers them on an embedded node.
    return schemathesis.openapi.from_url(cluster.leader().url + "/openapi.json").exclude(
        path_regex=r"^/v1/workflows")


schema = schemathesis.pytest.from_fixture("openapi")


@pytest.fixture(scope="module")
def headers_by_kind(cluster):
    """One login for the whole module: a login is a PBKDF2 hash, slow on purpose."""
    node = next(n for n in cluster.nodes.values() if n.alive())
    return {"admin": admin(cluster, node.url), "client": auth(cluster)}


@schema.parametrize()
@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
def test_schemathesis_finds_no_server_error(case, cluster, headers_by_kind):
    node = next(n for n in cluster.nodes.values() if n.alive())
    client = case.path.startswith(("/v1/events", "/v1/runs"))
    headers = headers_by_kind["client" if client else "admin"]
    response = case.call(base_url=node.url, headers=headers, timeout=30)
    assert response.status_code < 500, (case.method, case.path, response.text[:300])


def test_kill_leader_mid_traffic_loses_no_acknowledged_run(cluster):
    gen = OrderGenerator(seed=11, prefix=f"kill-{uuid.uuid4().hex[:6]}")
    orders = [gen.order() for _ in range(400)]
    acked: dict[str, dict] = {}
    urls = itertools.cycle([n.url for n in cluster.nodes.values() if n.alive()])
    leader = cluster.leader()

    def send(order: dict) -> None:
        for _ in range(40):  # a client retries on another node until acknowledged
            url = next(urls)
            try:
                r = httpx.post(url + "/v1/events", json=order, headers=auth(cluster), timeout=15)
            except httpx.HTTPError:
                continue
            if r.status_code == 200:
                acked[order["event_id"]] = r.json()
                return
            time.sleep(0.25)

    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        futures = [pool.submit(send, o) for o in orders[:150]]
        concurrent.futures.wait(futures)
        cluster.kill(leader, signal.SIGKILL)
        futures = [pool.submit(send, o) for o in orders[150:]]
        concurrent.futures.wait(futures)
    new_leader = cluster.wait_ready()
    assert new_leader is not leader
    assert len(acked) == len(orders), f"{len(orders) - len(acked)} orders never acknowledged"
    # exactly one run per event, and the same one on a retry
    run_ids = {e: a["runs"][0]["run_id"] for e, a in acked.items()}
    assert len(set(run_ids.values())) == len(orders)
    for event_id in list(run_ids)[::37]:
        again = post(cluster, new_leader.url, event_id).json()
        assert again["duplicate"] and again["runs"][0]["run_id"] == run_ids[event_id]
    # HBase holds every decided acknowledged run (the new leader re-drives unconfirmed writes)
    store = HBaseRunStore(endpoints.HBASE_THRIFT_HOST, endpoints.HBASE_THRIFT_PORT,
                          cluster.hbase_table)
    decided = {a["runs"][0]["run_id"] for a in acked.values() if a["runs"][0]["decision"]}
    deadline = time.monotonic() + settle_timeout_s
    missing = decided
    while time.monotonic() < deadline:
        missing = {r for r in missing if (s := store.get(r)) is None or s.decision is None}
        if not missing:
            break
        time.sleep(1)
    assert not missing, f"{len(missing)} decided runs not in HBase"
