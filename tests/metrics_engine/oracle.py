"""Brute-force recompute of a metric for every event, from the definition alone."""

from __future__ import annotations

import math
from fractions import Fraction

from metrics_engine.language import MetricDef
from metrics_engine.predicates import compile_expr


def stored(v):
    """A value as the engine takes it: NaN and infinities are null (the reservoir's JSON keeps
    them so, and an event counts the same live and read back)."""
    return None if type(v) is float and not math.isfinite(v) else v


def canon(v):
    """The grouping rule: numbers by value (1 == 1.0), booleans apart from numbers."""
    if type(v) is bool:
        return ("bool", v)
    if type(v) in (int, float):
        return ("num", v)
    return v


def _num(v):
    return (type(v) is int or type(v) is bool or (type(v) is float and math.isfinite(v)))


def in_window(d: MetricDef, t: int, i: int, tj: int, j: int) -> bool:
    if j > i:
        return False
    w = d.window
    if w.kind == "unbounded":
        return True
    if w.kind == "hop":
        b = (t - w.align_ms) // w.every_ms * w.every_ms + w.align_ms
        return b - w.size_ms <= tj < b
    if w.exclude_current and j == i:
        return False
    return t - w.delay_ms - w.size_ms < tj <= t - w.delay_ms


def aggregate(func: str, field, predicate, rows, t):
    vals = [stored(r.get(field)) for r in rows] if field else []
    nums = [Fraction(v) for v in vals if _num(v)]
    if func == "count":
        return len(rows) if field is None else sum(v is not None for v in vals)
    if func == "time_since_last":
        return t - rows[-1]["__ts"] if rows else None
    if func in ("sum", "avg", "var_samp", "var_pop", "stddev_samp", "stddev_pop", "skewness"):
        n = len(nums)
        if func == "sum":
            if not n:
                return None
            s = sum(nums)
            raw = [v for v in vals if _num(v)]
            return int(s) if all(type(v) is not float for v in raw) else float(s)
        if func == "avg":
            return float(sum(nums) / n) if n else None
        ddof = 1 if func.endswith("samp") else 0
        if func == "skewness":
            if n == 0:
                return None
            mean = sum(nums) / n
            m2 = sum((x - mean) ** 2 for x in nums) / n
            m3 = sum((x - mean) ** 3 for x in nums) / n
            if m2 == 0:
                return None
            g = math.sqrt(float(m3 * m3 / (m2 ** 3)))
            return g if m3 >= 0 else -g
        if n <= ddof:
            return None
        mean = sum(nums) / n
        var = sum((x - mean) ** 2 for x in nums) / (n - ddof)
        return float(var) if func.startswith("var") else math.sqrt(float(var))
    if func in ("min", "max"):
        raw = [v for v in vals if _num(v)]
        return (min(raw) if func == "min" else max(raw)) if raw else None
    if func == "count_distinct":
        return len({canon(v) for v in vals if v is not None})
    if func == "oldest":
        nn = [v for v in vals if v is not None]
        return nn[0] if nn else None
    if func == "recent":
        nn = [v for v in vals if v is not None]
        return nn[-1] if nn else None
    if func == "ratio":
        if not rows:
            return None
        p = compile_expr(predicate)
        return sum(bool(p(r)) for r in rows) / len(rows)
    raise AssertionError(func)


def key_of(d: MetricDef, ev):
    if not d.group_by:
        return ()
    if len(d.group_by) == 1:
        return canon(stored(ev.get(d.group_by[0])))
    return tuple(canon(stored(ev.get(f))) for f in d.group_by)


def expected(d: MetricDef, events: list[tuple[int, dict]]) -> list:
    """Values of ``d`` for every event; ``events`` are (clamped ts, event) in log order."""
    where = compile_expr(d.where) if d.where is not None else None
    events = [(t, {k: stored(v) for k, v in ev.items()}) for t, ev in events]
    out = []
    for i, (t, ev) in enumerate(events):
        k = key_of(d, ev)
        rows = []
        for j, (tj, ej) in enumerate(events[: i + 1]):
            if not in_window(d, t, i, tj, j):
                continue
            if where is not None and not where(ej):
                continue
            if key_of(d, ej) != k:
                continue
            rows.append({**ej, "__ts": tj})
        out.append(aggregate(d.func, d.field, d.predicate, rows, t))
    return out


def same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return a == b or math.isclose(a, b, rel_tol=1e-12, abs_tol=0.0)
    return a == b and type(a) is type(b)


def check_values(defs, stream, got, start=0):
    """Every value ``got`` gave for ``stream[start:]`` equals the brute force, metric by metric."""
    for d in defs:
        want = expected(d, stream)
        for i in range(start, len(stream)):
            g = got[i - start][d.name]
            assert same(g, want[i]), (d.name, i, g, want[i])


def check_carries_on(eng, stream, start, want, defs, held, held_want):
    """Fed ``stream[start:]`` one event at a time, ``eng`` (a restored engine) gives the values
    in ``want`` and ``held(eng) == held_want[j]`` after each event ``j``."""
    for j in range(start, len(stream)):
        tj, ej = stream[j]
        out = eng.ingest("payments", ej, tj)
        for d in defs:
            assert same(out[d.name], want[d.name][j]), (start, j, d.name, out[d.name])
        assert held(eng) == held_want[j], (start, j)
