"""W3: end-to-end latency of the decision API on a 3-node cluster, open-loop, CO-corrected.

Workload (WORKLOADS.md W3): three ``railflow serve`` nodes in cluster mode on the infra/
cluster (Kafka log, ZooKeeper election, HBase run store, S3 checkpoints) serving the W3 demo
workflow with W1's metrics. A load generator in a separate process sends synthetic orders at
a fixed arrival rate (500, 1,000, 2,000/s) over persistent HTTP/1.1 connections; each
request's latency runs from its *intended* send time (coordinated omission corrected) to the
last byte of the answer, recorded in an HdrHistogram after an uncounted warm-up. The leader
also reports the log round trip (append → applied on the leader) for the same interval, and
``bench/census.py``'s account of the machine's CPU second by second over the row (busy cores,
each node's and server's share, each node thread's CPU and its wait for a core), with the
seconds that held a round trip over 25 ms set beside the others: whether the tail comes with a
busy machine or from inside a node. Each row's seconds go to ``bench/results/
api_w3_census.json``.

Peers, measured in the same run:
- ``score API``: the same load against the leader's ``POST /demo/score`` (the scoring call
  alone, what a checkout would call without workflows): Sift's "added latency" is the
  difference;
- ``via followers``: at 1,000/s, requests spread over all three nodes (followers forward to
  the leader) instead of sent to the leader.
Published anchors (not re-run here): Sift < 50 ms p99 added; Railgun < 250 ms p99.9;
Temporal Cloud StartWorkflow p99 69-78 ms; Zeebe 8.8 p99 350 ms at ~248/s.

The load generator (``--generator``): ``native`` (default) is ``bench/loadgen``, a small Rust
open-loop generator built by ``make loadgen`` (pinned by its Cargo.lock; one thread that
wakes at the due times, at most once a millisecond, and times each answer by the kernel's
receive time of its last byte, so answers need no wakeup of their own). ``python`` is
the asyncio generator below (about 100 µs per request: a fifth of a core at 2,000/s, which is
why it is not the default). Each row reports the generator's own CPU per request
(``generator_cpu_us_per_request``, user + system, from the generator's ``getrusage``), its
share of a core (``generator_core_share``) and ``loadgen_cpu_ok``: at most 25 µs per request,
i.e. under 5 % of a core at 2,000/s, as issue 12 requires; ``bench/loadgen_cost.py`` measures
it against a cheap local server. (oha picks ``-Z`` body lines at random, which would repeat
event ids; vegeta is not in Debian's bookworm.)

Usage: ``.venv/bin/python bench/api_w3.py [--quick] [--generator native|python]
[--rates 500,1000] [--duration-s S] [--skip-peers]``. P1 is met only by a full-length row at
1,000/s. Starts the cluster if it is not up (and stops it again in that case), starts and stops
the three nodes.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import multiprocessing as mp
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import orjson
from hdrh.histogram import HdrHistogram

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.census import Census, format_summary  # noqa: E402
from runner import signing  # noqa: E402
from runner.demo import OrderGenerator  # noqa: E402
from runner.nodes import NodeCluster, free_base_port  # noqa: E402

RATES_FULL = (500, 1000, 2000)
RATES_QUICK = (500, 1000)
DURATION_FULL_S = 300.0
DURATION_QUICK_S = 10.0
WARMUP_FULL_S = 30.0
WARMUP_QUICK_S = 3.0
connections_per_target_max = 48
templates_max = 50_000
latency_us_max = 60_000_000
P1 = {"p99_ms": 10.0, "p999_ms": 25.0}
GENERATOR_CORE_SHARE_MAX = 0.05
# The nodes' gil-watch period (runner.gilwatch): ~0.2 % of a core, read by the census
GIL_WATCH_MS = 5.0
# 5 % of a core at 2,000/s: the generator's CPU per request that keeps it within the budget
GENERATOR_CPU_US_PER_REQUEST_MAX = 25.0


# ---------------------------------------------------------------- load generator (own process)
def _request_head(path: str, target: str, key: str) -> bytes:
    host = target.removeprefix("http://")
    return (f"POST {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {key}\r\n"
            f"Content-Type: application/json\r\nContent-Length: ").encode()


async def _read_response(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head[9:12])
    length = 0
    for line in head.split(b"\r\n"):
        if line[:15].lower() == b"content-length:":
            length = int(line[15:])
    body = await reader.readexactly(length) if length else b""
    return status, body


async def _load(targets: list[str], path: str, key: str, rate: float, duration_s: float,
                warmup_s: float, seed: int) -> dict[str, Any]:
    total = int(rate * (warmup_s + duration_s))
    # Bodies are prepared before the clock starts (the generator is not what is measured):
    # distinct orders, each sent with a fresh event id.
    gen = OrderGenerator(seed=seed)
    run_tag = uuid.uuid4().hex[:8]
    templates = []
    for _ in range(min(total, templates_max)):
        order = gen.order()
        head = b'{"event_id":"w3-' + run_tag.encode() + b"-"
        tail = b'","type":"order","data":' + orjson.dumps(order["data"]) + b"}"
        templates.append((head, tail))
    heads = [_request_head(path, t, key) for t in targets]
    hist = HdrHistogram(1, latency_us_max, 3)
    errors: dict[str, int] = {}
    decisions: dict[str, int] = {}
    pool: asyncio.Queue = asyncio.Queue()
    for i in range(connections_per_target_max * len(targets)):
        url = targets[i % len(targets)]
        host, port = url.removeprefix("http://").split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        await pool.put((i % len(targets), reader, writer))

    start = time.perf_counter() + 0.2
    warm_end = start + warmup_s
    cpu_start = time.process_time()

    async def one(body: bytes, intended: float) -> None:
        conn = await pool.get()  # waiting here is part of the latency (open loop)
        target, reader, writer = conn
        try:
            writer.write(heads[target] + str(len(body)).encode() + b"\r\n\r\n" + body)
            status, body = await _read_response(reader)
        except (OSError, asyncio.IncompleteReadError, ValueError) as exc:
            errors[type(exc).__name__] = errors.get(type(exc).__name__, 0) + 1
            return  # the connection is dropped
        pool.put_nowait(conn)
        done = time.perf_counter()
        if intended < warm_end:
            return
        if status != 200:
            errors[f"http {status}"] = errors.get(f"http {status}", 0) + 1
            return
        hist.record_value(max(1, int((done - intended) * 1_000_000)))
        if path == "/v1/events":  # count the first run's decision without parsing it all
            at = body.find(b'"decision":')
            d = body[at + 11:body.find(b",", at)].strip(b'"').decode() if at >= 0 else "?"
            decisions[d] = decisions.get(d, 0) + 1

    tasks = []
    for i in range(total):
        intended = start + i / rate
        delay = intended - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        head, tail = templates[i % len(templates)]
        tasks.append(asyncio.create_task(one(head + str(i).encode() + tail, intended)))
    send_end = time.perf_counter()
    await asyncio.gather(*tasks)
    # The generator's own CPU while it sent: what it took from the machine it measures.
    cpu_s, wall_s = time.process_time() - cpu_start, warmup_s + duration_s
    return {"hdr": base64.b64encode(hist.encode()).decode(), "errors": errors,
            "decisions": decisions, "sent": total,
            "send_lag_s": round(send_end - (start + total / rate), 3),
            "generator_cpu_us_per_request": round(cpu_s * 1e6 / max(total, 1), 1),
            "generator_core_share": round(cpu_s / max(wall_s, 1e-9), 4)}


def _loadgen_main(conn, *args) -> None:
    try:
        import uvloop

        uvloop.install()  # the generator's own CPU per request is reported (cpu_s)
        conn.send(asyncio.run(_load(*args)))
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        conn.send({"failed": repr(exc)})
    conn.close()


def run_load(targets: list[str], path: str, key: str, rate: float, duration_s: float,
             warmup_s: float, seed: int) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_loadgen_main,
                       args=(child, targets, path, key, rate, duration_s, warmup_s, seed))
    proc.start()
    result = parent.recv()
    proc.join()
    if "failed" in result:
        raise RuntimeError(f"load generator failed: {result['failed']}")
    return result


LOADGEN = ROOT / "bench" / "loadgen" / "target" / "release" / "railflow-loadgen"
LOADGEN_TICK_US = 1000  # bench/loadgen's own default: at most 1,000 wakeups a second


def build_loadgen() -> Path:
    """``make loadgen`` (a no-op when the binary is up to date)."""
    subprocess.run(["make", "-s", "loadgen"], cwd=ROOT, check=True)
    return LOADGEN


def run_load_native(targets: list[str], path: str, key: str, rate: float, duration_s: float,
                    warmup_s: float, seed: int, tick_us: int = LOADGEN_TICK_US) -> dict[str, Any]:
    """The same load as ``run_load`` through ``bench/loadgen``; its CPU as it reports it."""
    gen = OrderGenerator(seed=seed)
    lines = []
    for _ in range(min(int(rate * (warmup_s + duration_s)), templates_max)):
        data = orjson.dumps(gen.order()["data"]).decode()
        lines.append('{"event_id":"w3-@ID@","type":"order","data":' + data + "}")
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        f.write("\n".join(lines) + "\n")
    cmd = [str(LOADGEN), "--path", path, "--key", key, "--rate", str(rate),
           "--duration-s", str(duration_s), "--warmup-s", str(warmup_s),
           "--connections", str(connections_per_target_max), "--bodies", f.name,
           "--tag", uuid.uuid4().hex[:8], "--tick-us", str(tick_us)]
    for t in targets:
        cmd += ["--target", t.removeprefix("http://")]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE)
    os.unlink(f.name)
    if proc.returncode != 0:
        raise RuntimeError(f"load generator failed with status {proc.returncode}")
    result = json.loads(proc.stdout)
    cpu_s = result["cpu_user_s"] + result["cpu_sys_s"]
    ms = lambda us: round(us / 1000, 3)  # noqa: E731
    result["percentiles"] = {"count": result["count"], "p50_ms": ms(result["p50_us"]),
                             "p99_ms": ms(result["p99_us"]), "p999_ms": ms(result["p999_us"]),
                             "max_ms": ms(result["max_us"]), "min_ms": ms(result["min_us"])}
    result["generator_cpu_us_per_request"] = round(cpu_s * 1e6 / max(result["sent"], 1), 1)
    # over the time the load was due (a server that falls behind stretches the wall time)
    result["generator_core_share"] = round(cpu_s / (warmup_s + duration_s), 4)
    return result


def generate(generator: str, *args: Any, tick_us: int = LOADGEN_TICK_US) -> dict[str, Any]:
    """Run one load with the chosen generator; ``percentiles`` holds the latency figures."""
    if generator == "native":
        return run_load_native(*args, tick_us=tick_us)
    load = run_load(*args)
    load["percentiles"] = percentiles(_hdr(load["hdr"]))
    return load


# ---------------------------------------------------------------- reporting
def _hdr(b64: str) -> HdrHistogram:
    return HdrHistogram.decode(base64.b64decode(b64) if not isinstance(b64, bytes) else b64)


def percentiles(hist: HdrHistogram) -> dict[str, float]:
    ms = lambda v: round(v / 1000, 3)  # noqa: E731
    return {"count": hist.get_total_count(), "p50_ms": ms(hist.get_value_at_percentile(50)),
            "p99_ms": ms(hist.get_value_at_percentile(99)),
            "p999_ms": ms(hist.get_value_at_percentile(99.9)),
            "max_ms": ms(hist.get_max_value()), "min_ms": ms(hist.get_min_value())}


def take_round_trips(leader_url: str,
                     secret: str) -> tuple[HdrHistogram, list, HdrHistogram | None]:
    """The leader's log round trips since the last call (the call starts a new histogram),
    its cyclic collector's runs and how late its gil-watch thread ran, over the same time."""
    path = "/internal/v1/round-trip"
    body = httpx.post(leader_url + path, timeout=10,
                      headers=signing.internal_headers(secret, "POST", path)).json()
    gil = body.get("gil_wait_hdr")
    return (HdrHistogram.decode(body["hdr"].encode()), body["collections"]["runs"],
            HdrHistogram.decode(gil.encode()) if gil else None)


