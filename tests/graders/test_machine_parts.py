"""The grader's own GA-2 parts (``graders.machine_parts``), installed into a sandbox's copy of
``ga2``: requant against the integer arithmetic of the spec, written here from its formula."""
import numpy as np
from hypothesis import given, settings, strategies as st

from graders.machine_parts import requant


def _spec(acc: int, m: int, s: int) -> int:
    """sat127(round_half_away(acc * m / 2^s)), in Python integers (exact for any size)."""
    p = acc * m
    q = (abs(p) + (2 ** s) // 2) // 2 ** s
    q = q if p >= 0 else -q
    return max(-127, min(127, q))


ACC = st.integers(-(2 ** 31), 2 ** 31 - 1)
M = st.integers(0, 2 ** 16 - 1)
S = st.integers(0, 24)


@settings(max_examples=300, deadline=None)
@given(st.lists(ACC, min_size=1, max_size=40), M, S)
def test_an_array_is_requantized_as_the_spec_says_each_value(accs, m, s):
    got = requant(np.array(accs, dtype=np.int32), m, s)
    assert got.dtype == np.int64 and got.shape == (len(accs),)
    assert got.tolist() == [_spec(a, m, s) for a in accs]


@settings(max_examples=300, deadline=None)
@given(ACC, M, S)
def test_a_scalar_gives_a_python_int(acc, m, s):
    got = requant(acc, m, s)
    assert type(got) is int and got == _spec(acc, m, s)


def test_ties_round_away_from_zero_and_both_ends_saturate():
    assert requant(np.array([3, -3, 1, -1, 10_000, -10_000]), 1, 1).tolist() == [2, -2, 1, -1, 127, -127]
    assert requant(-128 * 4, 1, 2) == -127          # symmetric: -128 is never produced
