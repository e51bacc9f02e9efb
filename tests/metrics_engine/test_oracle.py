"""Every window type x aggregation x grouping equals a brute-force recompute, for every event."""

from __future__ import annotations

import tempfile

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from metrics_engine import offline
from metrics_engine.engine import Engine
from metrics_engine.language import parse

from .oracle import expected, same

WINDOWS = [
    "RANGE 5 SECONDS",
    "RANGE 5 SECONDS EXCLUDING CURRENT",
    "RANGE 4 SECONDS DELAY 3 SECONDS",
    "RANGE 3 SECONDS DELAY 2 SECONDS EXCLUDING CURRENT",
    "TUMBLING 4 SECONDS",
    "HOPPING 6 SECONDS EVERY 2 SECONDS",
    "RANGE UNBOUNDED",
]
# Three fields: keys longer than the native index holds inline (keyed.rs `Key`).
GROUPS = ["", "GROUP BY card", "GROUP BY card, channel", "GROUP BY card, channel, merchant"]
WHERES = ["", "WHERE channel = 'cnp'", "WHERE amount > 20 OR merchant IS NULL"]
AGGS = ("COUNT(*), COUNT(merchant), SUM(amount), AVG(amount), MIN(amount), MAX(amount), "
        "STDDEV(amount), STDDEV_POP(amount), VAR_SAMP(amount), VAR_POP(amount), "
        "SKEWNESS(amount), COUNT(DISTINCT merchant), OLDEST(amount), RECENT(merchant), "
        "RATIO(is_fraud = 1), TIME_SINCE_LAST()")

amounts = st.one_of(st.integers(-50, 100), st.integers(10**15, 10**15 + 5),
                    st.floats(-1e3, 1e3, allow_nan=False).map(lambda x: round(x, 2)),
                    st.sampled_from([1e9 + 0.1, 1e9 + 0.3, 1e9 - 0.7]), st.none())
event = st.fixed_dictionaries({
    "dt": st.sampled_from([0, 0, 1, 999, 1000, 1000, 1000, 2000, 3000, 5000, 7000, -500]),
    "card": st.sampled_from(["a", "b", "c", 1, 1.0, True]),  # 1 and 1.0 are one key
    "channel": st.sampled_from(["cnp", "cp"]),
    "merchant": st.one_of(st.sampled_from(["m1", "m2", "m3", "m4"]), st.none()),
    "amount": amounts,
    "is_fraud": st.sampled_from([0, 0, 1]),
})


def _timeline(raw):
    t, out = 1_700_000_000_000, []
    for e in raw:
        t += e["dt"]  # a negative step exercises clamping
        ev = {k: v for k, v in e.items() if k != "dt"}
        out.append((t, ev))
    return out


def _clamped(timeline):
    last, out = None, []
    for t, ev in timeline:
        last = t if last is None or t > last else last
        out.append((last, ev))
    return out


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(raw=st.lists(event, min_size=1, max_size=40), window=st.sampled_from(WINDOWS),
       group=st.sampled_from(GROUPS), where=st.sampled_from(WHERES))
def test_engine_matches_brute_force(raw, window, group, where):
    text = f"SELECT {AGGS} FROM payments {where} {group} {window}"
    defs = parse(text)
    timeline = _timeline(raw)
    clamped = _clamped(timeline)
    with tempfile.TemporaryDirectory() as tmp:
        # Tiny chunks: every few events a chunk closes, is written and read back from disk.
        eng = Engine(tmp, chunk_bytes_target=200, segment_bytes_max=600, fsync=False)
        eng.define(text)
        got = [eng.ingest("payments", ev, t) for t, ev in timeline]
        eng.close()
    rows = [{**ev, "ts": t} for t, ev in clamped]
    off = list(offline.compute(text, rows))
    for d in defs:
        want = expected(d, clamped)
        for i, w in enumerate(want):
            assert same(got[i][d.name], w), (d.name, i, got[i][d.name], w)
            assert same(off[i][d.name], w), ("offline", d.name, i, off[i][d.name], w)
