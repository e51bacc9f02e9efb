"""``ingest_many(..., arrow=True)`` answers every metric as a pyarrow array whose type follows
from the metric and its field's type, never from the values: the same values, bit for bit, as
the lists it gives otherwise (and as ``ingest``), for every function and window kind, over int,
float, boolean, string and mixed int/float fields, on the native path and the Python one. A
value its column cannot hold exactly (a SUM beyond 64 bits, a field that changed type while
its old values are still in a window) raises ``MetricOutputError`` once the batch went in,
with every value exact; the state is the one the lists' batch leaves."""

from __future__ import annotations

import math
import random

import numpy as np
import pyarrow as pa
import pytest

from metrics_engine import Engine, MetricOutputError
from metrics_engine.language import parse
from metrics_engine.plan import Plan
from metrics_engine.reservoir import StreamReservoir

T0 = 1_700_006_400_000  # a multiple of every bucket width below
AGGS = ("COUNT(*), COUNT(v), SUM(v), AVG(v), MIN(v), MAX(v), STDDEV(v), STDDEV_POP(v), "
        "VAR_SAMP(v), VAR_POP(v), SKEWNESS(v), COUNT(DISTINCT v), OLDEST(v), RECENT(v), "
        "RATIO(channel = 'cnp'), TIME_SINCE_LAST()")
WINDOWS = ("RANGE 5 SECONDS", "RANGE 4 SECONDS EXCLUDING CURRENT",
           "RANGE 3 SECONDS DELAY 2 SECONDS", "RANGE UNBOUNDED", "TUMBLING 4 SECONDS",
           "HOPPING 6 SECONDS EVERY 2 SECONDS")
TEXTS = [f"SELECT {AGGS} FROM payments GROUP BY card {w}" for w in WINDOWS] + [
    # SKEWNESS first: SUM then reads its power sums, which go to arbitrary precision once the
    # cubes pass i128 (the sum's own value may still fit 64 bits, or not).
    "SELECT SKEWNESS(v) AS sk, SUM(v) AS ssum FROM payments GROUP BY card RANGE 7 SECONDS"]
DEFS = [d for t in TEXTS for d in parse(t)]
# A predicate with arithmetic does not lower: the plan's batches take the Python path.
PY_PATH = "SELECT COUNT(*) AS big FROM payments WHERE n * 2 > 20 GROUP BY card RANGE 5 SECONDS"
KINDS = ("int", "float", "mixed", "bool", "str")
OPTS = dict(fsync=False, chunk_bytes_target=2048, segment_bytes_max=16 * 1024)


def want_type(func: str, kind: str) -> pa.DataType:
    """The column type the docs promise for a function over a field of ``kind``."""
    if func in ("count", "count_distinct", "time_since_last"):
        return pa.int64()
    if func in ("avg", "var_samp", "var_pop", "stddev_samp", "stddev_pop", "skewness", "ratio"):
        return pa.float64()
    if func == "sum":
        return pa.int64() if kind in ("int", "bool") else pa.float64()
    return {"int": pa.int64(), "float": pa.float64(), "mixed": pa.float64(),
            "bool": pa.bool_(), "str": pa.string()}[kind]


def _value(rng: random.Random, kind: str):
    if rng.random() < 0.15:
        return None
    if kind == "int":
        return rng.choice([rng.randrange(-50, 100), 2**40 + rng.randrange(9), -(2**45)])
    if kind == "float":
        return rng.choice([rng.randrange(-50, 100) + 0.5, 2.5, 1e9 + 0.1,
                           round(rng.uniform(-1e3, 1e3), 2)])
    if kind == "mixed":  # ints and floats in one list: a float64 column
        return rng.choice([rng.randrange(-50, 100), 2**40 + 3, 2.5, round(rng.uniform(-9, 9), 3)])
    if kind == "bool":
        return rng.random() < 0.5
    return rng.choice(["x", "y", 'z"é', ""])


def _batch(n: int, seed: int, kind: str, t0: int = T0) -> tuple[np.ndarray, dict]:
    rng = random.Random(seed)
    t, ts, rows = t0, [], []
    for _ in range(n):
        t += rng.choice([0, 100, 999, 1000, 2500, 9000])
        ts.append(t)
        rows.append((rng.choice(["a", "b", "c"]), rng.choice(["cnp", "cp"]), _value(rng, kind),
                     rng.randrange(20)))
    types = {"int": pa.int64(), "float": pa.float64(), "bool": pa.bool_(), "str": pa.string()}
    v = [r[2] for r in rows]
    cols = {"card": pa.array([r[0] for r in rows]), "channel": pa.array([r[1] for r in rows]),
            "v": v if kind == "mixed" else pa.array(v, types[kind]),
            "n": pa.array([r[3] for r in rows], pa.int64())}
    return np.array(ts, dtype=np.int64), cols


