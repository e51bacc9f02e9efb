"""CEL criteria: type checking, clear errors for any input, and checker soundness."""

import string

import cel
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from workflows import CriterionError, compile_criterion
from workflows.cel_types import BOOL, DOUBLE, INT, STRING, Record

ROOTS = {
    "event": Record("event", {"amount": INT, "country": STRING, "is_alert": BOOL,
                              "rate": DOUBLE}),
    "scores": Record("scores", {"risk": DOUBLE}, {"other": "node 'x' is not upstream"}),
    "metrics": Record("metrics", {"count_5m": DOUBLE}),
    "apps": Record("apps", {"kyc": Record("apps.kyc", {"level": INT, "name": STRING})}),
}
CONTEXT = {"event": {"amount": 1500, "country": "DE", "is_alert": False, "rate": 0.25},
           "scores": {"risk": 42.5}, "metrics": {"count_5m": 3.0},
           "apps": {"kyc": {"level": 2, "name": "ann"}}}


@pytest.mark.parametrize("source", [
    "event.amount > 1000",
    "event.amount > 1000.5",  # CEL compares numbers across int and double
    "scores.risk >= 80.0 && !(event.country in ['US', 'CA'])",
    "double(event.amount) * event.rate > 100.0",
    "event.country.startsWith('D') || event.is_alert",
    "has(event.country) && size(event.country) == 2",
    "[1, 2, 3].exists(x, x == apps.kyc.level)",
    "apps.kyc.name.matches('^a.*') ? metrics.count_5m > 2.0 : false",
    "event.amount % 2 == 0 && event.amount - 1 > 0",
    "'kyc' in apps",
    "int(scores.risk) > 40",
    "{'DE': 1, 'FR': 2}[event.country] == 1",
])
def test_accepts_well_typed_criteria(source):
    c = compile_criterion(source, ROOTS)
    value, error = c.evaluate_on(CONTEXT)
    assert error is None and isinstance(value, bool)


@pytest.mark.parametrize(("source", "code", "words"), [
    ("event.amount + 1.5 > 2.0", "criteria_type", "never mixes int and double"),
    ("event.country > 3", "criteria_type", "cannot order"),
    ("event.amount", "criteria_type", "must be bool"),
    ("event.nope == 1", "criteria_unknown", "no field 'nope'"),
    ("scores.other > 1.0", "criteria_unknown", "not upstream"),
    ("apps.kyc.level.size() > 1", "criteria_type", "size() needs"),
    ("customer.id == 'x'", "criteria_unknown", "unknown variable 'customer'"),
    ("lowerAscii(event.country) == 'de'", "criteria_unknown", "unknown function"),
    ("!event.amount", "criteria_type", "! needs a bool"),
    ("event.is_alert && 1", "criteria_type", "must be bool"),
    ("event.amount > ", "criteria_syntax", "syntax error"),
    ("", "criteria_syntax", "empty"),
    ("x" * 2000, "criteria_limit", "too long"),
    ("(" * 200 + "true" + ")" * 200, "criteria_limit", "nested too deeply"),
    ("true ? 1 : 'a'", "criteria_type", "both branches"),
    ("event.country in [1, 2]", "criteria_type", "element types differ"),
])
def test_rejects_with_a_clear_error(source, code, words):
    with pytest.raises(CriterionError) as e:
        compile_criterion(source, ROOTS)
    assert e.value.code == code
    assert words in e.value.message


def test_constant_criteria_are_folded():
    assert compile_criterion("1 < 2", ROOTS).constant is True
    assert compile_criterion("false", ROOTS).constant is False
    assert compile_criterion("event.amount > 1", ROOTS).constant is None


def test_reads_are_recorded_for_the_step():
    c = compile_criterion("apps.kyc.level > 1 && event.country == 'DE' || has(event.rate)", ROOTS)
    assert c.paths == {("apps", "kyc", "level"), ("event", "country"), ("event", "rate")}
    assert compile_criterion("size(event) > 2", ROOTS).paths == {("event",)}


def test_evaluate_never_raises_and_reports_non_bool():
    c = compile_criterion("dyn(event.amount)", ROOTS)  # dyn passes the checker
    assert c.evaluate_on(CONTEXT) == (False, "TypeError: criterion gave int, not bool")
    c = compile_criterion("event.amount / 0 > 1", ROOTS)
    value, error = c.evaluate_on(CONTEXT)
    assert value is False and error


CEL_ALPHABET = string.ascii_letters[:12] + string.digits + " .()[]{}<>=!&|?:+-*/%,'\"\\_u\n"


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(st.text(max_size=60), st.text(alphabet=CEL_ALPHABET, max_size=60)))
def test_random_strings_never_crash_the_compiler(source):
    try:
        c = compile_criterion(source, ROOTS)
    except CriterionError as e:
        assert e.code.startswith("criteria_") and e.message.strip()
    else:
        value, error = c.evaluate_on(CONTEXT)  # a compiled criterion also never raises
        assert isinstance(value, bool)


# Soundness: every expression the generator builds is well typed, so the checker must accept
# it and the runtime must evaluate it to a bool without error on a complete context.
def typed_exprs():
    ints = st.sampled_from(["event.amount", "apps.kyc.level", "1", "-7", "int(scores.risk)"])
    doubles = st.sampled_from(["scores.risk", "metrics.count_5m", "event.rate", "2.5",
                               "double(event.amount)"])
    strings = st.sampled_from(["event.country", "apps.kyc.name", "'DE'", "string(event.amount)"])

    def arith(leaves):
        return st.recursive(leaves, lambda inner: st.builds(
            lambda a, op, b: f"({a} {op} {b})", inner, st.sampled_from(["+", "-", "*"]), inner),
            max_leaves=4)

    num_int, num_double = arith(ints), arith(doubles)
    comparisons = st.one_of(
        st.builds(lambda a, op, b: f"{a} {op} {b}", st.one_of(num_int, num_double),
                  st.sampled_from(["<", "<=", ">", ">=", "==", "!="]),
                  st.one_of(num_int, num_double)),
        st.builds(lambda a, op, b: f"{a} {op} {b}", strings, st.sampled_from(["==", "<"]), strings),
        st.builds(lambda a: f"{a}.startsWith('D')", strings),
        st.builds(lambda a: f"{a} in ['DE', 'US']", strings),
        st.just("event.is_alert"),
    )
    return st.recursive(comparisons, lambda inner: st.one_of(
        st.builds(lambda a, op, b: f"({a} {op} {b})", inner, st.sampled_from(["&&", "||"]), inner),
        st.builds(lambda a: f"!({a})", inner),
        st.builds(lambda c, a, b: f"({c} ? {a} : {b})", inner, inner, inner),
    ), max_leaves=6)


@settings(max_examples=100, deadline=None)
@given(typed_exprs())
def test_checker_is_sound_on_well_typed_expressions(source):
    c = compile_criterion(source, ROOTS)
    value, error = c.evaluate_on(CONTEXT)
    assert error is None, (source, error)
    assert value == cel.compile(source).execute(CONTEXT)
