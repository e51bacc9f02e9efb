"""Memory soak of one embedded state machine: RSS over 1,000,000 orders spread over days.

Feeds a follower's ``RunnerStateMachine`` (real metrics engine, W1's metrics, the W3 workflow)
with seeded orders whose log times span ``--days`` days, so the event-id dedup retention
(``--retention-ms``) forgets ids as it goes and the 5-minute windows evict, plus the leader's
batched run-store confirmations. Every ``--sample-every`` orders it records RSS, the ids held
for dedup and the rows DuckDB holds. Target: RSS flat once warm (last sample within 1.1x of
the sample at 20% of the run).

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
from runner import ids  # noqa: E402
from runner.demo import W1_METRICS, OrderGenerator, w3_definition  # noqa: E402
from runner.state import entries  # noqa: E402
from runner.state.machine import RunnerStateMachine  # noqa: E402

T0 = 1_700_000_000_000
DAY_MS = 86_400_000
confirm_every_orders = 500


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--orders", type=int, default=None)
    ap.add_argument("--days", type=float, default=3.0)
    ap.add_argument("--retention-ms", type=int, default=3_600_000)
    ap.add_argument("--sample-every", type=int, default=None)
    ap.add_argument("--seed", type=int, default=11)
    args = ap.parse_args()
    orders = args.orders or (50_000 if args.quick else 1_000_000)
    every = args.sample_every or max(1, orders // 20)
    step_ms = max(1, int(args.days * DAY_MS / orders))
    report = Report("soak_memory", args.quick)
    scratch = Path(tempfile.mkdtemp(prefix="railflow-soak-"))
    sm = RunnerStateMachine(scratch / "node", dedup_retention_ms=args.retention_ms)
    offset = 0

    def apply(kind: str, payload: dict, ts: int) -> None:
        nonlocal offset
        sm.apply(Entry(offset, 1, ts, kind, entries.encode(payload)))
        offset += 1

    try:
        for text in W1_METRICS:
            apply(entries.METRIC_DEFINED, {"text": text}, T0)
        definition = w3_definition()
        apply(entries.WORKFLOW_PUBLISHED, {"workflow_id": definition["id"],
                                           "definition": definition}, T0)
        gen = OrderGenerator(seed=args.seed, cards=200_000, merchants=5_000)
        pending: list[list] = []
        samples = []
        for i in range(1, orders + 1):
            order = gen.order()
            ts = T0 + i * step_ms
            pending.append([ids.run_id(order["event_id"], definition["id"], offset), offset])
            apply(entries.EVENT_RECEIVED, order, ts)
            if len(pending) == confirm_every_orders:
                apply(entries.EFFECTS_DONE, {"stored": pending, "outbox": []}, ts)
                pending = []
            if i % every == 0:
                sm.flush()
                rows = {t: sm.con.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
                        for t in ("events_seen", "runs", "steps")}
                samples.append(rss_mb())
                report.add(orders=i, log_days=round((ts - T0) / DAY_MS, 2),
                           rss_mb=samples[-1], dedup_ids=len(sm._seen), **rows)
                print(f"{i:>9,} orders  rss {samples[-1]:8.1f} MB  dedup ids {len(sm._seen):,}  "
                      f"runs {rows['runs']:,}", flush=True)
        warm = samples[max(0, len(samples) // 5 - 1)]
        report.target("rss_growth_after_warmup", samples[-1] / warm, "x", 1.1,
                      higher_is_better=False,
                      note="decided runs stay in DuckDB until they leave the state (not done)")
        report.write(["orders", "log_days", "rss_mb", "dedup_ids", "events_seen", "runs",
                      "steps"])
    finally:
        sm.close()
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
