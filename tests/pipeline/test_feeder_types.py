"""The feeder's Arrow columns have the types of the job's output schema (``value_type``) for
every function over long, double, string and boolean fields, batch after batch, so the
partition's cast to that schema never depends on a batch's values."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest
from pyspark.sql import types as T
from pyspark.sql.pandas.types import to_arrow_type

from metrics_engine.language import parse
from pipeline.engine_feed import Feeder
from pipeline.features import value_type

FUNCS = ("COUNT(*)", "COUNT(v)", "SUM(v)", "AVG(v)", "MIN(v)", "MAX(v)", "STDDEV(v)",
         "SKEWNESS(v)", "COUNT(DISTINCT v)", "OLDEST(v)", "RECENT(v)", "RATIO(k = 'a')",
         "TIME_SINCE_LAST()")
FIELDS = {"long": (T.LongType(), pa.int64()), "double": (T.DoubleType(), pa.float64()),
          "string": (T.StringType(), pa.string()), "boolean": (T.BooleanType(), pa.bool_())}


def _values(rng: random.Random, kind: str, n: int) -> list:
    pick = {"long": lambda: rng.randrange(-9, 99), "double": lambda: rng.uniform(-9, 9),
            "string": lambda: rng.choice("xyz"), "boolean": lambda: rng.random() < 0.5}[kind]
    return [None if rng.random() < 0.2 else pick() for _ in range(n)]


@pytest.mark.parametrize("kind", FIELDS)
def test_columns_have_the_output_schema_types(kind):
    spark_type, arrow_type = FIELDS[kind]
    texts = [f"SELECT {', '.join(FUNCS)} FROM p GROUP BY k RANGE 5 SECONDS"]
    defs = [d for t in texts for d in parse(t)]
    schema = T.StructType([T.StructField("ts", T.LongType()), T.StructField("k", T.StringType()),
                           T.StructField("v", spark_type)])
    feeder = Feeder(texts, batched=True)
    rng = random.Random(kind)
    t = 1_700_000_000_000
    for size in (50, 1, 80):  # batches of other sizes and other values: the same types
        ts = [t := t + rng.choice([0, 700, 2_000]) for _ in range(size)]
        batch = pa.RecordBatch.from_pydict({
            "ts": pa.array(ts, pa.int64()),
            "k": pa.array([rng.choice("ab") for _ in range(size)]),
            "v": pa.array(_values(rng, kind, size), arrow_type)})
        out = feeder.feed(batch)
        for d in defs:
            col = out[d.name]
            assert isinstance(col, pa.Array) and len(col) == size, d.name
            assert col.type == to_arrow_type(value_type(d, schema)), (d.name, col.type)
