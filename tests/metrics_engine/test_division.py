"""The finalizers' exact division is Python's correctly rounded ``int / int``, at every size.

``exact_ratio`` is how AVG, the variances and RATIO divide; ``square_by_cube_ratio`` is
SKEWNESS's ``a * a / (b * b * b)``. Operands past 128 bits are divided in fixed-width
integers (num.rs ``Wide``) before big integers take over: every path must give the double
Python gives, bit for bit.
"""

from __future__ import annotations

import math

from hypothesis import example, given, settings
from hypothesis import strategies as st
from railflow_metrics_native import exact_ratio, square_by_cube_ratio


def ints(max_bits: int, positive: bool = False):
    """Integers of every bit length up to ``max_bits``, uniformly by length (below 2**127:
    the native core holds them in i128)."""
    def of_length(k: int):
        top = 2**k - 1 if k == 127 else 2**k
        return st.integers(1 if positive else -top, max(top, 1))

    return st.integers(0, max_bits).flatmap(of_length)


def identical(a: float, b: float) -> bool:
    return a == b and math.copysign(1, a) == math.copysign(1, b)


@settings(max_examples=2000, deadline=None)
@given(a=ints(400), b=ints(400, positive=True))
@example(a=2**127 - 1, b=3)
@example(a=-(2**127), b=2**127 - 1)
@example(a=0, b=5)
def test_ratio_is_pythons(a, b):
    assert identical(exact_ratio(a, b), a / b), (a, b)


@settings(max_examples=3000, deadline=None)
@given(a=ints(127), b=ints(127, positive=True))
@example(a=(2**53 + 1) << 73, b=1 << 74)  # half-way between two doubles: to even
@example(a=((2**53 + 1) << 73) + 1, b=1 << 74)  # just above half-way: up
@example(a=(2**53 + 3) << 73, b=1 << 74)  # half-way, the odd one below: up
@example(a=-((2**53 + 1) << 73), b=1 << 74)
def test_ratio_within_128_bits_is_pythons(a, b):
    assert identical(exact_ratio(a, b), a / b), (a, b)


@settings(max_examples=3000, deadline=None)
@given(a=ints(135), b=ints(135, positive=True))
@example(a=2**127 - 1, b=1)
@example(a=1, b=2**127 - 1)
@example(a=-(2**127), b=3)
@example(a=2**64 + 1, b=2**43 + 7)
@example(a=3 * 2**70, b=2**47)  # an exact power-of-two ratio
@example(a=0, b=9)
def test_square_by_cube_is_pythons(a, b):
    assert identical(square_by_cube_ratio(a, b), a * a / (b * b * b)), (a, b)


def test_refuses_a_divisor_that_is_not_positive():
    import pytest

    with pytest.raises(ValueError):
        exact_ratio(1, 0)
    with pytest.raises(ValueError):
        square_by_cube_ratio(1, -2)
