"""Public checks for the exercise ``arithmetic_intensity(n, d, bytes_per_value)`` (chapter 4).

The expected intensities, and what four common mistakes give, are stored in
``data/arithmetic_intensity.json``.  The hidden tests check more.
"""
from ._data import load, mistake, same

CASES = load("arithmetic_intensity")["cases"]
HINTS = {"numbers": "It looks like the bytes were counted as numbers (multiply by bytes_per_value).",
         "bytes_twice": "It looks like bytes_per_value was applied twice.",
         "no_softmax": "The 3 N^2 operations of the softmax seem to be missing.",
         "half_traffic": "Count the loads AND the stores of every line."}


def _check(fn, index):
    case = CASES[index]
    args, want = tuple(case["args"]), case["expected"]
    got = fn(*args)
    assert same(got, want), (f"{case['what']}: arithmetic_intensity{args} should be {want:.6f} operations "
                             f"per byte, got {got!r}.{mistake(case, got, HINTS)}")
    return got


def check_llama(fn):
    _check(fn, 0)


def check_small_by_hand(fn):
    _check(fn, 1)


def check_one_token(fn):
    _check(fn, 2)


def check_float_and_bytes(fn):
    got = _check(fn, 3)
    assert isinstance(got, float), f"arithmetic_intensity should return a float, got {type(got).__name__}"


CHECKS = [
    ("N = 4096, d = 128, fp16: about 62.42", check_llama),
    ("a small case worked by hand: N = 4, d = 2", check_small_by_hand),
    ("one token, d = 1, one byte: 7/8", check_one_token),
    ("fp32 halves it, and the result is a float", check_float_and_bytes),
]
