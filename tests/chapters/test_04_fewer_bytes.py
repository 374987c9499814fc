"""Chapter 4's detour, "Fewer bytes a value" (book/chapters/04_fewer_bytes.ipynb): the 2-byte
formats and int8 on the real model, their overflow inside it, what each moves in its next-token
distribution, and the time half the bytes buy.

The formats' figures are pinned against IEEE's and bfloat16's definitions and the model's sizes,
counted here by hand; the measured ones (KL, perplexity, times) for their order and form only.
"""
import os
import re

import nbformat
import pytest

from chapter_notebooks import (assert_glue_references_resolve, chapter_path, errors, execute, executed, glued,
                               self_check_pairs)
from coursetools.answer_leaks import describe, leaks_in_notebook

DETOUR = chapter_path("04_fewer_bytes")
CH4 = chapter_path("04_memory_bound")

SMOL = dict(L=30, D=576, H=9, G=3, d=64, F=1536, V=49152)


def smol_weight_bytes(size: int) -> int:
    """Bytes a batch-1 decode step reads of the weights: every layer's matrices and two norm
    gains, the final norm, the output layer (the embedding table, tied) and one embedding row."""
    s = SMOL
    layer = (s["H"] + 2 * s["G"]) * s["d"] * s["D"] + s["D"] * s["H"] * s["d"] + 3 * s["F"] * s["D"] + 2 * s["D"]
    return (s["L"] * layer + s["D"] + s["V"] * s["D"] + s["D"]) * size


@pytest.fixture(scope="module")
def ch4():
    return executed(DETOUR)


def test_the_detour_runs_and_glues_what_it_says(ch4):
    nb, g = ch4
    assert not errors(nb)
    assert_glue_references_resolve(nb, g, "ch4_")


def test_the_detour_reads_the_chapter_s_text_and_context(ch4):
    """The same fixed text and the same cached context as chapter 4's real model (one plan)."""
    _, g = ch4
    _, g4 = executed(CH4)
    assert g["ch4_q_tokens"] == g4["ch4_real_context"]


def test_ch4_format_bits_and_bytes(ch4):
    _, g = ch4
    assert g["ch4_bf16_largest"] == "3.39e+38"                 # (2 - 2**-7) 2**127
    assert g["ch4_f16_largest"] == "65,504"                    # (2 - 2**-10) 2**15
    assert g["ch4_bf16_step"] == "0.0078" and g["ch4_f16_step"] == "0.00098" and g["ch4_f32_step"] == "1.19e-07"
    row = SMOL["d"]                                            # one head's key or value
    per_token = 2 * SMOL["L"] * SMOL["G"]                      # rows a token adds (K and V)
    assert g["ch4_bytes_c32"] == f"{per_token * row * 4:,}" == "46,080"
    assert g["ch4_bytes_c16"] == f"{per_token * row * 2:,}"
    assert g["ch4_bytes_c8"] == f"{per_token * (row + 4):,}"    # int8 values and a float32 scale
    assert g["ch4_bytes_w32"] == f"{smol_weight_bytes(4) / 1e6:.0f}"
    assert g["ch4_bytes_w16"] == f"{smol_weight_bytes(4) / 2e6:.0f}"


def test_ch4_real_activations_overflow_float16_only_in_the_norm(ch4):
    _, g = ch4
    residual = float(g["ch4_act_residual"].replace(",", ""))
    squares = float(g["ch4_act_squares"])
    assert 1_000 < residual < 65504                            # the page: "stored in float16 it fits"
    assert squares > 65504                                     # ... and its sum of squares does not
    assert g["ch4_act_over"] == f"{squares / 65504:,.0f}" or float(g["ch4_act_over"].replace(",", "")) > 1
    assert g["ch4_act_f16_nonzero"] == "0"
    assert 0 < float(g["ch4_act_bf16_err"]) < 0.5
    assert 1 <= int(g["ch4_act_layer"]) <= SMOL["L"] and g["ch4_width"] == str(SMOL["D"])


def test_ch4_formats_cost_little_and_in_order(ch4):
    _, g = ch4
    kl = {k: float(g[f"ch4_q_{k}_kl"]) for k in ("c_float16", "c_bfloat16", "c_int8")}
    # a float16 row rounds at 2**-11, a bfloat16 row at 2**-8, an int8 row at max|x| / 254
    assert 0 < kl["c_float16"] < kl["c_bfloat16"] < kl["c_int8"] < 0.01
    ppl = float(g["ch4_q_ppl"])
    assert 1 < ppl < SMOL["V"]
    for key in ("c_float16", "c_bfloat16", "c_int8", "w_bfloat16", "w_float16"):
        if g[f"ch4_q_{key}_kl"] == "unmeasured":
            continue
        assert float(g[f"ch4_q_{key}_kl"]) < 0.01, key
        assert float(g[f"ch4_q_{key}_top1"].rstrip("%")) >= 90, key
        assert float(g[f"ch4_q_{key}_ppl"]) == pytest.approx(ppl, rel=0.02), key
    if g["ch4_half_measured"] == "measured":
        assert g["ch4_half_speed"].startswith("bfloat16 weights and cache, with ")
        assert re.search(r"\d+(\.\d)? ms against \d+(\.\d)? ms: (about as fast as|[\d.,]+ times (faster|slower) than) "
                         r"float32$", g["ch4_half_speed"]), g["ch4_half_speed"]


