"""Hash-partitioning by group plus the (ts, seq) sort gives each group its events in log order."""

import functools

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.ordering import InvariantViolation, with_seq
from pipeline.partitioned import check_log_order, map_in_log_order


def _running_count(batches, key):
    """Per key: how many events of the key so far, and the seq of the previous one."""
    seen: dict = {}
    for batch in check_log_order(batches):
        keys = batch.column(batch.schema.get_field_index(key)).to_pylist()
        seqs = batch.column(batch.schema.get_field_index("seq")).to_pylist()
        counts, prev = [], []
        for k, s in zip(keys, seqs, strict=True):
            n, last = seen.get(k, (0, None))
            seen[k] = (n + 1, s)
            counts.append(n + 1)
            prev.append(last)
        yield pa.RecordBatch.from_arrays(
            [pa.array(seqs, pa.int64()), pa.array(counts, pa.int64()), pa.array(prev, pa.int64())],
            names=["seq", "n", "prev_seq"],
        )


@pytest.fixture(scope="module")
def events(tmp_path_factory):
    # Many ties in ts, two files, keys interleaved: the row order is the log order.
    d = tmp_path_factory.mktemp("events")
    rows = 3000
    ts = [1000 + i // 7 for i in range(rows)]
    key = [f"k{(i * 31) % 17}" for i in range(rows)]
    pq.write_table(pa.table({"ts": ts[:1700], "key": key[:1700]}), d / "part-0.parquet")
    pq.write_table(pa.table({"ts": ts[1700:], "key": key[1700:]}), d / "part-1.parquet")
    return d, ts, key


def test_groups_see_their_events_in_log_order(spark, events):
    d, ts, key = events
    df = with_seq(spark.read.parquet(str(d)))
    out = map_in_log_order(df, ["key"], functools.partial(_running_count, key="key"),
                           "seq long, n long, prev_seq long", partitions=3)
    got = {r.seq: (r.n, r.prev_seq) for r in out.collect()}
    # Oracle: walk rows in file order; seq encodes (file index, row index).
    expected, seen = {}, {}
    for i, k in enumerate(key):
        seq = i if i < 1700 else (1 << 40) + (i - 1700)
        n, last = seen.get(k, (0, None))
        expected[seq] = (n + 1, last)
        seen[k] = (n + 1, seq)
    assert got == expected


def test_out_of_order_input_is_refused():
    batch = pa.RecordBatch.from_pydict({"ts": [2, 1], "seq": [0, 1]})
    with pytest.raises(InvariantViolation):
        list(check_log_order(iter([batch])))


def test_partitions_fill_every_core_and_cap_each_engine():
    from pipeline.features import events_per_partition_max as cap
    from pipeline.features import partitions_for

    assert partitions_for(10_000, 8, 2) == 8
    assert partitions_for(15 * cap - 1, 8, 2) == 16  # 15 would idle a core a whole task
    assert partitions_for(15 * cap - 1, 8, 3) == 15
    assert partitions_for(9 * cap - 1, 4, 4) == 12
    assert partitions_for(15_000_000, 8, 2) == 100  # month: ~4 GiB of W2 state per engine
    for n, shuffle, slots in [(15_000_000, 8, 2), (1, 1, 1), (3 * cap + 1, 2, 2)]:
        p = partitions_for(n, shuffle, slots)
        assert p % slots == 0 and p >= shuffle and -(-n // p) <= cap