def node_threads(url: str, secret: str) -> dict[int, str]:
    path = "/internal/v1/threads"
    body = httpx.get(url + path, timeout=10,
                     headers=signing.internal_headers(secret, "GET", path)).json()
    return {t["id"]: t["name"] for t in body["threads"]}


def start_census(cluster: NodeCluster, leader_url: str, secret: str) -> Census:
    """A ``bench/census.py`` sampler over the three nodes and infra/'s servers, with the
    leader's round trips taken each second."""
    processes = {n.node_id + (" (leader)" if n.url == leader_url else ""): n.proc.pid
                 for n in cluster.nodes.values()}
    processes.update(infra_pids())
    nodes = {n.node_id + (" (leader)" if n.url == leader_url else ""):
             (n.proc.pid, lambda url=n.url: node_threads(url, secret))
             for n in cluster.nodes.values()}
    from infra import paths
    gc_logs = {p.name.removesuffix("-gc.log"): p for p in paths.LOG_DIR.glob("*-gc.log")}
    census = Census(processes, nodes, lambda: take_round_trips(leader_url, secret),
                    gc_logs=gc_logs)
    census.start()
    return census


def infra_pids() -> dict[str, int]:
    """The cluster's server processes (infra/'s PID files), name -> pid."""
    from infra import procs
    from infra.cluster import SERVERS
    out = {}
    for server in SERVERS:
        for p in server.processes:
            pid = procs.pid_of(p.name)
            if pid:
                out[p.name] = pid
    return out


