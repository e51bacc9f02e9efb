"""Backtest: replay historical events through a workflow version (draft or published).

Input is one row per event with the event's fields, its point-in-time metrics (one column per
metric name the workflow reads, as written by the features job) and its recorded scores (one
column ``score_<name>`` per score name). Outside work whose answer history holds is read from
``app_<node_id>_<output>`` columns (e.g. ``app_review_outcome``). Nothing is guessed: a run that
reaches a score absent from history stops as ``missing_score``, a run that reaches an app or
review whose answer history does not hold stops as ``needs_app_answer``. A webhook is never
waited for, as in production: its node reads ``status_code`` 0 unless history holds one.

Each event is walked with :func:`workflows.advance`, the one walk the runner's apply uses too,
so the backtest takes exactly the edges the runner would. Optionally a ``base`` version
(e.g. the published one) is walked for the same event in the same pass, and the summary says
how many orders change decision and to what. Callers: :func:`backtest` returns the per-event
DataFrame; :func:`summarize` turns it into a JSON-ready summary.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from pipeline.ordering import SEQ, InvariantViolation
from workflows import CompiledWorkflow, Workflow, advance, compile_version

SCORE_PREFIX = "score_"
APP_PREFIX = "app_"
PATH_SEP = ">"
paths_in_summary_max = 50
changes_in_summary_max = 100

DECIDED = "decided"
NEEDS_APP_ANSWER = "needs_app_answer"
MISSING_SCORE = "missing_score"

_RESULT_FIELDS = ("status", "action", "decision_node", "path", "waiting_node")
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


@dataclass(frozen=True)
class Outcome:
    status: str
    action: str | None
    decision_node: str | None
    path: str
    waiting_node: str | None


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
    result = advance(version, {"event": event, "metrics": metrics, "scores": scores,
                               "apps": apps})
    nodes = [version.root, *(s.next_node_id for s in result.steps)]
    path = PATH_SEP.join(nodes)
    if result.decision is not None:
        return Outcome(DECIDED, result.decision.action, result.node_id, path, None)
    if result.waiting is None:
        raise InvariantViolation("advance stopped with neither a decision nor outside work")
    status = MISSING_SCORE if result.waiting.kind == "score" else NEEDS_APP_ANSWER
    return Outcome(status, None, None, path, result.node_id)


@dataclass(frozen=True)
class _Columns:
    """Which input columns feed which part of the step context."""

    event: tuple[str, ...]
    metrics: tuple[str, ...]
    scores: tuple[tuple[str, str], ...]  # (score name, column)
    apps: tuple[tuple[str, str, str], ...]  # (node id, output, column)


def _columns(columns: list[str], versions: list[Workflow]) -> _Columns:
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
    return _Columns(tuple(event), tuple(metric_names), tuple(scores), tuple(apps))


def _outputs_of(node) -> list[str]:
    from workflows.model import node_outputs

    return list(node_outputs(node))


def _partition(batches: Iterator[pa.RecordBatch], refs: tuple[VersionRef, ...],
               cols: _Columns) -> Iterator[pa.RecordBatch]:
    versions = [compile_ref(r) for r in refs]
    for batch in batches:
        data = batch.to_pydict()
        rows = batch.num_rows
        out: dict[str, list] = {"seq": data[SEQ], "event_id": data.get("event_id", [None] * rows)}
        for prefix in ("", "base_")[: len(versions)]:
            for f in _RESULT_FIELDS:
                out[prefix + f] = []
        for i in range(rows):
            event = {c: data[c][i] for c in cols.event if data[c][i] is not None}
            metrics = {m: data[m][i] for m in cols.metrics if data[m][i] is not None}
            scores = {s: data[c][i] for s, c in cols.scores if data[c][i] is not None}
            apps: dict[str, dict] = {}
            for node_id, output, c in cols.apps:
                if data[c][i] is not None:
                    apps.setdefault(node_id, {})[output] = data[c][i]
            for prefix, version in zip(("", "base_"), versions, strict=False):
                o = walk(version, event, metrics, scores, apps)
                out[prefix + "status"].append(o.status)
                out[prefix + "action"].append(o.action)
                out[prefix + "decision_node"].append(o.decision_node)
                out[prefix + "path"].append(o.path)
                out[prefix + "waiting_node"].append(o.waiting_node)
        if len(versions) == 1:
            for f in _RESULT_FIELDS:
                out["base_" + f] = [None] * rows
        yield pa.RecordBatch.from_pydict(out, schema=_arrow_schema())


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
    for ref in refs:  # fail on the driver, with every problem listed, before any task starts
        compile_ref(ref)
    cols = _columns(history.columns, workflows)
    needed = [SEQ, *cols.event, *cols.metrics, *(c for _, c in cols.scores),
              *(c for _, _, c in cols.apps)]
    if "event_id" in history.columns and "event_id" not in needed:
        needed.append("event_id")
    fn = functools.partial(_partition, refs=tuple(refs), cols=cols)
    return history.select(*needed).mapInArrow(fn, OUTPUT_SCHEMA)


def summarize(outcomes: DataFrame, compare: bool) -> dict:
    """Decisions by action and by path and, with ``compare``, the changes against the base."""
    by_action = {
        f"{r.status}:{r.action}" if r.action else r.status: r["count"]
        for r in outcomes.groupBy("status", "action").count().collect()
    }
    paths = (outcomes.groupBy("path", "status", "action").count()
             .orderBy(F.desc("count"), "path").limit(paths_in_summary_max).collect())
    summary: dict = {
        "events": sum(by_action.values()),
        "by_action": dict(sorted(by_action.items())),
        "by_path": [{"path": r.path, "status": r.status, "action": r.action, "count": r["count"]}
                    for r in paths],
    }
    if compare:
        this = F.coalesce(F.col("action"), F.col("status"))
        base = F.coalesce(F.col("base_action"), F.col("base_status"))
        changed = outcomes.where(~this.eqNullSafe(base))
        changed_count = changed.count()
        changes = (changed.groupBy(base.alias("from"), this.alias("to")).count()
                   .orderBy(F.desc("count"), "from", "to").limit(changes_in_summary_max)
                   .collect())
        path_changed = outcomes.where(F.col("path") != F.col("base_path")).count()
        summary["compare"] = {
            "decision_changed": changed_count,
            "path_changed": path_changed,
            "changes": [{"from": r["from"], "to": r["to"], "count": r["count"]}
                        for r in changes],
        }
    return summary
