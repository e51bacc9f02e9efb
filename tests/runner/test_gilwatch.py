"""runner.gilwatch: the canary sees a thread that holds the GIL in one long C call."""

from __future__ import annotations

import re
import time

from runner.gilwatch import GilWatch


def test_the_watch_sees_the_gil_held_through_a_long_call():
    watch = GilWatch(0.002)
    watch.start()
    try:
        time.sleep(0.05)
        before = watch.take()
        # One C call holding the GIL (no bytecode, no switch): the canary cannot run meanwhile.
        started = time.perf_counter()
        re.match(r"(a+)+b", "a" * 20)  # catastrophic backtracking: tens of ms
        held_ms = (time.perf_counter() - started) * 1000
        time.sleep(0.02)
        during = watch.take()
    finally:
        watch.stop()
    assert before.get_total_count() > 0 and during.get_total_count() > 0
    # the canary woke late by about the call's length (within it: it asked mid-call)
    assert during.get_max_value() / 1000 >= held_ms / 2
    assert watch.take().get_total_count() <= 1  # taken: a new histogram started
