"""The pure-Python aggregation states the engine had before its native core: a reference.

Kept in tests only, to check the native finalizers bit for bit (test_native_states.py).
Aggregation states: ``add`` / ``remove`` / finalize, exact for every event.

Each state class keeps what one group key needs for one family of aggregations and supports
``add(value, ts, pos)`` when an event enters the window and ``remove(value, ts, pos)`` when it
leaves (windows are FIFO, so removals come in insertion order). Callers must pass the same
value to ``remove`` that they passed to ``add`` for that position.

- ``Count``: n and the time of the latest event (COUNT, TIME_SINCE_LAST).
- ``Moments``: exact integer power sums (SUM, AVG, STDDEV, VARIANCE, SKEWNESS). Integers stay
  integers; floats are turned into exact integers scaled by a power of two (the finest one in
  the window), so sums never drift and do not depend on the history of adds and removes.
  Results are rounded once, at the end.
- ``Extreme``: a monotonic deque of (pos, value), O(1) amortised per event (MIN, MAX).
- ``Distinct``: value -> multiplicity (COUNT DISTINCT).
- ``Fifo``: the window's values in order (OLDEST); ``Recent``: the last value (RECENT).
- ``Ratio``: events matching a predicate over all events.

>>> m = Moments()
>>> for p, v in enumerate([1_000_000_001.5, 1_000_000_002.25, 999_999_999.0]):
...     m.add(v, 0, p)
>>> m.remove(1_000_000_001.5, 0, 0)
>>> FINALIZERS["avg"](m, 0), FINALIZERS["sum"](m, 0)
(1000000000.625, 2000000001.25)
"""

from __future__ import annotations

import math
from collections import deque
from typing import Any

from metrics_engine.errors import InvariantViolation


def _numeric(v: Any) -> bool:
    t = type(v)
    return t is int or (t is float and math.isfinite(v)) or t is bool


class Count:
    """Events in the window (non-null values when the metric names a field)."""

    __slots__ = ("n", "last_ts")
    kind = "count"

    def __init__(self):
        self.n = 0
        self.last_ts = None

    def add(self, v, ts, pos):
        if v is None:
            return
        self.n += 1
        self.last_ts = ts

    def remove(self, v, ts, pos):
        if v is None:
            return
        self.n -= 1
        if self.n == 0:
            self.last_ts = None

    def empty(self) -> bool:
        return self.n == 0

    def canon(self):
        return (self.n, self.last_ts)


class Moments:
    """Exact power sums of order 1..``order`` of the numeric values in the window."""

    __slots__ = ("n", "fx", "f", "s1", "s2", "s3", "order")
    kind = "moments"

    def __init__(self, order: int = 3):
        self.order = order
        self.n = 0
        # Floats in the window by binary exponent k (the value is an integer times 2**-k).
        # The sums are scaled by 2**f with f = max(fx): every value in the window is then an
        # exact integer, and f goes back to 0 when the last float leaves.
        self.fx: dict[int, int] | None = None
        self.f = 0
        self.s1 = self.s2 = self.s3 = 0

    def _rescale(self, f: int):
        d = f - self.f
        if d > 0:
            self.s1 <<= d
            self.s2 <<= 2 * d
            self.s3 <<= 3 * d
        elif d < 0:
            self.s1 >>= -d
            self.s2 >>= -2 * d
            self.s3 >>= -3 * d
        self.f = f

    def _lift(self, v, delta: int):
        """The exact scaled integer of ``v`` (None if not a finite number); counts floats."""
        t = type(v)
        if t is int or t is bool:
            return int(v) << self.f
        if t is not float or not math.isfinite(v):
            return None
        num, den = v.as_integer_ratio()
        k = den.bit_length() - 1
        fx = self.fx
        if fx is None:
            fx = self.fx = {}
        c = fx.get(k, 0) + delta
        if c:
            fx[k] = c
        else:
            del fx[k]
        if k > self.f:
            self._rescale(k)
        return num << (self.f - k)

    def add(self, v, ts, pos):
        x = v if type(v) is int and not self.f else self._lift(v, 1)
        if x is None:
            return
        self.n += 1
        self.s1 += x
        if self.order > 1:
            xx = x * x
            self.s2 += xx
            if self.order > 2:
                self.s3 += xx * x

    def remove(self, v, ts, pos):
        x = v if type(v) is int and not self.f else self._lift(v, -1)
        if x is None:
            return
        self.n -= 1
        self.s1 -= x
        if self.order > 1:
            xx = x * x
            self.s2 -= xx
            if self.order > 2:
                self.s3 -= xx * x
        if self.f:
            f = max(self.fx) if self.fx else 0
            if f < self.f:  # the finest float left: coarser scale, still exact
                self._rescale(f)
        if self.n == 0 and (self.s1 or self.s2 or self.s3):
            raise InvariantViolation("power sums are not zero in an empty window")

    def empty(self) -> bool:
        return self.n == 0

    def canon(self):
        fx = tuple(sorted(self.fx.items())) if self.fx else ()
        return (self.n, fx, self.f, self.s1, self.s2, self.s3, self.order)


class Extreme:
    """Monotonic deque for MIN (``sign`` = 1) or MAX (``sign`` = -1)."""

    __slots__ = ("q", "sign")
    kind = "extreme"

    def __init__(self, sign: int = 1):
        self.sign = sign
        self.q: deque = deque()

    def add(self, v, ts, pos):
        if not _numeric(v):
            return
        q = self.q
        if self.sign == 1:
            while q and q[-1][1] > v:
                q.pop()
        else:
            while q and q[-1][1] < v:
                q.pop()
        q.append((pos, v))

    def remove(self, v, ts, pos):
        q = self.q
        if q and q[0][0] == pos:
            q.popleft()

    def empty(self) -> bool:
        return not self.q

    def canon(self):
        return (self.sign, tuple(self.q))


