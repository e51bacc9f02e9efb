"""``ingest_many`` for plans without predicates runs natively over typed columns (no Python
object per row): it must give exactly what ``ingest`` gives, store events that read back the
same (backfills, restarts, crashes mid-batch) and refuse a bad row before anything changes."""

from __future__ import annotations

import math
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from metrics_engine import Engine, MetricInputError
from metrics_engine.plan import typed_column

OPTS = dict(fsync=False, chunk_bytes_target=1024, segment_bytes_max=8 * 1024)
T0 = 1_700_000_000_000
# No WHERE, no RATIO: the plan has no predicate, so ingest_many takes the native path.
PLAIN = [
    "SELECT SUM(amount) AS s5, COUNT(*) AS n5, MAX(amount) AS mx5, MIN(score) AS lo5 "
    "FROM payments GROUP BY card RANGE 5 MINUTES",
    "SELECT AVG(amount) AS avg5, COUNT(DISTINCT card) AS dc5 FROM payments "
    "GROUP BY merchant RANGE 5 MINUTES",
    "SELECT OLDEST(amount) AS old1h, RECENT(channel) AS rc1h, STDDEV(score) AS sd1h "
    "FROM payments GROUP BY card RANGE 1 HOURS DELAY 5 MINUTES",
    "SELECT COUNT(*) AS nf, SUM(amount) AS sf FROM payments GROUP BY flag "
    "RANGE 1 DAYS EXCLUDING CURRENT",
    "SELECT SKEWNESS(amount) AS sk FROM payments GROUP BY card HOPPING 2 HOURS EVERY 30 MINUTES",
]


def _rows(n: int, seed: int = 3) -> tuple[list[int], list[dict]]:
    """Events with nulls, NaN, strings needing escapes, booleans, a column no metric reads
    (a list: kept in the reservoir as JSON) and now and then a late timestamp (clamped)."""
    rng = np.random.default_rng(seed)
    ts, rows, t = [], [], T0
    for i in range(n):
        t += int(rng.choice([0, 1_000, 20_000, 61_000, 200_000]))
        ts.append(t if i % 41 else t - 7_000)
        score = float(rng.uniform(-5, 5)) if i % 13 else (math.nan if i % 2 else None)
        rows.append({
            "id": i,
            "card": None if i % 29 == 0 else f"c{int(rng.integers(12))}",
            "merchant": ['m"1', "m\\2", "m\n3", "mé4"][int(rng.integers(4))],
            "channel": "cnp" if i % 3 else "cp",
            "amount": None if i % 17 == 0 else int(rng.integers(-500, 50_000)),
            "score": score,
            "flag": bool(i % 5),
            "tags": [i % 3, i % 7] if i % 4 else None,
        })
    return ts, rows


def _engine(path) -> Engine:
    eng = Engine(path, **OPTS)
    for m in PLAIN:
        eng.define(m)
    return eng


def _reference(tmp: Path, ts, rows):
    ref = _engine(tmp / "ref")
    want = [ref.ingest("payments", ev, t) for t, ev in zip(ts, rows, strict=True)]
    digest = ref.digest()
    ref.close()
    return want, digest


def _same(got: dict[str, list], want: list[dict]) -> None:
    for name in want[0]:
        g = [(type(v), v) for v in got[name]]
        w = [(type(x[name]), x[name]) for x in want]
        # NaN is never equal to itself: compare those by kind.
        g = [(t, "nan" if isinstance(v, float) and math.isnan(v) else v) for t, v in g]
        w = [(t, "nan" if isinstance(v, float) and math.isnan(v) else v) for t, v in w]
        assert g == w, name


