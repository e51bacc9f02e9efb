"""A run-store outage on an embedded node: decided runs wait for the store in the hot state,
and /healthz and /metrics say how many."""

from __future__ import annotations

import time

import pytest
from fastapi.testclient import TestClient

from runner import service
from runner.api.app import create_app
from runner.runstore.memory import MemoryRunStore
from runner.service import Service
from runner.settings import Settings
from runner.state import queries

settle_timeout_s = 60


class FlakyStore(MemoryRunStore):
    """The in-memory store, refusing every write while ``down``."""

    down = False

    def put_many(self, runs, writer_id=None):
        if self.down:
            raise ConnectionError("run store unreachable")
        super().put_many(runs, writer_id)


def wait_for(predicate, what: str):
    deadline = time.monotonic() + settle_timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"gave up waiting: {what}"
        time.sleep(0.05)


@pytest.fixture
def node(tmp_path, monkeypatch):
    monkeypatch.setattr(service, "runs_awaiting_store_warn", 2)
    store = FlakyStore()
    svc = Service(Settings(data_dir=tmp_path, port=8997, effects_confirm_interval_ms=50),
                  run_store=store)
    with TestClient(create_app(svc)) as client:
        client.headers["Authorization"] = f"Bearer {svc.auth.create_key('tests')}"

        def demo_loaded():
            cur = svc.reader()
            try:
                return bool(queries.workflows(cur))
            finally:
                cur.close()

        wait_for(demo_loaded, "the demo workflow")
        yield client, svc, store


def test_runs_waiting_for_the_store_are_counted_in_healthz_and_metrics(node):
    client, svc, store = node
    assert client.get("/healthz").json()["runs_awaiting_store"] == 0
    store.down = True
    for i in range(3):
        body = {"event_id": f"outage-{i}", "type": "order",
                "data": {"card": f"c-out-{i}", "amount": 1_000, "country": "US"}}
        r = client.post("/v1/events", json=body)
        assert r.status_code == 200 and r.json()["runs"][0]["state"] == "decided", r.text
    health = client.get("/healthz").json()
    assert health["runs_awaiting_store"] == 3
    assert any("3 decided runs wait for the run store" in p for p in health["problems"])
    wait_for(lambda: "railflow_runs_awaiting_store 3.0" in client.get("/metrics").text,
             "the gauge")
    store.down = False  # the leader's retries get through; EffectsDone confirms them
    wait_for(lambda: client.get("/healthz").json()["runs_awaiting_store"] == 0,
             "the confirmations")
    assert not any("wait for the run store" in p for p in client.get("/healthz").json()["problems"])
