"""CPU per order of the HTTP layer alone, in-process: the hot path beside the FastAPI routes.

Calls the ASGI application directly (no server, no socket) with ``POST /v1/events`` bodies of
W3 orders and a client key; the node's ``submit`` and ``wait_runs`` answer at once with a
decided run of the demo workflow's shape, so what is measured is auth, decoding, the limits,
``operations.receive_event`` and encoding the reply: the part of issue 12's 250 µs budget the
HTTP layer takes before the server's own parsing (measured whole by ``bench/api_cost.py``).
Figures are process CPU time per request, min/median/max over repeats.

Usage: ``.venv/bin/python bench/http_layer.py [--quick]``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.harness import Report, spread  # noqa: E402
from replog.protocols import Applied  # noqa: E402
from runner.api.app import create_app  # noqa: E402
from runner.demo import OrderGenerator  # noqa: E402
from runner.service import Service  # noqa: E402
from runner.settings import Settings  # noqa: E402
from runner.state.effects import Reply  # noqa: E402

REQUESTS_FULL, REQUESTS_QUICK = 20_000, 3_000
REPEATS_FULL, REPEATS_QUICK = 5, 3
WARMUP_REQUESTS = 500
# A decided run as apply returns it for the W3 workflow (one score step, one decision).
RUN = {"run_id": "r_0", "event_id": "e", "workflow_id": "w3_demo", "workflow_version": 1,
       "state": "decided", "decision": "approve", "node_id": "approve", "waiting_for": None,
       "path": [{"seq": 0, "node_id": "score", "edge_id": "approve_default",
                 "next_node_id": "approve", "node_kind": "score", "default_taken": True,
                 "trace": [{"edge_id": f"e{i}", "criteria": "scores.payment_abuse > 90",
                            "value": False, "error": None} for i in range(4)],
                 "decision": {"action": "approve", "reason": ""}, "ts": 1}],
       "explanation": ["score: no edge matched; default to approve"],
       "metrics": {"card_count_5m": 1, "card_sum_5m": 1250, "merchant_avg_5m": 1250.0},
       "scores": {"payment_abuse": 12.0, "score": 12.0}, "apps": {}, "offset": 1,
       "started_ts": 1, "updated_ts": 1}


def stub_service() -> tuple[Service, str]:
    """A node that is never started: the log answers at once with one decided run."""
    svc = Service(Settings(data_dir=Path(tempfile.mkdtemp(prefix="railflow-http-"))))
    key = svc.auth.create_key("bench")

    async def submit(kind: str, payload: dict, timeout_s: float | None = None, *,
                     raw: bytes | None = None) -> Applied:
        return Applied(1, 1, [Reply(ok=True, runs=[RUN],
                                    result={"duplicate": False, "offset": 1})])

    async def wait_runs(runs: list[dict], deadline_at_ms: int) -> list[dict]:
        return runs

    svc.submit = submit  # type: ignore[method-assign]
    svc.wait_runs = wait_runs  # type: ignore[method-assign]
    return svc, key


async def drive(app: Any, key: str, bodies: list[bytes], n: int) -> float:
    """CPU µs per request over ``n`` requests."""
    headers = [(b"host", b"bench"), (b"authorization", f"Bearer {key}".encode()),
               (b"content-type", b"application/json")]
    status: list[int] = []

    async def send(message: dict) -> None:
        if message["type"] == "http.response.start":
            status.append(message["status"])

    started = time.process_time()
    for i in range(n):
        body = bodies[i % len(bodies)]
        pending = [{"type": "http.request", "body": body, "more_body": False}]

        async def receive(pending=pending) -> dict:
            return pending.pop() if pending else {"type": "http.disconnect"}

        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
                 "method": "POST", "scheme": "http", "path": "/v1/events",
                 "raw_path": b"/v1/events", "root_path": "", "query_string": b"",
                 "headers": [*headers, (b"content-length", str(len(body)).encode())],
                 "server": ("127.0.0.1", 8000), "client": ("127.0.0.1", 40000)}
        await app(scope, receive, send)
    used = time.process_time() - started
    if set(status) != {200}:
        raise RuntimeError(f"unexpected answers: {sorted(set(status))}")
    return used * 1e6 / n


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    n, repeats = (REQUESTS_QUICK, REPEATS_QUICK) if args.quick else (REQUESTS_FULL,
                                                                       REPEATS_FULL)
    svc, key = stub_service()
    gen = OrderGenerator(seed=12)
    bodies = [orjson.dumps({"event_id": f"http-{i}", "type": "order",
                            "data": gen.order()["data"]}) for i in range(2_000)]
    report = Report("http_layer", args.quick)
    apps = {"hot path": create_app(svc, manage=False),
            "FastAPI routes only": create_app(svc, manage=False, hot_path=False)}
    costs: dict[str, list[float]] = {name: [] for name in apps}
    for app in apps.values():
        asyncio.run(drive(app, key, bodies, WARMUP_REQUESTS))
    for _ in range(repeats):  # interleaved: both see the same machine
        for name, app in apps.items():
            costs[name].append(asyncio.run(drive(app, key, bodies, n)))
    for name in apps:
        report.add(path=name, requests=n * repeats, cpu_us_per_order=spread(costs[name]))
    ref = report.results[1]["cpu_us_per_order"]["median"]
    for row in report.results:
        row["ratio_vs_fastapi_routes"] = round(row["cpu_us_per_order"]["median"] / ref, 3)
    report.write(["path", "requests", "cpu_us_per_order", "ratio_vs_fastapi_routes"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
