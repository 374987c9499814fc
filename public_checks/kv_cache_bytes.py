"""Public checks for the exercise ``kv_cache_bytes(n_layers, n_kv_heads, head_dim, n_tokens,
bytes_per_value)`` (chapter 3).

A few cases with the expected byte counts worked out by hand here (never with the course's
engine).  The hidden tests check more.
"""

# 2 * 32 * 32 * 128 * 2 = 524,288: a 7B-class model in fp16, per token (512 KiB)
SEVEN_B_PER_TOKEN = 524_288
# 2 * 32 * 32 * 128 * 8192 * 2 = 2**32 = 4,294,967,296: the seed's example, 4 GiB
SEED_EXAMPLE = 4_294_967_296
# 2 * 80 * 8 * 128 * 2048 * 2 = 671,088,640: the 70B-class model, 8 KV heads, 2,048 tokens (640 MiB)
SEVENTY_B_2048 = 671_088_640
# 2 * 80 * 64 * 128 * 131072 * 4 = 687,194,767,360: far beyond 2**31 and exact only as an integer
HUGE = 687_194_767_360


def _hint(got, want):
    if isinstance(got, (int, float)) and got:
        ratio = got / want
        if abs(ratio - 0.5) < 1e-12:
            return " It is half the right size: the cache holds a key AND a value (the factor 2)."
        if abs(ratio - 2.0) < 1e-12:
            return " It is twice the right size: is a factor 2 counted twice?"
    if got == 0 or (isinstance(got, int) and got < 0):
        return " A 32-bit integer product wraps around past 2**31 - 1: multiply Python ints."
    return ""


def _check_value(fn, args, want, what):
    got = fn(*args)
    assert got == want, f"{what}: kv_cache_bytes{args} should be {want:,} bytes, got {got!r}.{_hint(got, want)}"
    return got


def check_seven_b_per_token(fn):
    _check_value(fn, (32, 32, 128, 1, 2), SEVEN_B_PER_TOKEN, "one token of a 7B-class model in fp16")


def check_seed_example(fn):
    _check_value(fn, (32, 32, 128, 8192, 2), SEED_EXAMPLE, "the seed's example (4 GiB)")


def check_returns_python_int(fn):
    got = fn(80, 8, 128, 2048, 2)
    assert type(got) is int, (
        f"kv_cache_bytes should return a Python int, got {type(got).__name__} ({got!r}); "
        "a float may round large byte counts and a numpy integer may overflow")
    assert got == SEVENTY_B_2048, (
        f"70B-class model, 8 KV heads, 2,048 tokens, fp16: expected {SEVENTY_B_2048:,} bytes, got {got:,}."
        f"{_hint(got, SEVENTY_B_2048)}")


def check_beyond_2_31_exact(fn):
    got = _check_value(fn, (80, 64, 128, 131072, 4), HUGE, "a value beyond 2**31 must be exact")
    assert type(got) is int, f"the result should be a Python int, got {type(got).__name__}"


def check_zero_tokens(fn):
    got = fn(32, 32, 128, 0, 2)
    assert got == 0 and type(got) is int, f"an empty cache (0 tokens) takes 0 bytes (the int 0), got {got!r}"


CHECKS = [
    ("one token of a 7B-class model in fp16: 524,288 bytes", check_seven_b_per_token),
    ("the seed's example: 8,192 tokens, 4 GiB", check_seed_example),
    ("returns a Python int (70B-class, 8 KV heads)", check_returns_python_int),
    ("a value beyond 2**31 is exact", check_beyond_2_31_exact),
    ("0 tokens: 0 bytes", check_zero_tokens),
]
