"""Chapter 3 (the cache's memory), its exercises (kv_cache_bytes, max_batch) and their public checks.

The numbers the chapter states through myst-nb glue are read back and pinned against the source
documents' figures (numbered 001, 002 and 004 below), written here as constants, and against what
exact arithmetic gives instead.
"""
import nbformat
import numpy as np
import pytest

from chapter_notebooks import ROOT, chapter_path, errors, executed, figures, markdown
from coursetools.answer_leaks import leaks_in_notebook
from public_checks import PublicCheckFailed, evaluate, run_checks

CH3 = chapter_path("03_cache_memory")
EXERCISES = {"kv_cache_bytes": 3, "max_batch": 3}


# ---------------------------------------------------------------- the sources' figures
# the decoding-with-a-KV-cache exercise: L=32, G=32, d=128, T=8192, 2 bytes -> 4,294,967,296 bytes,
# 4 GiB; G=8 -> 1 GiB
EXERCISE_FIGURES = {"ch3_example_bytes": "4,294,967,296", "ch3_example_gib": "4 GiB", "ch3_example_gqa_gib": "1 GiB"}


# the published GA-2 chapter, "How big is a cache?" and "Running example B"
GA2_CHAPTER_FIGURES = {"ch3_bpt_7b": "524,288", "ch3_bpt_7b_kib": "512 KiB", "ch3_7b_4096": "2 GiB",
                       "ch3_7b_4096_int8": "1 GiB", "ch3_7b_32768": "16 GiB", "ch3_bpt_70b": "327,680",
                       "ch3_70b_2048": "640 MiB", "ch3_70b_32768": "10 GiB", "ch3_bpt_1b": "65,536",
                       # the memory-budget exercise: 16 GiB for caches, 2,048-token conversations
                       "ch3_budget_7b_fp16": "16", "ch3_budget_7b_int8": "32", "ch3_budget_70b": "25",
                       "ch3_budget_70b_each": "640 MiB"}


# the guide to LLM inference on NVIDIA GPUs: the A10 (24 GB, 7B in fp16 ~ 14 GB, ~10 GB left),
# "19,230 tokens", "a batch of 4"
GUIDE_FIGURES_CH3 = {"ch3_a10_weights_gb": "14", "ch3_a10_spare_gb": "10", "ch3_guide_tokens": "19,230",
                     "ch3_batch_gb": "4"}


# and what the exact arithmetic gives instead
EXACT_CH3 = {"ch3_tokens_gb": "19,073", "ch3_tokens_gib": "20,480", "ch3_batch_gib": "5",
             "ch3_batch_gb_exact": "4.66", "ch3_int32_product": "0", "ch3_guide_reading_ratio": "19,230.77",
             "ch3_70b_mha_bpt": "2.5 MiB", "ch3_a10_batch_int8": "9", "ch3_a100_batch_fp16": "30",
             "ch3_calc_gqa_int8_batch": "37", "ch3_70b_weights_gb": "140", "ch3_t4_spare_gb": "2",
             "ch3_t4_batch": "0", "ch3_q2_bpt": "98,304", "ch3_gib_over_gb": "7.4%",
             "ch3_q2_total": "201,326,592 bytes (192 MiB)", "ch3_q3_total": "201,326,592 bytes (192 MiB)",
             "ch3_70b_sharing_ratio": "8", "ch3_1b_batch_min": "52", "ch3_1b_batch_max": "290",
             "ch3_calc_group": "4", "ch3_calc_cut": "8",
             # the calculator's unit switch on the example: 24 and 14 read as GiB leave 10 GiB, a batch of 5;
             # an A10's 24,000,000,000 bytes are 22.35 GiB
             "ch3_calc_gpu_field": "24", "ch3_calc_weights_field": "14", "ch3_calc_spare_gib": "10 GiB",
             "ch3_calc_batch_gib": "5", "ch3_a10_gb": "24", "ch3_calc_a10_gib": "22.35"}


# ---------------------------------------------------------------- executing the notebooks




@pytest.fixture(scope="module")
def ch3():
    return executed(CH3)


# ---------------------------------------------------------------- chapter 3


def test_ch3_source_figures(ch3):
    _, g = ch3
    for key, want in {**EXERCISE_FIGURES, **GA2_CHAPTER_FIGURES, **GUIDE_FIGURES_CH3}.items():
        assert g[key] == want, key


def test_ch3_exact_figures(ch3):
    _, g = ch3
    for key, want in EXACT_CH3.items():
        assert g[key] == want, key


def test_ch3_explains_19230(ch3):
    _, g = ch3
    assert g["ch3_guide_reading"] == "10 GB divided by 0.00052 GB"
    assert g["ch3_tokens_gb"] != g["ch3_guide_tokens"] != g["ch3_tokens_gib"]


def test_ch3_shows_the_widget_and_its_static_figure(ch3):
    nb, _ = ch3
    assert not errors(nb)
    outs = [o for c in nb.cells for o in c.get("outputs", [])]
    assert any("application/vnd.jupyter.widget-view+json" in o.get("data", {}) for o in outs)
    assert figures(nb) >= 3          # cache vs tokens, batch vs length, the presets figure
    assert nb.metadata.get("widgets"), "the executed notebook should carry the widget state"