def ensure_cluster() -> bool:
    """Start infra/ if it is not up; True when this run started it."""
    status = subprocess.run([sys.executable, "-m", "infra", "status"], cwd=ROOT,
                            capture_output=True, text=True)
    if status.returncode == 0 and "healthy" in status.stdout and "down" not in status.stdout:
        return False
    up = subprocess.run([sys.executable, "-m", "infra", "up"], cwd=ROOT, check=True,
                        capture_output=True, text=True)
    print(up.stdout, end="")
    # A status read while another user restarts a server looks "down"; ``up`` then keeps the
    # servers already running, and stopping them afterwards would take a shared cluster away.
    return ": kept" not in up.stdout


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--generator", choices=("native", "python"), default="native")
    parser.add_argument("--rates", default=None,
                        help="comma-separated rates of the leader rows (default: 500,1000,2000; "
                             "--quick: 500,1000)")
    parser.add_argument("--loadgen-tick-us", type=int, default=LOADGEN_TICK_US,
                        help="bench/loadgen's wakeups are at least this far apart (less CPU "
                             "above one request a tick; a request due sooner after a wakeup "
                             "goes up to a tick late, counted in its latency); 0: each at its "
                             "due time")
    parser.add_argument("--checkpoint-stagger-s", type=float, default=2.0,
                        help="node i waits i times this long after a checkpoint's capture "
                             "before writing it (Settings.checkpoint_write_delay_s), the "
                             "leader 6 s more (Settings.checkpoint_leader_write_delay_s): the "
                             "first follower writes, the others find its checkpoint and "
                             "compare; 0 and RAILFLOW_CHECKPOINT_LEADER_WRITE_DELAY_S=0: all "
                             "at once")
    parser.add_argument("--duration-s", type=float, default=None,
                        help="each row's measured length (default 300 s, --quick 10 s): a "
                             "row of a minute or two gives the JVMs' collections and each "
                             "process's CPU per order without a full row")
    parser.add_argument("--skip-peers", action="store_true",
                        help="leave out the score-API and via-all-nodes rows")
    args = parser.parse_args(argv)
    if args.generator == "native":
        build_loadgen()
    rates = RATES_QUICK if args.quick else RATES_FULL
    if args.rates:
        rates = tuple(int(r) for r in args.rates.split(","))
    duration = DURATION_QUICK_S if args.quick else DURATION_FULL_S
    if args.duration_s:
        duration = args.duration_s
    warmup = WARMUP_QUICK_S if args.quick else WARMUP_FULL_S
    started_at = datetime.now(UTC).isoformat()

    started_cluster = ensure_cluster()
    topic = f"rf-bench-{uuid.uuid4().hex[:8]}"
    data_dir = Path(tempfile.mkdtemp(prefix="railflow-w3-"))
    # The peer row calls the demo scorer, which cluster nodes serve only when asked to.
    cluster = NodeCluster(data_dir, topic, 3, base_port=free_base_port(3),
                          env={"RAILFLOW_DEMO_SCORER": "true",
                               "RAILFLOW_GIL_WATCH_MS": str(GIL_WATCH_MS)},
                          checkpoint_stagger_s=args.checkpoint_stagger_s)
    results: list[dict[str, Any]] = []
    censuses: list[dict[str, Any]] = []
    try:
        cluster.start()
        leader = cluster.wait_ready()
        _wait_demo(leader.url, cluster.api_key)
        all_urls = [n.url for n in cluster.nodes.values()]
        plan = [("decision API (leader)", "/v1/events", [leader.url], r) for r in rates]
        if not args.skip_peers:
            plan.append(("score API alone (peer)", "/demo/score", [leader.url], 1000))
        if not (args.quick or args.skip_peers):
            plan.append(("decision API via all 3 nodes (peer)", "/v1/events", all_urls, 1000))
        for seed, (name, path, targets, rate) in enumerate(plan):
            secret = cluster.shared_secrets["cluster_secret"]
            take_round_trips(leader.url, secret)  # reset
            # The census spans the warm-up too (the generator does not say when it ends), as
            # the row's round trips always did.
            census = start_census(cluster, leader.url, secret)
            load = generate(args.generator, targets, path, cluster.api_key, rate, duration,
                            warmup, seed + 1, tick_us=args.loadgen_tick_us)
            census_summary = census.stop()
            row = {"name": name, "rate": rate, "duration_s": duration,
                   "generator": args.generator, **load["percentiles"], "errors": load["errors"],
                   "decisions": load["decisions"], "reconnects": load.get("reconnects", 0),
                   "send_lag_s": load["send_lag_s"],
                   "send_late_p99_us": load.get("send_late_p99_us"),
                   "generator_core_share": load["generator_core_share"],
                   "generator_cpu_us_per_request": load["generator_cpu_us_per_request"],
                   "loadgen_cpu_ok": (load["generator_cpu_us_per_request"]
                                      <= GENERATOR_CPU_US_PER_REQUEST_MAX)}
            row["census"] = census_summary
            censuses.append({"name": name, "rate": rate, "seconds": census.seconds})
            if path == "/v1/events":
                row["log_round_trip"] = percentiles(census.round_trips)
            results.append(row)
            print(f"  {name} @ {rate}/s: p50 {row['p50_ms']} ms, p99 {row['p99_ms']} ms, "
                  f"p99.9 {row['p999_ms']} ms, errors {row['errors']}, "
                  f"reconnects {row['reconnects']}, generator "
                  f"{row['generator_cpu_us_per_request']} µs CPU/request "
                  f"(loadgen_cpu_ok {row['loadgen_cpu_ok']})", flush=True)
            print(format_summary(census_summary), flush=True)
    finally:
        cluster.stop()
        if started_cluster:
            subprocess.run([sys.executable, "-m", "infra", "down"], cwd=ROOT)

    score = next((r for r in results if r["name"].startswith("score")), None)
    for r in results:
        if score and r["name"] != score["name"]:
            r["ratio_p99_vs_score_api"] = round(r["p99_ms"] / max(score["p99_ms"], 1e-3), 2)
            r["added_p99_ms"] = round(r["p99_ms"] - score["p99_ms"], 3)
        r["ratio_p99_vs_sift_50ms"] = round(r["p99_ms"] / 50.0, 3)
        r["ratio_p999_vs_railgun_250ms"] = round(r["p999_ms"] / 250.0, 3)
    _print_table(results)
    at_1000 = next((r for r in results if r["name"] == "decision API (leader)"
                    and r["rate"] == 1000), None)
    targets = {}
    if at_1000:
        # Met only over the workload's five minutes (a 10 s row holds no checkpoint, no
        # DuckDB generation past the first few, no run-store backlog).
        full = at_1000["duration_s"] >= DURATION_FULL_S and not at_1000["errors"]
        targets["P1_p99"] = {"value": at_1000["p99_ms"], "unit": "ms", "target": P1["p99_ms"],
                             "met": full and at_1000["p99_ms"] <= P1["p99_ms"]}
        targets["P1_p999"] = {"value": at_1000["p999_ms"], "unit": "ms",
                              "target": P1["p999_ms"],
                              "met": full and at_1000["p999_ms"] <= P1["p999_ms"]}
    at_max = [r for r in results if r["name"] == "decision API (leader)" and r["rate"] == 2000]
    if at_max:
        rt = at_max[0]["log_round_trip"]
        targets["P2_log_round_trip_p99"] = {"value": rt["p99_ms"], "unit": "ms",
                                            "target": 5.0, "met": rt["p99_ms"] <= 5.0}
    # The generator must not compete for the CPU it measures (issue 12): its own share of a
    # core at the highest rate run, against the 5 % the issue allows.
    top = max((r for r in results if r["name"] == "decision API (leader)"),
              key=lambda r: r["rate"], default=None)
    if top:
        targets["generator_core_share"] = {
            "value": top["generator_core_share"], "unit": f"of a core at {top['rate']}/s",
            "target": GENERATOR_CORE_SHARE_MAX,
            "met": top["generator_core_share"] <= GENERATOR_CORE_SHARE_MAX}
    out = {"name": "api_w3", "quick": args.quick, "started_at": started_at,
           "machine": {"cores": os.cpu_count(), "python": platform.python_version(),
                       "load_avg_1m": os.getloadavg()[0]},
           "results": results, "targets": targets}
    path = ROOT / "bench" / "results" / "api_w3.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=2))
    print(f"wrote {path.relative_to(ROOT)}")
    per_second = path.with_name("api_w3_census.json")
    per_second.write_text(json.dumps(censuses))
    print(f"wrote {per_second.relative_to(ROOT)} (each row's samples, second by second)")
    return 0


