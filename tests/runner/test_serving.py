"""A serving process: runner.gcpolicy (the collector, the GIL's switch interval), create_app's
on_started hook, FastAPI's telemetry off."""

from __future__ import annotations

import gc
import sys

from fastapi.testclient import TestClient

from runner import gcpolicy
from runner.api.app import create_app
from runner.settings import Settings


def test_serving_thresholds_and_settle_freezes_what_is_alive() -> None:
    before, switch = gc.get_threshold(), sys.getswitchinterval()
    try:
        gcpolicy.for_serving(Settings().gil_switch_ms)
        assert gc.get_threshold() == gcpolicy.thresholds
        assert sys.getswitchinterval() == 0.005
        gcpolicy.for_serving(0.5)
        assert sys.getswitchinterval() == 0.0005
        alive = [[i] for i in range(1000)]  # containers the collector tracks
        gcpolicy.settle()
        assert gc.get_freeze_count() >= len(alive)
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)
        sys.setswitchinterval(switch)


def test_on_started_runs_after_the_service_started(tmp_path) -> None:
    seen = []
    app = create_app(settings=Settings(data_dir=tmp_path, port=8998, demo=False),
                     on_started=lambda: seen.append(app.state.service.node.applied_offset))
    with TestClient(app):
        assert len(seen) == 1  # node exists: the service had started


def test_fastapi_telemetry_is_off(tmp_path) -> None:
    """No per-request OpenTelemetry lookups: the node's metrics are Prometheus'."""
    app = create_app(settings=Settings(data_dir=tmp_path, port=8997, demo=False), manage=False)
    assert not app._native_telemetry.enabled()
    assert not any(app._telemetry[k] for k in ("tracing", "metrics", "logs", "operation_spans"))


class _Recorder:
    """Wraps FastAPI's middleware stack and notes the paths that reached it."""

    def __init__(self, app) -> None:
        self.app, self.paths = app, []

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http":
            self.paths.append(scope["path"])
        await self.app(scope, receive, send)


def test_the_hot_path_serves_orders_before_fastapis_stack(tmp_path) -> None:
    app = create_app(settings=Settings(data_dir=tmp_path, port=8996, demo=False))
    with TestClient(app) as client:
        key = app.state.service.auth.create_key("tests")
        assert client.get("/healthz").status_code == 200  # FastAPI built its stack
        app.middleware_stack = recorder = _Recorder(app.middleware_stack)
        r = client.post("/v1/events", json={"event_id": "hot-1", "type": "order", "data": {}},
                        headers={"Authorization": f"Bearer {key}"})
        assert r.status_code == 200, r.text
        assert recorder.paths == []
        r = client.post("/v1/events", json={"event_id": "hot-2", "type": "order", "data": {}})
        assert r.status_code == 401 and recorder.paths == ["/v1/events"]  # left to FastAPI
        assert client.get("/healthz").status_code == 200 and recorder.paths[-1] == "/healthz"
