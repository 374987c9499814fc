"""ga2.quant and ga2.softmax: the int8 arithmetic and the softmax unit."""
import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from ga2.quant import (dequantize, mantissa_shift, matmul_int8, quantize, requant, round_half_away, saturate,
                       scale_for)
from ga2.softmax import EXP_TABLE, softmax_fixed, softmax_fixed_array, softmax_float
from published_figures import PUBLISHED_SOFTMAX_IN, PUBLISHED_SOFTMAX_OUT, PUBLISHED_WEIGHTS_INT8, PUBLISHED_WEIGHTS_RQ

SETTINGS = settings(max_examples=200, derandomize=True, deadline=None, database=None)


# ---------------------------------------------------------------- scales and quantization
def test_round_half_away_and_saturate():
    assert [round_half_away(v) for v in (2.5, -2.5, 0.5, -0.5, 1.49, -1.49, 0.0)] == [3, -3, 1, -1, 1, -1, 0]
    assert list(round_half_away(np.array([2.5, -2.5]))) == [3, -3]
    assert saturate(300) == 127 and saturate(-300) == -127
    assert list(saturate(np.array([128, -128, 5]))) == [127, -127, 5]


def test_scale_and_quantize_are_symmetric_int8():
    v = np.array([[0.5, -2.0], [1.0, 0.01]])
    s = scale_for(v)
    assert s == 2.0 / 127
    q = quantize(v, s)
    assert q.dtype == np.int64 and q.tolist() == [[32, -127], [64, 1]]
    assert quantize([[0.5, -2.0]], s) == [[32, -127]]
    assert quantize(3.0, s) == 127 and quantize(-3.0, s) == -127          # saturates, never -128
    assert quantize(0.5 * s, s) == 1 and quantize(-0.5 * s, s) == -1       # halves away from zero
    assert scale_for([0.0, 0.0]) == 1.0
    assert np.allclose(dequantize(q, s), q * s) and dequantize(5, 0.5) == 2.5


@SETTINGS
@given(st.lists(st.floats(-1e3, 1e3, allow_nan=False), min_size=1, max_size=30))
def test_quantization_error_is_at_most_half_a_level(values):
    s = scale_for(values)
    q = np.array(quantize(values, s))
    assert np.all(np.abs(q) <= 127)
    assert np.all(np.abs(q * s - np.array(values)) <= s / 2 * (1 + 1e-9))


# ---------------------------------------------------------------- requantizer parameters
def test_mantissa_shift_of_the_weights_requantizer():
    assert mantissa_shift(127 / 65536) == PUBLISHED_WEIGHTS_RQ == (16646144, 33)


@SETTINGS
@given(st.floats(1e-12, 1e6, allow_nan=False, allow_infinity=False))
def test_mantissa_shift_is_the_closest_24_bit_fraction(x):
    m, s = mantissa_shift(x)
    assert 2 ** 23 <= m < 2 ** 24 and s >= 0
    exact = Fraction(x) * 2 ** s
    assert abs(Fraction(m) - exact) <= Fraction(1, 2)       # m is x * 2^s rounded
    assert abs(m / 2 ** s - x) <= x * 2 ** -23


def test_mantissa_shift_carries_and_refuses():
    m, s = mantissa_shift(1 - 2 ** -30)        # rounds up to 2^24: carried to 2^23 with one less shift
    assert (m, s) == (2 ** 23, 23)
    for bad in (0.0, -1.0, float("inf"), float("nan"), 2.0 ** 30):
        with pytest.raises(ValueError):
            mantissa_shift(bad)


@SETTINGS
@given(st.integers(-2 ** 31, 2 ** 31 - 1), st.integers(0, 2 ** 24 - 1), st.integers(0, 63), st.integers(0, 1))
def test_requant_scalar_and_array_agree_with_fractions(acc, m, s, relu):
    x = Fraction(acc * m, 2 ** s)
    r = math.floor(abs(x) + Fraction(1, 2))
    want = max(-127, min(127, r if x >= 0 else -r))
    want = max(0, want) if relu else want
    assert requant(acc, m, s, relu) == want
    assert requant(np.array([acc]), m, s, relu).tolist() == [want]
    assert requant([acc, acc], m, s, relu) == [want, want]


def test_matmul_int8_is_exact_and_checks_its_operands():
    a = np.full((1, 64), -128)
    b = np.full((64, 2), -128)
    assert matmul_int8(a, b).tolist() == [[2 ** 20, 2 ** 20]]
    assert matmul_int8([[1, 2], [3, -4]], [[5], [6]]) == [[17], [-9]]     # lists in, lists out
    with pytest.raises(ValueError):
        matmul_int8([[128]], [[1]])


# ---------------------------------------------------------------- the softmax unit
def test_softmax_fixed_running_example_a():
    assert softmax_fixed(PUBLISHED_SOFTMAX_IN) == PUBLISHED_SOFTMAX_OUT
    assert sum(PUBLISHED_SOFTMAX_OUT) == 65536
    # the int8 weights of example A: probabilities times 127, rounded
    assert requant(np.array(PUBLISHED_SOFTMAX_OUT), *mantissa_shift(127 / 65536)).tolist() == PUBLISHED_WEIGHTS_INT8


def test_exp_table():
    assert EXP_TABLE.shape == (256,) and EXP_TABLE[0] == 65536
    assert EXP_TABLE[16] == math.floor(65536 / math.e)
    assert np.all(np.diff(EXP_TABLE) <= 0)
    # 65536 exp(-d/16) drops below 1 after d = 16 ln 65536 = 177.4: scores that far below the max weigh 0
    assert EXP_TABLE[177] == 1 and EXP_TABLE[178] == 0 and EXP_TABLE[255] == 0


@SETTINGS
@given(st.lists(st.integers(-128, 127), min_size=1, max_size=64))
def test_softmax_fixed_is_close_to_the_real_softmax(scores):
    p = softmax_fixed(scores)
    assert all(0 <= v <= 65536 for v in p)
    assert abs(sum(p) - 65536) <= len(p)                 # rounding of each division
    real = softmax_float(scores)
    assert max(abs(a / 65536 - b) for a, b in zip(p, real)) < 1e-3
    assert softmax_fixed_array(scores).tolist() == p


def test_softmax_refuses_bad_input():
    for bad in ([], [128], [-129], [[1, 2]]):
        with pytest.raises(ValueError):
            softmax_fixed(bad)


def test_softmax_float_twin():
    assert softmax_float([16, 16]) == [0.5, 0.5]
    w = softmax_float([0.7071, 0.3536, 1.0607, -0.7071], scale=1)   # running example A in real numbers
    assert [round(v, 4) for v in w] == [0.2968, 0.2084, 0.4227, 0.0722]
