"""Outside work: what the runner must do at ``score``, ``app``, ``review_queue`` and ``webhook``
nodes before the run can continue, as plain data (the runner stops the run there, performs the
work, and resumes with the output in ``StepContext.scores`` or ``StepContext.apps[node_id]``).
"""

from __future__ import annotations

from dataclasses import dataclass

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

    def is_done(self, scores: object, apps: object) -> bool:
        """True when the context already holds this node's output (so a walk may pass it)."""
        if self.kind == "score":
            return all(s in scores for s in self.scores)  # type: ignore[operator]
        return self.node_id in apps  # type: ignore[operator]


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
