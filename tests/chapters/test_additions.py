"""The sections the chapters gained from the source documents: the cache's interface (chapter 5),
the GA-2 head's memory and its softmax unit's typical error (chapter 10), the mutation bound
(chapter 11), the inference guide's notes (chapters 3, 4, 7), and the appendix's attention notes.

Each notebook is executed once (module-scoped fixtures, cwd = book/chapters); the numbers its new
text states through myst-nb glue are read back and pinned against the source documents' figures,
written here as constants, or against arithmetic this file does on its own.  Measured values
(the batching wait's times) are checked for their form and their direction only, never a speed.
"""
import math
import re
from pathlib import Path

import pytest

from chapter_notebooks import execute, glued

ROOT = Path(__file__).resolve().parents[2]
CHAPTERS = ROOT / "book" / "chapters"
GLUE_ROLE = re.compile(r"\{glue:(?:text|md)?\}`([A-Za-z0-9_]+)(?::[^`]*)?`")


def markdown(nb):
    return "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")


def roles_resolve(nb, g, prefix):
    """Every glue role of the notebook's text that starts with ``prefix`` names a glued value."""
    names = {m.group(1) for m in GLUE_ROLE.finditer(markdown(nb)) if m.group(1).startswith(prefix)}
    assert names, f"no {prefix}* glue in the text"
    assert names <= set(g), f"unglued: {sorted(names - set(g))}"
    return names


# ---------------------------------------------------------------- chapter 5: the cache's interface

@pytest.fixture(scope="module")
def ch5():
    nb = execute(CHAPTERS / "05_batches.ipynb")
    return nb, glued(nb)


def test_ch5_interface_table_names_every_method_and_error(ch5):
    nb, _ = ch5
    text = markdown(nb)
    section = text.split("## The cache's interface", 1)[1]
    for method in ("update(k, v, counts)", "attend(q, counts)", "reorder(beam_idx)", "select(rows)", "crop(n)"):
        assert f"| `{method}` |" in section, method
    for error in ("CacheFullError", "OutOfBlocks", "ValueError"):
        assert error in section
    # transformers' names, as its cache_utils.py spells them
    for name in ("Cache.update", "reorder_cache", "batch_repeat_interleave", "batch_select_indices",
                 "Cache.crop", "PagedAttentionCache"):
        assert name in section, name


def test_ch5_paged_append_takes_one_block(ch5):
    nb, g = ch5
    roles_resolve(nb, g, "ch5_api_")
    # a pool of 3 blocks of 4 positions: a 4-token prompt fills ceil(4 / 4) = 1 block, the fifth
    # token needs ceil(5 / 4) = 2
    assert (g["ch5_api_blocks_prompt"], g["ch5_api_free_prompt"]) == (str(math.ceil(4 / 4)), str(3 - 1))
    assert (g["ch5_api_blocks_append"], g["ch5_api_free_append"]) == (str(math.ceil(5 / 4)), str(3 - 2))
    # crop(4) after a 5 + 1 and a 3 + 1 token row: both rows hold 4, and the refused step changed nothing
    assert g["ch5_api_crop_length"] == "4"


def test_ch5_interface_cell_shows_each_refusal(ch5):
    nb, _ = ch5
    cell = next(c for c in nb.cells if c.cell_type == "code" and "pool_cache = tiny.new_cache" in c.source)
    out = "".join(o.get("text", "") for o in cell.outputs)
    assert "prefill   logits (2, 64) lengths [5, 3]" in out
    assert "decode    logits (2, 64) lengths [6, 4]" in out
    assert "reorder   lengths [6, 6, 4]" in out and "select    lengths [6, 4]" in out
    assert out.count("refused:") == 4
    assert "lengths still [4, 4]" in out and "table still [0, 1]" in out


# ---------------------------------------------------------------- chapter 10: GA-2's head

# the GA-2 chapter: "2 (K and V) x 16 (head width) x 1 byte (int8) = 32 bytes per token; a
# 32-token context holds 1024 bytes"; its self-check: 12 layers, 12 heads of width 64, int8,
# 4,096 tokens
GA2_HEAD = {"ch10_head_bpt": "32", "ch10_head_full": "1,024"}
SMALL_MODEL_BYTES = 2 * 12 * 12 * 64 * 4096 * 1
# its softmax unit "is accurate to 0.00002"; chapter 9's worst over 3,200 vectors is 0.000168
PUBLISHED_SOFTMAX = 0.00002
COURSE_WORST_SOFTMAX = "0.000168"


@pytest.fixture(scope="module")
def ch10():
    nb = execute(CHAPTERS / "10_decode_on_ga2.ipynb")
    return nb, glued(nb)


