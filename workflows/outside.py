"""Outside work: what the runner must do at ``score``, ``app``, ``review_queue`` and ``webhook``
nodes before the run can continue, as plain data (the runner stops the run there, performs the
work, and resumes with the output in ``StepContext.scores`` or ``StepContext.apps[node_id]``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from workflows.model import AppNode, Node, ReviewQueueNode, ScoreNode, WebhookNode, node_outputs


@dataclass(frozen=True, slots=True)
class OutsideWork:
    node_id: str
    kind: str  # score | app | review_queue | webhook
    timeout_ms: int  # after this the runner takes the node's default edge
    app: str | None = None  # score and app nodes: the app to call
    scores: tuple[str, ...] = ()  # score nodes: names to put in context.scores
    outputs: tuple[tuple[str, str], ...] = ()  # (name, type) expected in context.apps[node_id]
    queue: str | None = None  # review_queue nodes
    outcomes: tuple[str, ...] = ()  # review_queue nodes: allowed values of output "outcome"
    url: str | None = None  # webhook nodes
    secret_ref: str | None = None  # webhook nodes: the name of the secret, never the secret

    def check_output(self, output: Mapping[str, Any]) -> list[str]:
        """Problems of an app's answer before the runner logs it: missing or mistyped outputs,
        a review outcome that is not one of the queue's outcomes. Extra keys are allowed."""
        if not isinstance(output, Mapping):
            return [f"output of {self.node_id!r} must be an object"]
        expected = dict.fromkeys(self.scores, "double") if self.kind == "score" else dict(
            self.outputs)
        problems = []
        for name, type_name in expected.items():
            if name not in output:
                problems.append(f"{self.node_id}: missing output {name!r}")
            elif not _has_type(output[name], type_name):
                problems.append(f"{self.node_id}: output {name!r} should be {type_name}, "
                                f"got {type(output[name]).__name__}")
        if self.kind == "review_queue" and output.get("outcome") not in self.outcomes:
            if "outcome" in output and isinstance(output["outcome"], str):
                problems.append(f"{self.node_id}: outcome {output['outcome']!r} is not one of "
                                f"{', '.join(self.outcomes)}")
        return problems

    def is_done(self, scores: object, apps: object) -> bool:
        """True when the context already holds this node's output (so a walk may pass it): the
        node's answer in ``apps``, or for a score node every one of its scores."""
        if self.node_id in apps:  # type: ignore[operator]
            return True
        if self.kind != "score":
            return False
        for name in self.scores:  # a loop, not all(<generator>): called at every score node
            if name not in scores:  # type: ignore[operator]
                return False
        return True


def _has_type(value: Any, type_name: str) -> bool:
    if type_name == "string":
        return isinstance(value, str)
    if type_name == "bool":
        return isinstance(value, bool)
    if type_name == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, int | float) and not isinstance(value, bool)  # double


def outside_work_of(node: Node) -> OutsideWork | None:
    """The work a node needs, or None for ``event`` and ``decision`` nodes."""
    outputs = tuple(node_outputs(node).items())
    if isinstance(node, ScoreNode):
        return OutsideWork(node.id, node.kind, node.timeout_ms, app=node.app,
                           scores=tuple(node.scores))
    if isinstance(node, AppNode):
        return OutsideWork(node.id, node.kind, node.timeout_ms, app=node.app, outputs=outputs)
    if isinstance(node, ReviewQueueNode):
        return OutsideWork(node.id, node.kind, node.time_limit_ms, queue=node.queue,
                           outcomes=tuple(node.outcomes), outputs=outputs)
    if isinstance(node, WebhookNode):
        return OutsideWork(node.id, node.kind, node.timeout_ms, url=node.url,
                           secret_ref=node.secret_ref, outputs=outputs)
    return None
