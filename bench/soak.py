"""A nemesis soak against the real cluster: three runner nodes take orders at a fixed rate while
a nemesis kill -9s and restarts nodes, SIGSTOPs the leader past its ZooKeeper session timeout,
and restarts the Kafka broker and ZooKeeper; ``bench.soak_check`` then decides from the history
alone: no acknowledged order lost, at most one run per event id, no entry of a fenced writer
applied, equal digests at every checkpoint offset, the run store holding every decided run.

Usage (``make soak`` runs the full one; it is not part of ``make test``)::

    .venv/bin/python bench/soak.py                          # 600 s at 300/s, every fault
    .venv/bin/python bench/soak.py --duration 60 --quick    # smoke: 20/s, node kills only
    .venv/bin/python -m bench.soakload --rate 300           # what the load generator costs

Restarting the broker or ZooKeeper disturbs everything else that uses the shared local
cluster, so ``--quick`` injects node faults only. Writes ``bench/results/soak.json`` (the
report: faults injected, orders acknowledged, failovers and their durations, the verdict) and
``bench/results/soak-history.jsonl``. Exits 1 when the checker finds a problem.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import random
import signal
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
import orjson  # noqa: E402

from bench.soak_check import LogRecord, check  # noqa: E402
from bench.soakload import Pool  # noqa: E402
from infra import endpoints  # noqa: E402
from runner import signing  # noqa: E402
from runner.demo import OrderGenerator  # noqa: E402
from runner.nodes import NodeCluster, free_base_port  # noqa: E402

RESULTS = ROOT / "bench" / "results"
FAULTS_ALL = ("kill", "pause", "broker", "zookeeper")
FAULTS_QUICK = ("kill",)
SESSION_TIMEOUT_S = 3.0
PAUSE_PAST_SESSION_S = 3.0
NODE_DOWN_S = 5.0
SERVER_DOWN_S = 3.0
CHECKPOINT_EVERY_ENTRIES = 5_000  # quick: 500, so a short run still compares digests
inflight_max = 3_000  # orders in flight; beyond that the generator records a shed order
attempts_max = 5  # a client retries an unacknowledged order (same event id) this many times
attempt_timeout_s = 15.0
retry_pause_s = 0.5
settle_timeout_s = 120.0
digest_poll_s = 3.0
leader_poll_s = 0.5
progress_every_s = 10.0
tick_s = 0.01  # the generator wakes at most this often; an order leaves at most this late


class History:
    """Every operation, in the order it happened, with a monotonic time."""

    def __init__(self) -> None:
        self.ops: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self.t0 = time.monotonic()
        self.acks = 0

    def add(self, type_: str, **fields: Any) -> dict[str, Any]:
        op = {"type": type_, "t": round(time.monotonic() - self.t0, 4), **fields}
        with self._lock:
            self.ops.append(op)
            self.acks += type_ == "ok"
        return op

    def snapshot(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self.ops)


# ---------------------------------------------------------------- load
_live_cache: tuple[float, list] = (0.0, [])
live_refresh_s = 0.05  # a node's liveness is a waitpid: asked at most this often, not per order


def _live(cluster: NodeCluster) -> list:
    global _live_cache
    now = time.monotonic()
    if now - _live_cache[0] >= live_refresh_s:
        _live_cache = (now, [n for n in cluster.nodes.values() if n.alive()])
    return _live_cache[1]


async def _send(pools: dict[str, Pool], headers: bytes, cluster: NodeCluster,
                history: History, order: dict, rng: random.Random) -> None:
    body = orjson.dumps(order)
    for _attempt in range(attempts_max):
        live = _live(cluster)
        if not live:
            await asyncio.sleep(retry_pause_s)
            continue
        node = rng.choice(live)
        history.add("invoke", id=order["event_id"], node=node.node_id)
        pool = pools.get(node.url)
        if pool is None:
            pool = pools[node.url] = Pool(node.url)
        try:
            status, raw = await pool.post("/v1/events", body, headers, attempt_timeout_s)
        except (OSError, TimeoutError) as exc:
            history.add("info", id=order["event_id"], node=node.node_id, error=type(exc).__name__)
            await asyncio.sleep(retry_pause_s)
            continue
        if status == 200:
            reply = orjson.loads(raw)
            history.add("ok", id=order["event_id"], node=node.node_id, offset=reply["offset"],
                        duplicate=reply["duplicate"],
                        runs=[{"run_id": x["run_id"], "decision": x["decision"]}
                              for x in reply["runs"]])
            return
        text = raw[:200].decode("utf-8", "replace")
        if 400 <= status < 500 and status != 429:
            history.add("fail", id=order["event_id"], node=node.node_id, error=f"{status} {text}")
            return
        history.add("info", id=order["event_id"], node=node.node_id,
                    error=f"{status} {text[:120]}")
        await asyncio.sleep(retry_pause_s)


async def run_load(cluster: NodeCluster, history: History, rate: float, duration_s: float,
                   stop: threading.Event, seed: int) -> dict[str, Any]:
    """Open loop: order i is due at ``i / rate`` whatever the cluster does. Runs on one thread
    whose own CPU time is reported (``loadgen_cpu_share``: the generator's cost, which must
    stay small next to the nodes it loads)."""
    gen = OrderGenerator(seed=seed, prefix=f"soak-{uuid.uuid4().hex[:6]}")
    rng = random.Random(seed)
    tasks: set[asyncio.Task] = set()
    shed = sent = 0
    pools: dict[str, Pool] = {}
    headers = (b"Content-Type: application/json\r\nAuthorization: Bearer "
               + cluster.api_key.encode() + b"\r\n")
    cpu0, started = time.thread_time(), time.monotonic()
    last_report = started
    try:
        for i in itertools.count():
            if time.monotonic() - last_report >= progress_every_s:
                last_report = time.monotonic()
                print(f"  {last_report - started:5.0f} s: {sent} sent, {history.acks} "
                      f"acknowledged, {len(tasks)} in flight, {shed} shed, generator CPU "
                      f"{(time.thread_time() - cpu0) / (last_report - started):.1%}", flush=True)
            due = started + i / rate
            if due - started >= duration_s or stop.is_set():
                break
            delay = due - time.monotonic()
            if delay > 0:  # orders due within a tick go out together: one wakeup per tick
                await asyncio.sleep(max(delay, tick_s))
            order = gen.order()
            if len(tasks) >= inflight_max:
                shed += 1
                history.add("fail", id=order["event_id"], error="client backlog: not sent")
                continue
            task = asyncio.create_task(_send(pools, headers, cluster, history, order, rng))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            sent += 1
        load_cpu_s, load_wall_s = time.thread_time() - cpu0, time.monotonic() - started
        if tasks:
            await asyncio.wait(tasks)
    finally:
        for pool in pools.values():
            pool.close()
    return {"sent": sent, "shed": shed, "cpu_s": round(load_cpu_s, 2),
            "cpu_share": round(load_cpu_s / max(load_wall_s, 1e-9), 4)}


# ---------------------------------------------------------------- observers
def internal_headers(cluster: NodeCluster, path: str) -> dict[str, str]:
    return signing.internal_headers(cluster.shared_secrets["cluster_secret"], "GET", path)


def poll_digests(cluster: NodeCluster, history: History, seen: set[tuple[str, int]]) -> None:
    for node in list(cluster.nodes.values()):
        if not node.alive():
            continue
        try:
            path = "/internal/v1/digests"
            r = httpx.get(node.url + path, headers=internal_headers(cluster, path), timeout=5)
            digests = r.json()["digests"] if r.status_code == 200 else []
        except (httpx.HTTPError, ValueError, KeyError):
            continue
        for item in digests:
            key = (node.node_id, int(item["offset"]))
            if key not in seen:
                seen.add(key)
                history.add("digest", node=node.node_id, offset=item["offset"],
                            digest=item["digest"])


def observe(cluster: NodeCluster, history: History, stop: threading.Event) -> None:
    """Records leader changes and the nodes' checkpoint digests until ``stop``."""
    leader, seen = None, set()
    last_digests = 0.0
    while not stop.is_set():
        now = cluster.leader()
        name = now.node_id if now else None
        if name != leader:
            history.add("leader", node=name)
            leader = name
        if time.monotonic() - last_digests > digest_poll_s:
            poll_digests(cluster, history, seen)
            last_digests = time.monotonic()
        stop.wait(leader_poll_s)
    poll_digests(cluster, history, seen)


