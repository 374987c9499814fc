"""lessons.memory: the cache-size arithmetic of Chapter 3, pinned to the figures of its sources."""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from lessons.memory import (GB, GIB, KIB, MIB, MODELS, ModelShape, bytes_per_token, format_bytes,
                            kv_cache_bytes, max_batch, max_tokens, sequences_in_budget,
                            readings_grid, token_count_readings, values_stored_per_step)

# The sources' figures, copied from them: the decoding-with-a-KV-cache exercise (the 4 GiB example),
# the published GA-2 chapter ("How big is a cache?" / "Running example B") and the guide to LLM
# inference on NVIDIA GPUs ("Batching memory-bound processes", the A10).
PUBLISHED_8192_TOKENS_BYTES = 4_294_967_296     # L=32, G=32, d=128, T=8192, 2 bytes: "4 GiB"
PUBLISHED_8192_TOKENS_G8 = 1 * GIB               # "With G = 8 it is 1 GiB"
PUBLISHED_7B_BYTES_PER_TOKEN = 524_288           # "524,288 bytes per token: 512 KiB"
PUBLISHED_7B_4096 = 2 * GIB                      # "2 GiB for a 4,096-token context"
PUBLISHED_7B_4096_INT8 = 1 * GIB                 # "(1 GiB with an int8 cache)"
PUBLISHED_7B_32768 = 16 * GIB                    # "16 GiB for a 32,768-token context"
PUBLISHED_70B_BYTES_PER_TOKEN = 327_680          # "70B-class model with 8 KV heads ... 327,680"
PUBLISHED_70B_2048 = 640 * MIB                   # "640.0 MiB at 2,048 tokens"
PUBLISHED_70B_32768 = 10 * GIB                   # "10.00 GiB at 32,768"
PUBLISHED_1B_BYTES_PER_TOKEN = 65_536            # "a 1B-class model ... 65,536 bytes/token"
PUBLISHED_1B_2048 = 128 * MIB                    # "128.0 MiB at 2,048 tokens"
PUBLISHED_A10_TOKENS = 19_230                    # "comfortably accommodate 19,230 tokens"
PUBLISHED_A10_BATCH = 4                          # "a batch of 4 sequences"
# The published GA-2 chapter's memory-budget exercise: 16 GiB for caches, 2,048-token conversations
BUDGET_7B_FP16, BUDGET_7B_INT8, BUDGET_70B = 16, 32, 25


def test_the_exercise_example_4_gib_and_1_gib_with_8_kv_heads():
    assert kv_cache_bytes(32, 32, 128, 8192, 2) == PUBLISHED_8192_TOKENS_BYTES == 4 * GIB
    assert kv_cache_bytes(32, 8, 128, 8192, 2) == PUBLISHED_8192_TOKENS_G8


def test_result_is_python_int_beyond_2_31():
    n = kv_cache_bytes(80, 64, 128, 131_072, 4)
    assert type(n) is int and n == 687_194_767_360 > 2**31


def test_numpy_integers_are_accepted_and_give_exact_python_ints():
    n = kv_cache_bytes(np.int32(32), np.int32(32), np.int32(128), np.int32(8192), np.int32(2))
    assert type(n) is int and n == 2**32


@pytest.mark.parametrize("bad", [2.5, 0.5, "2"])
def test_non_integer_sizes_are_refused(bad):
    with pytest.raises(TypeError):
        kv_cache_bytes(32, 32, 128, 8192, bad)


def test_whole_valued_floats_are_taken_at_their_value():
    assert max_batch(24e9, 14e9, 32, 32, 128, 4096, 2) == 4
    n = kv_cache_bytes(32, 32, 128, 8192, 2.0)
    assert type(n) is int and n == 2**32


def test_negative_sizes_are_refused():
    with pytest.raises(ValueError):
        kv_cache_bytes(32, 32, 128, -1, 2)


def test_what_one_step_stores():
    stored = values_stored_per_step(32, 32, 128)
    assert stored == {"per key/value head": 256, "per layer": 8192, "per token": 262_144}
    assert 2 * stored["per token"] == PUBLISHED_7B_BYTES_PER_TOKEN


def test_seven_b_rows():
    m = MODELS["7B"]
    assert m.bytes_per_token(2) == PUBLISHED_7B_BYTES_PER_TOKEN == 512 * KIB
    assert m.cache_bytes(4096) == PUBLISHED_7B_4096
    assert m.cache_bytes(4096, bytes_per_value=1) == PUBLISHED_7B_4096_INT8
    assert m.cache_bytes(32768) == PUBLISHED_7B_32768
    assert m.weight_bytes(2) == 14 * GB


def test_seventy_b_and_one_b_rows():
    m70, m1 = MODELS["70B-GQA"], MODELS["1B"]
    assert m70.bytes_per_token(2) == PUBLISHED_70B_BYTES_PER_TOKEN
    assert m70.cache_bytes(2048) == PUBLISHED_70B_2048
    assert m70.cache_bytes(32768) == PUBLISHED_70B_32768
    assert m1.bytes_per_token(2) == PUBLISHED_1B_BYTES_PER_TOKEN
    assert m1.cache_bytes(2048) == PUBLISHED_1B_2048
    # sharing 8 KV heads among 64 query heads divides the cache by 8
    assert kv_cache_bytes(80, 64, 128, 1, 2) == 8 * PUBLISHED_70B_BYTES_PER_TOKEN


