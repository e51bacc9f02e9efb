"""Criteria evaluated in Python (``workflows.direct``) answer exactly as CEL does, or leave it
to CEL: same value, and a step gives the same result (edge, trace with errors, next node)."""

import math
import random

import cel
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.workflows.builders import build, edge, small
from workflows import StepContext, compile_criterion, compile_version, step
from workflows.activation import read_plan
from workflows.cel_types import BOOL, DOUBLE, INT, STRING, Record
from workflows.direct import UNSURE, direct_variables
from workflows.step import _traced

ROOTS = {
    "event": Record("event", {"amount": INT, "country": STRING, "is_alert": BOOL,
                              "rate": DOUBLE}),
    "scores": Record("scores", {"risk": DOUBLE}),
    "metrics": Record("metrics", {"count_5m": DOUBLE, "avg_5m": DOUBLE}),
    "apps": Record("apps", {"kyc": Record("apps.kyc", {"level": INT, "name": STRING})}),
}

SUBSET = [
    "metrics.count_5m > 4",
    "metrics.count_5m == 4",
    "metrics.count_5m != 4.0",
    "scores.risk > 90.0",
    "scores.risk > 80.0 && !(event.country in ['US', 'CA'])",
    "scores.risk > 60.0 || double(event.amount) > 10.0 * metrics.avg_5m",
    "event.amount >= 1000 || event.amount < -5",
    "event.amount in [1, 2, 3.5]",
    "event.country < 'M' && event.country >= \"B\"",
    "event.is_alert == true || !event.is_alert",
    "event.is_alert < true",
    "-event.rate < 0.5 && event.rate / metrics.avg_5m <= 2.0",
    "metrics.avg_5m - scores.risk + 1.5 > 0.0",
    "apps.kyc.level > 1 && apps.kyc.name == 'ann'",
    "double(apps.kyc.level) * 2.0 > scores.risk",
]
OUTSIDE = [  # constructs left to CEL: no Python function is made
    "has(event.country)",
    "size(event.country) == 2",
    "event.amount % 2 == 0",
    "event.country.startsWith('D')",
    "event.country == 'a\\nb'",
    "event.country == r'x'",
    "event.amount > 0x10",
    "int(scores.risk) > 40",
    "scores.risk > 1.0 ? true : false",
    "event.country in ['US', 1]",
    "event.amount in [true, 1]",
]


def odd(rng):
    return rng.choice([0, 1, 4, 5, 85, 95, -3, 2**53, 2**53 + 1, 2**63 - 1, 2**63, 2**70,
                       0.0, -0.0, 0.5, 4.0, 61.0, 90.0, 95.5, 1e308, -1e308, 5e-324,
                       math.nan, math.inf, -math.inf, True, False, None,
                       "US", "CA", "DE", "M", "ann", "", "é", "\ud800", [1], {"a": 1}])


def cel_value(c, variables):
    try:
        return c.program.execute(cel.Context(variables=variables))
    except BaseException:  # noqa: BLE001 - any failure: the direct answer must be UNSURE
        return UNSURE


@pytest.mark.parametrize("source", SUBSET)
def test_the_subset_is_compiled_and_gives_cel_values(source):
    c = compile_criterion(source, ROOTS)
    assert c.direct is not None
    plan = read_plan([c])
    rng = random.Random(source)
    answered = 0
    for i in range(4000):
        ctx = {"event": {}, "scores": {}, "metrics": {}, "apps": {"kyc": {}}}
        for _, path in c.flat:
            if rng.random() > 0.02:
                record = ctx[path[0]] if path[0] != "apps" else ctx["apps"][path[1]]
                record[path[-1]] = odd(rng) if i % 2 else _typical(path, rng)
        variables = direct_variables(plan, StepContext.of(ctx))  # as the step checks them
        if variables is None:
            continue
        got = c.direct(variables)
        if got is UNSURE:
            continue
        answered += 1
        assert got == cel_value(c, variables), variables
        assert got.__class__ is bool
    assert answered > 1000  # typical values are answered in Python


