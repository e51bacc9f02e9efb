"""P7: server CPU per order (µs), on the leader and on a follower, embedded and on three nodes.

Latency on a shared 2-core machine moves with whatever else runs; the CPU a node spends per
order moves far less. This benchmark starts real nodes (``python -m runner.cli serve``), sends
them a fixed number of W3 orders at a fixed rate from a load generator in its own process
(``bench/api_w3.py``'s), and reads each server process tree's CPU time (user + system, via
psutil, the server's worker processes included) just before and just after those orders:

    cpu_us_per_order = (cpu_after - cpu_before) / orders

The figure includes what the node spends while idle over the same interval (housekeeping,
log polling); ``idle_cpu_pct`` is that rate, measured before the load, and ``net_us_per_order``
the figure without it.

Rows, all in the same run:
- embedded node (file log, one node) under uvicorn (httptools, uvloop), under the native front
  end (``runner.api.native``: hyper in front, uvicorn behind it for the other routes) and under
  granian (ASGI, one worker, uvloop) with the hot path, under uvicorn with orders served
  through ASGI
  (``RAILFLOW_LEAN_ORDERS=false``: what ``runner.api.transport``'s lean orders save), and
  under uvicorn with the hot path off (the FastAPI routes alone: what ``runner.api.hot``
  saves);
- three nodes in cluster mode on infra/'s Kafka, ZooKeeper, HBase and S3, once under each server
  of ``--servers`` (uvicorn and native): the leader (HTTP in, append, apply, reply, run
  store) and each follower (consume, apply). Targets P7: ≤ 250 µs on the leader, ≤ 120 µs on
  a follower (read under the default server; each server's leader has its own line).

Before each reading every node has applied what the leader applied (a follower's CPU for the
orders is counted only once it applied them all). ``--quick`` measures the servers of
``--servers`` with the hot path, embedded and on three nodes, one repeat each (granian and the
ASGI and FastAPI peers only in full runs).

Usage: ``.venv/bin/python bench/api_cost.py [--quick] [--skip-cluster] [--servers
uvicorn,native]``. Starts the cluster if it is not up (and stops it again in that case).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.api_w3 import _wait_demo, ensure_cluster, run_load  # noqa: E402
from bench.harness import Report, spread  # noqa: E402
from runner.nodes import NodeCluster, free_base_port  # noqa: E402
from runner.settings import Settings  # noqa: E402

RATE_PER_S = 500  # fixed arrival rate: CPU per order depends a little on batching
ORDERS_FULL, ORDERS_QUICK = 15_000, 1_500
WARMUP_ORDERS_FULL, WARMUP_ORDERS_QUICK = 3_000, 500
REPEATS_FULL, REPEATS_QUICK = 3, 1
IDLE_S_FULL, IDLE_S_QUICK = 5.0, 1.0
ready_timeout_s = 90.0
catch_up_timeout_s = 120.0
P7_LEADER_US, P7_FOLLOWER_US = 250.0, 120.0


def cpu_s(pid: int) -> float:
    """CPU seconds (user + system) of a process and its descendants (granian's worker)."""
    procs = [psutil.Process(pid)]
    procs += procs[0].children(recursive=True)
    total = 0.0
    for p in procs:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.NoSuchProcess:
            pass
    return total


def applied_offset(url: str) -> int:
    return int(httpx.get(url + "/healthz", timeout=5).json()["applied_offset"])


def wait_caught_up(url: str, nodes: dict[str, str]) -> None:
    """Until every node applied what the node at ``url`` (the leader) applied by now: a
    follower's share of the orders is counted only once it applied them all."""
    target = applied_offset(url)
    deadline = time.monotonic() + catch_up_timeout_s
    while time.monotonic() < deadline:
        if all(applied_offset(u) >= target for u in nodes.values()):
            return
        time.sleep(0.1)
    raise TimeoutError(f"the nodes did not apply offset {target} in {catch_up_timeout_s} s")


def measure(pids: dict[str, int], urls: dict[str, str], url: str, key: str, orders: int,
            warmup_orders: int, idle_s: float, seed: int) -> dict[str, Any]:
    """Warm up, measure idle CPU, then CPU over ``orders`` orders sent to ``url``."""
    run_load([url], "/v1/events", key, RATE_PER_S, warmup_orders / RATE_PER_S, 0.0, seed)
    wait_caught_up(url, urls)
    time.sleep(0.5)  # the warm-up's run-store writes and confirmations
    idle0 = {n: cpu_s(p) for n, p in pids.items()}
    time.sleep(idle_s)
    before = {n: cpu_s(p) for n, p in pids.items()}
    idle_per_s = {n: (before[n] - idle0[n]) / idle_s for n in pids}
    started = time.monotonic()
    load = run_load([url], "/v1/events", key, RATE_PER_S, orders / RATE_PER_S, 0.0, seed + 100)
    wait_caught_up(url, urls)
    after = {n: cpu_s(p) for n, p in pids.items()}
    wall_s = time.monotonic() - started
    ok = orders - sum(load["errors"].values())
    out: dict[str, Any] = {"orders": orders, "errors": load["errors"], "wall_s": round(wall_s, 2),
                           "generator_core_share": load["generator_core_share"]}
    for n in pids:
        used = after[n] - before[n]
        out[n] = {"cpu_us_per_order": used * 1e6 / max(ok, 1),
                  "net_us_per_order": max(0.0, used - idle_per_s[n] * wall_s) * 1e6 / max(ok, 1),
                  "idle_cpu_pct": 100 * idle_per_s[n]}
    return out


def _start_embedded(server: str, hot_path: bool, lean: bool = True,
                    ) -> tuple[subprocess.Popen, str, str, Path]:
    data_dir = Path(tempfile.mkdtemp(prefix=f"railflow-cost-{server}-"))
    port = free_base_port(1)
    env = dict(os.environ, RAILFLOW_MODE="embedded", RAILFLOW_DATA_DIR=str(data_dir),
               RAILFLOW_PORT=str(port), RAILFLOW_SERVER=server,
               RAILFLOW_HOT_PATH="true" if hot_path else "false",
               RAILFLOW_LEAN_ORDERS="true" if lean else "false")
    proc = subprocess.Popen([sys.executable, "-m", "runner.cli", "serve"], env=env, cwd=ROOT,
                            stdout=open(data_dir / "node.log", "wb"), stderr=subprocess.STDOUT,
                            start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + ready_timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the node exited; see {data_dir / 'node.log'}")
        try:
            if httpx.get(url + "/healthz", timeout=2).json()["status"] == "ok":
                break
        except (httpx.HTTPError, ValueError):
            pass
        time.sleep(0.3)
    key = (data_dir / "demo-api-key").read_text().strip()
    _wait_demo(url, key)
    return proc, url, key, data_dir


def _stop(proc: subprocess.Popen) -> None:
    proc.send_signal(2)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def run_embedded(report: Report, server: str, hot_path: bool, lean: bool, orders: int,
                 warmup: int, idle_s: float, repeats: int) -> None:
    proc, url, key, _ = _start_embedded(server, hot_path, lean)
    try:
        runs = [measure({"node": proc.pid}, {"node": url}, url, key, orders, warmup, idle_s,
                        seed) for seed in range(1, repeats + 1)]
    finally:
        _stop(proc)
    name = f"embedded, {server}" + (", hot path" if hot_path else ", FastAPI routes only")
    if hot_path and server == "uvicorn":
        name += ", lean orders" if lean else ", orders through ASGI"
    _add(report, name, "node", "leader", runs)


@contextlib.contextmanager
def started_cluster(server: str) -> Iterator[tuple[NodeCluster, Any]]:
    """Three nodes in cluster mode on infra/'s servers (started if down, and then stopped
    again), on a fresh topic, the demo workflow published; yields ``(cluster, leader)``."""
    started_infra = ensure_cluster()
    topic = f"rf-cost-{uuid.uuid4().hex[:8]}"
    cluster = NodeCluster(Path(tempfile.mkdtemp(prefix="railflow-cost-3n-")), topic, 3,
                          base_port=free_base_port(3), env={"RAILFLOW_SERVER": server})
    try:
        cluster.start()
        leader = cluster.wait_ready()
        _wait_demo(leader.url, cluster.api_key)
        yield cluster, leader
    finally:
        cluster.stop()
        if started_infra:
            subprocess.run([sys.executable, "-m", "infra", "down"], cwd=ROOT)


def run_cluster(report: Report, server: str, orders: int, warmup: int, idle_s: float,
                repeats: int) -> None:
    with started_cluster(server) as (cluster, leader):
        pids = {n.node_id: n.proc.pid for n in cluster.nodes.values()}
        urls = {n.node_id: n.url for n in cluster.nodes.values()}
        runs = [measure(pids, urls, leader.url, cluster.api_key, orders, warmup, idle_s, seed)
                for seed in range(1, repeats + 1)]
    _add(report, f"3 nodes, {server}", leader.node_id, "leader", runs)
    for node_id in pids:
        if node_id != leader.node_id:
            _add(report, f"3 nodes, {server}", node_id, "follower", runs)


def _add(report: Report, name: str, node: str, role: str, runs: list[dict]) -> None:
    cost = [r[node]["cpu_us_per_order"] for r in runs]
    report.add(workload=name, node=node, role=role, rate_per_s=RATE_PER_S,
               orders=sum(r["orders"] for r in runs),
               errors=sum(sum(r["errors"].values()) for r in runs),
               cpu_us_per_order=spread(cost),
               net_us_per_order=spread([r[node]["net_us_per_order"] for r in runs]),
               idle_cpu_pct=statistics.median(r[node]["idle_cpu_pct"] for r in runs),
               generator_core_share=statistics.median(r["generator_core_share"] for r in runs))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--skip-cluster", action="store_true")
    parser.add_argument("--servers", default="uvicorn,native",
                        help="servers measured embedded and on three nodes, in this order "
                             "(uvicorn, native, granian)")
    args = parser.parse_args(argv)
    servers = [s for s in args.servers.split(",") if s]
    q = args.quick
    orders, warmup = (ORDERS_QUICK, WARMUP_ORDERS_QUICK) if q else (ORDERS_FULL,
                                                                     WARMUP_ORDERS_FULL)
    idle_s, repeats = (IDLE_S_QUICK, REPEATS_QUICK) if q else (IDLE_S_FULL, REPEATS_FULL)
    report = Report("api_cost", q)
    default_server = Settings.model_fields["server"].default
    configs = [(server, True, True) for server in servers]
    if not q:  # the peers only in full runs
        configs += [("granian", True, True)] * ("granian" not in servers) + [
            ("uvicorn", True, False), ("uvicorn", False, False)]
    for server, hot, lean in configs:
        print(f"== embedded, {server}, hot path {'on' if hot else 'off'}, lean orders "
              f"{'on' if lean else 'off'}", flush=True)
        run_embedded(report, server, hot, lean, orders, warmup, idle_s, repeats)
    if not args.skip_cluster:
        for server in servers:
            print(f"== 3 nodes, {server}", flush=True)
            run_cluster(report, server, orders, warmup, idle_s, repeats)

    rows = report.results
    reference = next((r for r in rows if "FastAPI routes only" in r["workload"]), None)
    for r in rows:
        if reference is not None:
            r["ratio_vs_fastapi_routes"] = round(r["cpu_us_per_order"]["median"]
                                                 / reference["cpu_us_per_order"]["median"], 3)
    for r in rows:
        if r["workload"].startswith("3 nodes") and r["role"] == "leader":
            report.target(f"P7_leader ({r['workload'].split(', ')[1]})",
                          r["cpu_us_per_order"]["median"], "µs CPU per order", P7_LEADER_US,
                          higher_is_better=False)
    cluster = f"3 nodes, {default_server}"
    if not any(r["workload"] == cluster for r in rows):  # the default server not measured
        cluster = next((r["workload"] for r in rows if r["workload"].startswith("3 nodes")), "")
    leader = [r for r in rows if r["workload"] == cluster and r["role"] == "leader"]
    followers = [r for r in rows if r["workload"] == cluster and r["role"] == "follower"]
    if leader:
        report.target("P7_leader", leader[0]["cpu_us_per_order"]["median"], "µs CPU per order",
                      P7_LEADER_US, higher_is_better=False)
    if followers:
        worst = max(r["cpu_us_per_order"]["median"] for r in followers)
        report.target("P7_follower", worst, "µs CPU per order (the busier follower)",
                      P7_FOLLOWER_US, higher_is_better=False)
    report.write(["workload", "node", "role", "orders", "errors", "cpu_us_per_order",
                  "net_us_per_order", "idle_cpu_pct", "ratio_vs_fastapi_routes",
                  "generator_core_share"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
