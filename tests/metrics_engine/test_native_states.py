"""The native finalizers are bit-identical to the Python states the engine had before.

The reference classes (reference_states.py) run in lockstep with the engine over a sliding
window, with adversarial values (64-bit integers whose power sums pass i128, floats of every
scale, booleans, nulls, strings), and every value must be equal, not close: same type, bits.
"""

from __future__ import annotations

import math
import tempfile

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from metrics_engine import Engine

from . import reference_states as ref

FUNCS = ["count", "sum", "avg", "var_samp", "var_pop", "stddev_samp", "stddev_pop", "skewness",
         "min", "max", "count_distinct", "oldest", "recent", "time_since_last"]
TEXT = ("SELECT COUNT(x) AS count, SUM(x) AS sum, AVG(x) AS avg, VAR_SAMP(x) AS var_samp, "
        "VAR_POP(x) AS var_pop, STDDEV_SAMP(x) AS stddev_samp, STDDEV_POP(x) AS stddev_pop, "
        "SKEWNESS(x) AS skewness, MIN(x) AS min, MAX(x) AS max, "
        "COUNT(DISTINCT x) AS count_distinct, OLDEST(x) AS oldest, RECENT(x) AS recent, "
        "TIME_SINCE_LAST() AS time_since_last FROM s RANGE {w} MILLISECONDS")

values = st.one_of(
    st.integers(-10**6, 10**6), st.integers(-2**63, 2**63 - 1),
    st.sampled_from([2**63 - 1, -2**63]),
    st.floats(allow_nan=False, allow_infinity=False, min_value=-1e150, max_value=1e150),
    st.floats(min_value=-1e-3, max_value=1e-3, allow_nan=False), st.booleans(), st.none(),
    st.sampled_from(["a", "b"]), st.sampled_from([1e9 + 0.1, 1e9 - 0.7, 0.1, 1 / 3]))


def _reference_state(func):
    kind, arg = {"count": ("count", None), "time_since_last": ("count", None),
                 "min": ("extreme", 1), "max": ("extreme", -1),
                 "count_distinct": ("distinct", None), "oldest": ("fifo", None),
                 "recent": ("recent", None)}.get(func, ("moments", 3))
    return ref.new_state(kind, arg)


def _input(func, x):
    """What the engine feeds a state: COUNT(x) counts non-null x, TIME_SINCE_LAST() every event."""
    if func == "time_since_last":
        return 1
    if func == "count":
        return None if x is None else 1
    return x


def _identical(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return a == b and math.copysign(1, a) == math.copysign(1, b) or (a != a and b != b)
    return type(a) is type(b) and a == b


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(xs=st.lists(values, min_size=1, max_size=30), window=st.integers(1, 6))
@example(xs=[0, 1.7605429128942034e-154], window=2)  # a subnormal variance: rounded once
def test_native_values_equal_the_python_states_bit_for_bit(xs, window):
    states = {f: _reference_state(f) for f in FUNCS}
    with tempfile.TemporaryDirectory() as tmp:
        eng = Engine(tmp, fsync=False)
        eng.define(TEXT.format(w=window))
        for i, x in enumerate(xs):
            got = eng.ingest("s", {"x": x}, i)
            for f, s in states.items():
                if i >= window:  # the event at i - window leaves
                    s.remove(_input(f, xs[i - window]), i - window, i - window)
                s.add(_input(f, x), i, i)
                want = ref.FINALIZERS[f](s, i)
                if f == "count_distinct":
                    continue  # by value, not by Python's 1 == True (see test_input.py)
                assert _identical(got[f], want), (f, i, got[f], want)
        eng.close()
