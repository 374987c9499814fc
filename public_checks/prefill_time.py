"""Public checks for the exercise ``prefill_time(n_tokens, n_params, flops)`` (chapter 4).
The expected times are stored in ``data/prefill_time.json``; the hidden tests check more.
"""
from ._data import load, same

CASES = load("prefill_time")["cases"]


def _check(fn, index):
    case = CASES[index]
    args, want = tuple(case["args"]), case["expected"]
    got = fn(*args)
    ok = same(got, want)
    hint = ""
    if not ok and isinstance(got, (int, float)):
        if same(got, want * 1000):
            hint = " That is in milliseconds: return seconds."
        elif same(got, want / 2):
            hint = " Half the right time: each token costs 2 operations per parameter (multiply and add)."
        elif args[0] and same(got, want / args[0]):
            hint = " That is the time of one token: multiply by n_tokens."
    assert ok, f"{case['what']}: prefill_time{args} should be {want:.9f} seconds, got {got!r}.{hint}"
    return got


def check_a10(fn):
    _check(fn, 0)


def check_t4_and_a100(fn):
    _check(fn, 1)
    _check(fn, 2)


def check_one_token(fn):
    _check(fn, 3)


def check_zero_tokens(fn):
    got = _check(fn, 4)
    assert isinstance(got, float), f"prefill_time should return a float, got {type(got).__name__}"


CHECKS = [
    ("350 tokens of a 7B model on an A10: 39.2 ms, in seconds", check_a10),
    ("the T4 and the A100", check_t4_and_a100),
    ("one token: 2 operations per parameter", check_one_token),
    ("0 tokens: 0.0 seconds, a float", check_zero_tokens),
]