# ---------------------------------------------------------------- nemesis
class Nemesis:
    def __init__(self, cluster: NodeCluster, history: History, faults: tuple[str, ...],
                 every_s: float, seed: int) -> None:
        self.cluster, self.history, self.every_s = cluster, history, every_s
        self.faults = itertools.cycle(faults)
        self.rng = random.Random(seed)
        self.kills = 0

    def run(self, stop: threading.Event) -> None:
        while not stop.wait(self.every_s):
            kind = next(self.faults)
            try:
                getattr(self, f"_{kind}")()
            except Exception as exc:  # noqa: BLE001 - a failed fault is reported, not fatal
                self.history.add("fault_error", kind=kind, error=repr(exc))

    def _fault(self, kind: str, target: str, leader: bool) -> dict:
        return self.history.add("fault", kind=kind, target=target, was_leader=leader)

    def _kill(self) -> None:
        c = self.cluster
        leader = c.leader()
        live = [n for n in c.nodes.values() if n.alive()]
        # Every other kill takes the leader: both failover and follower catch-up are exercised.
        node = leader if (leader and self.kills % 2 == 0) else self.rng.choice(live)
        self.kills += 1
        op = self._fault("kill", node.node_id, node is leader)
        c.kill(node, signal.SIGKILL)
        time.sleep(NODE_DOWN_S)
        c.start_node(node.node_id, node.port)
        op["end_t"] = round(time.monotonic() - self.history.t0, 4)

    def _pause(self) -> None:
        leader = self.cluster.leader()
        if leader is None:
            return
        op = self._fault("pause", leader.node_id, True)
        leader.proc.send_signal(signal.SIGSTOP)
        try:
            time.sleep(SESSION_TIMEOUT_S + PAUSE_PAST_SESSION_S)
        finally:
            leader.proc.send_signal(signal.SIGCONT)
        op["end_t"] = round(time.monotonic() - self.history.t0, 4)

    def _server(self, kind: str, name: str) -> None:
        from infra import cluster as infra_cluster

        op = self._fault(kind, name, False)
        quiet = lambda *a, **k: None  # noqa: E731
        infra_cluster.down([name], log=quiet)
        time.sleep(SERVER_DOWN_S)
        infra_cluster.up([name], log=quiet)
        op["end_t"] = round(time.monotonic() - self.history.t0, 4)

    def _broker(self) -> None:
        self._server("broker", "kafka")

    def _zookeeper(self) -> None:
        self._server("zookeeper", "zookeeper")


