"""lessons.roofline (the arithmetic of Chapter 4, pinned to the figures of the guide to LLM inference on NVIDIA GPUs it follows) and lessons.bandwidth
(the measurement, sanity-checked only: no assertion on a speed)."""
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from lessons import bandwidth as bw
from lessons.attention import attend
from lessons.roofline import (GPU, GPUS, arithmetic_intensity, attainable_flops, attention_table,
                              batched_step_time, decode_attention_intensity, decode_weight_intensity,
                              generation_time, prefill_time, seconds_2dp, guide_ms_per_token,
                              guide_prefill_ms, guide_total_ms, time_per_token, weight_intensity)

# The guide's figures, as printed there.
GUIDE_OPS_PER_BYTE_A10 = "208.3"
GUIDE_ATTENTION_INTENSITY = 62                         # "62 operations per byte"
GUIDE_MS_PER_TOKEN = {"T4": 46, "A10": 23, "A100": 6}
GUIDE_PREFILL_MS = {"T4": 75, "A10": 39, "A100": 16}
GUIDE_TOTAL_S = {"T4": "6.98", "A10": "3.49", "A100": "0.92"}
# The exact values behind them (7B in fp16, 350-token prompt, 150 new tokens).
EXACT_MS_PER_TOKEN = {"T4": 46.67, "A10": 23.33, "A100": 6.87}
EXACT_PREFILL_MS = {"T4": 75.38, "A10": 39.20, "A100": 15.71}
EXACT_TOTAL_S = {"T4": "7.08", "A10": "3.54", "A100": "1.05"}


def test_gpu_specs_from_the_guide():
    assert (GPUS["T4"].bandwidth, GPUS["T4"].flops, GPUS["T4"].memory_bytes) == (300e9, 65e12, 16 * 10**9)
    assert (GPUS["A10"].bandwidth, GPUS["A10"].flops, GPUS["A10"].memory_bytes) == (600e9, 125e12, 24 * 10**9)
    assert (GPUS["A100"].bandwidth, GPUS["A100"].flops, GPUS["A100"].memory_bytes) == (2039e9, 312e12, 80 * 10**9)


def test_ops_per_byte():
    assert f"{GPUS['A10'].ops_per_byte:.1f}" == GUIDE_OPS_PER_BYTE_A10
    assert f"{GPUS['T4'].ops_per_byte:.1f}" == "216.7"
    assert f"{GPUS['A100'].ops_per_byte:.1f}" == "153.0"


def test_attention_table_lines():
    N, d, b = 4096, 128, 2
    rows = attention_table(N, d, b)
    assert [r["load"] for r in rows] == [b * 2 * N * d, b * N * N, b * (N * N + N * d)]
    assert [r["compute"] for r in rows] == [2 * d * N * N, 3 * N * N, 2 * N * N * d]
    assert [r["store"] for r in rows] == [b * N * N, b * N * N, b * N * d]
    assert sum(r["compute"] for r in rows) == 8_640_266_240
    assert sum(r["load"] + r["store"] for r in rows) == 138_412_032


def test_attention_intensity_as_the_guide_gives_it():
    ai = arithmetic_intensity(4096, 128, 2)
    assert round(ai) == GUIDE_ATTENTION_INTENSITY
    assert f"{ai:.2f}" == "62.42"
    assert ai < GPUS["A10"].ops_per_byte


@given(n=st.integers(1, 10**5), d=st.integers(1, 1024), b=st.sampled_from([1, 2, 4]))
def test_attention_intensity_closed_form(n, d, b):
    assert math.isclose(arithmetic_intensity(n, d, b), (4 * d + 3) * n / (4 * b * (n + d)), rel_tol=1e-12)


def test_decode_intensities_are_about_one():
    assert 1.0 < decode_attention_intensity(4096, 128, 2) < 1.01
    assert decode_weight_intensity(1) == 1.0 == weight_intensity(1, 2)
    assert weight_intensity(350) == 350.0


def test_grouped_query_attention_multiplies_the_decode_intensity_by_the_group():
    # SmolLM2: 9 query heads over 3 key/value heads of 64, fp16, 4,096 cached tokens:
    # 3 (4 * 64 + 3) 4096 / (2 (2 * 4096 * 64 + 2 * 3 * 64)) = 3,182,592 / 1,049,344
    assert decode_attention_intensity(4096, 64, 2, queries_per_kv_head=3) == pytest.approx(3182592 / 1049344)
    assert 3.0 < decode_attention_intensity(4096, 64, 2, queries_per_kv_head=3) < 3.04
    assert decode_attention_intensity(4096, 128, 2, queries_per_kv_head=1) == decode_attention_intensity(4096, 128, 2)
    for bad in (0, 1.5, -2):
        with pytest.raises(ValueError):
            decode_attention_intensity(4096, 64, 2, queries_per_kv_head=bad)