def test_ch10_head_and_small_model_cache(ch10):
    nb, g = ch10
    assert {k: g[k] for k in GA2_HEAD} == GA2_HEAD
    assert g["ch10_small_model_bytes"] == f"{SMALL_MODEL_BYTES:,}" == "75,497,472"
    assert g["ch10_small_model_mib"] == "72 MiB"


def test_ch10_softmax_typical_against_worst(ch10):
    nb, g = ch10
    roles_resolve(nb, g, "ch10_sm_")
    assert g["ch10_sm_worst"] == COURSE_WORST_SOFTMAX
    # the published figure is the median, to its one significant digit
    assert round(float(g["ch10_sm_median"]), 5) == PUBLISHED_SOFTMAX
    ratio = float(g["ch10_sm_worst_over_median"])
    assert ratio == pytest.approx(float(COURSE_WORST_SOFTMAX) / float(g["ch10_sm_median"]), abs=0.06)
    assert ratio > 5


# ---------------------------------------------------------------- chapter 4: the A10's sheet

# the inference guide's A10 table (dense figures): FP32 31.2 TF, TF32 62.5, BF16 and FP16 125,
# INT8 250 TOPS, INT4 500 TOPS, 24 GB GDDR6, 600 GB/s, 150 W; the T4 has 16 GB ("only 2 GB"
# left beside a 7B model in fp16)
A10_SHEET = {"FP32": 31.2, "TF32 tensor core": 62.5, "BF16 tensor core": 125, "FP16 tensor core": 125,
             "INT8 tensor core": 250, "INT4 tensor core": 500}


@pytest.fixture(scope="module")
def ch4():
    nb = execute(CHAPTERS / "04_memory_bound.ipynb")
    return nb, glued(nb)


def test_ch4_a10_sheet(ch4):
    nb, g = ch4
    roles_resolve(nb, g, "ch4_sheet_")
    cell = next(c for c in nb.cells if c.cell_type == "code" and c.source.startswith("a10_sheet = "))
    shown = "".join(o.get("data", {}).get("text/html", "") + o.get("text", "") for o in cell.outputs)
    for fmt, tflops in A10_SHEET.items():
        assert fmt in shown and f"{tflops:.1f}" in shown, fmt
    assert g["ch4_sheet_fp16_over_fp32"] == f"{125 / 31.2:.0f}" == "4"
    assert g["ch4_sheet_fp32_opb"] == f"{31.2e12 / 600e9:.0f}" == "52"
    assert g["ch4_sheet_int8_opb"] == f"{250e12 / 600e9:.1f}" == "416.7"
    assert (g["ch4_sheet_tdp"], g["ch4_sheet_memory_gb"]) == ("150", "24")
    assert (g["ch4_7b_fp16_gb"], g["ch4_7b_fp32_gb"]) == ("14", "28")
    assert g["ch4_t4_spare_gb"] == "2"


def test_ch4_latency_and_flashattention(ch4):
    nb, g = ch4
    text = markdown(nb)
    assert "memory bandwidth, math\nbandwidth, and **latency**" in text
    assert "FlashAttention paper (Dao et\nal., 2022)" in text
    # one more operation per score: (4d + 4) N^2 over b (4N^2 + 4Nd), N = 4,096, d = 128, b = 2
    N, d, b = 4096, 128, 2
    assert g["ch4_ai_scaled"] == f"{(4 * d + 4) * N * N / (b * (4 * N * N + 4 * N * d)):.2f}"
    assert float(g["ch4_ai_scaled"]) - float(g["ch4_ai"]) < 0.5


# ---------------------------------------------------------------- chapter 6: waiting for a batch

@pytest.fixture(scope="module")
def ch6():
    nb = execute(CHAPTERS / "06_paged_cache.ipynb")
    return nb, glued(nb)


def test_ch6_waiting_trades_first_token_for_fuller_steps(ch6):
    nb, g = ch6
    roles_resolve(nb, g, "ch6_wait_")
    assert (g["ch6_wait_low_rate"], g["ch6_wait_high_rate"]) == (f"{1 / 8:.3f}", f"{1 / 2:.1f}")
    # no window: every request is admitted, and makes its first token, in its arrival step
    assert g["ch6_wait_ttft_0"] == "0.00"
    # a window of 32 steps holds a request 16 steps on average (less: arrivals on a multiple wait 0)
    for key in ("ch6_wait_low_ttft_32", "ch6_wait_high_ttft_32"):
        assert 8 < float(g[key]) < 32, key
    # 16 requests of 8 tokens: at most 16 tokens a step; the window fills the steps
    assert 1 <= float(g["ch6_wait_low_fill_0"]) < float(g["ch6_wait_low_fill_32"]) <= 16
    assert 1 <= float(g["ch6_wait_high_fill_0"]) < float(g["ch6_wait_high_fill_32"]) <= 16
    assert float(g["ch6_wait_ms_32"]) > 0
    assert g["ch6_wait_measured"].startswith("Measured on the machine that built this page")


