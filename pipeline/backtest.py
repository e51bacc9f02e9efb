"""Backtest: replay historical events through a workflow version (draft or published).

Input is one row per event with the event's fields, its point-in-time metrics (one column per
metric name the workflow reads, as written by the features job) and its recorded scores (one
column ``score_<name>`` per score name). Outside work whose answer history holds is read from
``app_<node_id>_<output>`` columns (e.g. ``app_review_outcome``). Nothing is guessed: a run that
reaches a score absent from history stops as ``missing_score``, a run that reaches an app or
review whose answer history does not hold stops as ``needs_app_answer``. A webhook is never
waited for, as in production: its node reads ``status_code`` 0 unless history holds one.

Each partition's events are walked with :func:`workflows.advance_batch`, the walk of
:func:`workflows.advance` (the one the runner's apply uses) over Arrow columns, held to it row
for row by ``tests/workflows/test_batch.py``; built-in scorers are answered as apply does
(:func:`pipeline.walk.walk_columns`), so the backtest takes exactly the edges the runner would.
Rows are independent: Spark walks each input partition in its own task,
across every core. Optionally a ``base`` version (e.g. the published one) is walked for the
same event in the same pass, and the summary says how many orders change decision and to what.
Callers: :func:`backtest` returns the per-event DataFrame; :func:`summarize` turns it into a
JSON-ready summary (with a ``console`` part shaped like the console's ``BacktestPublic``) and
:func:`write_tables` into Parquet tables.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from pipeline.ordering import SEQ, InvariantViolation
from pipeline.walk import (
    DECIDED,
    MISSING_SCORE,
    NEEDS_APP_ANSWER,
    PATH_SEP,
    Outcome,
    Walker,
    walk_columns,
)
from workflows import BatchColumns, CompiledWorkflow, Workflow, compile_version

__all__ = ["DECIDED", "MISSING_SCORE", "NEEDS_APP_ANSWER", "Outcome", "VersionRef", "backtest",
           "compile_ref", "summarize", "walk", "write_tables"]

SCORE_PREFIX = "score_"
APP_PREFIX = "app_"
paths_in_summary_max = 50
changes_in_summary_max = 100
samples_in_summary_max = 20
walk_shapes_max = 100_000  # distinct (outcome, base outcome) rows the summary collects

# uncompiled: nodes where the row was stepped one at a time (criteria not run on columns)
_RESULT_FIELDS = ("status", "action", "decision_node", "path", "waiting_node", "edges",
                  "uncompiled")
OUTPUT_SCHEMA = ", ".join(
    ["seq long", "event_id string"]
    + [f"{f} string" for f in _RESULT_FIELDS]
    + [f"base_{f} string" for f in _RESULT_FIELDS]
)


@dataclass(frozen=True)
class VersionRef:
    """A workflow version as JSON, so it travels to executors (compiled CEL does not pickle)."""

    workflow_json: str
    version: int

    @classmethod
    def of(cls, workflow: Workflow, version: int) -> VersionRef:
        return cls(workflow.model_dump_json(), version)


@functools.lru_cache(maxsize=8)
def _compiled(ref: VersionRef, known_metrics: tuple[str, ...] | None) -> CompiledWorkflow:
    workflow = Workflow.model_validate_json(ref.workflow_json)
    return compile_version(workflow, ref.version, known_metrics=known_metrics)


def compile_ref(ref: VersionRef) -> CompiledWorkflow:
    """Compile once per process (each Spark worker caches its own)."""
    return _compiled(ref, None)


def walk(version: CompiledWorkflow, event: dict, metrics: dict, scores: dict,
         apps: dict) -> Outcome:
    """Walk one event from the root to a decision, or to outside work history lacks."""
    return Walker(version).walk(event, metrics, scores, apps)


@dataclass(frozen=True)
class _Columns:
    """Which input columns feed which part of the step context."""

    event: tuple[str, ...]
    metrics: tuple[str, ...]
    scores: tuple[tuple[str, str], ...]  # (score name, column)
    apps: tuple[tuple[str, str, str], ...]  # (node id, output, column)


def _event_fields_read(versions: list[CompiledWorkflow]) -> set[str] | None:
    """Event fields any criterion of ``versions`` reads, or None for all of them (a criterion
    reads the whole event, or a built-in scorer scores from it)."""
    from workflows.activation import WHOLE

    fields: set[str] = set()
    for v in versions:
        for node in v.nodes.values():
            if node.outside is not None and node.outside.kind == "score" and \
                    node.outside.app is not None and node.outside.app.startswith("builtin:"):
                return None
            plan = getattr(node, "plan", None)
            if plan is None:
                continue
            fields |= {f for _var, record, _app, f in plan.flat if record == "event"}
            for name, fs in plan.records:
                if name == "event":
                    if fs is WHOLE:
                        return None
                    fields |= set(fs)
    return fields


def _columns(columns: list[str], versions: list[Workflow],
             compiled: list[CompiledWorkflow] | None = None) -> _Columns:
    metric_names = sorted({m for w in versions for m in w.metrics})
    missing = [m for m in metric_names if m not in columns]
    if missing:
        raise InvariantViolation(f"history lacks metric columns the workflow reads: {missing}")
    schema_fields: set[str] = set()
    open_schema = False
    for w in versions:
        schema = w.effective_event_schema()
        if schema is None:
            open_schema = True
        else:
            schema_fields |= set(schema)
    taken = set(metric_names)
    scores, apps = [], []
    for col in columns:
        if col.startswith(SCORE_PREFIX):
            scores.append((col[len(SCORE_PREFIX):], col))
            taken.add(col)
    for w in versions:
        for node in w.nodes:
            for output in _outputs_of(node):
                col = f"{APP_PREFIX}{node.id}_{output}"
                if col in columns and col not in taken:
                    apps.append((node.id, output, col))
                    taken.add(col)
    event = [c for c in columns if c not in taken and c != SEQ and
             (open_schema or c in schema_fields)]
    read = _event_fields_read(compiled) if compiled is not None else None
    if read is not None:  # convert only what the walk reads: most of a batch's cost
        event = [c for c in event if c in read]
    return _Columns(tuple(event), tuple(metric_names), tuple(scores), tuple(apps))


def _outputs_of(node) -> list[str]:
    from workflows.model import node_outputs

    return list(node_outputs(node))


def _partition(batches: Iterator[pa.RecordBatch], refs: tuple[VersionRef, ...],
               cols: _Columns) -> Iterator[pa.RecordBatch]:
    versions = [compile_ref(r) for r in refs]
    prefixes = ("", "base_")[: len(versions)]
    for batch in batches:
        rows = batch.num_rows

        def column(name: str, batch: pa.RecordBatch = batch) -> pa.Array:
            return batch.column(batch.schema.get_field_index(name))

        apps: dict[str, dict[str, pa.Array]] = {}
        for node_id, output, c in cols.apps:
            apps.setdefault(node_id, {})[output] = column(c)
        columns = BatchColumns(rows, event={c: column(c) for c in cols.event},
                               scores={s: column(c) for s, c in cols.scores},
                               metrics={m: column(m) for m in cols.metrics}, apps=apps)
        data: dict[str, pa.Array] = {
            "seq": column(SEQ),
            "event_id": column("event_id").cast(pa.string()) if "event_id" in
            batch.schema.names else pa.nulls(rows, pa.string())}
        for prefix, version in zip(prefixes, versions, strict=False):
            for f, values in walk_columns(version, columns).items():
                data[prefix + f] = values
        if len(versions) == 1:
            for f in _RESULT_FIELDS:
                data["base_" + f] = pa.nulls(rows, pa.string())
        yield pa.RecordBatch.from_pydict(data, schema=_arrow_schema())


@functools.cache
def _arrow_schema() -> pa.Schema:
    fields = [pa.field("seq", pa.int64()), pa.field("event_id", pa.string())]
    fields += [pa.field(f, pa.string()) for f in _RESULT_FIELDS]
    fields += [pa.field("base_" + f, pa.string()) for f in _RESULT_FIELDS]
    return pa.schema(fields)


def backtest(history: DataFrame, workflow: Workflow, version: int = 0,
             base: tuple[Workflow, int] | None = None) -> DataFrame:
    """Per-event outcomes of ``workflow`` (and of ``base`` in ``base_*`` columns, if given).

    ``history`` must carry ``seq`` (see :mod:`pipeline.ordering`); rows are independent, so
    the job keeps the input's partitioning.
    """
    if SEQ not in history.columns:
        raise InvariantViolation("history needs a seq column (pipeline.ordering.with_seq)")
    refs = [VersionRef.of(workflow, version)]
    workflows = [workflow]
    if base is not None:
        refs.append(VersionRef.of(*base))
        workflows.append(base[0])
    # fail on the driver, with every problem listed, before any task starts
    compiled = [compile_ref(ref) for ref in refs]
    cols = _columns(history.columns, workflows, compiled)
    needed = [SEQ, *cols.event, *cols.metrics, *(c for _, c in cols.scores),
              *(c for _, _, c in cols.apps)]
    if "event_id" in history.columns and "event_id" not in needed:
        needed.append("event_id")
    fn = functools.partial(_partition, refs=tuple(refs), cols=cols)
    return history.select(*needed).mapInArrow(fn, OUTPUT_SCHEMA)


def _label(status: str | None, action: str | None) -> str | None:
    """A decision as one word: the action, or the status when the walk stopped early."""
    return action if action is not None else status


def _edge_nodes(workflow: Workflow) -> dict[str, str]:
    return {e.id: n.id for n in workflow.nodes for e in (getattr(n, "edges", None) or [])}


def summarize(outcomes: DataFrame, compare: bool, workflow: Workflow | None = None,
              version: int = 0, base_version: int | None = None) -> dict:
    """Decisions by action and by path, hits per edge, the nodes walked one row at a time
    (``uncompiled``) and, with ``compare``, the changes against the base with sample changed
    orders.

    One aggregation over the outcomes (rows grouped by their walk's shape) feeds every count;
    a second query takes the sample changed orders. ``console`` has the shape of the console's
    ``BacktestPublic`` (``runs``, ``changed``, ``matrix``, ``hits``, ``samples``)."""
    cols = ["status", "action", "path", "edges", "uncompiled", "base_status", "base_action",
            "base_path", "base_uncompiled"]
    shapes = outcomes.groupBy(*cols).count().limit(walk_shapes_max + 1).collect()
    if len(shapes) > walk_shapes_max:
        raise InvariantViolation(f"more than {walk_shapes_max} distinct walks to summarize")
    by_action: dict[str, int] = {}
    by_path: dict[tuple, int] = {}
    hits: dict[str, int] = {}
    matrix: dict[tuple, int] = {}
    path_changed = 0
    uncompiled: dict[tuple[str, str], int] = {}  # (which version, node id) -> rows
    for r in shapes:
        n = r["count"]
        for which, nodes in (("version", r.uncompiled), ("base", r.base_uncompiled)):
            for nid in (nodes or "").split(PATH_SEP):
                if nid:
                    uncompiled[(which, nid)] = uncompiled.get((which, nid), 0) + n
        k = f"{r.status}:{r.action}" if r.action else r.status
        by_action[k] = by_action.get(k, 0) + n
        pk = (r.path, r.status, r.action)
        by_path[pk] = by_path.get(pk, 0) + n
        for edge in (r.edges or "").split(PATH_SEP):
            if edge:
                hits[edge] = hits.get(edge, 0) + n
        if compare:
            mk = (_label(r.base_status, r.base_action), _label(r.status, r.action))
            matrix[mk] = matrix.get(mk, 0) + n
            path_changed += n if r.path != r.base_path else 0
    events = sum(by_action.values())
    edge_nodes = _edge_nodes(workflow) if workflow is not None else {}
    summary: dict = {
        "events": events,
        "by_action": dict(sorted(by_action.items())),
        "by_path": [{"path": p, "status": st, "action": a, "count": c}
                    for (p, st, a), c in sorted(by_path.items(), key=lambda x: (-x[1], x[0][0]))
                    [:paths_in_summary_max]],
        "hits": [{"node_id": edge_nodes.get(e), "edge_id": e, "runs": c}
                 for e, c in sorted(hits.items())],
        # nodes whose criteria the column walk could not evaluate on columns, with the runs
        # stepped there one at a time (workflows.BatchWalk.uncompiled): empty when every
        # criterion ran on columns; a long list here is why a backtest runs slowly
        "uncompiled": [{"version": w, "node_id": nid, "runs": c}
                       for (w, nid), c in sorted(uncompiled.items())],
    }
    if compare:
        changes = sorted(((b, a, c) for (b, a), c in matrix.items() if a != b),
                         key=lambda x: (-x[2], str(x[0]), str(x[1])))
        changed = sum(c for _, _, c in changes)
        this = F.coalesce(F.col("action"), F.col("status"))
        base = F.coalesce(F.col("base_action"), F.col("base_status"))
        samples = (outcomes.where(~this.eqNullSafe(base)).orderBy(SEQ)
                   .select(SEQ, "event_id", base.alias("before"), this.alias("after"), "edges")
                   .limit(samples_in_summary_max).collect())
        summary["compare"] = {
            "decision_changed": changed,
            "path_changed": path_changed,
            "changes": [{"from": b, "to": a, "count": c}
                        for b, a, c in changes[:changes_in_summary_max]],
            "samples": [{"seq": r[SEQ], "event_id": r.event_id, "before": r.before,
                         "after": r.after, "edges": (r.edges or "").split(PATH_SEP)}
                        for r in samples],
        }
        summary["console"] = {
            "workflow_id": workflow.id if workflow is not None else None,
            "active_version": base_version, "version": version, "runs": events,
            "changed": changed,
            "matrix": [{"before": b, "after": a, "runs": c}
                       for (b, a), c in sorted(matrix.items(), key=lambda x: (str(x[0][0]),
                                                                              str(x[0][1])))],
            "hits": summary["hits"],
            "samples": [{"run_id": r.event_id or str(r[SEQ]), "before": r.before,
                         "after": r.after, "path": (r.edges or "").split(PATH_SEP)}
                        for r in samples],
        }
    return summary


def write_tables(summary: dict, out_dir: str) -> list[str]:
    """The summary's tables as Parquet files under ``out_dir`` (local paths or any fsspec
    URL pyarrow can write): by_action, by_path, hits, uncompiled and, when compared,
    changes, samples."""
    import pyarrow.parquet as pq
    from pyarrow import fs as pafs

    filesystem, root = pafs.FileSystem.from_uri(out_dir) if "://" in out_dir else (
        pafs.LocalFileSystem(), out_dir)
    filesystem.create_dir(root, recursive=True)
    tables = {
        "by_action": pa.Table.from_pylist(
            [{"decision": k, "count": v} for k, v in summary["by_action"].items()],
            schema=pa.schema([("decision", pa.string()), ("count", pa.int64())])),
        "by_path": pa.Table.from_pylist(summary["by_path"], schema=pa.schema(
            [("path", pa.string()), ("status", pa.string()), ("action", pa.string()),
             ("count", pa.int64())])),
        "hits": pa.Table.from_pylist(summary["hits"], schema=pa.schema(
            [("node_id", pa.string()), ("edge_id", pa.string()), ("runs", pa.int64())])),
        "uncompiled": pa.Table.from_pylist(summary["uncompiled"], schema=pa.schema(
            [("version", pa.string()), ("node_id", pa.string()), ("runs", pa.int64())])),
    }
    if "compare" in summary:
        tables["changes"] = pa.Table.from_pylist(summary["compare"]["changes"], schema=pa.schema(
            [("from", pa.string()), ("to", pa.string()), ("count", pa.int64())]))
        tables["samples"] = pa.Table.from_pylist(summary["compare"]["samples"], schema=pa.schema(
            [("seq", pa.int64()), ("event_id", pa.string()), ("before", pa.string()),
             ("after", pa.string()), ("edges", pa.list_(pa.string()))]))
    written = []
    for name, table in tables.items():
        path = f"{root}/{name}.parquet"
        pq.write_table(table, path, filesystem=filesystem)
        written.append(name)
    return written