def test_time_per_token_exact_and_as_the_guide_printed_it():
    for key, g in GPUS.items():
        t = time_per_token(7e9, 2, g.bandwidth)
        assert round(t * 1e3, 2) == EXACT_MS_PER_TOKEN[key]
        assert guide_ms_per_token(t) == GUIDE_MS_PER_TOKEN[key]


def test_prefill_time_exact_and_as_the_guide_printed_it():
    for key, g in GPUS.items():
        t = prefill_time(350, 7e9, g.flops)
        assert round(t * 1e3, 2) == EXACT_PREFILL_MS[key]
        assert guide_prefill_ms(t) == GUIDE_PREFILL_MS[key]


def test_totals_for_150_tokens():
    guide_ms_total = {}
    for key, g in GPUS.items():
        tpt, pre = time_per_token(7e9, 2, g.bandwidth), prefill_time(350, 7e9, g.flops)
        guide_ms_total[key] = guide_total_ms(pre, tpt, 150)
        assert seconds_2dp(guide_ms_total[key]) == GUIDE_TOTAL_S[key]
        assert f"{generation_time(350, 150, 7e9, 2, g):.2f}" == EXACT_TOTAL_S[key]
    assert guide_ms_total == {"T4": 6975, "A10": 3489, "A100": 916}


def test_seconds_2dp_rounds_halves_up():
    assert seconds_2dp(6975) == "6.98"   # a float 6.975 would round to 6.97
    assert seconds_2dp(916) == "0.92"


def test_guide_roundings():
    assert guide_ms_per_token(0.0469999) == 46
    assert guide_ms_per_token(0.023) == 23           # exact milliseconds are not truncated below
    assert guide_prefill_ms(0.0155) == 16 and guide_prefill_ms(0.0154) == 15


def test_roofline_and_batched_step():
    a10 = GPUS["A10"]
    assert attainable_flops(a10, 1) == 600e9
    assert attainable_flops(a10, 1000) == 125e12
    assert batched_step_time(a10, 14 * 10**9, 2**31, 0) == time_per_token(7e9, 2, 600e9)
    assert math.isclose(batched_step_time(a10, 14 * 10**9, 2**31, 4), (14e9 + 4 * 2**31) / 600e9)


def test_gpu_is_frozen():
    with pytest.raises(Exception):
        GPUS["A10"].bandwidth = 1.0
    assert GPU("x", 1, 2.0, 4.0).ops_per_byte == 2.0


# --- lessons.bandwidth: sanity only -----------------------------------------------------------

def test_decode_attention_matches_chapter_2():
    rng = np.random.default_rng(0)
    q, K, V = rng.standard_normal(16), rng.standard_normal((50, 16)), rng.standard_normal((50, 16))
    np.testing.assert_allclose(bw.decode_attention(q, K, V), attend(q, K, V), rtol=1e-12, atol=1e-12)
    q32, K32, V32 = (a.astype(np.float32) for a in (q, K, V))
    out = bw.decode_attention(q32, K32, V32)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, attend(q, K, V), rtol=1e-4, atol=1e-5)


def test_copy_bandwidth_is_positive_and_finite():
    m = bw.copy_bandwidth(4 * 2**20, repeats=3)
    assert m.nbytes == 4 * 2**20 and m.bytes_moved == 8 * 2**20 and len(m.seconds) == 3
    assert math.isfinite(m.bandwidth) and m.bandwidth > 0


def test_measure_decode_attention_small():
    steps = bw.measure_decode_attention(cache_mib=(1, 2), head_dim=64, repeats=2, min_seconds=0.001)
    assert [s.cache_bytes for s in steps] == [2**20, 2**21]
    assert [s.n_tokens for s in steps] == [2**20 // 512, 2**21 // 512]
    for s in steps:
        assert s.seconds > 0 and math.isfinite(s.bandwidth) and s.bandwidth > 0
    assert bw.achieved_bandwidth_beyond(steps, 2**21) == steps[1].bandwidth
    with pytest.raises(ValueError):
        bw.achieved_bandwidth_beyond(steps, 2**30)
