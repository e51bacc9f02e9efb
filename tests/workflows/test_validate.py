"""Validation: each rule reports its problem with node and edge ids, all problems at once."""

import pytest

from workflows import WorkflowInvalid, compile_version, validate

from .builders import build, edge, node, small


def codes(wf, **kw):
    return {(p.code, p.node_id, p.edge_id) for p in validate(build(wf), **kw)}


def test_small_is_valid():
    assert validate(build(small()), known_metrics=["card_count_5m"]) == []


def test_cycle():
    wf = small()
    node(wf, "check")["edges"].insert(0, edge("c_back", "score", "true"))
    assert ("cycle", "check", "c_back") in codes(wf)


def test_self_loop_is_a_cycle():
    wf = small()
    node(wf, "check")["edges"].insert(0, edge("c_self", "check", "event.amount > 1"))
    assert ("cycle", "check", "c_self") in codes(wf)


def test_unreachable_node():
    wf = small()
    wf["nodes"].append({"kind": "decision", "id": "orphan", "action": "ban_user"})
    assert codes(wf) == {("unreachable_node", "orphan", None)}


def test_terminal_must_be_decision_and_decision_terminal():
    wf = small()
    node(wf, "check")["edges"] = []
    node(wf, "block")["edges"] = [edge("b1", "approve", default=True)]
    got = codes(wf)
    assert ("terminal_not_decision", "check", None) in got
    assert ("decision_has_edges", "block", None) in got


def test_default_edge_rules():
    wf = small()
    node(wf, "score")["edges"][2]["default"] = False
    node(wf, "score")["edges"][2]["criteria"] = "true"
    node(wf, "check")["edges"].append(edge("c_default2", "approve", default=True))
    node(wf, "event")["edges"][0]["criteria"] = "true"
    got = codes(wf)
    assert ("default_edge_missing", "score", None) in got
    assert ("default_edge_multiple", "check", "c_default2") in got
    assert ("default_edge_has_criteria", "event", "e0") in got


def test_criteria_missing_on_non_default_edge():
    wf = small()
    node(wf, "score")["edges"][0]["criteria"] = None
    assert ("criteria_missing", "score", "s_block") in codes(wf)


def test_root_and_event_nodes():
    wf = small(root="score")
    got = codes(wf)
    assert ("root_not_event", "score", None) in got
    assert ("extra_event_node", "event", None) in got
    assert ("root_missing", None, None) in codes(small(root="nothing"))


def test_duplicate_ids_and_missing_targets():
    wf = small()
    wf["nodes"].append({"kind": "decision", "id": "approve", "action": "block"})
    node(wf, "check")["edges"][0]["id"] = "s_block"
    node(wf, "check")["edges"][1]["to"] = "nowhere"
    got = codes(wf)
    assert ("duplicate_node_id", "approve", None) in got
    assert ("duplicate_edge_id", "check", "s_block") in got
    assert ("edge_target_missing", "check", "c_default") in got


def test_edges_after_an_always_true_edge_are_unreachable():
    wf = small()
    node(wf, "score")["edges"].insert(0, edge("s_true", "approve", "1 < 2"))
    got = codes(wf)
    assert ("unreachable_edge", "score", "s_block") in got
    assert ("unreachable_edge", "score", "s_app") in got
    assert ("unreachable_edge", "score", "s_default") in got  # the default is tried last
    assert not any(c == "unreachable_edge" and e == "s_true" for c, _, e in got)


def test_always_false_criterion():
    wf = small()
    node(wf, "score")["edges"][0]["criteria"] = "false && true"
    assert ("criteria_always_false", "score", "s_block") in codes(wf)


def test_unknown_metric_and_undeclared_metric():
    wf = small()
    assert ("unknown_metric", None, None) in codes(wf, known_metrics=["other"])
    node(wf, "score")["edges"][0]["criteria"] = "metrics.card_sum_5m > 10.0"
    problems = validate(build(wf), known_metrics=["card_count_5m", "card_sum_5m"])
    p = next(p for p in problems if p.edge_id == "s_block")
    assert p.code == "criteria_unknown" and "declare it" in p.message


