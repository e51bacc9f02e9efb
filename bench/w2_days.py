"""W2's engine cost day by day over `month`: CPU µs per event, RSS and page faults per day.

Feeds one ``pipeline.engine_feed.Feeder`` (the features job's engine, W2's 405 metrics) the
events of one ``1/FRACTION`` of month's cards (``card & (FRACTION - 1) == 0``: whole keys, as
one partition of the features job holds them) day by day, in 8,192-event batches, and reports
for each day the process CPU time per event (not wall time), the RSS after it and the minor
page faults during it. The slice is generated first (all days), so the generator's memory is
not counted in a day's faults. This is the figure P5 rests on (docs/pipeline.md): the job's engines
together cost about ``FRACTION`` times this run's CPU. No peers: the job's own peers (DuckDB)
run in ``bench/pipeline_w4.py``.

    .venv/bin/python bench/w2_days.py                  # all 30 days, 1/128 of the cards
    .venv/bin/python bench/w2_days.py --days 6 --fraction 16
    .venv/bin/python bench/w2_days.py --days 12 --fraction 64 --no-look-ahead   # A/B

``--no-look-ahead`` turns off the batch's key look-ahead (the native core looks up the keys
of a row a few rows early and asks the CPU for their states, plan.rs ``find_ahead``), for an
A/B of it on the same data.
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pyarrow.compute as pc  # noqa: E402

from bench.harness import Report, rss_mb  # noqa: E402
from pipeline import synthetic  # noqa: E402
from pipeline.engine_feed import Feeder  # noqa: E402
from pipeline.feature_sets import definitions  # noqa: E402

SEED = 7
BATCH = 8_192


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--days", type=int, default=30)
    ap.add_argument("--fraction", type=int, default=128, help="a power of two")
    ap.add_argument("--no-look-ahead", action="store_true",
                    help="the native core's key look-ahead off (an A/B of it)")
    args = ap.parse_args()
    if args.fraction & (args.fraction - 1):
        raise SystemExit("--fraction must be a power of two")
    report = Report("w2_days" + ("_no_look_ahead" if args.no_look_ahead else ""),
                    quick=args.days < 30)
    feeder = Feeder(definitions("w2"))
    if args.no_look_ahead:
        for sp in feeder._plan.streams.values():
            sp.core.look_ahead = False
    total_cpu, total_events = 0.0, 0
    days = [t.filter(pc.equal(pc.bit_wise_and(t["card"], args.fraction - 1), 0))
            for t in synthetic.iter_batches("month", SEED, args.days)]
    for day, table in enumerate(days):
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        cpu = time.process_time()
        for batch in table.to_batches(max_chunksize=BATCH):
            feeder.feed(batch)
        cpu = time.process_time() - cpu
        usage = resource.getrusage(resource.RUSAGE_SELF)
        total_cpu += cpu
        total_events += table.num_rows
        report.add(day=day + 1, events=table.num_rows, cpu_s=cpu,
                   cpu_us_per_event=1e6 * cpu / max(1, table.num_rows),
                   rss_mb=rss_mb(), minor_faults=usage.ru_minflt - faults)
    report.add(day="all", events=total_events, cpu_s=total_cpu,
               cpu_us_per_event=1e6 * total_cpu / max(1, total_events),
               month_engine_cpu_s_estimate=total_cpu * args.fraction)
    report.write(["day", "events", "cpu_s", "cpu_us_per_event", "rss_mb", "minor_faults",
                  "month_engine_cpu_s_estimate"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