def test_ch3_unit_switch_moves_the_batch_as_the_two_readings_do(ch3):
    """Pressing GiB on the calculator's example gives the batch of the 10 GiB reading, and the
    page saves the widget back on its example (GB, the 7B-class model on an A10)."""
    nb, g = ch3
    assert (g["ch3_batch_gb"], g["ch3_calc_batch_gib"]) == ("4", "5") and g["ch3_calc_batch_gib"] == g["ch3_batch_gib"]
    printed = [o["text"] for c in nb.cells if c.get("id") == "cell-42-unit-code" for o in c.outputs]
    assert printed == ["24.0 14.0 GiB    presets: custom custom\n10 GiB left: 5 sequences of 4,096 tokens\n"]
    state = nb.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
    saved = [e["state"] for e in state.values() if e["model_name"] == "AnyModel"]
    assert [(s["unit"], s["model_preset"], s["gpu_preset"], s["gpu_memory"], s["weights"]) for s in saved] == \
        [("GB", "7B", "A10", 24.0, 14.0)]


def test_chapter_outputs_carry_no_stderr_and_no_warning(ch3):
    """A warning printed while a chapter runs would appear on its page (with the build's paths)."""
    nb, _ = ch3
    noisy = [(c.get("id"), o.get("text", "")[:200]) for c in nb.cells if c.cell_type == "code" for o in c.outputs
             if (o.get("output_type") == "stream" and o.get("name") == "stderr")
             or "Warning" in o.get("text", "") or "Warning" in o.get("data", {}).get("text/plain", "")]
    assert not noisy, noisy


def test_the_chapter_shows_no_answer_but_links_its_exercise(ch3):
    """No graded function's source in an executed chapter (cells or outputs); each graded function
    the chapter teaches is named beside a link to its exercise."""
    from coursetools.answer_leaks import describe, leaks_in_notebook
    nb, _ = ch3
    leaks = leaks_in_notebook(nb, "ch3")
    assert not leaks, describe(leaks)
    text = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    for name in EXERCISES:
        assert f"[{name} exercise](../../exercises/{name}.ipynb)" in text or \
                f"[{name}](../../exercises/{name}.ipynb)" in text, name


def test_ch3_whole_batch_formula(ch3):
    nb, g = ch3
    # the guide: d_model = d_head x n_heads = 4,096 for Llama 2 7B; 2 x 2 x 32 x 4,096 x 4,096 x 4
    assert g["ch3_dmodel_7b"] == f"{128 * 32:,}" == "4,096"
    assert g["ch3_whole_batch_bytes"] == f"{2 * 2 * 32 * 4096 * 4096 * 4:,}" == "8,589,934,592"
    assert g["ch3_whole_batch_gib"] == "8 GiB"
    assert g["ch3_dmodel_overcount"] == str(64 // 8)
    assert r"\text{batch\_size}" in markdown(nb)


def test_the_chapter_links_its_exercises():
    path, names = CH3, ["kv_cache_bytes", "max_batch"]
    nb = nbformat.read(path, as_version=4)
    text = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    assert "Self-check questions" in text and "dropdown" in text
    for name in names:
        link = f"../../exercises/{name}.ipynb"
        assert f"]({link})" in text
        assert (path.parent / link).resolve().exists()


# ---------------------------------------------------------------- exercise notebooks


# ---------------------------------------------------------------- public checks: right and wrong answers


def _failures(name, fn):
    return [o for o in evaluate(name, fn) if o.status == "failed"]


def kv_right(L, G, d, T, b):
    return 2 * L * G * d * T * b


def test_kv_cache_bytes_checks():
    assert not _failures("kv_cache_bytes", kv_right)
    # int32 arithmetic wraps around past 2**31 - 1
    wrapped = _failures("kv_cache_bytes", lambda *a: int(np.prod(np.array((2, *a)), dtype=np.int32)))
    assert wrapped and any("32-bit" in o.message for o in wrapped)
    # the factor 2 forgotten
    half = _failures("kv_cache_bytes", lambda L, G, d, T, b: L * G * d * T * b)
    assert half and any("key AND a value" in o.message for o in half)
    # a float result
    floaty = _failures("kv_cache_bytes", lambda *a: float(kv_right(*a)))
    assert floaty and any("Python int" in o.message for o in floaty)
    # numpy int64 is not a Python int
    assert _failures("kv_cache_bytes", lambda *a: np.int64(kv_right(*a)))
    with pytest.raises(PublicCheckFailed):
        run_checks("kv_cache_bytes", lambda L, G, d, T, b: L * G * d * T * b)


def mb_right(M, W, L, G, d, T, b):
    return 0 if W >= M else (M - W) // (2 * L * G * d * T * b)


def test_max_batch_checks():
    assert not _failures("max_batch", mb_right)
    # GB/GiB confusion: the spare memory converted with 2**30 and read back as 10**9
    gib_confused = _failures("max_batch", lambda M, W, L, G, d, T, b:
                             0 if W >= M else int((M - W) / 10**9 * 2**30) // (2 * L * G * d * T * b))
    assert gib_confused and any("10 GiB" in o.message for o in gib_confused)
    no_two = _failures("max_batch", lambda M, W, L, G, d, T, b: 0 if W >= M else (M - W) // (L * G * d * T * b))
    assert no_two and any("factor 2" in o.message for o in no_two)
    negative = _failures("max_batch", lambda M, W, L, G, d, T, b: (M - W) // (2 * L * G * d * T * b))
    assert negative and any("batch is 0" in o.message for o in negative)
    rounded = _failures("max_batch", lambda M, W, L, G, d, T, b:
                        0 if W >= M else round((M - W) / (2 * L * G * d * T * b)))
    assert rounded and any("round down" in o.message for o in rounded)
    floaty = _failures("max_batch", lambda *a: float(mb_right(*a)))
    assert floaty and any("Python int" in o.message for o in floaty)


def test_public_checks_compute_their_own_expectations():
    for name in EXERCISES:
        src = (ROOT / "public_checks" / f"{name}.py").read_text()
        assert "kvcache" not in src and "solutions" not in src
        assert 3 <= len(__import__(f"public_checks.{name}", fromlist=["CHECKS"]).CHECKS) <= 5