def _wait_demo(url: str, key: str, timeout_s: float = 60.0) -> None:
    """Until the demo workflow is published (the leader preloads it)."""
    deadline = time.monotonic() + timeout_s
    order = {"event_id": f"warm-{uuid.uuid4().hex}", "type": "order", "data": {"card": "w"}}
    while time.monotonic() < deadline:
        try:
            r = httpx.post(url + "/v1/events", json=order, timeout=10,
                           headers={"Authorization": f"Bearer {key}"})
            if r.status_code == 200 and r.json()["runs"]:
                return
        except httpx.HTTPError:
            pass
        order["event_id"] = f"warm-{uuid.uuid4().hex}"
        time.sleep(0.5)
    raise TimeoutError("the demo workflow was not published in time")


def _print_table(results: list[dict[str, Any]]) -> None:
    print()
    print(f"{'workload':<38}{'rate/s':>7}{'n':>8}{'p50 ms':>11}{'p99 ms':>11}{'p99.9 ms':>11}"
          f"{'max ms':>11}{'log rt p99':>12}{'errors':>8}{'gen µs/req':>12}")
    for r in results:
        rt = r.get("log_round_trip", {}).get("p99_ms", "")
        print(f"{r['name']:<38}{r['rate']:>7}{r['count']:>8}{r['p50_ms']:>11.1f}"
              f"{r['p99_ms']:>11.1f}{r['p999_ms']:>11.1f}{r['max_ms']:>11.1f}{rt!s:>12}"
              f"{sum(r['errors'].values()):>8}"
              f"{r['generator_cpu_us_per_request']:>10}{'' if r['loadgen_cpu_ok'] else ' !':<2}")
    lat = [r["p99_ms"] for r in results]
    if lat:
        print(f"p99 over workloads: min {min(lat)} / median {statistics.median(lat)} / "
              f"max {max(lat)} ms")


if __name__ == "__main__":
    raise SystemExit(main())
