"""How long a thread of this process waits before it may run Python: a canary thread.

Every ``period_s`` the ``gil-watch`` thread sleeps (the GIL released) and, on waking, notes how
much later than asked it got to run Python again: the time it waited for a core (the
scheduler's run queue; ``bench/census.py`` reads that part apart from the kernel) plus the time
it waited for the GIL. The GIL part is what every latency-bound thread of the node (the HTTP
front, the apply loop, a reply's wakeup) pays each time it wants the interpreter while another
thread holds it: a collection of the cyclic collector, one long C call (a pyarrow conversion, a
JSON encoding of a large batch), or a throughput-bound thread's switch interval
(``Settings.gil_switch_ms``). ``take()`` hands out the delays since the last call as a
histogram of microseconds.

Off by default (``Settings.gil_watch_ms`` = 0); a node with it on spends ~1 % of a core at a
1 ms period, ~0.2 % at 5 ms. ``bench/api_w3.py`` turns it on for its nodes and reads it with the
leader's round trips (``/internal/v1/round-trip``).
"""

from __future__ import annotations

import threading
import time

from hdrh.histogram import HdrHistogram

from runner.latency import LatencyRecorder


class GilWatch:
    def __init__(self, period_s: float) -> None:
        self.period_s = period_s
        self._late = LatencyRecorder()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gil-watch", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        period, clock = self.period_s, time.perf_counter
        while not self._stop.is_set():
            asked = clock()
            time.sleep(period)
            self._late.record(int((clock() - asked - period) * 1e6))

    def take(self) -> HdrHistogram:
        """The delays (µs) since the last call."""
        return self._late.take()