def _batches(ts, rows, size: int, form: str):
    table = pa.Table.from_pylist(rows)
    tsa = np.array(ts, dtype=np.int64)
    for lo in range(0, len(rows), size):
        part = table.slice(lo, size)  # sliced arrays: offsets into shared buffers
        if form == "numpy":
            # numpy holds no nulls: a column with some goes as a list of Python values.
            cols = {n: (c.to_pylist() if c.null_count else c.to_numpy())
                    for n, c in zip(part.column_names, part.columns, strict=True)}
            yield tsa[lo:lo + size], cols
        elif form == "chunked":
            cols = {n: pa.chunked_array([a.slice(0, 7), a.slice(7)])
                    for n, a in zip(part.column_names,
                                    [c.combine_chunks() for c in part.columns], strict=True)}
            yield pa.array(tsa[lo:lo + size]), cols
        else:
            yield tsa[lo:lo + size], part


@pytest.mark.parametrize("form", ["arrow", "numpy", "chunked"])
def test_native_batches_give_what_ingest_gives(tmp_path, form):
    ts, rows = _rows(1500)
    want, digest = _reference(tmp_path, ts, rows)
    eng = _engine(tmp_path / "b")
    assert eng._plan.streams["payments"].native_batch
    got: dict[str, list] = {}
    for t, cols in _batches(ts, rows, 400, form):
        for k, v in eng.ingest_many("payments", t, cols).items():
            got.setdefault(k, []).extend(v)
    _same(got, want)
    assert eng.digest() == digest
    assert eng.positions()["payments"] == len(rows)
    eng.close()


def test_batches_and_single_events_interleave(tmp_path):
    ts, rows = _rows(1200, seed=5)
    want, digest = _reference(tmp_path, ts, rows)
    eng = _engine(tmp_path / "b")
    got: dict[str, list] = {}
    lo = 0
    for size in (1, 250, 3, 400, 1, 300):
        if size < 10:
            for t, ev in zip(ts[lo:lo + size], rows[lo:lo + size], strict=True):
                for k, v in eng.ingest("payments", ev, t).items():
                    got.setdefault(k, []).append(v)
        else:
            table = pa.Table.from_pylist(rows[lo:lo + size])
            for k, v in eng.ingest_many("payments", ts[lo:lo + size], table).items():
                got.setdefault(k, []).extend(v)
        lo += size
    for t, ev in zip(ts[lo:], rows[lo:], strict=True):
        for k, v in eng.ingest("payments", ev, t).items():
            got.setdefault(k, []).append(v)
    _same(got, want)
    assert eng.digest() == digest
    eng.close()


def test_a_metric_defined_after_a_batch_is_filled_from_its_events(tmp_path):
    """The batch left its rows as JSON only; a backfill decodes them (open and closed chunks)."""
    ts, rows = _rows(900, seed=8)
    late = "SELECT SUM(id) AS ids, MAX(merchant) AS mm FROM payments GROUP BY channel RANGE 1 DAYS"
    ref = _engine(tmp_path / "ref")
    ref.define(late)
    want = [ref.ingest("payments", ev, t) for t, ev in zip(ts, rows, strict=True)]
    ref.close()
    eng = _engine(tmp_path / "b")
    eng.ingest_many("payments", ts[:700], pa.Table.from_pylist(rows[:700]))
    eng.define(late)  # now the plan has no predicate either; filled from 700 stored events
    out = eng.ingest_many("payments", ts[700:], pa.Table.from_pylist(rows[700:]))
    assert out["ids"] == [w["ids"] for w in want[700:]]
    assert out["mm"] == [w["mm"] for w in want[700:]]
    eng.close()


def test_a_bad_row_refuses_the_batch_before_anything_changes(tmp_path):
    ts, rows = _rows(300, seed=9)
    eng = _engine(tmp_path / "e")
    eng.ingest_many("payments", ts[:100], pa.Table.from_pylist(rows[:100]))
    before = (eng.digest(), eng.positions())
    cols = {k: [r[k] for r in rows[100:]] for k in rows[0]}
    cols["amount"][120] = 2**70  # no 64-bit integer
    with pytest.raises(MetricInputError) as e:
        eng.ingest_many("payments", ts[100:], cols)
    assert e.value.index == 120 and e.value.field == "amount"
    cols["amount"][120] = rows[220]["amount"]
    cols["card"][7] = {"not": "a key"}
    with pytest.raises(MetricInputError) as e:
        eng.ingest_many("payments", ts[100:], cols)
    assert e.value.index == 7 and e.value.field == "card"
    assert (eng.digest(), eng.positions()) == before
    eng.close()


