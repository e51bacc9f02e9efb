"""A token bucket per API key: ``rate_per_s`` requests a second, ``burst`` at once.

Per node and in memory: a limit protects this node's request handling, not the log.
"""

from __future__ import annotations

import threading
import time

keys_max = 10_000  # buckets kept; the oldest half is dropped past this


class RateLimiter:
    def __init__(self, rate_per_s: float, burst: int) -> None:
        self.rate_per_s = rate_per_s
        self.burst = max(1, burst)
        self._lock = threading.Lock()
        self._buckets: dict[str, tuple[float, float]] = {}  # key -> (tokens, at)

    def allow(self, key: str, now_s: float | None = None) -> bool:
        if self.rate_per_s <= 0:
            return True
        now = time.monotonic() if now_s is None else now_s
        with self._lock:
            tokens, at = self._buckets.get(key, (float(self.burst), now))
            tokens = min(float(self.burst), tokens + (now - at) * self.rate_per_s)
            allowed = tokens >= 1.0
            self._buckets[key] = (tokens - 1.0 if allowed else tokens, now)
            if len(self._buckets) > keys_max:
                for old in list(self._buckets)[: keys_max // 2]:
                    del self._buckets[old]
            return allowed