def test_criteria_see_only_what_is_upstream():
    wf = small()
    # the app's output is not known on the score node's edges: the app runs after them
    node(wf, "score")["edges"][0]["criteria"] = "apps.check.verified"
    problems = validate(build(wf))
    assert [(p.code, p.node_id, p.edge_id) for p in problems] == [
        ("criteria_unknown", "score", "s_block")]
    assert "not upstream" in problems[0].message


def test_output_upstream_on_some_paths_only_is_rejected():
    wf = small()
    # 'hold' reached from check only; make a node after both score and check paths
    wf["nodes"].append({"kind": "webhook", "id": "notify", "url": "https://x.test/h",
                        "secret_ref": "hook", "edges": [
                            edge("n_read", "block", "apps.check.level > 1"),
                            edge("n_default", "approve", default=True)]})
    node(wf, "score")["edges"][2]["to"] = "notify"
    node(wf, "check")["edges"][1]["to"] = "notify"
    wf["nodes"].remove(node(wf, "hold"))
    problems = validate(build(wf))
    assert [(p.code, p.node_id, p.edge_id) for p in problems] == [
        ("criteria_unknown", "notify", "n_read")]
    assert "some paths only" in problems[0].message


def test_review_outcome_is_readable_on_its_own_edges():
    wf = small()
    wf["nodes"].append({"kind": "review_queue", "id": "rq", "queue": "q", "time_limit_ms": 1000,
                        "edges": [edge("rq_ok", "approve", 'apps.rq.outcome == "accept"'),
                                  edge("rq_default", "block", default=True)]})
    node(wf, "check")["edges"][1]["to"] = "rq"
    wf["nodes"].remove(node(wf, "hold"))
    assert validate(build(wf)) == []


def test_every_problem_reported_at_once_and_compile_raises():
    wf = small()
    node(wf, "score")["edges"][0]["criteria"] = "scores.risk > "
    node(wf, "check")["edges"][0]["criteria"] = "event.nope"
    wf["nodes"].append({"kind": "decision", "id": "orphan", "action": "block"})
    with pytest.raises(WorkflowInvalid) as e:
        compile_version(build(wf), 1)
    got = {(p.code, p.node_id, p.edge_id) for p in e.value.problems}
    assert got == {("criteria_syntax", "score", "s_block"),
                   ("criteria_unknown", "check", "c_ok"),
                   ("unreachable_node", "orphan", None)}
    assert "orphan" in str(e.value)


def test_duplicate_score_names():
    wf = small()
    node(wf, "check").update(kind="score", scores=["risk"])
    del node(wf, "check")["app"], node(wf, "check")["outputs"]
    node(wf, "check")["edges"][0]["criteria"] = "scores.risk > 1.0"
    assert ("duplicate_score_name", "check", None) in codes(wf)


@pytest.mark.parametrize("bad_id", ["in", "null", "has-dash", "1abc", ""])
def test_node_ids_must_be_cel_identifiers(bad_id):
    wf = small()
    wf["nodes"].append({"kind": "decision", "id": bad_id, "action": "block"})
    with pytest.raises(ValueError):
        build(wf)


@pytest.mark.parametrize(("criteria", "bad"), [
    ('apps.rq.outcome == "acept"', "acept"),
    ('"rejct" != apps.rq.outcome', "rejct"),
    ('apps.rq.outcome in ["accept", "rejekt"]', "rejekt"),
])
def test_review_outcome_typos_are_caught(criteria, bad):
    wf = small()
    wf["nodes"].append({"kind": "review_queue", "id": "rq", "queue": "q", "time_limit_ms": 1000,
                        "edges": [edge("rq_ok", "approve", criteria),
                                  edge("rq_default", "block", default=True)]})
    node(wf, "check")["edges"][1]["to"] = "rq"
    wf["nodes"].remove(node(wf, "hold"))
    problems = validate(build(wf))
    assert [(p.code, p.edge_id) for p in problems] == [("criteria_unknown", "rq_ok")]
    assert bad in problems[0].message and "accept, reject" in problems[0].message
