"""Log order for events read from Parquet: the ``seq`` column and the (ts, seq) sort.

The online engine ingests events in log order, and events with equal ``ts`` keep that order.
Offline, the log position is the ``seq`` column when the data carries one (our synthetic data
and exports do); otherwise it is derived from the source order: files sorted by path, rows by
their index inside the file. Callers pass the DataFrame straight from ``spark.read.parquet``
(before any filter or shuffle) to :func:`with_seq`.
"""

from __future__ import annotations

import re

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

SEQ = "seq"
TS = "ts"
row_index_bits = 40  # up to 1.1e12 rows per file, 8.3e6 files: far beyond any input here
files_max = 1 << (63 - row_index_bits)


# "file:///tmp/x" (inputFiles) and "file:/tmp/x" (_metadata) must name the same file.
_scheme_pattern = r"^[a-zA-Z][a-zA-Z0-9+.-]*:/*"


class InvariantViolation(RuntimeError):
    """An invariant of the pipeline broke; the job stops rather than write wrong values."""


def with_seq(df: DataFrame) -> DataFrame:
    """``df`` with an int64 ``seq`` column that increases in log order (no shuffle needed)."""
    if SEQ in df.columns:
        return df
    files = sorted(_normalized(path) for path in df.inputFiles())
    if not files:
        raise InvariantViolation("with_seq needs a DataFrame read from files")
    if len(files) > files_max:
        raise InvariantViolation(f"{len(files)} input files exceed files_max={files_max}")
    index = F.create_map(*[x for i, path in enumerate(files) for x in (F.lit(path), F.lit(i))])
    file_path = F.regexp_replace(F.col("_metadata.file_path"), _scheme_pattern, "/")
    file_index = index[file_path].cast("long")
    return df.withColumn(
        SEQ,
        F.shiftleft(file_index, row_index_bits) + F.col("_metadata.row_index").cast("long"),
    )


def _normalized(path: str) -> str:
    return re.sub(_scheme_pattern, "/", path)
