"""Public checks for the exercise ``prefill_time(n_tokens, n_params, flops)`` (chapter 4).
Expected values worked out by hand here; the hidden tests check more.
"""
import math

A10 = 350 * 2 * 7e9 / 125e12     # 0.0392 s
T4 = 350 * 2 * 7e9 / 65e12       # 0.0753846... s
A100 = 350 * 2 * 7e9 / 312e12    # 0.0157051... s


def _check(fn, args, want, what):
    got = fn(*args)
    ok = isinstance(got, (int, float)) and math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-15)
    hint = ""
    if isinstance(got, (int, float)) and not ok:
        if math.isclose(got, want * 1000, rel_tol=1e-9):
            hint = " That is in milliseconds: return seconds."
        elif math.isclose(got, want / 2, rel_tol=1e-9):
            hint = " Half the right time: each token costs 2 operations per parameter (multiply and add)."
        elif args[0] and math.isclose(got, want / args[0], rel_tol=1e-9):
            hint = " That is the time of one token: multiply by n_tokens."
    assert ok, f"{what}: prefill_time{args} should be {want:.9f} seconds, got {got!r}.{hint}"
    return got


def check_a10(fn):
    _check(fn, (350, 7e9, 125e12), A10, "350 tokens, 7B, A10")


def check_t4_and_a100(fn):
    _check(fn, (350, 7e9, 65e12), T4, "350 tokens, 7B, T4")
    _check(fn, (350, 7e9, 312e12), A100, "350 tokens, 7B, A100")


def check_one_token(fn):
    _check(fn, (1, 1e9, 2e9), 1.0, "one token of a 1B model at 2 GFLOP/s")


def check_zero_tokens(fn):
    got = _check(fn, (0, 7e9, 125e12), 0.0, "an empty prompt")
    assert isinstance(got, float), f"prefill_time should return a float, got {type(got).__name__}"


CHECKS = [
    ("350 tokens of a 7B model on an A10: 39.2 ms, in seconds", check_a10),
    ("the T4 and the A100", check_t4_and_a100),
    ("one token: 2 operations per parameter", check_one_token),
    ("0 tokens: 0.0 seconds, a float", check_zero_tokens),
]