def _plan(*extra: str) -> Plan:
    """A memory-only plan, as the pipeline's feeder holds one."""
    p = Plan(lambda _stream: StreamReservoir(None, None, None))
    for text in [*TEXTS, *extra]:
        for d in parse(text):
            p.add(d)
    assert p.streams["payments"].native_batch == (not extra)
    return p


def _same(got: list, want: list, exact_types: bool, name: str) -> None:
    assert len(got) == len(want), name
    for i, (a, b) in enumerate(zip(got, want, strict=True)):
        if b is None:
            assert a is None, (name, i, a, b)
            continue
        if exact_types:
            assert type(a) is type(b), (name, i, a, b)
        if isinstance(b, float) and math.isnan(b):
            assert math.isnan(a), (name, i, a, b)
            continue
        # Python compares ints and floats exactly: 2**53 + 1 != float(2**53 + 1).
        assert a == b, (name, i, a, b)
        if isinstance(a, float) and isinstance(b, float):
            assert a.hex() == b.hex(), (name, i, a, b)


@pytest.mark.parametrize("kind", KINDS)
def test_columns_equal_the_lists_bit_for_bit(kind):
    lists, arrays = _plan(), _plan()
    for seed in range(3):  # several batches: state carries over between them
        ts, cols = _batch(300, seed, kind)
        want = lists.ingest_many("payments", ts, cols)
        got = arrays.ingest_many("payments", ts, cols, arrow=True)
        assert set(got) == set(want) == {d.name for d in DEFS}
        for d in DEFS:
            g = got[d.name]
            assert isinstance(g, pa.Array) and g.type == want_type(d.func, kind), (d.name, g.type)
            # A mixed field's ints come back as the float64 that equals them.
            _same(g.to_pylist(), want[d.name], exact_types=kind != "mixed", name=d.name)
    assert lists.streams["payments"].core.dump(True) == arrays.streams["payments"].core.dump(True)


@pytest.mark.parametrize("kind", KINDS)
def test_the_python_path_gives_the_same_columns(kind):
    native, python = _plan(), _plan(PY_PATH)
    for seed in range(2):
        ts, cols = _batch(200, seed + 10, kind)
        a = native.ingest_many("payments", ts, cols, arrow=True)
        b = python.ingest_many("payments", ts, cols, arrow=True)
        for d in DEFS:
            assert a[d.name].equals(b[d.name]), d.name
        assert b["big"].type == pa.int64()


def test_a_field_the_batch_lacks_keeps_its_type():
    lists, arrays = _plan(), _plan()
    ts, cols = _batch(200, 1, "int")
    lists.ingest_many("payments", ts, cols)
    arrays.ingest_many("payments", ts, cols, arrow=True)
    later = ts[-1] + np.arange(1, 51, dtype=np.int64) * 100
    for v in (None, pa.nulls(50)):  # absent, then all-null
        rest = {"card": pa.array(["a"] * 50), "channel": pa.array(["cp"] * 50)}
        if v is not None:
            rest["v"] = v
        want = lists.ingest_many("payments", later, rest)
        got = arrays.ingest_many("payments", later, rest, arrow=True)
        for d in DEFS:
            assert got[d.name].type == want_type(d.func, "int"), d.name
            _same(got[d.name].to_pylist(), want[d.name], exact_types=True, name=d.name)
        later = later + 5_000


def _check_refused(lists: Plan, arrays: Plan, ts, cols) -> MetricOutputError:
    want = lists.ingest_many("payments", ts, cols)
    with pytest.raises(MetricOutputError) as e:
        arrays.ingest_many("payments", ts, cols, arrow=True)
    err = e.value
    assert set(err.values) == set(want)
    for name, w in want.items():
        _same(err.values[name], w, exact_types=True, name=name)
    # The batch went in as the lists' batch did.
    assert lists.streams["payments"].core.dump(True) == arrays.streams["payments"].core.dump(True)
    return err


def test_a_sum_beyond_64_bits_is_refused_not_wrapped():
    lists, arrays = _plan(), _plan()
    ts = T0 + np.arange(6, dtype=np.int64) * 100
    cols = {"card": pa.array(["a"] * 6), "channel": pa.array(["cnp"] * 6),
            "v": pa.array([2**62, 2**62, 2**62, 1, 2, 3], pa.int64())}
    err = _check_refused(lists, arrays, ts, cols)
    sums = {d.name for d in DEFS if d.func == "sum"}
    assert err.metric in sums and "int64" in str(err)
    first = next(i for i, x in enumerate(err.values[err.metric]) if x is not None and x >= 2**63)
    assert err.row == first
    # Once the big values left every window but the unbounded one, later batches fit again
    # (that one's sum stays past 64 bits: refused every time).
    later = ts[-1] + 60_000 + np.arange(4, dtype=np.int64)
    small = {"card": pa.array(["b"] * 4), "channel": pa.array(["cp"] * 4),
             "v": pa.array([1, 2, 3, 4], pa.int64())}
    want = lists.ingest_many("payments", later, small)
    got = arrays.ingest_many("payments", later, small, arrow=True)
    for d in DEFS:
        _same(got[d.name].to_pylist(), want[d.name], exact_types=True, name=d.name)


