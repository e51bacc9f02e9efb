"""``bench/loadgen`` against ``bench/http_sink.py``: every request is sent and answered once,
each order with its own event id; an answer is timed when it arrived, not when it was read;
a request on a connection the server closed while idle is sent again on a fresh one and
counted in ``reconnects``, not as an error; a connection that breaks mid-answer is an error
and is replaced, so the pool never runs dry; and the generator reports its own CPU (user +
system) per request."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from typing import Any

import pytest

from bench.loadgen_cost import LOADGEN, ROOT, bodies_file, run, start_sink

pytestmark = pytest.mark.skipif(shutil.which("cargo") is None, reason="needs cargo")


@pytest.fixture(scope="module")
def binary() -> str:
    subprocess.run(["make", "-s", "loadgen"], cwd=ROOT, check=True)
    return str(LOADGEN)


@pytest.fixture
def bodies():
    path = bodies_file(50)
    yield path
    os.unlink(path)


@pytest.fixture
def load(binary, bodies) -> Callable[..., dict[str, Any]]:
    """``load(*sink_args, **run_args)``: one run against a sink of its own; the result."""
    def _load(*sink_args: str, **run_args: Any) -> dict[str, Any]:
        sink, port = start_sink(*sink_args)
        try:
            return run(binary, port, bodies=bodies, timeout_s=60, **run_args)
        finally:
            sink.terminate()
            sink.wait()
    return _load


@pytest.mark.parametrize("tick_us", [0, 10_000])  # a tick: two requests a wakeup
def test_every_request_is_answered_and_timed_with_its_own_cpu(load, tick_us):
    r = load(rate=200, duration_s=1.0, tick_us=tick_us, warmup_s=0.5, connections=4)
    assert r["sent"] == 300
    assert r["count"] == 200 and r["errors"] == {} and r["reconnects"] == 0
    assert r["decisions"] == {"accept": 200}
    assert r["cpu_user_s"] + r["cpu_sys_s"] > 0
    assert r["cpu_us_per_request"] == pytest.approx(
        (r["cpu_user_s"] + r["cpu_sys_s"]) * 1e6 / r["sent"], abs=0.2)
    assert r["tick_us"] == tick_us
    assert 0 < r["send_late_p50_us"] <= r["send_late_p99_us"] <= r["send_late_max_us"]
    # Latency runs from the intended start: never shorter than the lateness of the send.
    assert r["max_us"] >= r["send_late_max_us"]


def test_an_answer_is_timed_when_it_arrived_not_when_it_was_read(load):
    # Wakeups 100 ms apart at 10/s: each answer comes 50 ms after its request and lies unread
    # until the next wakeup, 100 ms after the request; its latency must be the 50 ms.
    r = load("--delay-ms", "50", rate=10, duration_s=2.0, warmup_s=0.0, connections=4,
             tick_us=100_000)
    assert r["count"] == r["sent"] == 20 and r["errors"] == {}
    assert r["rx_stamps_missing"] == 0
    assert r["min_us"] >= 49_000  # the sink's timers (uvloop) round to the millisecond
    assert r["p50_us"] < 75_000  # read at the wakeup, it would be ~100 ms


def test_a_connection_closed_while_idle_is_reopened_and_counted(load):
    # Four connections in turn at 5/s: each sits idle 0.8 s, far past the sink's 0.1 s, so a
    # sink or generator running late on a busy machine still finds every one of them closed.
    r = load("--idle-close-s", "0.1", rate=5, duration_s=4.0, warmup_s=0.0, connections=4)
    assert r["count"] == r["sent"] == 20
    assert r["errors"] == {}
    assert r["reconnects"] >= 16  # all but the first round found theirs closed


def test_a_connection_broken_mid_answer_is_an_error_and_is_replaced(load):
    # Every 5th request is cut off mid-answer; with 2 connections, a pool that lost each broken
    # connection would be empty after two and the rest of the run would never be sent.
    r = load("--break-every", "5", rate=100, duration_s=1.0, warmup_s=0.0, connections=2)
    broken = sum(r["errors"].values())
    assert r["errors"].keys() == {"UnexpectedEof"}
    assert broken == r["sent"] // 5
    assert r["count"] + broken == r["sent"] == 100
    assert r["reconnects"] == 0