@pytest.mark.parametrize("source", OUTSIDE)
def test_constructs_outside_the_subset_stay_with_cel(source):
    assert compile_criterion(source, ROOTS).direct is None


def _typical(path, rng):
    field = path[-1]
    if field in ("amount", "level"):
        return rng.choice([0, 1, 2, 3, 999, 1000, 5000, -6, -5])
    if field in ("country", "name"):
        return rng.choice(["US", "CA", "DE", "B", "Ma", "ann", "bob"])
    if field == "is_alert":
        return rng.choice([True, False])
    return rng.choice([0.0, 0.5, 1.0, 4.0, 4.5, 60.0, 61.5, 80.0, 90.0, 95.0, 3.25])


def test_w3_nodes_have_python_criteria_and_walk_as_cel(w3):
    """Every W3 node with criteria gets them in Python; each step equals the step with every
    trial built through CEL, for typical and odd values alike."""
    assert all(len(n.direct) == len(n.edges) for n in w3.nodes.values() if n.edges)
    rng = random.Random(5)
    for i in range(3000):
        ctx = {"event": {"country": rng.choice(["US", "CA", "DE", 1, None, "é"]),
                         "amount": rng.choice([100, 50_000, 0, -0.0, 1e9, "x", 2**64])},
               "scores": {"payment_abuse": odd(rng) if i % 3 == 0 else float(rng.randrange(101))}
               if i % 7 else {},
               "metrics": {"card_count_5m": odd(rng) if i % 3 == 0 else float(rng.randrange(8)),
                           "merchant_avg_5m": rng.choice([1.0, 0.0, 5000.5, -1.0, 7, math.nan])}}
        for node_id in ("event", "score"):
            got = step(w3, node_id, ctx)
            want = _traced(w3, w3.node(node_id), StepContext.of(ctx))
            assert got.to_dict() == want.to_dict(), ctx
            assert (got.outside, got.decision) == (want.outside, want.decision)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.floats(), st.integers(min_value=-2**65, max_value=2**65),
                          st.text(max_size=3), st.booleans(), st.none()),
                min_size=4, max_size=4))
def test_a_node_in_python_steps_as_through_cel(values):
    wf = small()
    wf["nodes"][1]["edges"] = [
        edge("a", "block", "scores.risk > 90.0 && event.amount > 1000"),
        edge("b", "check", "event.amount in [1, 2] || scores.risk / metrics.card_count_5m < "
                           "-1.0"),
        edge("c", "approve", "event.currency == 'EUR'"),
        edge("d", "block", "event.currency < 'M' || !(metrics.card_count_5m >= 2)"),
        edge("s_default", "approve", default=True),
    ]
    version = compile_version(build(wf), 1)
    version._memos.clear()  # every step evaluates
    assert len(version.node("score").direct) == 4
    risk, amount, currency, count = values
    ctx = StepContext.of({"event": {"amount": amount, "currency": currency},
                          "scores": {"risk": risk}, "metrics": {"card_count_5m": count}})
    got = step(version, "score", ctx)
    want = _traced(version, version.node("score"), ctx)
    assert got.to_dict() == want.to_dict()


def test_a_value_outside_the_subset_sends_the_whole_node_to_cel(w3):
    plan = w3.node("score").plan
    base = {"event": {"country": "US", "amount": 10}, "scores": {"payment_abuse": 10.0},
            "metrics": {"merchant_avg_5m": 2.0}}
    assert direct_variables(plan, StepContext.of(base)) is not None
    for event in ({"country": "\ud800", "amount": 10}, {"country": "US", "amount": 2**63},
                  {"country": ["US"], "amount": 10}):
        assert direct_variables(plan, StepContext.of({**base, "event": event})) is None