@pytest.mark.parametrize("case", ["float then int", "int beyond 2**53 among floats"])
def test_a_value_its_column_cannot_hold_is_refused(case):
    lists, arrays = _plan(), _plan()
    ts = T0 + np.arange(2, dtype=np.int64) * 100
    card = {"card": pa.array(["a", "a"]), "channel": pa.array(["cp", "cp"])}
    if case == "float then int":
        # SUM(v) is 13.5 and MIN(v) 2.5 when v arrives as an int64 column.
        first = {**card, "v": pa.array([2.5, 4.0])}
        lists.ingest_many("payments", ts, first)
        arrays.ingest_many("payments", ts, first, arrow=True)
        err = _check_refused(lists, arrays, ts + 1_000, {**card, "v": pa.array([7, 8])})
        assert err.metric == DEFS[2].name and DEFS[2].func == "sum" and err.row == 0
        assert "13.5" in str(err) and "int64" in str(err)
    else:
        err = _check_refused(lists, arrays, ts, {**card, "v": [2**60 + 1, 0.5]})
        assert "float64" in str(err)


def test_engine_columns_leave_the_digest_of_lists(tmp_path):
    a, b = Engine(tmp_path / "a", **OPTS), Engine(tmp_path / "b", **OPTS)
    for text in TEXTS:
        a.define(text)
        b.define(text)
    for seed in range(3):
        ts, cols = _batch(250, seed, "int", T0 + seed * 60_000)
        want = a.ingest_many("payments", ts, cols)
        got = b.ingest_many("payments", ts, cols, arrow=True)
        for d in DEFS:
            _same(got[d.name].to_pylist(), want[d.name], exact_types=True, name=d.name)
    assert a.digest() == b.digest()
    b.snapshot(tmp_path / "snap")
    c = Engine(tmp_path / "c", **OPTS)
    c.restore(tmp_path / "snap")
    assert c.digest() == a.digest()
    ts, cols = _batch(250, 9, "int", T0 + 5 * 60_000)
    want = a.ingest_many("payments", ts, cols)
    got = c.ingest_many("payments", ts, cols, arrow=True)
    for d in DEFS:
        _same(got[d.name].to_pylist(), want[d.name], exact_types=True, name=d.name)
    assert c.digest() == a.digest()
    for e in (a, b, c):
        e.close()


def test_native_columns_come_as_one_record_batch_and_an_unimported_one_is_freed(tmp_path):
    """With no misfit the core hands every column over as one record batch through the Arrow
    C data interface (arrow_ffi.rs): its arrays equal the lists' values and types. An export
    nobody imports is released with its owner (no leak, no second release: a crash here)."""
    from metrics_engine.plan import field_kind, typed_column

    eng = Engine(tmp_path / "e", **OPTS)
    eng.define("SELECT SUM(v) AS s, AVG(v) AS a, RECENT(m) AS r, MAX(b) AS x, OLDEST(z) AS o "
               "FROM payments GROUP BY card RANGE 5 SECONDS")
    ts = np.arange(T0, T0 + 40 * 300, 300, dtype=np.int64)
    cols = {"card": [i % 3 for i in range(40)], "v": [i if i % 4 else None for i in range(40)],
            "m": ["", "é", None, "m"] * 10, "b": [i % 3 == 0 for i in range(40)],
            "z": [None] * 40}
    lists = Engine(tmp_path / "l", **OPTS)
    lists.define("SELECT SUM(v) AS s, AVG(v) AS a, RECENT(m) AS r, MAX(b) AS x, OLDEST(z) AS o "
                 "FROM payments GROUP BY card RANGE 5 SECONDS")
    want = lists.ingest_many("payments", ts[:20], {k: v[:20] for k, v in cols.items()})
    got = eng.ingest_many("payments", ts[:20], {k: v[:20] for k, v in cols.items()}, arrow=True)
    assert list(got) == list(want)
    for name, col in got.items():
        assert isinstance(col, pa.Array), name
        assert [(type(x), x) for x in col.to_pylist()] == [(type(x), x) for x in want[name]]
    assert got["s"].type == pa.int64() and got["r"].type == pa.string()
    assert got["o"].null_count == 20
    sp = eng._plan.streams["payments"]
    typed = [typed_column(pa.array(c[20:])) for c in cols.values()]
    kinds = sp.value_kinds({n: field_kind(c) for n, c in zip(cols, typed, strict=True)})
    out, misfits = sp.core.ingest_arrays(list(cols), typed, ts[20:].tobytes(), kinds)
    assert not misfits and not isinstance(out, dict)
    assert all(out.addresses())
    del out  # released unimported
    eng.close()
    lists.close()