class Distinct:
    """Multiset of the window's non-null values."""

    __slots__ = ("counts",)
    kind = "distinct"

    def __init__(self):
        self.counts: dict = {}

    def add(self, v, ts, pos):
        if v is None:
            return
        if type(v) is list:
            v = tuple(v)
        c = self.counts
        c[v] = c.get(v, 0) + 1

    def remove(self, v, ts, pos):
        if v is None:
            return
        if type(v) is list:
            v = tuple(v)
        c = self.counts
        k = c[v] - 1
        if k:
            c[v] = k
        else:
            del c[v]

    def empty(self) -> bool:
        return not self.counts

    def canon(self):
        return tuple(sorted(self.counts.items(), key=repr))


class Fifo:
    """The window's non-null values in arrival order (for OLDEST)."""

    __slots__ = ("q",)
    kind = "fifo"

    def __init__(self):
        self.q: deque = deque()

    def add(self, v, ts, pos):
        if v is not None:
            self.q.append((pos, v))

    def remove(self, v, ts, pos):
        if v is None:
            return
        head = self.q.popleft()
        if head[0] != pos:
            raise InvariantViolation(f"FIFO removal out of order: {head[0]} != {pos}")

    def empty(self) -> bool:
        return not self.q

    def canon(self):
        return tuple(self.q)


class Recent:
    """Number of non-null values and the latest one (for RECENT)."""

    __slots__ = ("n", "last")
    kind = "recent"

    def __init__(self):
        self.n = 0
        self.last = None

    def add(self, v, ts, pos):
        if v is not None:
            self.n += 1
            self.last = v

    def remove(self, v, ts, pos):
        if v is not None:
            self.n -= 1
            if self.n == 0:
                self.last = None

    def empty(self) -> bool:
        return self.n == 0

    def canon(self):
        return (self.n, self.last)


class Ratio:
    """Events matching a predicate, and all events. ``add`` gets the predicate's truth."""

    __slots__ = ("n", "hits")
    kind = "ratio"

    def __init__(self):
        self.n = 0
        self.hits = 0

    def add(self, hit, ts, pos):
        self.n += 1
        if hit:
            self.hits += 1

    def remove(self, hit, ts, pos):
        self.n -= 1
        if hit:
            self.hits -= 1

    def empty(self) -> bool:
        return self.n == 0

    def canon(self):
        return (self.n, self.hits)


# -- finalizers: (state or None, ts of the question) -> value -------------------------------

def _sum(m, ts):
    if m is None or m.n == 0:
        return None
    return m.s1 / (1 << m.f) if m.fx else m.s1  # a float in the window: a float sum


def _avg(m, ts):
    if m is None or m.n == 0:
        return None
    return m.s1 / (m.n << m.f)


def _var(m, ddof):
    if m is None or m.n <= ddof:
        return None
    num = m.n * m.s2 - m.s1 * m.s1  # exact, >= 0
    return num / ((m.n * (m.n - ddof)) << (2 * m.f))


def _skewness(m, ts):
    if m is None or m.n == 0:
        return None
    n, s1, s2, s3 = m.n, m.s1, m.s2, m.s3
    b = n * s2 - s1 * s1
    if b == 0:
        return None
    a = n * n * s3 - 3 * n * s1 * s2 + 2 * s1 * s1 * s1
    g = math.sqrt((a * a) / (b * b * b))  # exact ratio, rounded once
    return g if a >= 0 else -g


def _sqrt_or_none(v):
    return None if v is None else math.sqrt(v)


FINALIZERS = {
    "count": lambda s, ts: 0 if s is None else s.n,
    "time_since_last": lambda s, ts: None if s is None or s.last_ts is None else ts - s.last_ts,
    "sum": _sum,
    "avg": _avg,
    "var_samp": lambda s, ts: _var(s, 1),
    "var_pop": lambda s, ts: _var(s, 0),
    "stddev_samp": lambda s, ts: _sqrt_or_none(_var(s, 1)),
    "stddev_pop": lambda s, ts: _sqrt_or_none(_var(s, 0)),
    "skewness": _skewness,
    "min": lambda s, ts: s.q[0][1] if s is not None and s.q else None,
    "max": lambda s, ts: s.q[0][1] if s is not None and s.q else None,
    "count_distinct": lambda s, ts: 0 if s is None else len(s.counts),
    "oldest": lambda s, ts: s.q[0][1] if s is not None and s.q else None,
    "recent": lambda s, ts: None if s is None else s.last,
    "ratio": lambda s, ts: None if s is None or s.n == 0 else s.hits / s.n,
}

# Which state a function needs: (state kind, constructor argument).
STATE_OF = {
    "count": ("count", None), "time_since_last": ("count", None),
    "sum": ("moments", 1), "avg": ("moments", 1),
    "var_samp": ("moments", 2), "var_pop": ("moments", 2),
    "stddev_samp": ("moments", 2), "stddev_pop": ("moments", 2),
    "skewness": ("moments", 3),
    "min": ("extreme", 1), "max": ("extreme", -1),
    "count_distinct": ("distinct", None), "oldest": ("fifo", None),
    "recent": ("recent", None), "ratio": ("ratio", None),
}

CLASSES = {"count": Count, "moments": Moments, "extreme": Extreme, "distinct": Distinct,
           "fifo": Fifo, "recent": Recent, "ratio": Ratio}


def new_state(kind: str, arg):
    """A fresh, empty state of ``kind`` (see ``STATE_OF``)."""
    cls = CLASSES[kind]
    return cls() if arg is None else cls(arg)
