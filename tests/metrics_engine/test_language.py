"""The metric language: accepted forms, canonical text, and errors with position + expectation."""

from __future__ import annotations

import pytest

from metrics_engine.errors import MetricSyntaxError
from metrics_engine.language import parse


def test_issue_example_and_aliases():
    defs = parse("SELECT SUM(amount) AS card_sum_5m, COUNT(*) AS card_count_5m "
                 "FROM payments GROUP BY card RANGE 5 MINUTES")
    assert [(d.name, d.func, d.field, d.group_by) for d in defs] == [
        ("card_sum_5m", "sum", "amount", ("card",)), ("card_count_5m", "count", None, ("card",))]
    assert defs[0].window.size_ms == 300_000 and defs[0].window.kind == "range"


@pytest.mark.parametrize("text", [
    "SELECT AVG(amount) FROM p WHERE channel = 'cnp' AND NOT amount < 10 GROUP BY card, mcc "
    "RANGE 1 HOURS DELAY 5 MINUTES",
    "SELECT TIME_SINCE_LAST() FROM p GROUP BY card RANGE 1 DAYS EXCLUDING CURRENT",
    "SELECT COUNT(DISTINCT merchant) FROM p GROUP BY card HOPPING 7 DAYS EVERY 1 DAY",
    "SELECT MAX(amount) FROM p TUMBLING 1 WEEK",
    "SELECT RATIO(is_fraud = 1 OR mcc IN (5411, 5812)) FROM p RANGE UNBOUNDED",
    "select min(amount) from p where ip is not null range 30 seconds",
])
def test_canonical_text_parses_back_to_the_same_metric(text):
    for d in parse(text):
        assert parse(d.text) == [d]


def test_generated_names_are_deterministic_and_distinct():
    a = parse("SELECT SUM(amount), SUM(amount) AS s2 FROM p GROUP BY card RANGE 5 MINUTES")
    assert a[0].name == "sum_amount_p_by_card_range_5m"
    assert parse("SELECT SUM(amount) FROM p GROUP BY card RANGE 5 MINUTES")[0].name == a[0].name


def test_weekly_buckets_start_on_monday():
    w = parse("SELECT COUNT(*) FROM p TUMBLING 1 WEEK")[0].window
    assert (w.align_ms // 86_400_000) == 4  # 1970-01-05 was a Monday


@pytest.mark.parametrize("text, line, column, expected", [
    ("SELECT SUM(amount FROM p", 1, 19, ")"),
    ("SELECT SUM(a) FROM p RANGE 5 PARSECS", 1, 30, "UNIT"),
    ("SELECT SUM(a)\nFROM", 2, 5, "NAME"),
    ("SELECT SUM(a) FROM p GROUP card", 1, 28, "BY"),
])
def test_syntax_errors_say_where_and_what_was_expected(text, line, column, expected):
    with pytest.raises(MetricSyntaxError) as e:
        parse(text)
    assert (e.value.line, e.value.column) == (line, column)
    assert expected in e.value.expected
    assert isinstance(e.value, ValueError)


@pytest.mark.parametrize("text, message", [
    ("SELECT FOO(x) FROM p", "unknown aggregation"),
    ("SELECT SUM(*) FROM p", r"only COUNT\(\*\)"),
    ("SELECT RATIO(amount) FROM p RANGE 5 MINUTES", None),
    ("SELECT SUM(a) FROM p HOPPING 7 DAYS EVERY 2 DAYS", "multiple"),
    ("SELECT SUM(a), COUNT(*) AS sum_a_p_all FROM p", "same name"),
])
def test_semantic_errors(text, message):
    if message is None:  # RATIO(field) is a truthiness predicate: allowed
        assert parse(text)[0].func == "ratio"
        return
    with pytest.raises(MetricSyntaxError, match=message) as e:
        parse(text)
    assert e.value.line >= 1 and e.value.column >= 1
