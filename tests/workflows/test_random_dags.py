"""Property tests over random DAGs: valid ones are accepted and walk to a decision; each class
of breakage is rejected with the right problem at the right node and edge."""

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from workflows import Workflow, advance, compile_version, validate

from .builders import edge

KINDS = ["score", "app", "review_queue", "webhook"]
SETTINGS = settings(max_examples=30, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _node(kind, nid):
    if kind == "score":
        return {"kind": "score", "id": nid, "scores": [f"s_{nid}"]}
    if kind == "app":
        return {"kind": "app", "id": nid, "app": "a", "timeout_ms": 50,
                "outputs": {"flag": "bool", "level": "int"}}
    if kind == "review_queue":
        return {"kind": "review_queue", "id": nid, "queue": "q", "time_limit_ms": 1000}
    return {"kind": "webhook", "id": nid, "url": "https://hooks.test/x", "secret_ref": "k"}


def _own_criterion(kind, nid, draw_int):
    """A criterion reading the node's own output, which is always known on its edges."""
    if kind == "score":
        return f"scores.s_{nid} > {draw_int}.0"
    if kind == "app":
        return f"apps.{nid}.flag || apps.{nid}.level > {draw_int}"
    if kind == "review_queue":
        return f'apps.{nid}.outcome == "accept"'
    return f"apps.{nid}.status_code == 200"


@st.composite
def valid_dags(draw):
    """Root 'event', inner nodes n0..nk in topological order, decisions d0..dm."""
    kinds = draw(st.lists(st.sampled_from(KINDS), min_size=0, max_size=7))
    inner = [f"n{i}" for i in range(len(kinds))]
    decisions = [f"d{i}" for i in range(draw(st.integers(1, 4)))]
    order = ["event", *inner]
    edges = {nid: [] for nid in order}
    counter = iter(range(10_000))
    # every inner node and decision gets a parent earlier in the order: all reachable
    for i, nid in enumerate(inner):
        parent = order[draw(st.integers(0, i))]
        edges[parent].append(nid)
    for d in decisions:
        edges[order[draw(st.integers(0, len(order) - 1))]].append(d)
    nodes = [{"kind": "event", "id": "event"}]
    nodes += [_node(k, nid) for k, nid in zip(kinds, inner, strict=True)]
    nodes += [{"kind": "decision", "id": d, "action": draw(st.sampled_from(
        ["approve", "block", "cancel_order", "ban_user", "hold"]))} for d in decisions]
    by_id = {n["id"]: n for n in nodes}
    for i, nid in enumerate(order):
        later = order[i + 1:] + decisions
        targets = edges[nid] + draw(st.lists(st.sampled_from(later), max_size=2))
        out = []
        for t in targets:
            kind = by_id[nid]["kind"]
            crit = (f"event.amount > {draw(st.integers(0, 5000))}" if kind == "event" or
                    draw(st.booleans()) else _own_criterion(kind, nid, draw(st.integers(0, 99))))
            out.append(edge(f"e{next(counter)}", t, crit))
        default_to = draw(st.sampled_from(later))
        out.insert(draw(st.integers(0, len(out))), edge(f"e{next(counter)}", default_to,
                                                        default=True))
        by_id[nid]["edges"] = out
    return {"id": "random", "name": "random", "event_type": "order", "root": "event",
            "nodes": nodes}


def _ancestors(wf, node_id):
    preds = {}
    for n in wf["nodes"]:
        for e in n.get("edges", []):
            preds.setdefault(e["to"], set()).add(n["id"])
    seen, todo = set(), [node_id]
    while todo:
        for p in preds.get(todo.pop(), ()):
            if p not in seen:
                seen.add(p)
                todo.append(p)
    return seen


def problems(wf):
    return {(p.code, p.node_id, p.edge_id) for p in validate(Workflow.model_validate(wf))}


def _outputs_for_all(wf, amount):
    scores, apps = {}, {}
    for n in wf["nodes"]:
        if n["kind"] == "score":
            scores[f"s_{n['id']}"] = float(amount % 100)
        elif n["kind"] == "app":
            apps[n["id"]] = {"flag": amount % 2 == 0, "level": amount % 7}
        elif n["kind"] == "review_queue":
            apps[n["id"]] = {"outcome": "accept" if amount % 3 else "reject"}
        elif n["kind"] == "webhook":
            apps[n["id"]] = {"status_code": 200 if amount % 5 else 500}
    return scores, apps


@SETTINGS
@given(valid_dags(), st.integers(0, 6000))
def test_valid_dags_are_accepted_and_always_reach_a_decision(wf, amount):
    assert problems(wf) == set()
    version = compile_version(Workflow.model_validate(wf), 1)
    scores, apps = _outputs_for_all(wf, amount)
    walk = advance(version, {"event": {"amount": amount}, "scores": scores, "apps": apps})
    assert walk.decision is not None and walk.waiting is None
    assert all(not t.error for s in walk.steps for t in s.trace)  # every read was known
    # with no outside output yet, a walk stops at the first outside node it meets, or decides
    first = advance(version, {"event": {"amount": amount}})
    assert (first.waiting is None) == (first.decision is not None)


@SETTINGS
@given(valid_dags(), st.data())
def test_back_edge_is_a_cycle(wf, data):
    inner = [n for n in wf["nodes"] if n["kind"] not in ("decision",)]
    src = data.draw(st.sampled_from(inner))
    dst = data.draw(st.sampled_from(sorted(_ancestors(wf, src["id"]) | {src["id"]})))
    src["edges"].insert(0, edge("back", dst, "event.amount > 1"))
    assert ("cycle", src["id"], "back") in problems(wf)


@SETTINGS
@given(valid_dags())
def test_orphan_is_unreachable(wf):
    wf["nodes"].append({"kind": "decision", "id": "orphan", "action": "block"})
    assert problems(wf) == {("unreachable_node", "orphan", None)}


@SETTINGS
@given(valid_dags(), st.data())
def test_dropping_edges_makes_a_non_decision_terminal(wf, data):
    inner = [n for n in wf["nodes"] if n["kind"] != "decision"]
    victim = data.draw(st.sampled_from(inner))
    victim["edges"] = []
    assert ("terminal_not_decision", victim["id"], None) in problems(wf)


@SETTINGS
@given(valid_dags(), st.data())
def test_edges_on_a_decision(wf, data):
    d = data.draw(st.sampled_from([n for n in wf["nodes"] if n["kind"] == "decision"]))
    d["edges"] = [edge("dx", "event", default=True)]
    assert ("decision_has_edges", d["id"], None) in problems(wf)


@SETTINGS
@given(valid_dags(), st.data())
def test_missing_default_edge(wf, data):
    victim = data.draw(st.sampled_from([n for n in wf["nodes"] if n["kind"] != "decision"]))
    victim["edges"] = [e for e in victim["edges"] if not e["default"]]
    assume(victim["edges"])  # with no edge at all it is terminal_not_decision instead
    assert ("default_edge_missing", victim["id"], None) in problems(wf)


@SETTINGS
@given(valid_dags(), st.data(), st.sampled_from([
    ("event.unknown_field > 1", "criteria_unknown"),
    ("event.country > 3", "criteria_type"),
    ("event.amount + 0.5 > 1.0", "criteria_type"),
    ("event.amount >", "criteria_syntax"),
    ("scores.never_produced > 1.0", "criteria_unknown"),
]))
def test_bad_criteria_are_located(wf, data, bad):
    source, code = bad
    victim = data.draw(st.sampled_from([n for n in wf["nodes"] if n["kind"] != "decision"]))
    crit_edges = [e for e in victim["edges"] if not e["default"]]
    assume(crit_edges)
    target = data.draw(st.sampled_from(crit_edges))
    target["criteria"] = source
    assert problems(wf) == {(code, victim["id"], target["id"])}


@SETTINGS
@given(valid_dags(), st.data())
def test_reading_a_downstream_output_is_rejected(wf, data):
    inner = [n for n in wf["nodes"] if n["kind"] not in ("decision", "event")]
    assume(len(inner) >= 1)
    later = data.draw(st.sampled_from(inner))
    src = wf["nodes"][0]  # the root: nothing but the event is known there
    reads = _own_criterion(later["kind"], later["id"], 1)
    src["edges"].insert(0, edge("early", later["id"], reads))
    got = problems(wf)
    assert {c for c, n, e in got if (n, e) == ("event", "early")} == {"criteria_unknown"}


@SETTINGS
@given(valid_dags(), st.data())
def test_edges_after_always_true_are_unreachable(wf, data):
    victim = data.draw(st.sampled_from([n for n in wf["nodes"] if n["kind"] != "decision"]))
    target = victim["edges"][0]["to"]
    victim["edges"].insert(0, edge("always", target, "true || false"))
    expected = {("unreachable_edge", victim["id"], e["id"]) for e in victim["edges"][1:]}
    assert problems(wf) == expected
