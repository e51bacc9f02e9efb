"""runner.service: a node future resolved on another thread settles the request's asyncio
future on its own loop (result, error, cancellation; a request gone away is left alone)."""

from __future__ import annotations

import asyncio
import functools
import threading
from concurrent.futures import Future

import pytest

from runner.service import _settle_threadsafe


async def _bridged(resolve) -> asyncio.Future:
    waiter = asyncio.get_running_loop().create_future()
    fut: Future = Future()
    fut.add_done_callback(functools.partial(_settle_threadsafe, waiter))
    t = threading.Thread(target=resolve, args=(fut,))
    t.start()
    try:
        await asyncio.wait_for(asyncio.shield(waiter), 10)
    except (ValueError, asyncio.CancelledError):
        pass
    t.join()
    return waiter


def test_a_result_and_an_error_reach_the_loop():
    ok = asyncio.run(_bridged(lambda f: f.set_result(7)))
    assert ok.result() == 7
    failed = asyncio.run(_bridged(lambda f: f.set_exception(ValueError("refused"))))
    with pytest.raises(ValueError, match="refused"):
        failed.result()


def test_a_cancelled_node_future_cancels_the_waiter():
    assert asyncio.run(_bridged(lambda f: f.cancel())).cancelled()


def test_an_already_resolved_future_settles_too_and_a_gone_request_is_left_alone():
    async def main():
        loop = asyncio.get_running_loop()
        done: Future = Future()
        done.set_result("x")
        waiter = loop.create_future()
        done.add_done_callback(functools.partial(_settle_threadsafe, waiter))  # runs at once
        assert await waiter == "x"
        gone = loop.create_future()
        gone.cancel()
        later: Future = Future()
        later.add_done_callback(functools.partial(_settle_threadsafe, gone))
        later.set_result("y")
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert gone.cancelled()

    asyncio.run(main())


def test_running_loop_cache_follows_the_running_loop():
    import uvloop

    from runner.service import _running_loop

    async def same() -> bool:
        return _running_loop() is asyncio.get_running_loop()

    assert asyncio.run(same()) and uvloop.run(same()) and asyncio.run(same())
    with pytest.raises(RuntimeError):
        _running_loop()  # the last loop stopped: none runs here
