"""Backfill wall time: one engine in one task vs the build per key partition, same snapshot.

Backfills new metrics (a 12-hour MAX / COUNT DISTINCT per card, a 1-hour MIN per card
excluding the current event, a 2-day hopping MAX per merchant) beside an existing metric set
(``--existing``, default W1; ``w2_card``: W2's 45 per-card features, where the engine's work
per event dominates) over a synthetic data set, once with
``pipeline.backfill.backfill_in_one_task`` (the oracle) and once with
``pipeline.backfill.backfill`` (key partitions, local[*]); the two digests must be equal
(``digests_equal`` in the JSON; a run where they differ reports no speed-up).

    .venv/bin/python bench/backfill.py --quick           # tiny: a check that it runs
    .venv/bin/python bench/backfill.py --size small      # 1 M events over 2 days
    .venv/bin/python bench/backfill.py --size small --existing w2_card
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.harness import Report, spread  # noqa: E402
from bench.pipeline_w4 import CACHE, dataset  # noqa: E402
from pipeline.feature_sets import definitions  # noqa: E402

NEW = [
    "SELECT COUNT(DISTINCT merchant) AS card_merchants_12h, MAX(amount) AS card_max_12h "
    "FROM payments GROUP BY card RANGE 12 HOURS",
    "SELECT MIN(amount) AS card_min_1h FROM payments GROUP BY card RANGE 1 HOURS "
    "EXCLUDING CURRENT",
    "SELECT MAX(amount) AS merchant_max_2d FROM payments GROUP BY merchant "
    "HOPPING 2 DAYS EVERY 1 DAYS",
]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--size", default=None, help="tiny, small, month or a number of events")
    ap.add_argument("--partitions", type=int, default=None,
                    help="key partitions (default: the backfill's own choice)")
    ap.add_argument("--existing", default="w1", help="the live metric set (w1, w2_card, w2)")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--work", default=str(CACHE / "backfill"), help="scratch directory")
    args = ap.parse_args()
    size = args.size or ("tiny" if args.quick else "small")
    size = int(size) if str(size).isdigit() else size

    from pipeline.backfill import backfill, backfill_in_one_task
    from pipeline.session import spark_session

    spark = spark_session("bench-backfill")
    report = Report("backfill", args.quick)
    source = dataset(size)
    existing = definitions(args.existing)
    work = Path(args.work)
    digests: dict[str, set[str]] = {}
    for name, fn in [("one_task", backfill_in_one_task), ("partitioned", backfill)]:
        times, events = [], 0
        for i in range(args.repeats):
            out = work / f"{name}-{i}"
            shutil.rmtree(out, ignore_errors=True)
            kw = {"partitions": args.partitions} if name == "partitioned" else {}
            t0 = time.perf_counter()
            manifest = fn(spark.read.parquet(str(source)), NEW, existing, out, **kw)
            times.append(time.perf_counter() - t0)
            events = manifest.events
            digests.setdefault(name, set()).add(manifest.digest)
            shutil.rmtree(out, ignore_errors=True)
        sp = spread(times)
        report.add(build=name, size=size, existing=args.existing, events=events, seconds=sp,
                   events_per_s=events / sp["median"] if sp["median"] else 0.0)
    equal = len(digests["one_task"] | digests["partitioned"]) == 1
    one = report.results[0]["seconds"]["median"]
    part = report.results[1]["seconds"]["median"]
    for row in report.results:
        row["digests_equal"] = equal
    report.results[1]["speedup_vs_one_task"] = one / part if equal and part else 0.0
    report.write(["build", "size", "existing", "events", "seconds", "events_per_s", "digests_equal",
                  "speedup_vs_one_task"])
    spark.stop()
    return 0 if equal else 1


if __name__ == "__main__":
    raise SystemExit(main())
