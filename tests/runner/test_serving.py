"""A serving process: runner.gcpolicy (the collector, the GIL's switch interval), create_app's
on_started hook, FastAPI's telemetry off."""

from __future__ import annotations

import gc
import sys
import weakref

from fastapi.testclient import TestClient

from runner import gcpolicy
from runner.api.app import create_app
from runner.settings import Settings


class _Cyclic:
    def __init__(self) -> None:
        self.me = self  # only the cyclic collector frees it


def _walked(obj: object) -> bool:
    """Whether ``obj`` is in a generation a collection walks (a frozen one is in none)."""
    return any(o is obj for o in gc.get_objects())


def _serving(**policy) -> tuple:
    saved = gc.get_threshold(), sys.getswitchinterval(), gc.isenabled()
    gcpolicy.for_serving(Settings().gil_switch_ms, full_every=0, **policy)
    return saved


def _leave(saved: tuple) -> None:
    gcpolicy.leave_serving()
    gc.set_threshold(*saved[0])
    sys.setswitchinterval(saved[1])
    if saved[2]:
        gc.enable()


def test_serving_thresholds_and_settle_freezes_what_is_alive() -> None:
    saved = _serving()
    try:
        assert gc.get_threshold() == (gcpolicy.young_threshold, *gcpolicy.thresholds[1:])
        assert sys.getswitchinterval() == 0.005
        gcpolicy.for_serving(0.5, full_every=0)
        assert sys.getswitchinterval() == 0.0005
        alive = [[i] for i in range(1000)]  # containers the collector tracks
        gcpolicy.settle()
        assert gc.get_freeze_count() >= len(alive)
    finally:
        _leave(saved)


def test_young_survivors_are_frozen_and_young_cycles_still_freed() -> None:
    saved = _serving()
    try:
        gcpolicy.settle()
        gc.disable()  # only the collections below
        frozen = gc.get_freeze_count()
        survivors = [[i] for i in range(500)]
        dropped = _Cyclic()
        freed_young = weakref.ref(dropped)
        del dropped
        gc.collect(0)
        assert freed_young() is None  # a cycle born and dropped between two collections
        assert not _walked(survivors)  # the rest, set aside: no collection walks it
        assert gc.get_freeze_count() > frozen
        kept = _Cyclic()
        gc.collect(0)  # kept survives it: frozen
        late = weakref.ref(kept)
        del kept
        gc.collect(0)
        gc.collect(1)
        assert late() is not None  # garbage now, but frozen: no young or middle walk sees it
        assert gcpolicy.collect_fully() >= 1
        assert late() is None
        assert gc.get_freeze_count() > 0  # alive again set aside
    finally:
        _leave(saved)


def test_without_freeze_survivors_the_earlier_policy() -> None:
    saved = _serving(freeze_survivors=False)
    try:
        assert gc.get_threshold() == gcpolicy.thresholds
        gcpolicy.settle()
        gc.disable()
        survivors = [[i] for i in range(500)]
        gc.collect(0)
        assert _walked(survivors)  # promoted to the middle generation, not frozen
    finally:
        _leave(saved)


def test_the_collector_clock_times_each_run_once_by_generation() -> None:
    clock = gcpolicy.CollectorClock()
    gc.callbacks.append(clock)
    enabled = gc.isenabled()
    gc.disable()  # only the two collections below
    try:
        clock.take()
        gc.collect(0)
        cycle: list = []
        cycle.append(cycle)
        del cycle  # one object only the collector frees
        gc.collect(2)
        runs = clock.take()["runs"]
    finally:
        gc.callbacks.remove(clock)
        if enabled:
            gc.enable()
    assert [g for g, _, _, _ in runs] == [0, 2]
    assert all(wall >= 0 and cpu >= 0 for _, wall, cpu, _ in runs)
    assert runs[1][3] >= 1  # the cycle
    assert clock.take() == {"runs": [], "dropped": 0}  # taken: a new count starts


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
