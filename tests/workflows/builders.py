"""Workflows as plain dicts, so tests can break them in ways the models allow."""

from workflows import Workflow


def edge(id, to, criteria=None, default=False):
    return {"id": id, "to": to, "criteria": criteria, "default": default}


def small(**overrides):
    """event -> score -> (block | app -> (approve | hold)), all valid."""
    wf = {
        "id": "wf", "name": "small", "event_type": "order", "root": "event",
        "metrics": ["card_count_5m"],
        "nodes": [
            {"kind": "event", "id": "event", "edges": [edge("e0", "score", default=True)]},
            {"kind": "score", "id": "score", "scores": ["risk"], "edges": [
                edge("s_block", "block", "scores.risk > 90.0"),
                edge("s_app", "check", "event.amount > 1000"),
                edge("s_default", "approve", default=True),
            ]},
            {"kind": "app", "id": "check", "app": "kyc", "timeout_ms": 100,
             "outputs": {"verified": "bool", "level": "int"}, "edges": [
                 edge("c_ok", "approve", "apps.check.verified && apps.check.level >= 2"),
                 edge("c_default", "hold", default=True),
             ]},
            {"kind": "decision", "id": "block", "action": "block"},
            {"kind": "decision", "id": "approve", "action": "approve"},
            {"kind": "decision", "id": "hold", "action": "hold"},
        ],
    }
    wf.update(overrides)
    return wf


def node(wf, node_id):
    return next(n for n in wf["nodes"] if n["id"] == node_id)


def build(wf):
    return Workflow.model_validate(wf)
