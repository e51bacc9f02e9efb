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


def _wait_for_seconds(census: Census, n: int, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while len(census.seconds) < n:
        assert census._thread.is_alive(), "the census thread died"
        assert time.monotonic() < deadline, "the census took no sample"
        time.sleep(0.05)


def test_python_thread_names_drop_node_ids_and_pool_indexes():
    assert python_thread_name("replog-loop-node-3") == "replog-loop"
    assert python_thread_name("checkpointer_0") == "checkpointer"
    assert python_thread_name("duckdb-flush") == "duckdb-flush"


def test_census_names_a_busy_thread_and_sums_the_round_trips():
    values = iter([[500], [40_000, 600], [700], [800]] + [[]] * 100)

    collected = iter([[], [[2, 30.0, 3.0, 7]], [[0, 0.5, 0.25, 0]]] + [[]] * 100)

    def round_trip() -> tuple[HdrHistogram, list, None]:
        h = HdrHistogram(1, 60_000_000, 3)
        for v in next(values):
            h.record_value(v)
        return h, next(collected), None

    stop = threading.Event()
    spinner = threading.Thread(target=_spin, args=(stop,), name="spinner-node-1")
    spinner.start()
    census = Census({"me": os.getpid()}, {"me": (os.getpid(), _names)}, round_trip,
                    interval_s=0.2)
    try:
        census.start()  # takes the first histogram ([500]) as the row's start
        _wait_for_seconds(census, 3)
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
    assert summary["leader_collections"]["all"] == {"2": [1, 30.0, 30.0, 3.0, 7],
                                                    "0": [1, 0.5, 0.5, 0.25, 0]}
    assert summary["leader_collections"]["in_slow_seconds"] == {"2": [1, 30.0, 30.0, 3.0, 7]}
    assert "spinner" in format_summary(summary)


def test_gc_pauses_are_read_from_a_jvm_log_within_the_window(tmp_path):
    from bench.census import gc_pauses
    log = tmp_path / "kafka-gc.log"
    log.write_text(
        "[2026-11-24T16:24:04.231+0000][0.003s] Using G1\n"
        "[2026-11-24T16:24:05.000+0000][1.2s] GC(0) Pause Young (Normal) (G1 Evacuation Pause)"
        " 24M->5M(256M) 3.456ms\n"
        "[2026-11-24T16:24:09.500+0000][5.7s] GC(1) Pause Remark 30M->30M(256M) 1.5ms\n"
        "[2026-11-24T16:25:00.000+0000][61s] GC(2) Pause Young (Normal) (G1 Evacuation Pause)"
        " 24M->5M(256M) 9.0ms\n")
    from datetime import datetime
    t = lambda s: datetime.fromisoformat(s).timestamp()  # noqa: E731
    got = gc_pauses(log, t("2026-11-24T16:24:04+00:00"), t("2026-11-24T16:24:10+00:00"))
    assert [(ms, kind) for _, ms, kind in got] == [(3.456, "Pause Young"), (1.5, "Pause Remark")]
    assert got[0][0] == t("2026-11-24T16:24:05+00:00")


def test_gc_cpu_sums_user_and_system_time_of_the_pauses_within_the_window(tmp_path):
    from bench.census import gc_cpu_ms, gc_pauses
    log = tmp_path / "hmaster-gc.log"
    log.write_text(
        "[2026-11-24T16:24:05.000+0000][1.2s] GC(0) Pause Young (Normal) (G1 Evacuation Pause)"
        " 400M->350M(1024M) 130.0ms\n"
        "[2026-11-24T16:24:05.000+0000][1.2s] GC(0) User=0.02s Sys=0.01s Real=0.13s\n"
        "[2026-11-24T16:24:08.000+0000][4.2s] GC(1) User=0.04s Sys=0.00s Real=0.05s\n"
        "[2026-11-24T16:25:00.000+0000][61s] GC(2) User=1.00s Sys=0.00s Real=1.00s\n")
    from datetime import datetime
    t = lambda s: datetime.fromisoformat(s).timestamp()  # noqa: E731
    since, until = t("2026-11-24T16:24:04+00:00"), t("2026-11-24T16:24:10+00:00")
    assert gc_cpu_ms(log, since, until) == (70.0, 180.0)
    # the CPU lines are not pauses of their own
    assert [ms for _, ms, _ in gc_pauses(log, since, until)] == [130.0]


def test_gil_waits_are_summed_and_set_beside_the_slow_seconds():
    def hist(*values: int) -> HdrHistogram:
        h = HdrHistogram(1, 60_000_000, 3)
        for v in values:
            h.record_value(v)
        return h

    samples = iter([(hist(), [], None), (hist(40_000), [], hist(100, 30_000)),
                    (hist(500), [], hist(200, 300))] + [(hist(), [], hist())] * 100)
    census = Census({"me": os.getpid()}, {"me": (os.getpid(), _names)}, lambda: next(samples),
                    interval_s=0.1)
    census.start()
    _wait_for_seconds(census, 2)
    summary = census.stop()
    assert census.gil_waits.get_total_count() == 4
    g = summary["leader_gil_wait_ms"]
    assert 29.9 < g["max"] < 30.1
    slow, rest = g["max_per_second_slow_vs_rest"]
    assert 29.9 < slow < 30.1 and rest < 1
    assert "wait to run Python" in format_summary(summary)
