"""Public checks for the exercise ``max_batch(gpu_bytes, weight_bytes, n_layers, n_kv_heads,
head_dim, seq_len, bytes_per_value)`` (chapter 3).

The expected batches are worked out by hand in the comments (never with the course's engine).
The hidden tests check more.
"""

GB = 10**9
GIB = 2**30
SEVEN_B = (32, 32, 128)   # layers, KV heads, head size of a 7B-class model
# one 4,096-token fp16 sequence of the 7B-class model: 2 * 32 * 32 * 128 * 4096 * 2 = 2 GiB
SEQ_7B_4096 = 2_147_483_648


def check_a10(fn):
    # 24 GB - 14 GB = 10,000,000,000 bytes; / 2,147,483,648 = 4.66 -> 4 whole sequences
    got = fn(24 * GB, 14 * GB, *SEVEN_B, 4096, 2)
    hint = ""
    if got == 5:
        hint = " 5 would need 10 GiB (10,737,418,240 bytes); here 10 GB (10**9 bytes each) are left."
    elif got == 9:
        hint = " That is the count for half-size sequences: is the factor 2 (keys and values) missing?"
    assert got == 4, f"A10 (24 GB), 7B weights (14 GB), 4,096-token fp16 sequences: expected 4, got {got!r}.{hint}"


def check_exact_fit_counts(fn):
    # 10 GiB left = exactly 5 sequences of 2 GiB: a sequence that fits exactly counts
    got = fn(24 * GIB, 14 * GIB, *SEVEN_B, 4096, 2)
    assert got == 5, (f"10 GiB left holds exactly 5 sequences of 2 GiB; expected 5, got {got!r}"
                      + (" (use floor division, and count a sequence that fits exactly)" if got == 4 else ""))
    got = fn(24 * GIB - 1, 14 * GIB, *SEVEN_B, 4096, 2)
    assert got == 4, f"one byte less than 5 sequences leaves room for 4; expected 4, got {got!r}"


def check_weights_do_not_fit(fn):
    # a 70B model in fp16 (140 GB) on an 80 GB GPU: nothing fits
    got = fn(80 * GB, 140 * GB, 80, 8, 128, 4096, 2)
    assert got == 0, f"when the weights (140 GB) exceed the GPU's memory (80 GB) the batch is 0, got {got!r}"
    got = fn(16 * GB, 16 * GB, *SEVEN_B, 4096, 2)
    assert got == 0, f"when the weights exactly fill the GPU the batch is 0, got {got!r}"


def check_returns_int(fn):
    # 16 GiB for caches, 70B-class with 8 KV heads, 2,048 tokens: 640 MiB each, 16384 / 640 = 25.6 -> 25
    got = fn(16 * GIB, 0, 80, 8, 128, 2048, 2)
    assert type(got) is int, f"max_batch should return a Python int (whole sequences), got {type(got).__name__} ({got!r})"
    assert got == 25, (f"16 GiB of caches, 640 MiB per sequence: 25.6 sequences, so 25 whole ones; got {got!r}"
                       + (" (round down: a part of a sequence does not fit)" if got == 26 else ""))


CHECKS = [
    ("the A10 example: 10 GB left, 4 sequences of 4,096 tokens", check_a10),
    ("a sequence that fits exactly counts; one byte less does not", check_exact_fit_counts),
    ("the weights alone do not fit: 0", check_weights_do_not_fit),
    ("returns a Python int, rounded down (16 GiB budget, 70B-class)", check_returns_int),
]