def test_typed_columns_read_the_values_arrow_holds():
    assert typed_column(pa.array([1, None, 3]))[0] == "i"
    assert typed_column(pa.array([1.5, None]))[0] == "f"
    assert typed_column(pa.array([True, None]))[0] == "b"
    assert typed_column(pa.array(["a", None]).slice(1))[0] == "s"
    assert typed_column(pa.array([None, None]))[0] == "n"
    assert typed_column(pa.array([2**63], pa.uint64()))[0] == "o"  # beyond 64-bit signed
    assert typed_column(pa.array([[1]]))[0] == "o"
    assert typed_column(np.array(["a"], dtype=object))[0] == "o"
    kind, valid, offsets, data = typed_column(pa.array(["ab", None, "cde", ""]).slice(1))
    assert (kind, data, valid) == ("s", b"cde", bytes([0, 1, 1]))
    assert np.frombuffer(offsets, dtype=np.int64).tolist() == [0, 0, 3, 3]


CHILD = textwrap.dedent("""
    import os, signal, sys
    sys.path.insert(0, {root!r})
    import pyarrow as pa
    from metrics_engine.engine import Engine
    from tests.metrics_engine.test_batch_native import OPTS, PLAIN, _rows
    opts = dict(OPTS, fsync=True)
    eng = Engine({data!r}, **opts)
    for m in PLAIN:
        eng.define(m)
    ts, rows = _rows({n})
    eng.ingest_many("payments", ts[:600], pa.Table.from_pylist(rows[:600]))
    eng.sync()
    eng.ingest_many("payments", ts[600:{kill}], pa.Table.from_pylist(rows[600:{kill}]))
    os.kill(os.getpid(), signal.SIGKILL)
""")


def test_a_crash_after_batches_then_refeed_gives_identical_digests(tmp_path):
    n, kill = 1500, 1100
    root = str(Path(__file__).resolve().parents[2])
    code = CHILD.format(root=root, data=str(tmp_path / "crashed"), n=n, kill=kill)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()[-2000:]
    ts, rows = _rows(n)
    want, digest = _reference(tmp_path, ts, rows)
    eng = Engine(tmp_path / "crashed", **OPTS)
    durable = eng.durable_positions()["payments"]
    assert 600 <= durable <= kill
    out = eng.ingest_many("payments", ts[durable:], pa.Table.from_pylist(rows[durable:]))
    _same(out, want[durable:])
    assert eng.digest() == digest
    eng.close()


# WHERE and RATIO over a field of every kind: the batch evaluates them natively
# (predicate.rs), ``ingest`` with predicates.py's closures; they must agree on every row.
MIXED = [0, 1, 1.0, True, False, 2, 2.5, -3, 10**15, "a", "", "b", "é", None, [1], {"k": 1}, []]
PREDICATES = [
    "x = 1", "x != 1", "x > 1", "x <= 2.5", "x < 'b'", "x >= ''", "x = 'a'", "x != 'a'",
    "x IN (1, 'a', TRUE)", "x NOT IN (2, 'b')", "x IS NULL", "x IS NOT NULL",
    "NOT x = 1", "(x > 0 AND y = 'p') OR x = 'a'", "NOT (x < 1 OR y != 'q')", "x = NULL",
    "1 < x", "'a' = x", "x IN (NULL, 2.5)", "x > TRUE",
]


def _mixed(n: int, seed: int) -> tuple[list[int], list[dict]]:
    rng = np.random.default_rng(seed)
    ts = [T0 + 1000 * i for i in range(n)]
    rows = [{"g": f"g{int(rng.integers(3))}", "x": MIXED[int(rng.integers(len(MIXED)))],
             "y": ["p", "q", None][int(rng.integers(3))], "amount": int(rng.integers(100))}
            for _ in range(n)]
    return ts, rows