def test_int8_halves_every_model():
    for m in MODELS.values():
        assert m.bytes_per_token(1) * 2 == m.bytes_per_token(2)


def test_a10_tokens_and_batch_in_gb_and_gib():
    args = (32, 32, 128)
    assert max_tokens(24 * GB, 14 * GB, *args, 2) == 19_073
    assert max_tokens(10 * GIB, 0, *args, 2) == 20_480
    assert max_batch(24 * GB, 14 * GB, *args, 4096, 2) == PUBLISHED_A10_BATCH
    assert max_batch(10 * GIB, 0, *args, 4096, 2) == 5
    assert max_tokens(24 * GB, 14 * GB, *args, 2) != PUBLISHED_A10_TOKENS


def test_the_guides_19230_is_10_gb_over_0_00052_gb():
    rows = token_count_readings(PUBLISHED_7B_BYTES_PER_TOKEN)
    hits = [r for r in rows if r["tokens"] == PUBLISHED_A10_TOKENS]
    assert len(hits) == 1
    assert hits[0]["spare_bytes"] == 10 * GB and hits[0]["per_token_bytes"] == 520_000
    exact = [r for r in rows if r["per_token_bytes"] == PUBLISHED_7B_BYTES_PER_TOKEN]
    assert all(r["tokens"] != PUBLISHED_A10_TOKENS for r in exact)


def test_the_readings_laid_out_as_a_grid():
    """Rows: the spare memory read three ways; columns: the bytes per token read four ways."""
    rows, header = readings_grid(token_count_readings(PUBLISHED_7B_BYTES_PER_TOKEN))
    assert header == ["spare | per token", "524,288 bytes (exact)", "0.5 MB = 500,000 bytes",
                      "0.00052 GB = 520,000 bytes", "0.524 MB = 524,000 bytes"]
    assert [row[0] for row in rows] == ["10 GB (24 GB - 14 GB)", "10 GiB", "24 GiB - 14 GB"]
    assert rows[0][1:] == [19_073, 20_000, 19_230, 19_083]          # 10**10 // each reading, by hand
    assert rows[1][1:] == [20_480, 21_474, 20_648, 20_491]          # 10 * 2**30 // each
    made = [{"spare": "a", "per_token": "x", "tokens": 1}, {"spare": "b", "per_token": "x", "tokens": 3},
            {"spare": "a", "per_token": "y", "tokens": 2}, {"spare": "b", "per_token": "y", "tokens": 4}]
    assert readings_grid(made) == ([["a", 1, 2], ["b", 3, 4]], ["spare | per token", "x", "y"])


def test_memory_budget_exercise():
    budget = 16 * GIB
    assert sequences_in_budget(budget, MODELS["7B"], 2048, 2) == BUDGET_7B_FP16
    assert sequences_in_budget(budget, MODELS["7B"], 2048, 1) == BUDGET_7B_INT8
    assert sequences_in_budget(budget, MODELS["70B-GQA"], 2048, 2) == BUDGET_70B


def test_max_batch_edges():
    per_seq = kv_cache_bytes(32, 32, 128, 4096, 2)
    assert max_batch(16 * GB, 16 * GB, 32, 32, 128, 4096, 2) == 0
    assert max_batch(16 * GB, 140 * GB, 32, 32, 128, 4096, 2) == 0
    assert max_batch(3 * per_seq, 0, 32, 32, 128, 4096, 2) == 3
    assert max_batch(3 * per_seq - 1, 0, 32, 32, 128, 4096, 2) == 2
    assert type(max_batch(24 * GB, 14 * GB, 32, 32, 128, 4096, 2)) is int
    with pytest.raises(ValueError):
        max_batch(GB, 0, 32, 32, 128, 0, 2)


def test_model_shapes_are_frozen():
    with pytest.raises(Exception):
        MODELS["7B"].n_layers = 1
    assert isinstance(MODELS["7B"], ModelShape)


def test_format_bytes():
    assert format_bytes(524_288) == "512 KiB"
    assert format_bytes(4 * GIB) == "4 GiB"
    assert format_bytes(640 * MIB) == "640 MiB"
    assert format_bytes(1_280 * MIB) == "1.25 GiB"
    assert format_bytes(2_621_440) == "2.5 MiB"
    assert format_bytes(10 * GB) == "9.31 GiB"
    assert format_bytes(100) == "100 bytes"


sizes = st.integers(min_value=1, max_value=512)


@given(L=sizes, G=sizes, d=sizes, T=st.integers(0, 10**6), b=st.sampled_from([1, 2, 4]))
def test_formula_is_the_product_and_linear_in_tokens(L, G, d, T, b):
    n = kv_cache_bytes(L, G, d, T, b)
    assert n == 2 * L * G * d * T * b
    assert n == T * bytes_per_token(L, G, d, b)


@given(gpu=st.integers(0, 10**12), weights=st.integers(0, 10**12), L=st.integers(1, 100),
       G=st.integers(1, 64), d=st.sampled_from([64, 128]), T=st.integers(1, 10**5), b=st.sampled_from([1, 2]))
def test_max_batch_is_the_largest_batch_that_fits(gpu, weights, L, G, d, T, b):
    n = max_batch(gpu, weights, L, G, d, T, b)
    per_seq = kv_cache_bytes(L, G, d, T, b)
    assert type(n) is int and n >= 0
    if weights >= gpu:
        assert n == 0
    else:
        assert weights + n * per_seq <= gpu < weights + (n + 1) * per_seq
