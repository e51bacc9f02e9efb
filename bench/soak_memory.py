"""Memory soak of one embedded state machine: RSS over 1,000,000 orders spread over days.

Feeds a follower's ``RunnerStateMachine`` (real metrics engine, W1's metrics, the W3 workflow)
with seeded orders whose log times span ``--days`` days, so the event-id dedup retention
(``--retention-ms``) forgets ids as it goes, finished runs leave DuckDB after the run retention
(``--run-retention-ms``, once the confirmations say the run store holds them) and the 5-minute
windows evict, plus the leader's batched run-store confirmations. Every ``--sample-every``
orders it records RSS, the ids held for dedup, the finished runs held and the rows DuckDB
holds. Target: RSS flat once warm (last sample within 1.1x of the sample at 20% of the run);
``met`` also needs the real workload (at least 1,000,000 orders), never a ``--quick`` glance.

    .venv/bin/python bench/soak_memory.py            # 1,000,000 orders (long)
    .venv/bin/python bench/soak_memory.py --quick    # 50,000 orders, a glance
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.harness import Report, rss_mb  # noqa: E402
from replog.entry import Entry  # noqa: E402
from runner.demo import W1_METRICS, OrderGenerator, w3_definition  # noqa: E402
from runner.state import entries  # noqa: E402
from runner.state.effects import StoreRun  # noqa: E402
from runner.state.machine import RunnerStateMachine  # noqa: E402

T0 = 1_700_000_000_000
DAY_MS = 86_400_000
confirm_every_orders = 500
orders_required = 1_000_000  # the soak: fewer orders only glance at the trend
rss_growth_max = 1.1


TABLES = ("events_seen", "runs", "steps", "decisions", "app_tasks")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--orders", type=int, default=None)
    ap.add_argument("--days", type=float, default=3.0)
    ap.add_argument("--retention-ms", type=int, default=3_600_000, help="dedup retention")
    ap.add_argument("--run-retention-ms", type=int, default=3_600_000)
    ap.add_argument("--sample-every", type=int, default=None)
    ap.add_argument("--seed", type=int, default=11)
    args = ap.parse_args()
    orders = args.orders or (50_000 if args.quick else 1_000_000)
    every = args.sample_every or max(1, orders // 20)
    step_ms = max(1, int(args.days * DAY_MS / orders))
    report = Report("soak_memory", args.quick)
    scratch = Path(tempfile.mkdtemp(prefix="railflow-soak-"))
    sm = RunnerStateMachine(scratch / "node", dedup_retention_ms=args.retention_ms,
                            run_retention_ms=args.run_retention_ms)
    offset = 0

    pending: list[list] = []  # run-store writes not yet confirmed, as the leader keeps them

    def apply(kind: str, payload: dict, ts: int) -> None:
        nonlocal offset
        effects = sm.apply(Entry(offset, 1, ts, kind, entries.encode(payload)))
        offset += 1
        pending.extend([e.run["run_id"], e.run["offset"]] for e in effects
                       if isinstance(e, StoreRun))

    try:
        for text in W1_METRICS:
            apply(entries.METRIC_DEFINED, {"text": text}, T0)
        definition = w3_definition()
        apply(entries.WORKFLOW_PUBLISHED, {"workflow_id": definition["id"],
                                           "definition": definition}, T0)
        gen = OrderGenerator(seed=args.seed, cards=200_000, merchants=5_000)
        samples = []
        for i in range(1, orders + 1):
            order = gen.order()
            ts = T0 + i * step_ms
            apply(entries.EVENT_RECEIVED, order, ts)
            due = sm.next_deadline()
            if due is not None and due <= ts:  # a review past its deadline: the leader ticks
                apply(entries.TICK, {}, ts)
            if i % confirm_every_orders == 0:
                stored = pending[:]
                pending.clear()
                apply(entries.EFFECTS_DONE, {"stored": stored, "outbox": []}, ts)
            if i % every == 0:
                sm.flush()
                rows = {t: sm.con.execute(f"SELECT count(*) FROM {t}").fetchall()[0][0]
                        for t in TABLES}
                samples.append(rss_mb())
                report.add(orders=i, log_days=round((ts - T0) / DAY_MS, 2),
                           rss_mb=samples[-1], dedup_ids=len(sm._seen),
                           finished_held=len(sm.finished), **rows)
                print(f"{i:>9,} orders  rss {samples[-1]:8.1f} MB  dedup ids {len(sm._seen):,}  "
                      f"runs {rows['runs']:,}  steps {rows['steps']:,}", flush=True)
        warm = samples[max(0, len(samples) // 5 - 1)]
        growth = samples[-1] / warm
        report.target("rss_growth_after_warmup", growth, "x", rss_growth_max,
                      higher_is_better=False,
                      note=f"{orders:,} orders over {args.days:g} days of log time; met needs "
                           f"at least {orders_required:,} orders")
        report.targets["rss_growth_after_warmup"]["met"] = (
            growth <= rss_growth_max and orders >= orders_required and not args.quick)
        report.write(["orders", "log_days", "rss_mb", "dedup_ids", "finished_held",
                      *TABLES])
    finally:
        sm.close()
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
