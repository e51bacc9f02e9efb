"""Versions: publish, immutability, runs keep their version, rollback, diff, snapshot."""

import json

import pytest

from workflows import (
    UnknownVersion,
    Workflow,
    WorkflowInvalid,
    WorkflowStore,
    diff,
    step,
    workflow_json_schema,
)
from workflows.__main__ import SCHEMA_PATH, schema_text
from workflows.examples import sift_example, w3_demo

from .builders import build, node, small


def _raise_threshold(wf: Workflow, threshold: str) -> Workflow:
    data = wf.model_dump(mode="json")
    node(data, "score")["edges"][0]["criteria"] = f"scores.payment_abuse > {threshold}"
    return Workflow.model_validate(data)


def test_publish_numbers_versions_and_runs_keep_theirs():
    store = WorkflowStore()
    store.save_draft(sift_example())
    v1 = store.publish("sift_example")
    store.save_draft(_raise_threshold(sift_example(), "95.0"))
    v2 = store.publish("sift_example")
    assert (v1.version, v2.version) == (1, 2) and store.versions("sift_example") == [1, 2]
    ctx = {"event": {"country": "US"}, "scores": {"payment_abuse": 93.0}}
    # a run that started on v1 keeps v1's decision after v2 is published
    assert step(v1.compiled, "score", ctx).next_node_id == "block_high_score"
    assert step(v2.compiled, "score", ctx).next_node_id == "review"
    assert store.latest("sift_example").version == 2
    assert store.version("sift_example", 1).compiled is v1.compiled


def test_published_version_cannot_be_changed_through_the_draft_or_a_copy():
    store = WorkflowStore()
    draft = sift_example()
    store.save_draft(draft)
    v1 = store.publish("sift_example")
    digest = v1.compiled.digest
    draft.nodes.clear()  # mutating the caller's object does not reach the version
    v1.workflow.nodes.clear()  # nor does mutating the copy it hands out
    v1.compiled.workflow.nodes.clear()  # nor the shared model: steps and rollback ignore it
    assert len(v1.workflow.nodes) == len(sift_example().nodes)
    assert v1.compiled.digest == digest
    ctx = {"event": {"country": "DE"}, "scores": {"payment_abuse": 99.0}}
    assert step(v1.compiled, "score", ctx).next_node_id == "block_high_score"
    v2 = store.rollback("sift_example", 1)
    assert v2.compiled.digest == digest and len(v2.workflow.nodes) == len(sift_example().nodes)
    with pytest.raises(ValueError):
        v1.workflow.name = "changed"  # models are frozen


def test_invalid_draft_is_not_published():
    store = WorkflowStore()
    bad = small()
    node(bad, "score")["edges"][0]["criteria"] = "scores.nope > 1.0"
    store.save_draft(build(bad))
    with pytest.raises(WorkflowInvalid) as e:
        store.publish("wf")
    assert e.value.problems[0].edge_id == "s_block"
    assert store.versions("wf") == []
    with pytest.raises(UnknownVersion):
        store.latest("wf")


def test_rollback_republishes_an_older_version_as_newest():
    store = WorkflowStore()
    store.save_draft(sift_example())
    store.publish("sift_example")
    store.save_draft(_raise_threshold(sift_example(), "95.0"))
    store.publish("sift_example")
    v3 = store.rollback("sift_example", 1)
    assert v3.version == 3 and v3.rollback_of == 1
    assert v3.compiled.digest == store.version("sift_example", 1).compiled.digest
    assert store.latest("sift_example") is v3
    assert store.diff("sift_example", 1, 3).empty
    with pytest.raises(UnknownVersion):
        store.rollback("sift_example", 9)


def test_diff_reports_nodes_edges_and_criteria():
    a = sift_example().model_dump(mode="json")
    b = json.loads(json.dumps(a))
    score = node(b, "score")
    score["edges"][0]["criteria"] = "scores.payment_abuse > 95.0"  # changed
    score["edges"].insert(0, {"id": "new_edge", "to": "approve",
                              "criteria": "event.amount < 100", "default": False})  # added
    del score["edges"][3]  # removes review_above_60
    score["timeout_ms"] = 500
    b["nodes"].append({"kind": "decision", "id": "ban", "action": "ban_user"})
    b["name"] = "renamed"
    d = diff(Workflow.model_validate(a), Workflow.model_validate(b))
    assert [c.field for c in d.workflow] == ["name"]
    assert d.nodes_added == ["ban"] and d.nodes_removed == []
    assert d.nodes_changed[0].node_id == "score"
    assert [(c.field, c.before, c.after) for c in d.nodes_changed[0].changes] == [
        ("timeout_ms", 200, 500)]
    assert [(r.node_id, r.edge_id) for r in d.edges_added] == [("score", "new_edge")]
    assert [(r.node_id, r.edge_id) for r in d.edges_removed] == [("score", "review_above_60")]
    assert [c.after for c in d.criteria_added] == ["event.amount < 100"]
    assert [c.before for c in d.criteria_removed] == ["scores.payment_abuse > 60.0"]
    assert [(c.edge_id, c.before, c.after) for c in d.criteria_changed] == [
        ("block_above_90", "scores.payment_abuse > 90.0", "scores.payment_abuse > 95.0")]
    changed = {c.edge_id: {f.field for f in c.changes} for c in d.edges_changed}
    assert changed == {"block_above_90": {"criteria", "position"},
                       "block_above_80_foreign": {"position"}}
    assert not d.empty and diff(Workflow.model_validate(a), Workflow.model_validate(a)).empty


def test_snapshot_restore_round_trip():
    store = WorkflowStore()
    store.save_draft(sift_example())
    store.publish("sift_example")
    store.rollback("sift_example", 1)
    store.save_draft(w3_demo())
    state = json.loads(json.dumps(store.snapshot()))
    again = WorkflowStore.restore(state)
    assert again.snapshot() == state
    assert again.latest("sift_example").rollback_of == 1
    assert again.draft("w3_demo") == w3_demo()
    assert [v.workflow_id for v in again.live_for_event("order")] == ["sift_example"]


def test_diff_draft_against_newest():
    store = WorkflowStore()
    store.save_draft(sift_example())
    assert len(store.diff_draft("sift_example").nodes_added) == len(sift_example().nodes)
    store.publish("sift_example")
    assert store.diff_draft("sift_example").empty


def test_workflow_json_round_trip_and_committed_schema_is_current():
    wf = w3_demo()
    assert Workflow.model_validate_json(wf.model_dump_json()) == wf
    assert SCHEMA_PATH.read_text() == schema_text(), "run: python -m workflows schema"
    schema = workflow_json_schema()
    kinds = {d["properties"]["kind"]["const"] for name, d in schema["$defs"].items()
             if "kind" in d.get("properties", {})}
    assert kinds == {"event", "score", "app", "review_queue", "webhook", "decision"}
