"""bench/census.py: a second's CPU and run-queue wait per named thread, the round trips'
sum, and the slow seconds set beside the rest."""

from __future__ import annotations

import os
import threading
import time

from hdrh.histogram import HdrHistogram

from bench.census import Census, format_summary, python_thread_name


def _spin(stop: threading.Event) -> None:
    while not stop.is_set():
        sum(range(1000))


def _names() -> dict[int, str]:
    return {t.native_id: t.name for t in threading.enumerate()}


def test_python_thread_names_drop_node_ids_and_pool_indexes():
    assert python_thread_name("replog-loop-node-3") == "replog-loop"
    assert python_thread_name("checkpointer_0") == "checkpointer"
    assert python_thread_name("duckdb-flush") == "duckdb-flush"


def test_census_names_a_busy_thread_and_sums_the_round_trips():
    values = iter([[500], [40_000, 600], [700], [800]] + [[]] * 100)

    def round_trip() -> HdrHistogram:
        h = HdrHistogram(1, 60_000_000, 3)
        for v in next(values):
            h.record_value(v)
        return h

    stop = threading.Event()
    spinner = threading.Thread(target=_spin, args=(stop,), name="spinner-node-1")
    spinner.start()
    census = Census({"me": os.getpid()}, {"me": (os.getpid(), _names)}, round_trip,
                    interval_s=0.2)
    try:
        census.start()  # takes the first histogram ([500]) as the row's start
        while len(census.seconds) < 3:
            time.sleep(0.05)
    finally:
        stop.set()
        spinner.join()
    summary = census.stop()
    # the histograms after the start, none lost: [40 ms, 0.6 ms], [0.7], [0.8], ...
    assert census.round_trips.get_total_count() == 4
    assert census.seconds[0]["rt_max_ms"] > 25 > census.seconds[1]["rt_max_ms"]
    assert summary["slow_seconds"] == 1
    threads = summary["threads"]["me"]
    assert threads["spinner"][0] > 0  # CPU ms per second, under its Python name
    assert summary["process_cores"]["me"] is not None
    assert "slow_vs_rest" in summary and "me" in summary["slow_vs_rest"]["process_cores"]
    assert "spinner" in format_summary(summary)
