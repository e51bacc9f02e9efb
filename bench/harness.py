"""Shared helpers for benchmarks that follow the contract of WORKLOADS.md.

- ``Report``: collects result rows and targets, prints a table and writes
  ``bench/results/<name>.json`` with ``name, quick, started_at, machine, results, targets``.
- ``spread(values)``: min / median / max of repeats.
- ``open_loop(fn, items, rate_per_s, warmup)``: calls ``fn(item)`` at a fixed arrival rate in
  this thread and records each latency from the call's *intended* start (coordinated omission
  corrected) into an HdrHistogram; returns percentiles in microseconds.
- ``rss_mb()``: resident set size of this process.

Callers measure every peer in the same run and put ``ratio`` fields in their rows.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import time
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from hdrh.histogram import HdrHistogram

RESULTS_DIR = Path(__file__).resolve().parent / "results"
LATENCY_US_MAX = 60_000_000  # one minute: anything slower is clamped


def spread(values: Sequence[float]) -> dict[str, float]:
    """min / median / max of repeated measurements."""
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


def perf_control(cmd: str) -> None:
    """Tell a ``perf record --control fifo:$PERF_CTL,$PERF_ACK`` around this process to enable
    or disable sampling (``bench/w1_profile.py``, ``w2_profile.py``), if there is one."""
    ctl, ack = os.environ.get("PERF_CTL"), os.environ.get("PERF_ACK")
    if not ctl or not ack:
        return
    with open(ctl, "w") as f:
        f.write(cmd + "\n")
    with open(ack) as f:
        f.readline()


def rss_mb() -> float:
    import psutil

    return psutil.Process(os.getpid()).memory_info().rss / 1e6


def open_loop(fn: Callable[[Any], Any], items: Iterable[Any], rate_per_s: float,
              warmup: int = 0) -> dict[str, float]:
    """Latency percentiles (µs) of ``fn`` under a fixed arrival rate; the first ``warmup``
    calls are not recorded. Spins between arrivals (one core, no sleeping jitter)."""
    hist = HdrHistogram(1, LATENCY_US_MAX, 3)
    interval = 1.0 / rate_per_s
    clock = time.perf_counter
    start = clock()
    n = 0
    for i, item in enumerate(items):
        intended = start + i * interval
        while clock() < intended:
            pass
        fn(item)
        if i >= warmup:
            lat_us = int((clock() - intended) * 1e6)
            hist.record_value(min(max(lat_us, 1), LATENCY_US_MAX))
            n += 1
    return {"p50_us": hist.get_value_at_percentile(50), "p99_us": hist.get_value_at_percentile(99),
            "p999_us": hist.get_value_at_percentile(99.9), "max_us": hist.get_max_value(),
            "count": n, "rate_per_s": rate_per_s}


class Report:
    """Rows and targets of one benchmark run."""

    def __init__(self, name: str, quick: bool):
        self.name = name
        self.quick = quick
        self.started_at = datetime.now(UTC).isoformat()
        self.results: list[dict[str, Any]] = []
        self.targets: dict[str, dict[str, Any]] = {}

    def add(self, **row: Any) -> dict[str, Any]:
        self.results.append(row)
        return row

    def target(self, tid: str, value: float, unit: str, target: float, *,
               higher_is_better: bool = True, note: str = "") -> None:
        met = value >= target if higher_is_better else value <= target
        self.targets[tid] = {"value": value, "unit": unit, "target": target, "met": bool(met),
                             **({"note": note} if note else {})}

    def table(self, columns: Sequence[str]) -> str:
        rows = [[_fmt(r.get(c, "")) for c in columns] for r in self.results]
        widths = [max(len(c), *(len(r[i]) for r in rows)) if rows else len(c)
                  for i, c in enumerate(columns)]
        out = ["  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True))]
        out.append("  ".join("-" * w for w in widths))
        out += ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)) for r in rows]
        return "\n".join(out)

    def write(self, columns: Sequence[str]) -> Path:
        print(self.table(columns))
        for tid, t in self.targets.items():
            print(f"{tid}: {t['value']:.4g} {t['unit']} (target {t['target']:g}) "
                  f"{'met' if t['met'] else 'NOT met'}{' - ' + t['note'] if 'note' in t else ''}")
        RESULTS_DIR.mkdir(parents=True, exist_ok=True)
        path = RESULTS_DIR / f"{self.name}.json"
        doc = {"name": self.name, "quick": self.quick, "started_at": self.started_at,
               "machine": {"cores": os.cpu_count(), "python": platform.python_version(),
                           "load_avg_1m": os.getloadavg()[0]},
               "results": self.results, "targets": self.targets}
        path.write_text(json.dumps(doc, indent=2, default=str))
        print(f"wrote {path}")
        return path


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:,.3g}" if abs(v) < 100 else f"{v:,.0f}"
    if isinstance(v, dict) and {"min", "median", "max"} <= set(v):
        return f"{_fmt(v['median'])} [{_fmt(v['min'])}..{_fmt(v['max'])}]"
    return str(v)
