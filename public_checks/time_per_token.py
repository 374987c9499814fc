"""Public checks for the exercise ``time_per_token(n_params, bytes_per_param, bandwidth)``
(chapter 4).  Expected values worked out by hand here; the hidden tests check more.
"""
import math

A10 = 14e9 / 600e9        # 7B in fp16 on 600 GB/s: 0.023333... s
T4 = 14e9 / 300e9         # 0.046666... s
A100_INT8 = 7e9 / 2039e9  # 7B in int8 on 2,039 GB/s: 0.003433... s


def _check(fn, args, want, what):
    got = fn(*args)
    ok = isinstance(got, (int, float)) and math.isclose(got, want, rel_tol=1e-9)
    hint = ""
    if isinstance(got, (int, float)) and not ok:
        if math.isclose(got, want * 1000, rel_tol=1e-9):
            hint = " That is in milliseconds: return seconds."
        elif math.isclose(got, want / args[1], rel_tol=1e-9):
            hint = " bytes_per_param seems to be missing."
        elif got and math.isclose(1 / got, want, rel_tol=1e-9):
            hint = " That is tokens per second: invert it."
    assert ok, f"{what}: time_per_token{args} should be {want:.9f} seconds, got {got!r}.{hint}"
    return got


def check_a10(fn):
    _check(fn, (7e9, 2, 600e9), A10, "7B in fp16 on an A10")


def check_t4(fn):
    _check(fn, (7e9, 2, 300e9), T4, "7B in fp16 on a T4")


def check_int8(fn):
    _check(fn, (7e9, 1, 2039e9), A100_INT8, "7B in int8 on an A100")


def check_ints_give_float(fn):
    got = _check(fn, (1000, 4, 2000), 2.0, "1,000 parameters of 4 bytes at 2,000 bytes/s")
    assert isinstance(got, float), f"time_per_token should return a float, got {type(got).__name__}"


CHECKS = [
    ("7B fp16 on an A10: 23.3 ms, in seconds", check_a10),
    ("7B fp16 on a T4: 46.7 ms", check_t4),
    ("int8 weights take half the bytes", check_int8),
    ("integer inputs give a float", check_ints_give_float),
]
