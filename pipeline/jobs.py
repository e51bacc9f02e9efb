"""The pipeline's jobs end to end (read Parquet, run, write Parquet/JSON), for the CLI,
``spark-submit`` and the benchmark alike.

Each job takes a Spark session and paths, and returns a small dict of figures (events, wall
time, where it wrote). Metric definitions come from a named set (:mod:`pipeline.feature_sets`)
or a text file with one definition per line; workflows from a JSON file or a named example of
:mod:`workflows.examples`. Scores for a backtest are read from ``score_<name>`` columns; a
caller without recorded scores may add them with :func:`add_scores` and a scorer function it
names (e.g. the runner's demo scorer), so nothing is invented silently.
"""

from __future__ import annotations

import functools
import importlib
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import orjson
import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession

from pipeline import backfill as backfill_mod
from pipeline import backtest as backtest_mod
from pipeline import feature_files, feature_sets, features, synthetic_job
from pipeline.ordering import InvariantViolation, with_seq
from pipeline.sources import read_events
from workflows import Workflow, examples

SUMMARY = "summary.json"  # beside OUTCOMES, the per-event Parquet directory
OUTCOMES = "outcomes"
TABLES = "summary"  # the summary's tables as Parquet (by_action, by_path, hits, changes, ...)


def _join(base: str, name: str) -> str:
    """``base/name`` for local paths and URLs alike (Path would fold ``s3a://``)."""
    return f"{base.rstrip('/')}/{name}"


def _write_bytes(path: str, data: bytes) -> None:
    if "://" in path:
        from pyarrow import fs as pafs

        filesystem, p = pafs.FileSystem.from_uri(path)
        with filesystem.open_output_stream(p) as f:
            f.write(data)
        return
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_bytes(data)


def load_definitions(spec: str) -> list[str]:
    """A named set (w1, w2, w2_card, w3) or a file of definitions, one per non-empty line."""
    if spec in feature_sets.SETS:
        return feature_sets.definitions(spec)
    lines = Path(spec).read_text().splitlines()
    return [x.strip() for x in lines if x.strip() and not x.lstrip().startswith("#")]


def load_workflow(spec: str) -> Workflow:
    """A JSON file of a workflow, or the name of an example (sift_example, w3_demo)."""
    if spec in ("sift_example", "w3_demo"):
        return getattr(examples, spec)()
    return Workflow.model_validate_json(Path(spec).read_bytes())


def load_callable(spec: str) -> Callable:
    """``module:function``, imported on demand (the pipeline imports no scorer itself)."""
    module, _, name = spec.partition(":")
    if not name:
        raise InvariantViolation(f"scorer must be module:function, got {spec!r}")
    return getattr(importlib.import_module(module), name)


def _score_partition(batches: Iterator[pa.RecordBatch], scorer_spec: str,
                     column: str) -> Iterator[pa.RecordBatch]:
    scorer = load_callable(scorer_spec)
    for batch in batches:
        scores = [float(scorer(row)) for row in batch.to_pylist()]
        yield batch.append_column(column, pa.array(scores, pa.float64()))


def add_scores(df: DataFrame, scorer_spec: str, name: str) -> DataFrame:
    """``df`` plus ``score_<name>`` computed per row by the scorer ``module:function``."""
    from pyspark.sql import types as T

    column = backtest_mod.SCORE_PREFIX + name
    schema = T.StructType([*df.schema.fields, T.StructField(column, T.DoubleType(), True)])
    fn = functools.partial(_score_partition, scorer_spec=scorer_spec, column=column)
    return df.mapInArrow(fn, schema)


def run_features(spark: SparkSession, events: str, metrics: str, out: str,
                 partitions: int | None = None) -> dict:
    defs = load_definitions(metrics)
    t0 = time.perf_counter()
    n = feature_files.write_features(read_events(spark, events), defs, out, partitions)
    return {"job": "features", "events": n, "metrics": len(features.parse_definitions(defs)),
            "seconds": time.perf_counter() - t0, "out": out}


def run_backfill(spark: SparkSession, events: str, new: str, existing: str | None,
                 out: str, stream: str = "payments",
                 progress: Callable[[int], None] | None = None,
                 partitions: int | None = None) -> dict:
    t0 = time.perf_counter()
    manifest = backfill_mod.backfill(read_events(spark, events), load_definitions(new),
                                     load_definitions(existing) if existing else [], out,
                                     stream, progress, partitions)
    return {"job": "backfill", "events": manifest.events, "new_metrics": manifest.new_metrics,
            "last_seq": manifest.last_seq, "digest": manifest.digest,
            "seconds": time.perf_counter() - t0, "out": out}


def run_backtest(spark: SparkSession, history: str, workflow: str, out: str,
                 version: int = 0, base: str | None = None, base_version: int = 0,
                 scorer: str | None = None, score_name: str = "payment_abuse") -> dict:
    t0 = time.perf_counter()
    df = with_seq(read_events(spark, history))
    if scorer:
        df = add_scores(df, scorer, score_name)
    wf = load_workflow(workflow)
    base_ref = (load_workflow(base), base_version) if base else None
    outcomes = backtest_mod.backtest(df, wf, version, base_ref)
    outcomes_dir = _join(out, OUTCOMES)
    outcomes.write.mode("overwrite").parquet(outcomes_dir)
    written = spark.read.parquet(outcomes_dir)
    summary = backtest_mod.summarize(written, base_ref is not None, wf, version,
                                     base_version if base_ref else None)
    summary["workflow"] = {"id": wf.id, "version": version}
    if base_ref:
        summary["base"] = {"id": base_ref[0].id, "version": base_version}
    summary["tables"] = backtest_mod.write_tables(summary, _join(out, TABLES))
    summary["seconds"] = time.perf_counter() - t0
    _write_bytes(_join(out, SUMMARY), orjson.dumps(summary, option=orjson.OPT_INDENT_2))
    return {"job": "backtest", **summary, "out": out}


def run_synthetic(spark: SparkSession, size: str, seed: int, out: str,
                  partitions: int | None = None) -> dict:
    t0 = time.perf_counter()
    size_arg: str | int = int(size) if size.isdigit() else size
    n = synthetic_job.write(spark, size_arg, seed, out, partitions)
    return {"job": "synthetic", "events": n, "seconds": time.perf_counter() - t0, "out": out}
