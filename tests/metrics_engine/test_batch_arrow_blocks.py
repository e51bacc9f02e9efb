"""Arrow columns over many windows that share their values (native plan.rs `ingest_typed`
writes them in blocks of rows, column by column): every value and type equals the lists', in
batches longer and shorter than a block, with the windows of a raw key reusing the window
before's values, and a value no column holds (a SUM beyond 64 bits, ints among floats) in a
later block refused at its own row, with every value exact."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from metrics_engine import MetricOutputError
from metrics_engine.language import parse
from metrics_engine.plan import Plan
from metrics_engine.reservoir import StreamReservoir

from .test_batch_arrow import _same

T0 = 1_700_006_400_000
# Ten misaligned windows of the same slots (W1's P3 shape, scaled down): lazy, and a raw
# key's windows read one fold and reuse its values.
TEXTS = [f"SELECT SUM(v) AS s{i}, COUNT(*) AS c{i}, MAX(v) AS mx{i} FROM payments "
         f"GROUP BY card RANGE {3000 + 170 * i} MILLISECONDS" for i in range(10)]
NAMES = [d.name for t in TEXTS for d in parse(t)]


def _plan() -> Plan:
    p = Plan(lambda _stream: StreamReservoir(None, None, None))
    for text in TEXTS:
        for d in parse(text):
            p.add(d)
    assert p.streams["payments"].native_batch
    return p


def _rows(n: int, seed: int, t0: int) -> tuple[np.ndarray, dict]:
    rng = np.random.default_rng(seed)
    ts = t0 + np.cumsum(rng.integers(0, 400, n)).astype(np.int64)
    cards = [f"k{x}" for x in rng.integers(0, 40, n)]
    return ts, {"card": pa.array(cards), "v": pa.array(rng.integers(-99, 999, n), pa.int64())}


@pytest.mark.parametrize("size", [1, 31, 33, 200])
def test_columns_over_shared_windows_equal_the_lists(size):
    lists, arrays = _plan(), _plan()
    t0 = T0
    for seed in range(4):
        ts, cols = _rows(size, seed, t0)
        t0 = int(ts[-1]) + 1
        want = lists.ingest_many("payments", ts, cols)
        got = arrays.ingest_many("payments", ts, cols, arrow=True)
        assert set(got) == set(want) == set(NAMES)
        for name in NAMES:
            _same(got[name].to_pylist(), want[name], exact_types=True, name=name)
    assert arrays.streams["payments"].core.reused_reads() > 0
    assert lists.streams["payments"].core.dump(True) == arrays.streams["payments"].core.dump(True)


@pytest.mark.parametrize("row", [40, 99])
def test_a_value_no_column_holds_in_a_later_block_is_refused_at_its_row(row):
    lists, arrays = _plan(), _plan()
    ts, cols = _rows(100, 7, T0)
    v, cards = cols["v"].to_pylist(), cols["card"].to_pylist()
    # Rows row - 1 and row: one card, 2**62 each (0.4 s apart at most: both in every window),
    # so its sums pass 64 bits at `row` first.
    cards[row - 1] = cards[row] = "big"
    v[row - 1] = v[row] = 2**62
    cols = {"card": pa.array(cards), "v": pa.array(v, pa.int64())}
    want = lists.ingest_many("payments", ts, cols)
    with pytest.raises(MetricOutputError) as e:
        arrays.ingest_many("payments", ts, cols, arrow=True)
    err = e.value
    assert err.row == row and err.metric.startswith("s")
    assert set(err.values) == set(want)
    for name, w in want.items():
        _same(err.values[name], w, exact_types=True, name=name)


# Nulls among native values: AVG and MAX of a fresh key whose events are all null are null,
# COUNT is 0. Blocks of 5 and 13 rows start off a validity byte's boundary, 8 and 32 on it.
NULLABLE = [f"SELECT AVG(v) AS a{i}, COUNT(v) AS n{i}, MAX(v) AS m{i} FROM payments "
            f"GROUP BY card RANGE {2000 + 700 * i} MILLISECONDS" for i in range(2)]


@pytest.mark.parametrize("block", [5, 8, 13, 32])
def test_validity_bits_and_null_counts_of_a_block_match_the_lists(block):
    def plan() -> Plan:
        p = Plan(lambda _stream: StreamReservoir(None, None, None))
        for text in NULLABLE:
            for d in parse(text):
                p.add(d)
        return p

    lists, arrays = plan(), plan()
    arrays.streams["payments"].core.out_block = block
    rng = np.random.default_rng(block)
    n = 157  # not a multiple of 8 or of any block
    ts = T0 + np.cumsum(rng.integers(0, 300, n)).astype(np.int64)
    cards = [f"k{x}" for x in rng.integers(0, 60, n)]
    v = [None if x < 0.45 else int(y) for x, y in zip(rng.random(n), rng.integers(-50, 50, n))]
    cols = {"card": pa.array(cards), "v": pa.array(v, pa.int64())}
    want = lists.ingest_many("payments", ts, cols)
    got = arrays.ingest_many("payments", ts, cols, arrow=True)
    names = [d.name for t in NULLABLE for d in parse(t)]
    nulls = 0
    for name in names:
        col = got[name]
        _same(col.to_pylist(), want[name], exact_types=True, name=name)
        assert col.null_count == sum(x is None for x in want[name]), name
        nulls += col.null_count
    assert 0 < nulls < n * len(names)  # both kinds of rows in the columns
