"""Railflow runs in Sift's shapes: workflow statuses, score responses, decisions. Pure.

A run's Sift ``history`` lists the nodes it passed, newest first: the decision (with
``config.decision_id``, the decision node's id), the review queue (with its outcome buttons),
the scorer, and the event. ``route.name`` is the edge that routed the order automatically (the
last edge taken outside a review queue). ``definition`` is the workflow version's JSON.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote

from runner.sift.config import SiftSettings

CATEGORY_OF_ACTION = {"approve": "ACCEPT", "hold": "WATCH", "block": "BLOCK",
                      "cancel_order": "BLOCK", "ban_user": "BLOCK"}
APP_OF_KIND = {"event": "event", "score": "scorer", "app": "app", "review_queue": "review_queue",
               "webhook": "webhook", "decision": "decision"}


def nodes_of(definition: dict | None) -> dict[str, dict]:
    return {n["id"]: n for n in (definition or {}).get("nodes", [])}


def entity_of(data: dict | None, event_id: str, cfg: SiftSettings) -> dict[str, str]:
    """The order (or else the user, or session) the run is about: from the event's data, or
    from an event id named by an order id (``sift.create_order.<order id>``)."""
    if data:
        if data.get("order_id") is not None:
            return {"type": "order", "id": str(data["order_id"])}
        if data.get("customer") is not None:
            return {"type": "user", "id": str(data["customer"])}
        return {"type": "session", "id": str(data.get("session_id", ""))}
    parts = event_id.split(".", 2)  # "=" starts a digest, never an encoded id
    if len(parts) == 3 and parts[0] == "sift" and not parts[2].startswith("=") \
            and cfg.id_fields.get("$" + parts[1]) == "$order_id":
        return {"type": "order", "id": unquote(parts[2])}
    return {"type": "user", "id": ""}


def _history_item(node: dict, node_id: str, state: str) -> dict[str, Any]:
    kind = node.get("kind", "app")
    config: dict[str, Any] = {}
    if kind == "decision":
        config = {"decision_id": node_id}
    elif kind == "review_queue":
        config = {"buttons": [{"id": o, "name": o} for o in node.get("outcomes", [])]}
    return {"app": APP_OF_KIND.get(kind, kind), "name": node.get("name") or node_id,
            "state": state, "config": config}


def route_of(run: dict, nodes: dict[str, dict]) -> dict[str, str] | None:
    for step in reversed(run.get("path") or []):
        if nodes.get(step["node_id"], {}).get("kind") != "review_queue":
            return {"name": step["edge_id"]}
    return None


def workflow_status(run: dict, definition: dict | None, cfg: SiftSettings,
                    data: dict | None, route: bool = True) -> dict[str, Any]:
    """The run as Sift's workflow status object."""
    nodes = nodes_of(definition)
    decided = run["state"] == "decided"
    history = [_history_item(nodes.get(s["node_id"], {}), s["node_id"], "finished")
               for s in run.get("path") or []]
    current = run.get("node_id")
    if current:
        history.append(_history_item(nodes.get(current, {}), current,
                                     "finished" if decided else "running"))
    history.reverse()
    status = {
        "id": run["run_id"],
        "state": "finished" if decided else "running",
        "config": {"id": run["workflow_id"], "version": str(run["workflow_version"])},
        "config_display_name": (definition or {}).get("name") or run["workflow_id"],
        "abuse_types": cfg.abuse_types_of(run["workflow_id"]),
        "entity": entity_of(data, run["event_id"], cfg),
        "history": history,
    }
    if route:
        status["route"] = route_of(run, nodes) or {"name": ""}
    return status


def scores(runs: list[dict], cfg: SiftSettings, abuse_types: list[str] | None) -> dict:
    """``{abuse type: {score 0..1, reasons}}`` from the first run that has the mapped score;
    the run's metric values are the reasons."""
    out: dict[str, dict] = {}
    for abuse, score_name in sorted(cfg.abuse_scores.items()):
        if abuse_types and abuse not in abuse_types:
            continue
        for run in runs:
            value = (run.get("scores") or {}).get(score_name)
            if isinstance(value, int | float):
                reasons = [{"name": k, "value": str(v)}
                           for k, v in sorted((run.get("metrics") or {}).items())]
                out[abuse] = {"score": round(float(value) / cfg.score_scale, 6),
                              "reasons": reasons}
                break
    return out


def wants(run: dict, cfg: SiftSettings, abuse_types: list[str] | None) -> bool:
    return not abuse_types or bool(set(cfg.abuse_types_of(run["workflow_id"])) & set(abuse_types))


def latest_decisions(runs: list[dict], cfg: SiftSettings) -> dict[str, dict]:
    """``{abuse type: {decision: {id}, time, webhook_succeeded}}`` from the latest decided runs
    (Sift's order and user decision status)."""
    out: dict[str, dict] = {}
    decided = [r for r in runs if r["state"] == "decided"]
    for run in sorted(decided, key=lambda r: (r["updated_ts"], r["run_id"])):
        for abuse in cfg.abuse_types_of(run["workflow_id"]):
            out[abuse] = {"decision": {"id": run["node_id"]}, "time": run["updated_ts"],
                          "webhook_succeeded": False}
    return out


def decision_configs(workflows: list[tuple[str, dict]], cfg: SiftSettings,
                     entity_type: str | None, abuse_types: list[str] | None) -> list[dict]:
    """Sift's decision catalogue: one entry per decision node of the active workflows."""
    seen: dict[str, dict] = {}
    for wf_id, definition in workflows:
        abuse = cfg.abuse_types_of(wf_id)
        if abuse_types and not set(abuse) & set(abuse_types):
            continue
        kind = "order" if definition.get("event_type") == "order" else "user"
        if entity_type and entity_type.lower() != kind:
            continue
        for node in definition.get("nodes", []):
            if node.get("kind") != "decision" or node["id"] in seen:
                continue
            seen[node["id"]] = {
                "id": node["id"], "name": node.get("name") or node["id"],
                "description": node.get("reason", ""), "entity_type": kind,
                "abuse_type": abuse[0] if abuse else "",
                "category": CATEGORY_OF_ACTION.get(node.get("action", ""), "WATCH"),
                "webhook_url": None, "created_by": "railflow", "updated_by": "railflow",
            }
    return [seen[k] for k in sorted(seen)]


def review_outcome(decision_id: str, outcomes: list[str], cfg: SiftSettings) -> str | None:
    """The review outcome a Sift decision id stands for (its own name, or configured)."""
    if decision_id in outcomes:
        return decision_id
    mapped = cfg.decision_outcomes.get(decision_id)
    return mapped if mapped in outcomes else None
