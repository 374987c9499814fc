"""Public checks for the exercise ``arithmetic_intensity(n, d, bytes_per_value)`` (chapter 4).

Expected values are worked out by hand here from (4d + 3) N / (4 b (N + d)), never with the
course's engine.  The hidden tests check more.
"""
import math

# N = 4096, d = 128, b = 2: 515 * 4096 / (8 * 4224) = 2,109,440 / 33,792 = 62.4242...
SEED = 2_109_440 / 33_792
# N = 4, d = 2, b = 2: (11 * 4) / (8 * 6) = 44 / 48
SMALL = 44 / 48
# N = 1, d = 1, b = 1: 7 / 8
TINY = 7 / 8


def _close(got, want):
    return isinstance(got, (int, float)) and math.isclose(got, want, rel_tol=1e-9)


def _hint(got, want, n, d, b):
    if not isinstance(got, (int, float)):
        return ""
    if _close(got, want * b):
        return " It looks like the bytes were counted as numbers (multiply by bytes_per_value)."
    if _close(got, want / b):
        return " It looks like bytes_per_value was applied twice."
    if _close(got, (4 * d * n * n) / (b * (4 * n * n + 4 * n * d))):
        return " The 3 N^2 operations of the softmax seem to be missing."
    if _close(got, (2 * d * n * n + 3 * n * n + 2 * n * n * d) / (b * (2 * n * n + 2 * n * d))):
        return " Count the loads AND the stores of every line."
    return ""


def _check(fn, n, d, b, want, what):
    got = fn(n, d, b)
    assert _close(got, want), (f"{what}: arithmetic_intensity({n}, {d}, {b}) should be {want:.6f} operations "
                               f"per byte, got {got!r}.{_hint(got, want, n, d, b)}")
    return got


def check_seed(fn):
    _check(fn, 4096, 128, 2, SEED, "Llama 2 7B's attention in fp16 (the seed's 62)")


def check_small_by_hand(fn):
    _check(fn, 4, 2, 2, SMALL, "N = 4, d = 2, fp16")


def check_one_token(fn):
    _check(fn, 1, 1, 1, TINY, "N = 1, d = 1, one byte per number")


def check_float_and_bytes(fn):
    got = _check(fn, 4096, 128, 4, SEED / 2, "the same attention in fp32 (4 bytes)")
    assert isinstance(got, float), f"arithmetic_intensity should return a float, got {type(got).__name__}"


CHECKS = [
    ("N = 4096, d = 128, fp16: about 62.42", check_seed),
    ("a small case worked by hand: N = 4, d = 2", check_small_by_hand),
    ("one token, d = 1, one byte: 7/8", check_one_token),
    ("fp32 halves it, and the result is a float", check_float_and_bytes),
]