def test_native_predicates_agree_with_python_ones(tmp_path):
    defs = [f"SELECT COUNT(*) AS w{i}, RATIO({p}) AS r{i} FROM s WHERE {p} GROUP BY g "
            f"RANGE 2 MINUTES" for i, p in enumerate(PREDICATES)]
    ts, rows = _mixed(900, 4)
    ref = Engine(tmp_path / "ref", **OPTS)
    eng = Engine(tmp_path / "b", **OPTS)
    for d in defs:
        ref.define(d)
        eng.define(d)
    assert eng._plan.streams["s"].native_batch
    want = [ref.ingest("s", ev, t) for t, ev in zip(ts, rows, strict=True)]
    got: dict[str, list] = {}
    for lo in range(0, len(rows), 300):
        cols = {k: [r[k] for r in rows[lo:lo + 300]] for k in rows[0]}
        for k, v in eng.ingest_many("s", ts[lo:lo + 300], cols).items():
            got.setdefault(k, []).extend(v)
    _same(got, want)
    assert eng.digest() == ref.digest()
    ref.close()
    eng.close()


def test_arithmetic_predicates_keep_the_python_path(tmp_path):
    ts, rows = _rows(400, seed=2)
    d = "SELECT COUNT(*) AS big FROM payments WHERE amount * 2 > 20000 GROUP BY card RANGE 1 HOURS"
    ref = Engine(tmp_path / "ref", **OPTS)
    eng = Engine(tmp_path / "b", **OPTS)
    ref.define(d)
    eng.define(d)
    assert not eng._plan.streams["payments"].native_batch
    want = [ref.ingest("payments", ev, t) for t, ev in zip(ts, rows, strict=True)]
    out = eng.ingest_many("payments", ts, pa.Table.from_pylist(rows))
    assert out["big"] == [w["big"] for w in want]
    ref.close()
    eng.close()


KILL_MID_BATCH = textwrap.dedent("""
    import os, signal, sys, threading, time
    sys.path.insert(0, {root!r})
    import pyarrow as pa
    from metrics_engine.engine import Engine
    from tests.metrics_engine.test_batch_native import OPTS, PLAIN, _rows
    eng = Engine({data!r}, **dict(OPTS, fsync=True))
    for m in PLAIN:
        eng.define(m)
    ts, rows = _rows({n})
    eng.ingest_many("payments", ts[:500], pa.Table.from_pylist(rows[:500]))
    eng.sync()
    table = pa.Table.from_pylist(rows[500:])
    # The kill lands somewhere inside the next call: wherever it does, recovery holds.
    threading.Timer({delay}, lambda: os.kill(os.getpid(), signal.SIGKILL)).start()
    while True:
        eng.ingest_many("payments", ts[500:], table)  # late rows: clamped, still ingested
""")


@pytest.mark.parametrize("delay", [0.0, 0.05])
def test_a_kill_inside_a_batch_then_refeed_gives_identical_digests(tmp_path, delay):
    n = 1500
    root = str(Path(__file__).resolve().parents[2])
    code = KILL_MID_BATCH.format(root=root, data=str(tmp_path / "crashed"), n=n, delay=delay)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()[-2000:]
    eng = Engine(tmp_path / "crashed", **OPTS)
    durable = eng.durable_positions()["payments"]
    assert durable > 0  # the chunks closed before the sync at least
    # What the crashed engine was fed: the first 500 rows, then rows[500:] over and over.
    ts, rows = _rows(n)
    fed_ts, fed = ts[:500], rows[:500]
    while len(fed) < durable + 10:
        fed_ts, fed = fed_ts + ts[500:], fed + rows[500:]
    want, digest = _reference(tmp_path, fed_ts[:durable + 10], fed[:durable + 10])
    out = eng.ingest_many("payments", fed_ts[durable:durable + 10],
                          pa.Table.from_pylist(fed[durable:durable + 10]))
    _same(out, want[durable:])
    assert eng.digest() == digest
    eng.close()