# ---------------------------------------------------------------- after the run
def settle(cluster: NodeCluster) -> dict[str, int]:
    """Wait until every node runs, one leads and all applied the same offset."""
    deadline = time.monotonic() + settle_timeout_s
    offsets: dict[str, int] = {}
    while time.monotonic() < deadline:
        for node in cluster.nodes.values():
            if not node.alive():
                cluster.start_node(node.node_id, node.port)
        healths = {n.node_id: cluster.health(n) for n in cluster.nodes.values()}
        offsets = {k: h["applied_offset"] for k, h in healths.items() if h}
        if len(offsets) == len(cluster.nodes) and len(set(offsets.values())) == 1 \
                and cluster.leader() is not None:
            return offsets
        time.sleep(1.0)
    return offsets


def read_log(topic: str) -> list[LogRecord]:
    import orjson
    from confluent_kafka import Consumer, TopicPartition

    from replog.entry import Entry

    consumer = Consumer({"bootstrap.servers": endpoints.KAFKA_BOOTSTRAP,
                         "group.id": f"soak-{uuid.uuid4().hex}", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "log_level": 3})
    tp = TopicPartition(topic, 0)
    low, high = consumer.get_watermark_offsets(tp, timeout=30)
    consumer.assign([TopicPartition(topic, 0, low)])
    out: list[LogRecord] = []
    while len(out) < high - low:
        for msg in consumer.consume(1000, 5.0):
            if msg.error():
                continue
            e = Entry.decode(msg.value(), msg.offset())
            event_id = None
            if e.kind == "EventReceived":
                try:
                    event_id = orjson.loads(e.payload).get("event_id")
                except (orjson.JSONDecodeError, AttributeError):
                    event_id = None
            out.append(LogRecord(e.offset, e.writer_id, e.seq, e.kind,
                                 event_id if isinstance(event_id, str) else None))
    consumer.close()
    return out


def stored_runs(table: str, run_ids: set[str]) -> set[str]:
    """Which of ``run_ids`` the HBase run store holds."""
    import happybase

    from runner.runstore import keys

    by_key = {keys.run_key(r): r for r in run_ids}
    present: set[str] = set()
    conn = happybase.Connection(endpoints.HBASE_THRIFT_HOST, endpoints.HBASE_THRIFT_PORT)
    try:
        t = conn.table(table)
        ordered = sorted(by_key)
        for i in range(0, len(ordered), 500):
            present.update(by_key[k] for k, row in t.rows(ordered[i:i + 500]) if row)
    finally:
        conn.close()
    return present


