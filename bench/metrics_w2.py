"""W2: the thesis feature set, 405 features per event (9 groupings x 5 windows x 9 aggregations).

Groupings: card, and card x each of mcc, merchant, country, region, channel, device, currency,
shipping_address. Windows: a continuously sliding 24 h (``RANGE 24 HOURS``) and daily-sliding
7, 28, 182 and 392 days (``HOPPING N DAYS EVERY 1 DAY``). Aggregations over ``amount``: sum,
mean, count, stddev, skewness, count distinct merchants, oldest, most recent, and the ratio of
card-not-present payments. Events come from ``pipeline.synthetic`` at one day's density
(500 k/day), taken around a midnight so the daily windows move during the run.

Reports events/s (wall and per CPU-second, min/median/max over repeats) and the per-event
latency distribution (closed loop; the day boundary shows as the maximum), beside the thesis's
anchor (40,000 events/s on a Flink cluster, not re-run here), as a ratio. Checks that every
event got 405 values.

Usage: ``.venv/bin/python bench/metrics_w2.py [--quick]``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hdrh.histogram import HdrHistogram  # noqa: E402

from bench.harness import Report, rss_mb, spread  # noqa: E402

GROUPINGS = ["card", "card, mcc", "card, merchant", "card, country", "card, region",
             "card, channel", "card, device", "card, currency", "card, shipping_address"]
WINDOWS = ["RANGE 24 HOURS", "HOPPING 7 DAYS EVERY 1 DAY", "HOPPING 28 DAYS EVERY 1 DAY",
           "HOPPING 182 DAYS EVERY 1 DAY", "HOPPING 392 DAYS EVERY 1 DAY"]
# SKEWNESS first: the power-sum state it creates (order 3) then serves SUM, AVG and STDDEV.
AGGS = ("SKEWNESS(amount), SUM(amount), AVG(amount), COUNT(amount), STDDEV(amount), "
        "COUNT(DISTINCT merchant), OLDEST(amount), RECENT(amount), RATIO(channel = 'cnp')")
THESIS_EVENTS_PER_S = 40_000
SEED = 7


def definitions() -> list[str]:
    return [f"SELECT {AGGS} FROM payments GROUP BY {g} {w}" for g in GROUPINGS for w in WINDOWS]


def events_around_midnight(n: int) -> list[tuple[int, dict]]:
    from pipeline.synthetic import DAY_MS, START_MS, _block

    day0 = _block(1_000_000, SEED, 0).slice(500_000 - n // 2).to_pylist()
    day1 = _block(1_000_000, SEED, 1).slice(0, n - len(day0)).to_pylist()
    rows = day0 + day1
    assert rows[0]["ts"] < START_MS + DAY_MS <= rows[-1]["ts"]
    return [(r.pop("ts"), r) for r in rows]


def run(events, repeats: int) -> dict:
    from metrics_engine.engine import Engine

    rates, cpu_rates = [], []
    hist = HdrHistogram(1, 600_000_000, 3)
    features = set()
    for _ in range(repeats):
        with tempfile.TemporaryDirectory() as tmp:
            eng = Engine(tmp)
            for d in definitions():
                eng.define(d)
            features.add(len(eng.metrics()))
            ingest = eng.ingest
            t0, c0 = time.perf_counter(), time.process_time()
            for t, ev in events:
                s = time.perf_counter()
                out = ingest("payments", ev, t)
                hist.record_value(max(1, int((time.perf_counter() - s) * 1e6)))
                if len(out) != 405:
                    raise SystemExit(f"expected 405 values per event, got {len(out)}")
            rates.append(len(events) / (time.perf_counter() - t0))
            cpu_rates.append(len(events) / max(1e-9, time.process_time() - c0))
            rss = rss_mb()
            eng.close()
    return {"events_per_s": spread(rates), "events_per_cpu_s": spread(cpu_rates),
            "p50_us": hist.get_value_at_percentile(50), "p99_us": hist.get_value_at_percentile(99),
            "p999_us": hist.get_value_at_percentile(99.9), "max_us": hist.get_max_value(),
            "rss_mb": rss, "features": sorted(features)}


def main() -> int:
    ap = argparse.ArgumentParser(description="W2 metrics benchmark")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    n = 1_000 if args.quick else 10_000
    repeats = 2 if args.quick else 3
    rep = Report("metrics_w2", args.quick)
    events = events_around_midnight(n)
    r = run(events, repeats)
    rate = r["events_per_s"]["median"]
    rep.add(system="railflow engine (405 features)", events=n, **r,
            ratio_vs_thesis=rate / THESIS_EVENTS_PER_S)
    rep.add(system="thesis anchor: Flink, optimized (not re-run)", events_per_s=THESIS_EVENTS_PER_S)
    rep.target("P4", rate, "events/s", THESIS_EVENTS_PER_S,
               note=f"{r['events_per_cpu_s']['median']:,.0f} events per CPU-second")
    rep.write(["system", "events_per_s", "events_per_cpu_s", "ratio_vs_thesis", "p50_us",
               "p99_us", "p999_us", "max_us", "rss_mb"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
