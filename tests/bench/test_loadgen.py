"""``bench/loadgen`` against ``bench/http_sink.py``: every request is sent and answered once,
each order with its own event id; a request on a connection the server closed while idle is
sent again on a fresh one and counted in ``reconnects``, not as an error; a connection that
breaks mid-answer is an error and is replaced, so the pool never runs dry; and the generator
reports its own CPU (user + system) per request."""

from __future__ import annotations

import os
import shutil
import subprocess

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


def _sink(*args: str):
    return start_sink(*args)


def _stop(proc) -> None:
    proc.terminate()
    proc.wait()


@pytest.mark.parametrize("tick_us", [0, 10_000])  # a tick: two requests a wakeup
def test_every_request_is_answered_and_timed_with_its_own_cpu(binary, bodies, tick_us):
    sink, port = _sink()
    try:
        r = run(binary, port, rate=200, duration_s=1.0, bodies=bodies, tick_us=tick_us,
                warmup_s=0.5, connections=4, timeout_s=60)
    finally:
        _stop(sink)
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


def test_a_connection_closed_while_idle_is_reopened_and_counted(binary, bodies):
    # Four connections in turn at 10/s: each sits idle 0.4 s, past the sink's 0.2 s.
    sink, port = _sink("--idle-close-s", "0.2")
    try:
        r = run(binary, port, rate=10, duration_s=2.0, bodies=bodies, warmup_s=0.0,
                connections=4, timeout_s=60)
    finally:
        _stop(sink)
    assert r["count"] == r["sent"] == 20
    assert r["errors"] == {}
    assert r["reconnects"] >= 16  # all but the first round found theirs closed


def test_a_connection_broken_mid_answer_is_an_error_and_is_replaced(binary, bodies):
    # Every 5th request is cut off mid-answer; with 2 connections, a pool that lost each broken
    # connection would be empty after two and the rest of the run would never be sent.
    sink, port = _sink("--break-every", "5")
    try:
        r = run(binary, port, rate=100, duration_s=1.0, bodies=bodies, warmup_s=0.0,
                connections=2, timeout_s=60)
    finally:
        _stop(sink)
    broken = sum(r["errors"].values())
    assert r["errors"].keys() == {"UnexpectedEof"}
    assert broken == r["sent"] // 5
    assert r["count"] + broken == r["sent"] == 100
    assert r["reconnects"] == 0

