"""CPU per order of the state machine's apply alone, as a follower does it (P7's follower half).

A follower's share of an order is: decode the entry, apply it (dedup, metrics, runs, the walk,
the rows for DuckDB), and later the flusher thread's insert of those rows, plus the leader's
batched ``EffectsDone`` confirmations. This runs exactly that in one process, with the real
metrics engine, W1's metrics and the W3 workflow (built-in demo scorer), over seeded synthetic
orders, and reports process CPU time (every thread, the flusher included) per order. The
metrics engine's ``ingest`` of the same orders is measured alone beside it, so the table says
how much of apply is the engine. No HTTP, no log I/O: ``bench/api_cost.py`` measures those.

    .venv/bin/python bench/apply_cost.py              # 50,000 orders x 3 repeats
    .venv/bin/python bench/apply_cost.py --quick      # a glance (noisy)
    .venv/bin/python bench/apply_cost.py --profile    # where the CPU goes (cProfile, top 25)
    .venv/bin/python bench/apply_cost.py --serving-gc # the collector as a serving node sets it
    .venv/bin/python bench/apply_cost.py --store      # + the run-store writer's work per run
    .venv/bin/python bench/apply_cost.py --canary --serving-gc  # late wakeups of a canary
                                                      # thread during each flush, and the
                                                      # flusher's and apply thread's CPU
                                                      # (bench/flush_gil.py)
    .venv/bin/python bench/apply_cost.py --app        # W3 scored by an outside app: each
                                                      # order that called it is followed by
                                                      # its AppCompleted
    .venv/bin/python bench/apply_cost.py --app --answer-all  # ... and an answer naming no
                                                      # task for each order decided before
                                                      # the app node (looked up in DuckDB)

Without ``--serving-gc`` the collector keeps CPython's defaults, as in every earlier figure of
this bench; a node (``runner.gcpolicy``) collects far less often and freezes its startup heap,
so the flag is the closer figure for a node's apply thread.

Target P7 (follower half): <= 120 us CPU per order.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import pstats
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.harness import Report, spread  # noqa: E402
from replog.entry import Entry  # noqa: E402
from runner import gcpolicy, ids  # noqa: E402
from runner.demo import W1_METRICS, OrderGenerator, w3_definition  # noqa: E402
from runner.scoring import BUILTIN_DEMO, demo_score  # noqa: E402
from runner.state import entries  # noqa: E402
from runner.state.effects import CallApp  # noqa: E402
from runner.state.machine import RunnerStateMachine  # noqa: E402

T0 = 1_700_000_000_000
confirm_every_orders = 500  # the leader confirms stored runs in batches (one entry per batch)
warmup_orders = 2_000
APP = "demo_score"  # an outside app's name (--app): its answers are in the feed


class Feed:
    """Encoded log records, as a follower reads them, with increasing offsets and times."""

    def __init__(self) -> None:
        self.records: list[tuple[int, bytes]] = []
        self.offset = 0

    def add(self, kind: str, payload: dict, ts: int) -> None:
        raw = Entry(self.offset, 1, ts, kind, entries.encode(payload)).encode()
        self.records.append((self.offset, raw))
        self.offset += 1


def build_feed(orders: int, seed: int, app: bool = False, answer_all: bool = False,
               confirm_every: int = confirm_every_orders) -> tuple[Feed, int, list[dict]]:
    """Setup entries, warm-up orders, measured orders (with batched confirmations). With
    ``app`` the score node calls an outside app, and the answer (the demo model's score) of
    each order that called it follows as an ``AppCompleted`` entry 5 ms of log time later
    (which orders call it is learnt by applying the feed as it is built); with
    ``answer_all`` every order gets one, also those decided before the score node (a task
    apply does not hold: answered 404 after a DuckDB lookup)."""
    feed = Feed()
    scratch = (Path(tempfile.mkdtemp(prefix="railflow-apply-feed-")) if app and not answer_all
               else None)
    oracle = RunnerStateMachine(scratch / "node") if scratch is not None else None
    for text in W1_METRICS:
        feed.add(entries.METRIC_DEFINED, {"text": text}, T0)
    definition = w3_definition(APP if app else BUILTIN_DEMO)
    feed.add(entries.WORKFLOW_PUBLISHED, {"workflow_id": definition["id"],
                                          "definition": definition}, T0)
    gen = OrderGenerator(seed=seed)
    datas = []
    pending: list[list] = []
    for i in range(warmup_orders + orders):
        order = gen.order()
        datas.append(order["data"])
        ts = T0 + i * 20  # 50 orders/s of event time: windows fill and evict
        feed.add(entries.EVENT_RECEIVED, order, ts)
        offset = feed.offset - 1
        run_id = ids.run_id(order["event_id"], definition["id"], offset)
        calls = app and (answer_all or _calls_app(oracle, feed))
        if calls:
            feed.add(entries.APP_COMPLETED, {
                "run_id": run_id, "node_id": "score",
                "result": {"payment_abuse": float(demo_score(order["data"]))}}, ts + 5)
            offset = feed.offset - 1  # the version the store gets once the run moved on
        pending.append([run_id, offset])
        if len(pending) == confirm_every:
            feed.add(entries.EFFECTS_DONE, {"stored": pending, "outbox": []}, ts)
            pending = []
    if oracle is not None:
        oracle.close()
        shutil.rmtree(scratch, ignore_errors=True)
    measured_from = next(i for i, (_, raw) in enumerate(feed.records)
                         if Entry.decode(raw).kind == entries.EVENT_RECEIVED) + warmup_orders
    return feed, measured_from, datas


def _calls_app(oracle: RunnerStateMachine, feed: Feed) -> bool:
    """Apply the feed's records not applied yet; whether the last one called the app."""
    effects: list = []
    for offset, raw in feed.records[oracle.applied_offset + 1:]:
        effects = oracle.apply(Entry.decode(raw, offset))
    return any(isinstance(e, CallApp) for e in effects)


def run_apply(feed: Feed, measured_from: int, profile: bool,
              serving_gc: bool = False) -> tuple[float, float, float, str]:
    """(CPU us per order, of which the apply thread's, wall us per order, profile text) of
    decode + apply + flush."""
    scratch = Path(tempfile.mkdtemp(prefix="railflow-apply-cost-"))
    sm = RunnerStateMachine(scratch / "node")
    try:
        for offset, raw in feed.records[:measured_from]:
            sm.apply(Entry.decode(raw, offset))
        sm.flush()
        if serving_gc:
            gcpolicy.settle()  # as a node does once it started: the heap so far is frozen
        measured = feed.records[measured_from:]
        orders = sum(1 for _, raw in measured if b"EventReceived" in raw[:64])
        prof = cProfile.Profile() if profile else None
        cpu0, wall0 = time.process_time_ns(), time.perf_counter_ns()
        thread0 = time.thread_time_ns()
        if prof is not None:
            prof.enable()
        for offset, raw in measured:
            sm.apply(Entry.decode(raw, offset))
        thread = time.thread_time_ns() - thread0
        sm.flush()  # the flusher thread's inserts are part of the cost
        if prof is not None:
            prof.disable()
        cpu, wall = time.process_time_ns() - cpu0, time.perf_counter_ns() - wall0
        text = ""
        if prof is not None:
            out = io.StringIO()
            pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(25)
            text = out.getvalue()
        return cpu / orders / 1000, thread / orders / 1000, wall / orders / 1000, text
    finally:
        gc.unfreeze()
        sm.close()
        shutil.rmtree(scratch, ignore_errors=True)


def run_store_records(feed: Feed, measured_from: int, runs_per_call: int = 25) -> float:
    """CPU µs per run of what the leader's run-store writer does with a run before the wire:
    its ``RunRecord`` (``StoreRun.record``), the HBase rows' Thrift mutations and their
    serialization into one ``mutateRowsTs`` call per ``runs_per_call`` runs (~25: what a 50 ms
    linger gathers at 500 orders/s). No socket: a call's own cost (~300-400 µs, mostly the
    kernel's) is per call, not per run, and shows in ``bench/profile_node.py --cluster``."""
    import happybase  # noqa: F401 - loads Hbase_thrift
    from Hbase_thrift import Hbase
    from thriftpy2.protocol import TCyBinaryProtocolFactory
    from thriftpy2.utils import serialize

    from runner.runstore.base import RunRecord
    from runner.runstore.hbase import _mutations
    from runner.state.effects import StoreRun

    scratch = Path(tempfile.mkdtemp(prefix="railflow-store-cost-"))
    sm = RunnerStateMachine(scratch / "node")
    try:
        stores = []
        for i, (offset, raw) in enumerate(feed.records):
            effects = sm.apply(Entry.decode(raw, offset))
            if i >= measured_from:
                stores += [e for e in effects if isinstance(e, StoreRun)]
        sm.flush()
        gc.collect()
        protocol = TCyBinaryProtocolFactory()  # what happybase sends with (Cython)
        thread0 = time.thread_time_ns()
        for at in range(0, len(stores), runs_per_call):
            records = [RunRecord.of_fields(e.record) for e in stores[at:at + runs_per_call]]
            serialize(Hbase.mutateRowsTs_args(
                tableName=b"runs", rowBatches=[m for r in records for m in _mutations(r)],
                timestamp=1 << 32, attributes={}), protocol)
        return (time.thread_time_ns() - thread0) / max(1, len(stores)) / 1000
    finally:
        sm.close()
        shutil.rmtree(scratch, ignore_errors=True)


def run_engine_alone(datas: list[dict]) -> float:
    """CPU us per order of the metrics engine's ingest of the same orders (no apply)."""
    from metrics_engine import Engine

    scratch = Path(tempfile.mkdtemp(prefix="railflow-engine-cost-"))
    engine = Engine(scratch / "engine")
    try:
        for text in W1_METRICS:
            engine.define(text)
        for i, data in enumerate(datas[:warmup_orders]):
            engine.ingest("payments", data, T0 + i * 20)
        cpu0 = time.process_time_ns()
        for i, data in enumerate(datas[warmup_orders:], start=warmup_orders):
            engine.ingest("payments", data, T0 + i * 20)
        return (time.process_time_ns() - cpu0) / (len(datas) - warmup_orders) / 1000
    finally:
        engine.close()
        shutil.rmtree(scratch, ignore_errors=True)


def _canary(report: Report, feed: Feed, measured_from: int, orders: int, repeats: int,
            serving_gc: bool, rt: bool) -> None:
    from bench import flush_gil

    rows = [flush_gil.run(feed, measured_from, serving_gc, rt) for _ in range(repeats)]
    for i, r in enumerate(rows):
        report.add(what=f"repeat {i + 1}{', serving gc' if serving_gc else ''}"
                        f"{', SCHED_FIFO' if rt else ''}",
                   **{k: round(v, 2) for k, v in r.items()})
    report.write(["what", "orders", "flushes", "flush_ms", "late_per_flush", "late_max_ms",
                  "late_per_quiet", "quiet_max_ms", "flusher_us", "apply_us"])


def feed_parser(description: str) -> argparse.ArgumentParser:
    """The options of a benchmark over ``build_feed``'s orders: --quick, --orders, --repeats,
    --seed (``bench/follower_loop.py`` shares them)."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--orders", type=int, default=None)
    ap.add_argument("--repeats", type=int, default=None)
    ap.add_argument("--seed", type=int, default=7)
    return ap


def main() -> None:
    ap = feed_parser(__doc__.splitlines()[0])
    ap.add_argument("--profile", action="store_true", help="print a cProfile of one repeat")
    ap.add_argument("--serving-gc", action="store_true",
                    help="the collector's thresholds and freeze of a serving node")
    ap.add_argument("--app", action="store_true",
                    help="W3 scored by an outside app: an AppCompleted after every order that "
                         "called it")
    ap.add_argument("--answer-all", action="store_true",
                    help="with --app: an answer after every order, also those decided before "
                         "the app node")
    ap.add_argument("--confirm-every", type=int, default=confirm_every_orders,
                    help="orders per EffectsDone entry (a node confirms every 100 ms: ~50 at "
                         "500 orders/s)")
    ap.add_argument("--store", action="store_true",
                    help="also the leader's run-store writer per run before the wire (its "
                         "record, HBase mutations and their Thrift encoding)")
    ap.add_argument("--rt", action="store_true",
                    help="with --canary: the canary and the flusher under SCHED_FIFO (root)")
    ap.add_argument("--canary", action="store_true",
                    help="a canary thread's late wakeups during each flush, apply and flush "
                         "taking turns (bench/flush_gil.py), and each thread's CPU per order")
    args = ap.parse_args()
    if args.serving_gc:
        gcpolicy.for_serving()
    orders = args.orders or (5_000 if args.quick else 50_000)
    repeats = args.repeats or (1 if args.quick else 3)
    report = Report(("apply_cost_app_all" if args.answer_all else "apply_cost_app") if args.app
                    else "apply_cost_canary" if args.canary else "apply_cost", args.quick)
    feed, measured_from, datas = build_feed(orders, args.seed, app=args.app,
                                            answer_all=args.answer_all,
                                            confirm_every=args.confirm_every)
    if args.canary:
        _canary(report, feed, measured_from, orders, repeats, args.serving_gc, args.rt)
        return
    cpu, on_thread, wall, engine = [], [], [], []
    for _ in range(repeats):
        c, t, w, _ = run_apply(feed, measured_from, profile=False, serving_gc=args.serving_gc)
        cpu.append(c)
        on_thread.append(t)
        wall.append(w)
        engine.append(run_engine_alone(datas))
    gc_note = (", serving gc" if args.serving_gc else "") + (
        f", confirmed every {args.confirm_every}"
        if args.confirm_every != confirm_every_orders else "") + (
        ", an app answer per order" + (", to every order" if args.answer_all else " calling it")
        if args.app else "")
    report.add(what=f"follower apply (decode+apply+flush{gc_note})", orders=orders,
               repeats=repeats,
               cpu_us_per_order=spread(cpu), wall_us_per_order=spread(wall))
    report.add(what="  on the apply thread", orders=orders, repeats=repeats,
               cpu_us_per_order=spread(on_thread))
    report.add(what="    metrics engine ingest (alone)", orders=orders, repeats=repeats,
               cpu_us_per_order=spread(engine))
    report.add(what="  other threads (DuckDB flush)", orders=orders, repeats=repeats,
               cpu_us_per_order=spread([c - t for c, t in zip(cpu, on_thread, strict=True)]))
    if args.store:
        report.add(what="leader's run-store writer per run (record, mutations, Thrift)",
                   orders=orders, repeats=repeats, cpu_us_per_order=spread(
                       [run_store_records(feed, measured_from) for _ in range(repeats)]))
    report.target("P7-follower-apply", spread(cpu)["median"], "us CPU/order", 120,
                  higher_is_better=False,
                  note="apply alone; bench/api_cost.py adds consume and HTTP")
    report.write(["what", "orders", "repeats", "cpu_us_per_order", "wall_us_per_order"])
    if args.profile:
        *_, text = run_apply(feed, measured_from, profile=True, serving_gc=args.serving_gc)
        print(text)


if __name__ == "__main__":
    main()
