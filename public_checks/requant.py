"""Public checks for the exercise ``requant(acc, m, s)`` (chapter 9): GA-2's requantizer.

A few cases; the expected results (and what the common mistakes give instead: ties rounded to
even or up, saturation at -128, a float64 product) are stored in
``data/requant.json``.  The hidden tests check more: every shift, products beyond 2^53, arrays of
every shape.
"""
import numpy as np

from ._data import load

DATA = load("requant")
HINTS = {"even": "Halves seem to be rounded to even (Python's round and np.round do that); GA-2 rounds "
                 "them away from zero: 2.5 -> 3, -2.5 -> -3.",
         "up": "Negative halves seem to be rounded up (floor(x + 0.5)); GA-2 rounds them away from zero: "
               "-2.5 -> -3.",
         "low128": "The result seems to saturate at -128; GA-2's int8 is symmetric: -127 ... 127."}
HINTS["float64"] = ("The product acc * m seems to be computed in float64, which rounds it past 2^53: "
                    "multiply exactly (Python ints, or int64), then shift (rule 1).")
HINTS["int32"] = ("The accumulators are int32, as the machine's words are: acc * m reaches 2^55, so an int32 "
                  "product wraps around; compute it in int64 (or with Python ints).")


def _hint(case, got) -> str:
    """The hint of the one mistake that gives exactly ``got``, or none."""
    for name, wrong in case.get("mistakes", {}).items():
        if wrong != case["expected"] and got == wrong:
            return " " + HINTS[name]
    return ""


def _scalars(fn, key):
    case = DATA[key]
    got = []
    for args in case["args"]:
        value = fn(*args)
        assert type(value) is int, (f"requant{tuple(args)} returned {type(value).__name__} ({value!r}); a scalar "
                                    "accumulator gives a Python int")
        got.append(value)
    for args, g, want in zip(case["args"], got, case["expected"]):
        assert g == want, f"requant{tuple(args)} should be {want}, got {g}.{_hint(case, got)}"


def check_weights(fn):
    _scalars(fn, "weights")


def check_ties(fn):
    _scalars(fn, "ties")


def check_saturation(fn):
    _scalars(fn, "saturation")


def check_exact_product(fn):
    _scalars(fn, "exact")


def check_int32_array(fn):
    case = DATA["array"]
    acc = np.array(case["acc"], dtype=np.int32)
    before = acc.copy()
    got = fn(acc, case["m"], case["s"])
    assert isinstance(got, np.ndarray), f"for an array of accumulators requant should return a numpy array, got {type(got).__name__}"
    assert got.shape == acc.shape, f"the result has shape {got.shape}; expected the input's shape {acc.shape}"
    assert got.dtype.kind in "iu", f"the result has dtype {got.dtype}; expected integers"
    assert np.array_equal(acc, before), "requant modified its input array: leave acc as it was"
    values = [int(v) for v in got]
    assert values == case["expected"], (f"for int32 accumulators {case['acc']} with m = {case['m']}, s = {case['s']} "
                                        f"the result should be {case['expected']}, got {values}.{_hint(case, values)}")


CHECKS = [
    ("the chapter's weights requantizer: Q0.16 probabilities to int8 (m = 16646144, s = 33)", check_weights),
    ("ties go away from zero: 2.5 -> 3, -2.5 -> -3, 1.5 -> 2, -1.5 -> -2", check_ties),
    ("saturation: 1000 -> 127, -1000 -> -127, -128 -> -127", check_saturation),
    ("products past 2^53, one below a half: multiplied exactly, not in float64", check_exact_product),
    ("an int32 array in (products beyond 2^31), an int array of its shape out, the input unchanged",
     check_int32_array),
]