def test_the_detour_is_a_page_of_its_own_after_the_chapter(ch4):
    nb, _ = ch4
    md = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    flat = " ".join(md.split())
    assert md.lstrip().startswith("# Fewer bytes a value") and md.count("\n# ") == 0
    assert "[Chapter 4](04_memory_bound.ipynb)" in flat
    for right in ("Weight-only quantisation", "FP8", "fused", "llama.cpp", "tensor cores"):
        assert right in flat, right
    assert "tensor cores read 2-byte values directly" not in flat
    pairs = self_check_pairs(nb)
    assert len(pairs) == 4 and all(answered for _, answered in pairs), pairs
    assert md.index("## Summary") < md.index("## Self-check questions") < md.index("## Sources and further reading")
    assert md[md.index("## Sources and further reading"):].count("](https://") >= 5
    toc = (chapter_path("04_memory_bound").parents[2] / "_toc.yml").read_text()
    assert toc.index("book/chapters/04_memory_bound") < toc.index("book/chapters/04_fewer_bytes") \
        < toc.index("book/chapters/05_the_model")
    first = next(c for c in nbformat.read(DETOUR, as_version=4).cells if c.cell_type == "code")
    assert "limit_blas_threads(1)" in first.source


def test_the_detour_shows_no_answer_and_no_warning(ch4):
    nb, _ = ch4
    leaks = leaks_in_notebook(nb, "ch4")
    assert not leaks, describe(leaks)
    noisy = [(c.get("id"), o.get("text", "")[:200]) for c in nb.cells if c.cell_type == "code" for o in c.outputs
             if (o.get("output_type") == "stream" and o.get("name") == "stderr")
             or "Warning" in o.get("text", "") or "Warning" in o.get("data", {}).get("text/plain", "")]
    assert not noisy, noisy


def test_the_detour_builds_on_a_machine_with_a_300_mib_cache_and_little_free_memory(tmp_path):
    """Chapter 4's small machine (a 300 MiB last-level cache, 2 GiB free): the page measures the
    copy and the formats that fit, and says what it left unmeasured rather than failing."""
    (tmp_path / "sitecustomize.py").write_text(
        "import lessons.machine_facts as machine\n"
        "machine.read_machine = lambda: machine.MachineFacts(llc_bytes=300 * 2**20, mem_available_bytes=2 * 2**30,\n"
        "                                                    logical_cpus=64, usable_cpus=64, cpu_model='test')\n")
    nb = execute(DETOUR, {"PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])})
    g = glued(nb)
    assert not errors(nb)
    assert_glue_references_resolve(nb, g, "ch4_")
    assert g["ch4_half_measured"] in ("measured", "unmeasured")
    for name in ("bfloat16", "float16"):
        value = g[f"ch4_q_w_{name}_kl"]
        assert value == "unmeasured" or float(value) < 0.01, (name, value)


def test_the_detour_s_self_check_figures(ch4):
    """int8 rows of 64 with a float32 scale: 180 rows of 68 bytes a token; the KL ratio is the
    measured ratio of the two caches' KL divergences (3 fewer mantissa bits: about 64)."""
    _, g = ch4
    assert g["ch4_bytes_c8"] == f"{2 * 30 * 3 * (64 + 4):,}" == "12,240"
    ratio = float(g["ch4_q_c_bfloat16_kl"]) / float(g["ch4_q_c_float16_kl"])
    assert abs(int(g["ch4_q_kl_ratio"]) - ratio) <= 0.1 * ratio + 1       # the glued KLs are rounded to 2 digits
    assert 8 < int(g["ch4_q_kl_ratio"]) < 512


def test_the_detour_s_floor_uses_the_fastest_copy(ch4):
    """A floor computed from a copy slowed by other programs would sit above the step it bounds:
    the page takes the fastest of nine copies, and says so."""
    nb, _ = ch4
    code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    assert "copy.best_bandwidth" in code and "/ copy.bandwidth" not in code
    printed = "\n".join(o.get("text", "") for c in nb.cells for o in c.get("outputs", []))
    assert "copy bandwidth, fastest of 9:" in printed