def failovers(history: list[dict]) -> list[dict]:
    """Per fault: how long until the first order sent after it was acknowledged."""
    oks = sorted(((op["t"], op) for op in history if op["type"] == "ok"), key=lambda x: x[0])
    invokes = {}
    for op in history:
        if op["type"] == "invoke":
            invokes.setdefault((op["id"], op["node"]), op["t"])
    out = []
    faults = [op for op in history if op["type"] == "fault"]
    ack_times = [t for t, _ in oks]
    end_t = max((op["t"] for op in history), default=0.0)
    for i, fault in enumerate(faults):
        first = next((t for t, ok in oks
                      if t > fault["t"] and invokes.get((ok["id"], ok["node"]), 0) >= fault["t"]),
                     None)
        # The first ack after a fault can come before the fault bites (a server takes a moment
        # to go down): the longest stretch without any ack until the next fault is the outage.
        until = faults[i + 1]["t"] if i + 1 < len(faults) else end_t
        window = [fault["t"]] + [t for t in ack_times if fault["t"] < t <= until] + [until]
        gap = max(b - a for a, b in zip(window, window[1:], strict=False))
        out.append({"kind": fault["kind"], "target": fault["target"],
                    "was_leader": fault["was_leader"], "at_s": fault["t"],
                    # how long the nemesis itself took (a server's stop, pause and start):
                    # the part of an outage the nodes cannot shorten
                    "fault_lasted_s": round(fault["end_t"] - fault["t"], 3)
                    if "end_t" in fault else None,
                    "recovered_after_s": None if first is None else round(first - fault["t"], 3),
                    "longest_without_ack_s": round(gap, 3)})
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=None, help="seconds (600; quick 60)")
    parser.add_argument("--rate", type=float, default=None, help="orders/s (300; quick 20)")
    parser.add_argument("--quick", action="store_true", help="smoke mode: node kills only")
    parser.add_argument("--faults", default=None,
                        help=f"comma-separated subset of {','.join(FAULTS_ALL)}")
    parser.add_argument("--fault-every", type=float, default=None, help="seconds between faults")
    parser.add_argument("--checkpoint-every", type=int, default=None,
                        help=f"entries between checkpoints ({CHECKPOINT_EVERY_ENTRIES}; quick "
                             f"{CHECKPOINT_EVERY_ENTRIES // 10}): where digests are compared")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    rate = args.rate or (20.0 if args.quick else 300.0)
    args.duration = args.duration or (60.0 if args.quick else 600.0)
    faults = tuple(args.faults.split(",")) if args.faults else (
        FAULTS_QUICK if args.quick else FAULTS_ALL)
    unknown = set(faults) - set(FAULTS_ALL)
    if unknown:
        parser.error(f"unknown faults {sorted(unknown)}")
    every_s = args.fault_every or (20.0 if args.quick else 30.0)

    tag = uuid.uuid4().hex[:8]
    topic, table = f"rf-soak-{tag}", f"railflow_runs_soak_{tag}"
    data_dir = Path(tempfile.mkdtemp(prefix="railflow-soak-"))
    cluster = NodeCluster(data_dir, topic, 3, base_port=free_base_port(3), env={
        "RAILFLOW_HBASE_TABLE": table, "RAILFLOW_SESSION_TIMEOUT_S": str(SESSION_TIMEOUT_S),
        "RAILFLOW_CHECKPOINT_EVERY_ENTRIES": str(args.checkpoint_every or (
            CHECKPOINT_EVERY_ENTRIES // 10 if args.quick else CHECKPOINT_EVERY_ENTRIES))})
    history = History()
    stop = threading.Event()
    print(f"soak: {args.duration:.0f} s at {rate:.0f}/s, faults {faults} every {every_s:.0f} s; "
          f"nodes' logs in {data_dir}", flush=True)
    cluster.start()
    try:
        _wait_demo(cluster)
        history.t0 = time.monotonic()
        nemesis = Nemesis(cluster, history, faults, every_s, args.seed)
        threads = [threading.Thread(target=nemesis.run, args=(stop,), daemon=True),
                   threading.Thread(target=observe, args=(cluster, history, stop), daemon=True)]
        for t in threads:
            t.start()
        load = _run_loop(run_load(cluster, history, rate, args.duration, stop, args.seed))
        stop.set()
        threads[0].join(timeout=120)
        offsets = settle(cluster)
        time.sleep(digest_poll_s)
        poll_digests(cluster, history, {(op["node"], op["offset"]) for op in history.ops
                                        if op["type"] == "digest"})
        ops = history.snapshot()
        decided = {r["run_id"] for op in ops if op["type"] == "ok" for r in op["runs"]
                   if r["decision"] is not None}
        stored = _stored_with_retries(table, decided)
        log = read_log(topic)
        verdict = check(ops, log, stored)
    finally:
        stop.set()
        cluster.stop()
    RESULTS.mkdir(parents=True, exist_ok=True)
    with open(RESULTS / "soak-history.jsonl", "w") as f:
        for op in ops:
            f.write(json.dumps(op) + "\n")
    report = _report(args, rate, faults, load, offsets, ops, verdict, len(log))
    (RESULTS / "soak.json").write_text(json.dumps(report, indent=1))
    print(json.dumps({k: v for k, v in report.items() if k != "failovers"}, indent=1))
    for f_ in report["failovers"]:
        print(f"  {f_['kind']:9} {f_['target']:9} leader={f_['was_leader']!s:5} at "
              f"{f_['at_s']:7.1f} s  lasted {f_['fault_lasted_s']} s, recovered after "
              f"{f_['recovered_after_s']} s, longest without an ack "
              f"{f_['longest_without_ack_s']} s")
    return 0 if verdict.valid else 1


def _run_loop(coro):
    """uvloop when installed (a cheaper event loop for the generator), else asyncio's."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    return uvloop.run(coro)


def _stored_with_retries(table: str, decided: set[str]) -> set[str]:
    """The run store is written behind the log: give a recovered leader time to re-drive."""
    stored: set[str] = set()
    deadline = time.monotonic() + settle_timeout_s
    missing = set(decided)
    while missing and time.monotonic() < deadline:
        stored |= stored_runs(table, missing)
        missing = decided - stored
        if missing:
            time.sleep(2.0)
    return stored


def _wait_demo(cluster: NodeCluster) -> None:
    leader = cluster.wait_ready()
    headers = {"Authorization": f"Bearer {cluster.api_key}"}
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        r = httpx.post(leader.url + "/v1/events", headers=headers, timeout=30,
                       json={"event_id": f"warm-{uuid.uuid4().hex}", "type": "order", "data": {}})
        if r.status_code == 200 and r.json()["runs"]:
            return
        time.sleep(0.5)
    raise RuntimeError("the demo workflow was not published within 60 s")


def _report(args, rate, faults, load, offsets, ops, verdict, log_entries) -> dict:
    counts: dict[str, int] = {}
    for op in ops:
        if op["type"] == "fault":
            counts[op["kind"]] = counts.get(op["kind"], 0) + 1
    fo = failovers(ops)
    leader_faults = [f["recovered_after_s"] for f in fo if f["was_leader"] or
                     f["kind"] in ("broker", "zookeeper")]
    acked_ids = {op["id"] for op in ops if op["type"] == "ok"}
    return {
        "duration_s": args.duration, "rate_per_s": rate, "faults_enabled": list(faults),
        "faults_injected": counts, "fault_errors": [op for op in ops
                                                    if op["type"] == "fault_error"],
        "orders_sent": load["sent"], "orders_shed_by_client": load["shed"],
        "loadgen_cpu_s": load["cpu_s"], "loadgen_cpu_share": load["cpu_share"],
        "orders_acknowledged": len(acked_ids),
        "acks_total": verdict.acknowledged,
        "attempts_indeterminate": sum(op["type"] == "info" for op in ops),
        "orders_refused": sum(op["type"] == "fail" for op in ops),
        "errors_seen": Counter(op.get("error", "")[:60] for op in ops
                               if op["type"] in ("fail", "info")).most_common(8),
        "leader_changes": sum(op["type"] == "leader" for op in ops) - 1,
        "failovers": fo,
        "failover_max_s": max((x for x in leader_faults if x is not None), default=None),
        "longest_without_ack_s": max((f["longest_without_ack_s"] for f in fo), default=None),
        "log_entries": log_entries, "final_applied_offsets": offsets,
        "decided_runs_checked": verdict.decided_runs,
        "digest_offsets_compared": verdict.digest_offsets_compared,
        "valid": verdict.valid, "problems": verdict.problems(),
        "lost": len(verdict.lost), "duplicate_runs": len(verdict.duplicate_runs),
        "fenced_applied": len(verdict.fenced_applied),
        "digest_mismatches": len(verdict.digest_mismatches),
        "missing_in_store": len(verdict.missing_in_store),
    }


if __name__ == "__main__":
    raise SystemExit(main())
