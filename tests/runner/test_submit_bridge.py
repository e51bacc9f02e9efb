"""runner.service: a request's outcome, settled on the node's thread, reaches the request's
asyncio future on its own loop (result, error; a request gone away is left alone), and the
outcomes that arrive before the loop runs share one wakeup of it."""

from __future__ import annotations

import asyncio
import threading

import pytest

from runner.latency import LatencyRecorder
from runner.service import _inbox, _Reply, _settle_future


async def _from_thread(settle, timed: LatencyRecorder | None = None) -> asyncio.Future:
    inbox = _inbox()
    waiter = inbox.loop.create_future()
    reply = _Reply(_settle_future, waiter, inbox, timed)
    t = threading.Thread(target=settle, args=(reply,))
    t.start()
    try:
        await asyncio.wait_for(asyncio.shield(waiter), 10)
    except ValueError:
        pass
    t.join()
    return waiter


def test_a_result_and_an_error_reach_the_loop():
    timed = LatencyRecorder()
    ok = asyncio.run(_from_thread(lambda r: r.set_result(7), timed))
    assert ok.result() == 7
    assert timed.take().get_total_count() == 1  # the leader's round trip, timed once
    failed = asyncio.run(_from_thread(lambda r: r.set_exception(ValueError("refused")), timed))
    with pytest.raises(ValueError, match="refused"):
        failed.result()
    assert timed.take().get_total_count() == 0  # a failure is not a round trip


def test_outcomes_arriving_together_wake_the_loop_once():
    async def main():
        inbox = _inbox()
        wakeups = 0
        call_soon_threadsafe = inbox.loop.call_soon_threadsafe

        def counted(*args):
            nonlocal wakeups
            wakeups += 1
            return call_soon_threadsafe(*args)

        inbox.loop.call_soon_threadsafe = counted  # type: ignore[method-assign]
        try:
            waiters = [inbox.loop.create_future() for _ in range(50)]

            def settle_all():
                for i, w in enumerate(waiters):
                    _Reply(_settle_future, w, inbox, None).set_result(i)

            t = threading.Thread(target=settle_all)
            t.start()
            t.join()  # the loop is blocked here: nothing drains meanwhile
            assert await asyncio.gather(*waiters) == list(range(50))
            assert wakeups == 1
            done = inbox.loop.create_future()
            _Reply(_settle_future, done, inbox, None).set_result("again")  # a new wakeup
            assert await done == "again" and wakeups == 2
        finally:
            del inbox.loop.call_soon_threadsafe

    asyncio.run(main())


def test_a_request_gone_away_is_left_alone():
    async def main():
        inbox = _inbox()
        gone = inbox.loop.create_future()
        gone.cancel()
        kept = inbox.loop.create_future()
        _Reply(_settle_future, gone, inbox, None).set_result("y")
        _Reply(_settle_future, kept, inbox, None).set_result("z")
        assert await kept == "z"
        assert gone.cancelled()

    asyncio.run(main())


def test_running_loop_cache_follows_the_running_loop():
    import uvloop

    from runner.service import _running_loop

    async def same() -> bool:
        return _running_loop() is asyncio.get_running_loop() and _inbox().loop is \
            asyncio.get_running_loop()

    assert asyncio.run(same()) and uvloop.run(same()) and asyncio.run(same())
    with pytest.raises(RuntimeError):
        _running_loop()  # the last loop stopped: none runs here


def test_the_round_trip_recorder_folds_values_without_changing_the_histogram():
    import random

    from hdrh.histogram import HdrHistogram

    rng = random.Random(7)
    values = [int(rng.lognormvariate(7.5, 1.2)) for _ in range(10_000)]
    values += [0, 1, 2047, 2048, 2049, 4097, 59_999_999]
    ref, rec = HdrHistogram(1, 60_000_000, 3), LatencyRecorder()
    for v in values:
        ref.record_value(max(1, v))
        rec.record(v)  # folded every fold_every values, the rest on take
    got = rec.take()
    assert got.get_total_count() == ref.get_total_count() == len(values)
    for p in (0, 50, 90, 99, 99.9, 100):
        assert got.get_value_at_percentile(p) == ref.get_value_at_percentile(p)
    assert rec.take().get_total_count() == 0  # take starts a new one
