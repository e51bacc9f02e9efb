"""The backtest's walker remembers steps by the values read with their types, and a float
zero's sign is one of them: ``-0.0 == 0.0``, yet a criterion such as ``1.0 / x > 0.0`` tells
them apart, so a remembered ``0.0`` must never answer for ``-0.0``."""

from pipeline.walk import Walker
from tests.workflows.builders import build, edge, small
from workflows import compile_version


def _walk(walker, count):
    return walker.walk({"amount": 5}, {"card_count_5m": count}, {"risk": 1.0}, {})


def test_a_remembered_zero_never_answers_for_the_other_sign():
    wf = small()
    wf["nodes"][0]["edges"] = [edge("e_inv", "block", "1.0 / metrics.card_count_5m > 0.0"),
                               edge("e0", "score", default=True)]
    walker = Walker(compile_version(build(wf), 1))
    for first, second in ((0.0, -0.0), (-0.0, 0.0)):
        a, b = _walk(walker, first), _walk(walker, second)
        assert {a.edges.split(">")[0], b.edges.split(">")[0]} == {"e_inv", "e0"}
        assert _walk(walker, first) == a and _walk(walker, second) == b
    assert walker.steps_remembered > 0  # the memo answered the repeats


def test_int_float_and_bool_walk_apart():
    wf = small()
    wf["nodes"][0]["edges"] = [edge("e_one", "block", "string(metrics.card_count_5m) == '1'"),
                               edge("e0", "score", default=True)]
    version = compile_version(build(wf), 1)
    walker = Walker(version)
    values = (1, 1.0, True, 1, 1.0, True)
    remembered = [_walk(walker, v) for v in values]
    fresh = [_walk(Walker(version), v) for v in values]  # a walker of its own: no history
    assert remembered == fresh
    assert len({o.edges for o in fresh}) > 1  # the criterion does tell them apart
