"""A node whose state digest differs from another replica's at a checkpoint offset says so
loudly: /healthz, a Prometheus counter and an error log line."""

from __future__ import annotations

import time

from fastapi.testclient import TestClient

from checkpoints import Manifest, store_from_url
from checkpoints.layout import manifest_key
from runner.api.app import create_app
from runner.settings import Settings
from runner.state.digest import SCHEME

EVERY = 5


def test_a_digest_mismatch_at_a_checkpoint_offset_is_reported(tmp_path, caplog):
    settings = Settings(data_dir=tmp_path, port=8997, checkpoint_every_entries=EVERY)
    store = store_from_url(settings.effective_checkpoint_url)
    # Another replica's checkpoints at every boundary, with a state this node cannot have (a
    # digest of the same definition: one of another is not compared).
    for offset in range(EVERY, 400, EVERY):
        store.put_bytes(manifest_key(offset), Manifest(
            offset=offset, writer_id=1, created_at_ms=0, digest=f"{SCHEME}:not-our-state",
            parts=(),
            writer_node="node-9").to_bytes(settings.checkpoint_key()))
    app = create_app(settings=settings)
    with TestClient(app) as client:
        svc = app.state.service
        client.headers["Authorization"] = f"Bearer {svc.auth.create_key('t')}"
        health = client.get("/healthz").json()
        for i in range(200):
            if health["status"] == "diverged":
                break
            client.post("/v1/events", json={"event_id": f"d-{i}", "type": "order",
                                            "data": {"card": "c", "amount": 10}})
            time.sleep(0.02)
            health = client.get("/healthz").json()
        assert health["status"] == "diverged", health
        assert health["diverged_offsets"] and health["diverged_offsets"][0] % EVERY == 0
        text = client.get("/metrics").text
        (line,) = [x for x in text.splitlines()
                   if x.startswith("railflow_replica_digest_mismatches_total ")]
        assert float(line.split()[1]) >= 1
    assert "REPLICA DIVERGED" in caplog.text
