"""The Sift door's latency: ``track(..., return_workflow_status=True)`` with Sift's official
Python client against ``POST /v1/events`` on the same node, in the same run.

Workload: one embedded ``railflow serve`` node (file log, RocksDB run store) in its own process,
serving the W3 demo workflow with W1's metrics; synthetic orders from ``OrderGenerator``.
Each peer sends the same orders (fresh ids) open-loop at a fixed arrival rate from this
process, one request at a time on a persistent connection; latency runs from each request's
intended start (coordinated omission corrected) to the parsed answer, in an HdrHistogram,
after an uncounted warm-up. Peers alternate in rounds so machine noise hits each alike:

- ``v1 events (httpx)``: ``POST /v1/events`` (the baseline);
- ``sift track (official client)``: ``sift.Client.track("$create_order", ...,
  return_workflow_status=True, return_route_info=True)``, the merchant's call;
- ``v205 events (httpx)``: the same Sift body posted with httpx, which separates the door's
  server-side cost from the client library's.

Reports p50/p99/p99.9 (median over rounds, with min..max) and each peer's ratio to ``v1``.
Usage: ``.venv/bin/python bench/sift_api.py [--quick]``. Starts and stops its node.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.harness import Report, open_loop, spread  # noqa: E402
from runner.demo import OrderGenerator  # noqa: E402

ready_timeout_s = 90.0
RATE_FULL, RATE_QUICK = 100.0, 50.0  # one request at a time: below the service rate
REQUESTS_FULL, REQUESTS_QUICK = 6_000, 300  # per peer and round
WARMUP_FULL, WARMUP_QUICK = 500, 100
ROUNDS_FULL, ROUNDS_QUICK = 3, 1
ACCOUNT = "bench"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_node(data_dir: Path) -> tuple[subprocess.Popen, str, str]:
    port = _free_port()
    env = dict(os.environ, RAILFLOW_DATA_DIR=str(data_dir), RAILFLOW_PORT=str(port))
    log = open(data_dir / "node.log", "ab")
    proc = subprocess.Popen([sys.executable, "-m", "runner.cli", "serve"], env=env, cwd=ROOT,
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + ready_timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the node exited; see {data_dir / 'node.log'}")
        key_file = data_dir / "demo-api-key"
        try:
            if key_file.exists() and httpx.get(url + "/healthz").json()["status"] == "ok":
                key = key_file.read_text().strip()
                if _demo_ready(url, key):
                    return proc, url, key
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    proc.kill()
    raise TimeoutError(f"the node was not ready in {ready_timeout_s} s")


def _demo_ready(url: str, key: str) -> bool:
    r = httpx.post(url + "/v1/events", json={"event_id": "bench-probe", "type": "order",
                                             "data": {"card": "probe", "amount": 1}},
                   headers={"Authorization": f"Bearer {key}"})
    return r.status_code == 200 and bool(r.json()["runs"])


def sift_body(order: dict[str, Any]) -> dict[str, Any]:
    """The generator's order as a Sift ``$create_order`` (the same fields after translation)."""
    d = order["data"]
    card_n = int(d["card"].split("-")[1])
    return {"$user_id": d["customer"], "$order_id": order["event_id"],
            "$amount": d["amount"] * 10_000, "$currency_code": d["currency"], "$ip": d["ip"],
            "$billing_address": {"$country": d["country"], "$region": d["region"]},
            "$payment_methods": [{"$payment_type": "$credit_card", "$card_bin": "400000",
                                  "$card_last4": f"{card_n:04d}"}],
            "merchant": d["merchant"], "channel": d["channel"], "device": d["device"],
            "mcc": d["mcc"]}


def orders(prefix: str, n: int) -> list[dict[str, Any]]:
    gen = OrderGenerator(seed=11, prefix=prefix)
    return [gen.order() for _ in range(n)]


def run_peer(peer: str, url: str, key: str, prefix: str, n: int, rate: float,
             warmup: int) -> dict[str, float]:
    items = orders(prefix, n + warmup)
    if peer == "v1 events (httpx)":
        client = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"},
                              timeout=30)

        def call(order):
            r = client.post("/v1/events", json=order)
            assert r.status_code == 200 and r.json()["runs"], r.text
    elif peer == "v205 events (httpx)":
        client = httpx.Client(base_url=url, timeout=30)
        params = {"return_workflow_status": "true", "return_route_info": "true"}

        def call(order):
            body = {**sift_body(order), "$type": "$create_order", "$api_key": key}
            r = client.post("/v205/events", json=body, params=params)
            assert r.status_code == 200 and r.json()["score_response"]["workflow_statuses"]
    else:
        import sift

        client = sift.Client(api_key=key, api_url=url, account_id=ACCOUNT, timeout=30)

        def call(order):
            r = client.track("$create_order", sift_body(order), return_workflow_status=True,
                             return_route_info=True)
            assert r.api_status == 0 and r.body["score_response"]["workflow_statuses"]
    try:
        return open_loop(call, items, rate, warmup=warmup)
    finally:
        close = getattr(client, "close", None) or client.session.close
        close()


PEERS = ("v1 events (httpx)", "sift track (official client)", "v205 events (httpx)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    q = args.quick
    rate = RATE_QUICK if q else RATE_FULL
    n, warmup = (REQUESTS_QUICK, WARMUP_QUICK) if q else (REQUESTS_FULL, WARMUP_FULL)
    rounds = ROUNDS_QUICK if q else ROUNDS_FULL
    report = Report("sift_api", q)
    with tempfile.TemporaryDirectory(prefix="railflow-sift-bench-") as tmp:
        proc, url, key = start_node(Path(tmp))
        try:
            samples: dict[str, list[dict[str, float]]] = {p: [] for p in PEERS}
            for rnd in range(rounds):
                for i, peer in enumerate(PEERS):
                    samples[peer].append(run_peer(peer, url, key, f"b{rnd}p{i}", n, rate,
                                                  warmup))
        finally:
            os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
    base = samples[PEERS[0]]
    for peer in PEERS:
        rows = samples[peer]
        row: dict[str, Any] = {"peer": peer, "rate_per_s": rate, "requests": rows[0]["count"],
                               "rounds": rounds}
        for pct in ("p50", "p99", "p999"):
            row[f"{pct}_ms"] = spread([r[f"{pct}_us"] / 1000 for r in rows])
            row[f"{pct}_ratio"] = spread([r[f"{pct}_us"] / b[f"{pct}_us"]
                                          for r, b in zip(rows, base, strict=True)])
        report.add(**row)
    report.write(["peer", "rate_per_s", "p50_ms", "p99_ms", "p999_ms", "p50_ratio",
                  "p99_ratio"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
