"""The pure step: traces, runtime errors counted as false, defaults, determinism."""

import pytest

from workflows import InvariantViolation, StepContext, UnknownNode, step, step_default


def test_trace_lists_every_edge_tried_and_its_value(sift):
    r = step(sift, "score", {"event": {"country": "US"}, "scores": {"payment_abuse": 50.0}})
    assert [(t.edge_id, t.value, t.error) for t in r.trace] == [
        ("block_above_90", False, None),
        ("block_above_80_foreign", False, None),
        ("review_above_60", False, None),
        ("approve_otherwise", True, None),
    ]
    assert r.default_taken and r.trace[0].criteria == "scores.payment_abuse > 90.0"
    assert r.decision.action == "approve" and r.node_kind == "decision"
    assert r.to_dict()["trace"][3] == {"edge_id": "approve_otherwise", "criteria": None,
                                       "value": True, "error": None}


def test_missing_field_counts_as_false_and_is_recorded(sift):
    r = step(sift, "score", {"event": {"country": "US"}, "scores": {}})
    assert r.edge_id == "approve_otherwise"
    assert "payment_abuse" in r.trace[0].error and "payment_abuse" in r.trace[2].error
    # CEL's && is commutative over errors: error && false is false, without an error.
    assert r.trace[1].error is None
    assert all(t.value is False for t in r.trace[:3])


def test_wrong_runtime_type_counts_as_false(sift):
    r = step(sift, "score", {"event": {"country": "DE"}, "scores": {"payment_abuse": "95"}})
    assert r.trace[0].value is False and "TypeError" in r.trace[0].error  # "95" > 90.0
    assert r.edge_id == "approve_otherwise"


def test_unconvertible_context_fails_every_criterion_not_the_step(sift):
    r = step(sift, "score", {"event": {"country": object()}, "scores": {"payment_abuse": 99.0}})
    assert r.edge_id == "approve_otherwise"
    assert all("cannot be converted" in t.error for t in r.trace[:3])


def test_extra_context_fields_are_ignored(sift):
    big = {f"f{i}": object() for i in range(20)}  # not read, so never converted
    r = step(sift, "score", {"event": {**big, "country": "DE"}, "scores": {"payment_abuse": 85.0}})
    assert r.edge_id == "block_above_80_foreign"


def test_step_accepts_step_context_and_is_deterministic(sift):
    ctx = StepContext(event={"country": "DE"}, scores={"payment_abuse": 85.0})
    results = {step(sift, "score", ctx) for _ in range(3)}
    assert len(results) == 1


def test_no_step_after_a_decision(sift):
    with pytest.raises(InvariantViolation):
        step(sift, "approve", {})
    with pytest.raises(InvariantViolation):
        step_default(sift, "block_foreign")


def test_unknown_node(sift):
    with pytest.raises(UnknownNode):
        step(sift, "nope", {})


def test_step_default_is_the_timeout_path(sift):
    r = step_default(sift, "review")
    assert (r.edge_id, r.next_node_id) == ("review_default", "block_reviewed")
    assert r.default_taken
    assert len(r.trace) == 1


def test_outside_work_helpers(sift):
    assert set(sift.outside_nodes()) == {"score", "review"}
    assert sift.needs_outside_work("score") and not sift.needs_outside_work("approve")
    assert sift.outside_work("event") is None


def test_outside_output_checks(sift):
    score = sift.outside_work("score")
    assert score.check_output({"payment_abuse": 12}) == []
    assert score.check_output({"payment_abuse": True}) == [
        "score: output 'payment_abuse' should be double, got bool"]
    assert score.check_output({}) == ["score: missing output 'payment_abuse'"]
    review = sift.outside_work("review")
    assert review.check_output({"outcome": "accept", "note": "extra keys are fine"}) == []
    assert review.check_output({"outcome": "maybe"}) == [
        "review: outcome 'maybe' is not one of accept, reject"]
    assert review.check_output({"outcome": 1}) == [
        "review: output 'outcome' should be string, got int"]
    assert review.check_output([1]) == ["output of 'review' must be an object"]


def test_flat_and_record_reads_mix_in_one_node():
    from workflows import Workflow, compile_version

    from .builders import edge, node, small

    wf = small()
    node(wf, "score")["edges"][:2] = [
        edge("s_has", "block", "has(event.ip) && event.ip.startsWith('10.')"),  # reads records
        edge("s_flat", "check", "scores.risk > 50 && event.amount > 1000"),  # flat variables
    ]
    version = compile_version(Workflow.model_validate(wf), 1)
    plan = version.node("score").plan
    assert {v[1:] for v in plan.flat} == {("scores", None, "risk"), ("event", None, "amount")}
    assert plan.records == (("event", ("ip",)),)
    ctx = {"event": {"ip": "10.0.0.1", "amount": 5}, "scores": {"risk": 99}}
    assert step(version, "score", ctx).edge_id == "s_has"
    ctx = {"event": {"amount": 5000}, "scores": {"risk": 99}}
    assert step(version, "score", ctx).edge_id == "s_flat"
    missing = step(version, "score", {"event": {}, "scores": {"risk": 99}})
    assert missing.edge_id == "s_default"
    assert "event.amount" in missing.trace[1].error and "_rf_" not in missing.trace[1].error
