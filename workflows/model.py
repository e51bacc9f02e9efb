"""The workflow model: pydantic v2, JSON in and out, JSON Schema for the console.

A workflow is a DAG that starts at its ``event`` root, passes through nodes that need outside
work (``score``, ``app``, ``review_queue``, ``webhook``) and ends in ``decision`` nodes. Each
non-decision node has ordered edges with CEL criteria and exactly one default edge (criteria
``null``), taken when no other edge holds. Models only check the shape of one node or edge;
graph-wide rules live in :mod:`workflows.validate`, so every graph problem is reported at once.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from workflows.events import FieldType, default_event_schema

nodes_max = 500
edges_per_node_max = 64
criteria_chars_max = 1000
names_per_node_max = 64
timeout_ms_max = 7 * 24 * 3600 * 1000  # a review may wait a week; nothing waits longer

# Names appear inside CEL criteria (``apps.<node_id>.<output>``, ``scores.<name>``), so they must
# be CEL identifiers and not CEL reserved words.
cel_ident_pattern = r"^[A-Za-z_][A-Za-z0-9_]{0,63}$"
cel_reserved_words = frozenset(
    "as break const continue else for function if import let loop package namespace return "
    "var void while in true false null".split()
)

Ident = Annotated[str, Field(pattern=cel_ident_pattern)]


def _not_reserved(name: str) -> str:
    if name in cel_reserved_words:
        raise ValueError(f"{name!r} is a CEL reserved word and cannot name a node or output")
    return name


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Edge(_Frozen):
    """An ordered edge: taken when ``criteria`` holds; the default edge has ``criteria=None``."""

    id: Ident
    to: Ident
    criteria: str | None = Field(default=None, max_length=criteria_chars_max)
    default: bool = False


class DecisionAction(StrEnum):
    approve = "approve"
    block = "block"
    cancel_order = "cancel_order"
    ban_user = "ban_user"
    hold = "hold"


class _NodeBase(_Frozen):
    id: Ident
    name: str = Field(default="", max_length=200)
    edges: list[Edge] = Field(default_factory=list, max_length=edges_per_node_max)

    _check_id = field_validator("id")(_not_reserved)


class EventNode(_NodeBase):
    """The root: the event itself. Its edges may read ``event.*`` and ``metrics.*``."""

    kind: Literal["event"] = "event"


class ScoreNode(_NodeBase):
    """Calls a scoring app; its named scores (doubles) become ``scores.<name>`` downstream."""

    kind: Literal["score"] = "score"
    app: str = Field(default="score", min_length=1, max_length=200)
    scores: list[Ident] = Field(min_length=1, max_length=names_per_node_max)
    timeout_ms: int = Field(default=200, gt=0, le=timeout_ms_max)


class AppNode(_NodeBase):
    """Any outside app; its declared outputs become ``apps.<node_id>.<output>`` downstream."""

    kind: Literal["app"] = "app"
    app: str = Field(min_length=1, max_length=200)
    timeout_ms: int = Field(gt=0, le=timeout_ms_max)
    outputs: dict[Ident, FieldType] = Field(default_factory=dict, max_length=names_per_node_max)


class ReviewQueueNode(_NodeBase):
    """A manual review; downstream edges read ``apps.<node_id>.outcome`` (one of ``outcomes``)."""

    kind: Literal["review_queue"] = "review_queue"
    queue: str = Field(min_length=1, max_length=200)
    time_limit_ms: int = Field(gt=0, le=timeout_ms_max)
    outcomes: list[str] = Field(
        default_factory=lambda: ["accept", "reject"], min_length=1, max_length=names_per_node_max
    )


class WebhookNode(_NodeBase):
    """Posts the run to a URL signed with the secret named by ``secret_ref`` (never the secret).

    Downstream edges may read ``apps.<node_id>.status_code``.
    """

    kind: Literal["webhook"] = "webhook"
    url: str = Field(pattern=r"^https?://", max_length=2000)
    secret_ref: str = Field(min_length=1, max_length=200)
    timeout_ms: int = Field(default=5000, gt=0, le=timeout_ms_max)


class DecisionNode(_NodeBase):
    """Terminal: the run's decision. Must have no edges (validation reports any)."""

    kind: Literal["decision"] = "decision"
    action: DecisionAction
    reason: str = Field(default="", max_length=500)


Node = Annotated[
    EventNode | ScoreNode | AppNode | ReviewQueueNode | WebhookNode | DecisionNode,
    Field(discriminator="kind"),
]

OUTSIDE_KINDS = frozenset({"score", "app", "review_queue", "webhook"})
WEBHOOK_OUTPUTS: dict[str, FieldType] = {"status_code": "int"}
REVIEW_OUTPUTS: dict[str, FieldType] = {"outcome": "string"}


class Workflow(_Frozen):
    """A whole workflow as drawn in the console (a draft, or the content of a version)."""

    id: Ident
    name: str = Field(min_length=1, max_length=200)
    event_type: Ident
    root: Ident
    nodes: list[Node] = Field(min_length=1, max_length=nodes_max)
    event_schema: dict[Ident, FieldType] | None = Field(
        default=None,
        description="Event field -> type; null means the default schema of event_type, if any.",
    )
    metrics: list[Ident] = Field(
        default_factory=list,
        max_length=names_per_node_max,
        description="Metric names the criteria may read as metrics.<name> (doubles).",
    )

    def node(self, node_id: str) -> Node | None:
        for n in self.nodes:
            if n.id == node_id:
                return n
        return None

    def effective_event_schema(self) -> dict[str, FieldType] | None:
        """The declared schema, else the default one for ``event_type``, else None (open)."""
        if self.event_schema is not None:
            return dict(self.event_schema)
        return default_event_schema(self.event_type)


def node_outputs(node: Node) -> dict[str, FieldType]:
    """What a node adds under ``apps.<node_id>`` once its outside work is done."""
    if isinstance(node, AppNode):
        return dict(node.outputs)
    if isinstance(node, ReviewQueueNode):
        return dict(REVIEW_OUTPUTS)
    if isinstance(node, WebhookNode):
        return dict(WEBHOOK_OUTPUTS)
    return {}


def workflow_json_schema() -> dict:
    """The JSON Schema the console validates drafts against."""
    return Workflow.model_json_schema()
