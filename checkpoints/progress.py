"""Report progress while a node catches up on the log after a bootstrap.

``CatchUp`` is polled with the applied offset (from any thread, e.g. a watcher reading
``node.applied_offset``) and logs, at most every ``interval_s``, how far the node is, its rate
and the time left; ``done`` is true once the target offset has been applied.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger(__name__)

POLL_INTERVAL_S_MIN = 0.01


@dataclass(frozen=True)
class Progress:
    applied: int
    target: int
    start: int
    rate_per_s: float
    eta_s: float | None

    @property
    def fraction(self) -> float:
        span = self.target - self.start
        return 1.0 if span <= 0 else min(1.0, max(0.0, (self.applied - self.start) / span))


class CatchUp:
    def __init__(
        self,
        start_offset: int,
        target_offset: int,
        *,
        interval_s: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.start = start_offset
        self.target = target_offset
        self.interval_s = interval_s
        self._clock = clock
        self._t0 = clock()
        self._last_log = float("-inf")
        self.history: list[Progress] = []

    def update(self, applied: int) -> Progress:
        elapsed = max(self._clock() - self._t0, 1e-9)
        rate = max(applied - self.start, 0) / elapsed
        left = self.target - applied
        eta = None if rate <= 0 else max(left, 0) / rate
        p = Progress(applied, self.target, self.start, rate, eta)
        now = self._clock()
        if now - self._last_log >= self.interval_s or applied >= self.target:
            self._last_log = now
            self.history.append(p)
            log.info(
                "catching up: applied %d of %d (%.1f%%), %.0f entries/s, %s left",
                applied,
                self.target,
                100 * p.fraction,
                rate,
                "?" if eta is None else f"{eta:.1f} s",
            )
        return p

    def done(self, applied: int) -> bool:
        return applied >= self.target

    def watch(self, applied: Callable[[], int], timeout_s: float, poll_s: float = 0.1) -> bool:
        """Poll ``applied()`` until the target is reached or ``timeout_s`` passes."""
        deadline = self._clock() + timeout_s
        while True:
            p = self.update(applied())
            if self.done(p.applied):
                return True
            if self._clock() >= deadline:
                return False
            time.sleep(max(poll_s, POLL_INTERVAL_S_MIN))
