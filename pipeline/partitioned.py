"""Run a function over whole groups of events in log order, one Spark partition at a time.

A metric's value for an event depends only on the earlier events of the same group, so a
partition that holds *every* event of its groups, sorted by (ts, seq), sees exactly what the
online engine saw for those groups. :func:`map_in_log_order` hash-partitions by the group key
(so each group lands whole in one partition), sorts within partitions by (ts, seq), and hands
the partition's Arrow batches to ``fn`` in that order. ``fn`` must return batches matching
``schema``; it runs on executors, so it must be picklable (a module-level function or a
``functools.partial`` of one).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from pipeline.ordering import SEQ, TS, InvariantViolation

PartitionFn = Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]


def map_in_log_order(df: DataFrame, key_cols: Sequence[str], fn: PartitionFn, schema: str,
                     partitions: int) -> DataFrame:
    """``fn`` applied to each partition of ``df`` grouped by ``key_cols``, in (ts, seq) order."""
    for col in (TS, SEQ, *key_cols):
        if col not in df.columns:
            raise InvariantViolation(f"map_in_log_order needs column {col!r}")
    if partitions < 1:
        raise InvariantViolation("partitions must be >= 1")
    keyed = df.repartition(partitions, *[F.col(c) for c in key_cols]) if key_cols else \
        df.repartition(1)
    return keyed.sortWithinPartitions(TS, SEQ).mapInArrow(fn, schema)


def check_log_order(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Pass batches through, raising if (ts, seq) ever goes backwards or either is null.

    Vectorized over each batch (numpy), so the check costs no Python object per event."""
    last: tuple[int, int] | None = None
    for batch in batches:
        ts_col = batch.column(batch.schema.get_field_index(TS))
        seq_col = batch.column(batch.schema.get_field_index(SEQ))
        if ts_col.null_count or seq_col.null_count:
            raise InvariantViolation("events with a null ts or seq")
        if batch.num_rows:
            ts = ts_col.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
            seq = seq_col.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
            if last is not None:
                ts = np.concatenate([[last[0]], ts])
                seq = np.concatenate([[last[1]], seq])
            dts, dseq = np.diff(ts), np.diff(seq)
            bad = np.flatnonzero((dts < 0) | ((dts == 0) & (dseq < 0)))
            if bad.size:
                i = int(bad[0]) + 1
                raise InvariantViolation(
                    f"events out of log order at (ts, seq)={(int(ts[i]), int(seq[i]))}")
            last = (int(ts[-1]), int(seq[-1]))
        yield batch
