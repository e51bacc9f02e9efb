"""The replicated log's own Python per order on a leader, with a trivial state machine.

One ``replog.Node`` leads over ``replog.testing.memlog.MemLog`` (a ``SendingLog``: records
sent on the submitting thread, delivery reports taken by the loop in ``poll_sent``, as on
Kafka) and applies ``DictKV`` puts (a few µs). A driver submits ``--orders`` entries one at a
time (the next once the previous settled), so what the loop and the submitter do per order is
the node's: the core's bookkeeping, the locks, the sink's hand-off, publish, expire. Prints
each thread's CPU per order from its own clock; NOISY on a shared machine. For cuts below the
noise count instructions, which do not move with the load (run twice, N and 2N orders, and
take the difference per order; ``--separate-threads=yes`` gives the loop's own):

    PYTHONPATH=. python bench/node_overhead.py --orders 20000
    valgrind --tool=callgrind --separate-threads=yes --callgrind-out-file=/tmp/cg.%p \\
        python bench/node_overhead.py --orders 2000
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from replog import Node  # noqa: E402
from replog.testing import ops  # noqa: E402
from replog.testing.dictkv import DictKV  # noqa: E402
from replog.testing.memlog import ManualElection, MemLog  # noqa: E402


class OneAtATime:
    """A ``Sink`` that releases the driver when its request settled."""

    __slots__ = ("event", "error")

    def __init__(self) -> None:
        self.event = threading.Event()
        self.error: BaseException | None = None

    def set_result(self, result: object) -> None:
        self.event.set()

    def set_exception(self, exception: BaseException) -> None:
        self.error = exception
        self.event.set()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--orders", type=int, default=20_000)
    args = ap.parse_args(argv)
    node = Node(DictKV(), MemLog(), ManualElection({}), node_id="n0", advertise_url="mem://n0",
                on_effects=lambda entry, effects: None)
    node.start()
    node.election.elect(1)
    deadline = time.monotonic() + 10
    while not node.is_leader and time.monotonic() < deadline:
        time.sleep(0.01)
    payloads = [ops.put(f"k{i % 1000}", i) for i in range(args.orders)]
    loop = next(t for t in threading.enumerate() if t.name.startswith("replog-loop"))
    clock = time.pthread_getcpuclockid(loop.ident)
    loop0, me0, wall0 = time.clock_gettime_ns(clock), time.thread_time_ns(), time.monotonic()
    for payload in payloads:
        sink = OneAtATime()
        node.submit_to(ops.KIND, payload, 5.0, sink)
        sink.event.wait()
        if sink.error is not None:
            raise sink.error
    loop_ns = time.clock_gettime_ns(clock) - loop0
    me_ns, wall = time.thread_time_ns() - me0, time.monotonic() - wall0
    node.stop()
    n = args.orders
    print(f"{n} entries, one at a time, {wall:.1f} s (NOISY): µs of thread CPU per entry: "
          f"loop {loop_ns / n / 1000:.1f}, submitter {me_ns / n / 1000:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
