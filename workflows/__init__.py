"""Decision workflows: the model, its validation, CEL criteria, versions and the pure step.

A workflow is a DAG rooted at an ``event`` node whose nodes carry ordered edges with CEL
criteria; the first true edge is taken, else the node's default edge. Everything here is pure
(no I/O, no clock): callers load and store workflows themselves.

Callers:
- build or parse a :class:`Workflow` (JSON Schema: ``workflows/schema/workflow.schema.json``);
- :func:`validate` lists every :class:`Problem`; :func:`compile_version` raises
  :class:`WorkflowInvalid` or returns a :class:`CompiledWorkflow` (criteria compiled once);
- :func:`step` walks one node, :func:`advance` walks until a decision or outside work;
  :func:`advance_batch` is the same walk over columns of many events (the backtest's);
  a criterion failing at runtime counts as false and its error is kept in the trace;
  a compiled version holds each node's precomputed results and remembers steps by the values
  read (:mod:`workflows.memo`), so walks share result objects: treat them as read-only;
- :class:`WorkflowStore` keeps drafts and immutable versions (publish, rollback, diff).
``python -m workflows schema`` rewrites the JSON Schema; ``workflows/CEL.md`` explains the CEL
library choice; ``bench/workflows_step.py`` measures criteria and steps.
Imports nothing else of Railflow.
"""

from workflows.batch import BatchColumns, BatchWalk, advance_batch
from workflows.compiled import CompiledWorkflow, Decision, compile_version
from workflows.criteria import CompiledCriterion, CriterionError, compile_criterion
from workflows.diff import WorkflowDiff, diff
from workflows.errors import (
    InvariantViolation,
    Problem,
    UnknownNode,
    UnknownVersion,
    WorkflowInvalid,
)
from workflows.events import ORDER_EVENT_SCHEMA, default_event_schema
from workflows.model import (
    OUTSIDE_KINDS,
    AppNode,
    DecisionAction,
    DecisionNode,
    Edge,
    EventNode,
    Node,
    ReviewQueueNode,
    ScoreNode,
    WebhookNode,
    Workflow,
    workflow_json_schema,
)
from workflows.outside import OutsideWork
from workflows.step import (
    WEBHOOK_SENT,
    EdgeTrial,
    StepContext,
    StepResult,
    Walk,
    advance,
    step,
    step_default,
    timed_out,
)
from workflows.validate import validate
from workflows.versions import PublishedVersion, WorkflowStore

__all__ = [
    "AppNode", "BatchColumns", "BatchWalk", "CompiledCriterion", "CompiledWorkflow",
    "CriterionError", "Decision", "DecisionAction", "DecisionNode", "Edge", "EdgeTrial",
    "EventNode", "InvariantViolation", "Node", "ORDER_EVENT_SCHEMA", "OUTSIDE_KINDS",
    "OutsideWork", "Problem", "PublishedVersion", "ReviewQueueNode", "ScoreNode", "StepContext",
    "StepResult", "UnknownNode", "UnknownVersion", "WEBHOOK_SENT", "Walk", "WebhookNode",
    "Workflow", "WorkflowDiff", "WorkflowInvalid", "WorkflowStore", "advance", "advance_batch",
    "compile_criterion", "compile_version", "default_event_schema", "diff", "step", "step_default",
    "timed_out", "validate", "workflow_json_schema",
]
