"""The hidden tests of quantize_kv and dequantize_kv (chapter 13): the reference against cases
worked by hand and against the engine's quantizer (two implementations written apart that
agree), right answers written two ways get full marks, and common mistakes lose the tests they
break, with the mistake named."""
import numpy as np
import pytest

from graders import registry
from graders.exercises import quantize_kv as ex

from grader_helpers import failed_outputs, grade_text

VECTORISED = """
import numpy as np
def quantize_kv(x, bits, axis):
    top = 2 ** bits - 1
    offset = x.min(axis=axis, keepdims=True)
    scale = (x.max(axis=axis, keepdims=True) - offset) / top
    safe = np.where(scale > 0, scale, 1.0)
    codes = np.clip(np.round((x - offset) / safe), 0, top).astype(np.uint8)
    return codes, scale, offset

def dequantize_kv(codes, scale, offset):
    return codes * scale + offset
"""

LOOPS = """
import numpy as np
def _one(v, bits):
    lo, hi = float(v.min()), float(v.max())
    s = (hi - lo) / (2 ** bits - 1)
    if s == 0:
        return np.zeros(len(v), np.uint8), 0.0, lo
    return np.array([min(2 ** bits - 1, max(0, round((float(a) - lo) / s))) for a in v], np.uint8), s, lo

def quantize_kv(x, bits, axis):
    x = np.asarray(x, dtype=float)
    slices = x.T if axis == 0 else x
    parts = [_one(v, bits) for v in slices]
    codes = np.array([p[0] for p in parts], np.uint8)
    scale = np.array([[p[1]] for p in parts])
    offset = np.array([[p[2]] for p in parts])
    if axis == 0:
        return codes.T.copy(), scale.T.copy(), offset.T.copy()
    return codes, scale, offset

def dequantize_kv(codes, scale, offset):
    return codes.astype(np.float64) * scale + offset
"""


def test_the_worked_example_by_hand():
    codes, scale, offset = ex.quantize(ex.WORKED_EXAMPLE, 2, 0)
    # channel 0: min -0.5, step 1.5 / 3 = 0.5; channel 2 (the outlier): min 2, step 2; channel 3 constant
    assert codes.tolist() == [[1, 0, 3, 0], [3, 2, 0, 0], [0, 3, 2, 0]]
    assert scale.tolist() == [[0.5, 0.5, 2.0, 0.0]] and offset.tolist() == [[-0.5, -0.5, 2.0, 1.0]]
    codes, scale, offset = ex.quantize(ex.WORKED_EXAMPLE, 2, 1)
    # token 0: min -0.5, step 8.5 / 3: 0 and -0.5 both give code 0 (the outlier takes the range)
    assert codes.tolist() == [[0, 0, 3, 1], [1, 0, 3, 1], [0, 1, 3, 1]]
    assert scale[:, 0].tolist() == pytest.approx([8.5 / 3, 0.5, 6.5 / 3]) and offset[:, 0].tolist() == [-0.5, 0.5, -0.5]
    assert np.array_equal(ex.dequantize(*ex.quantize(ex.WORKED_EXAMPLE, 2, 0)), ex.WORKED_EXAMPLE)


def test_halves_go_to_the_even_code():
    codes, scale, _ = ex.quantize(ex.HALVES, 2, 0)
    assert scale.tolist() == [[1.0]] and codes[:, 0].tolist() == [0, 0, 2, 2, 3]
    assert ex.quantize(ex.HALVES, 2, 0, how="half_up")[0][:, 0].tolist() == [0, 1, 2, 3, 3]


def test_the_reference_agrees_with_the_engine():
    from kvcache.quantized import quantize_kv
    rng = np.random.default_rng(4)
    for _ in range(200):
        bits, axis = int(rng.integers(1, 9)), int(rng.integers(0, 2))
        x = ex.random_x(rng, int(rng.integers(1, 12)), int(rng.integers(1, 12)), bits, axis, spread=float(rng.random() * 9 + 0.1))
        codes, scale, offset = quantize_kv(x, bits, axis)
        want = ex.quantize(x, bits, axis)
        assert np.array_equal(codes, want[0]) and np.array_equal(scale, want[1]) and np.array_equal(offset, want[2])


def test_the_tests_are_a_table_of_sound_cases():
    tests = registry.tests("quantize_kv")
    assert len(tests) >= 12 and all(t.points > 0 for t in tests)
    names = " ".join(t.name for t in tests)
    for edge in ("every bit width", "constant", "single token", "half a step", "NaN", "shapes and dtypes",
                 "not modified", "axis=0", "axis=1"):
        assert edge in names, edge
    for t in tests:                                  # random inputs stay away from the halves
        for call in t.calls:
            if call.fn == "quantize_kv" and "halves" not in t.name:
                x, bits, axis = call.args
                assert ex.distance_from_halves(x, bits, axis) > ex.AWAY_FROM_HALF or \
                    ex.distance_from_halves(x, bits, axis) == np.inf or t.name.startswith(("the worked", "constant",
                                                                                             "a single", "no NaN",
                                                                                             "shapes", "the input"))


@pytest.mark.parametrize("source", [VECTORISED, LOOPS], ids=["vectorised", "loops"])
def test_a_right_answer_gets_full_marks(source):
    result = grade_text(source, "quantize_kv")
    assert result["score"] == result["max_score"] > 0, failed_outputs(result)


WRONG = [
    (VECTORISED.replace("np.round((x - offset) / safe)", "np.floor((x - offset) / safe)"), "rounded down"),
    (VECTORISED.replace("np.round((x - offset) / safe)", "np.floor((x - offset) / safe + 0.5)"), "halves rounded up"),
    (VECTORISED.replace("/ top\n", "/ (top + 1)\n"), "divide by 2**bits - 1"),
    (VECTORISED.replace("offset = x.min(axis=axis", "axis = 1 - axis\n    offset = x.min(axis=axis"), "other axis"),
    (VECTORISED.replace("keepdims=True", "keepdims=False"), "keepdims=True"),
    (VECTORISED.replace("return codes, scale, offset", "return codes, safe, offset"), "a constant slice (max = min)"),
    (VECTORISED.replace(".astype(np.uint8)", ""), "uint8"),
    (VECTORISED.replace("return codes * scale + offset", "return codes * scale"), "dequantize_kv"),
]


@pytest.mark.parametrize("source, words", WRONG, ids=[w for _, w in WRONG])
def test_a_common_mistake_loses_points_and_is_named(source, words):
    result = grade_text(source, "quantize_kv")
    assert 0 <= result["score"] < result["max_score"]
    feedback = "\n".join(failed_outputs(result))
    assert words in feedback, feedback


def test_an_answer_that_writes_into_its_input_loses_the_test_of_it():
    source = VECTORISED.replace("    return codes, scale, offset", "    x -= 0.0 * x\n    x[0, 0] = 99.0\n    return codes, scale, offset")
    result = grade_text(source, "quantize_kv")
    failed = {t["name"] for t in result["tests"] if t["status"] != "passed"}
    assert "the input is not modified" in failed
    assert not any("every bit width" in name for name in failed)


def test_nothing_returned_earns_nothing():
    source = "def quantize_kv(x, bits, axis):\n    return None\n\ndef dequantize_kv(codes, scale, offset):\n    return None\n"
    result = grade_text(source, "quantize_kv")
    assert result["score"] == 0
    assert "three arrays (codes, scale, offset)" in "\n".join(failed_outputs(result))
