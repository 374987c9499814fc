"""Public checks for the exercise ``time_per_token(n_params, bytes_per_param, bandwidth)``
(chapter 4).  The expected times are stored in ``data/time_per_token.json``; the hidden tests
check more.
"""
from ._data import load, same

CASES = load("time_per_token")["cases"]


def _check(fn, index):
    case = CASES[index]
    args, want = tuple(case["args"]), case["expected"]
    got = fn(*args)
    ok = same(got, want)
    hint = ""
    if not ok and isinstance(got, (int, float)):
        if same(got, want * 1000):
            hint = " That is in milliseconds: return seconds."
        elif same(got, want / args[1]):
            hint = " bytes_per_param seems to be missing."
        elif got and same(1 / got, want):
            hint = " That is tokens per second: invert it."
    assert ok, f"{case['what']}: time_per_token{args} should be {want:.9f} seconds, got {got!r}.{hint}"
    return got


def check_a10(fn):
    _check(fn, 0)


def check_t4(fn):
    _check(fn, 1)


def check_int8(fn):
    _check(fn, 2)


def check_ints_give_float(fn):
    got = _check(fn, 3)
    assert isinstance(got, float), f"time_per_token should return a float, got {type(got).__name__}"


CHECKS = [
    ("7B fp16 on an A10: 23.3 ms, in seconds", check_a10),
    ("7B fp16 on a T4: 46.7 ms", check_t4),
    ("int8 weights take half the bytes", check_int8),
    ("integer inputs give a float", check_ints_give_float),
]