# ---------------------------------------------------------------- chapter 11: the bound

@pytest.fixture(scope="module")
def ch11():
    nb = execute(CHAPTERS / "11_testing_the_tests.ipynb")
    return nb, glued(nb)


def test_ch11_bound_against_twice_the_worst(ch11):
    nb, g = ch11
    # the GA-2 notes: a 12% bound, "twice the worst error"; the correct builder's worst is 6.44%
    assert g["ch11_worst_exact"] == "6.44%"
    assert g["ch11_twice_worst"] == f"{2 * 6.44:.1f}%"
    assert g["ch11_bound_percent"] == "12%"
    assert f"{0.12 / 0.0644:.1f}" == "1.9" and round(g["ch11_bound_ratio"], 1) == 1.9
    text = markdown(nb)
    assert "one head of one\nlayer, with no normalisation and no feed-forward block" in text


# ---------------------------------------------------------------- chapter 8: the nRepeats loops

@pytest.fixture(scope="module")
def ch8():
    nb = execute(CHAPTERS / "08_one_kernel.ipynb")
    return nb, glued(nb)


def test_ch8_nrepeats_early_exit(ch8):
    nb, g = ch8
    roles_resolve(nb, g, "ch8_rep_")
    # 1,025 rows in blocks of 256, 4 passes of 64: 5 blocks; the last holds 1 row, so 1 pass of it
    # runs (63 of its rows masked) instead of 4 (255 masked)
    assert (g["ch8_rep_whole"], g["ch8_rep_early"]) == (str(5 * 4), str(4 * 4 + 1))
    assert (g["ch8_rep_masked"], g["ch8_rep_masked_whole"]) == ("63", "255")
    assert g["ch8_rep_saved"] == f"{1 - 17 / 20:.0%}" == "15%"
    assert "`nRepeats` passes" in markdown(nb)


# ---------------------------------------------------------------- the appendix

# the transformer paper: d_model 512, 8 heads, heads 64 wide, scores divided by sqrt(64) = 8
# chapter 10's four-token example: keys (1, 0), (0, 1), (1, 1), (-1, 0), query (1, 0.5)
FOUR_SCORES = [1.0, 0.5, 1.5, -1.0]


@pytest.fixture(scope="module")
def appx():
    nb = execute(CHAPTERS / "appendix_transformer.ipynb")
    return nb, glued(nb)


def test_appx_heads_width_and_scaling(appx):
    nb, g = appx
    roles_resolve(nb, g, "appx_")
    assert (g["appx_head_width"], g["appx_scale"]) == (str(512 // 8), str(int(math.sqrt(64))))
    # random unit-variance vectors of 64: q.k spreads sqrt(64) = 8, scaled about 1
    assert abs(float(g["appx_dot_spread"]) - 8) < 0.3
    assert abs(float(g["appx_scaled_spread"]) - 1) < 0.04
    text = markdown(nb)
    assert '"it", puts most of its weight on "The animal"' in text
    assert "encoder-decoder" in text and "decoder-only" in text


def test_appx_current_token_gets_the_lowest_weight(appx):
    _, g = appx
    e = [math.exp(s / math.sqrt(2)) for s in FOUR_SCORES]
    weights = [x / sum(e) for x in e]
    assert g["appx_self_rank"] == "the lowest"
    assert g["appx_self_weight"] == f"{weights[-1]:.3f}"
    assert g["appx_top_weight"] == f"{max(weights):.3f}" and g["appx_top_token"] == "2"


def test_appx_returns_several_hypotheses(appx):
    _, g = appx
    assert int(g["appx_n_hypotheses"]) >= 2
    assert float(g["appx_second_logprob"]) <= float(g["appx_beam_logprob"])


# ---------------------------------------------------------------- chapter 3: the whole batch

@pytest.fixture(scope="module")
def ch3():
    nb = execute(CHAPTERS / "03_cache_memory.ipynb")
    return nb, glued(nb)


def test_ch3_whole_batch_formula(ch3):
    nb, g = ch3
    # the guide: d_model = d_head x n_heads = 4,096 for Llama 2 7B; 2 x 2 x 32 x 4,096 x 4,096 x 4
    assert g["ch3_dmodel_7b"] == f"{128 * 32:,}" == "4,096"
    assert g["ch3_whole_batch_bytes"] == f"{2 * 2 * 32 * 4096 * 4096 * 4:,}" == "8,589,934,592"
    assert g["ch3_whole_batch_gib"] == "8 GiB"
    assert g["ch3_dmodel_overcount"] == str(64 // 8)
    assert r"\text{batch\_size}" in markdown(nb)
