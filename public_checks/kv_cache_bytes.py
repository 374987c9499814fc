"""Public checks for the exercise ``kv_cache_bytes(n_layers, n_kv_heads, head_dim, n_tokens,
bytes_per_value)`` (chapter 3).

A few cases; the expected byte counts are stored in ``data/kv_cache_bytes.json``.  The hidden
tests check more.
"""
from ._data import load

CASES = load("kv_cache_bytes")["cases"]


def _hint(got, want):
    if isinstance(got, (int, float)) and got and want:
        ratio = got / want
        if abs(ratio - 0.5) < 1e-12:
            return " It is half the right size: the cache holds a key AND a value (the factor 2)."
        if abs(ratio - 2.0) < 1e-12:
            return " It is twice the right size: is a factor 2 counted twice?"
    if (got == 0 and want) or (isinstance(got, int) and got < 0):
        return " A 32-bit integer product wraps around past 2**31 - 1: multiply Python ints."
    return ""


def _check(fn, index):
    case = CASES[index]
    args, want = tuple(case["args"]), case["expected"]
    got = fn(*args)
    assert got == want, (f"{case['what']}: kv_cache_bytes{args} should be {want:,} bytes, got {got!r}."
                         f"{_hint(got, want)}")
    assert type(got) is int, (
        f"kv_cache_bytes should return a Python int, got {type(got).__name__} ({got!r}); "
        "a float may round large byte counts and a numpy integer may overflow")
    return got


def check_seven_b_per_token(fn):
    _check(fn, 0)


def check_chapter_example(fn):
    _check(fn, 1)


def check_returns_python_int(fn):
    _check(fn, 2)


def check_beyond_2_31_exact(fn):
    _check(fn, 3)


def check_zero_tokens(fn):
    _check(fn, 4)


CHECKS = [
    ("one token of a 7B-class model in fp16: 524,288 bytes", check_seven_b_per_token),
    ("the chapter's example: 8,192 tokens, 4 GiB", check_chapter_example),
    ("returns a Python int (70B-class, 8 KV heads)", check_returns_python_int),
    ("a value beyond 2**31 is exact", check_beyond_2_31_exact),
    ("0 tokens: 0 bytes", check_zero_tokens),
]
