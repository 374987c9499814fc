"""Chapter 12 (fewer heads), its exercise latent_attend_step and the exercise's public checks.

The chapter's figures are read back from the notebook the book's build executed and pinned: the
bytes per token of every model worked out here by hand from its configuration, the 2.25 groups
derived, absorbed and naive latent attention equal to rounding, RoPE's gap large and the
decoupled key's nil, the step costs counted by hand; the conversions of SmolLM2 are measured, so
they are held to bounds and orderings (KL >= 0, top-1 a share, a smaller cache never judged as
good as the full one, rank 256 better than rank 128), never to copied values.
"""
import math

import nbformat
import pytest

from chapter_notebooks import ROOT, answer_cell, chapter_path, errors, executed, markdown, number
from public_checks import evaluate

CH12 = chapter_path("12_fewer_heads")
NAME = "latent_attend_step"

# 2 bytes a number: 2 x L x G x d_h x 2, or L x (d_c + d_R) x 2
BY_HAND = {"ch12_llama2_bpt": 2 * 32 * 32 * 128 * 2, "ch12_llama3_bpt": 2 * 32 * 8 * 128 * 2,
           "ch12_mistral_bpt": 2 * 32 * 8 * 128 * 2, "ch12_smol_bpt": 2 * 30 * 3 * 64 * 2,
           "ch12_smol_mha_bpt": 2 * 30 * 9 * 64 * 2, "ch12_dsv2_bpt": 60 * 576 * 2,
           "ch12_dsv3_bpt": 61 * 576 * 2, "ch12_dsv2_mha_bpt": 2 * 60 * 128 * 128 * 2}


@pytest.fixture(scope="module")
def ch12():
    return executed(CH12)


def test_the_chapter_ran_without_errors_or_warnings(ch12):
    nb, g = ch12
    assert not errors(nb)
    noisy = [o.get("text", "")[:200] for c in nb.cells if c.cell_type == "code" for o in c.outputs
             if (o.get("output_type") == "stream" and o.get("name") == "stderr") or "Warning" in o.get("text", "")]
    assert not noisy, noisy


def test_bytes_per_token_by_hand(ch12):
    _, g = ch12
    for key, value in BY_HAND.items():
        assert g[key] == f"{value:,}", key
    assert g["ch12_gqa_ratio"] == "4"
    assert g["ch12_dsv2_mha_ratio"] == f"{(2 * 60 * 128 * 128 * 2) / (60 * 576 * 2):.1f}" == "56.9"
    assert g["ch12_llama3_gib"] == "1"                     # 131,072 x 8,192 = 2^30
    assert g["ch12_dsv2_vs_llama3"] == f"{69_120 / 131_072:.0%}"


def test_the_groups_are_derived(ch12):
    nb, g = ch12
    assert g["ch12_groups"] == "2.25" == str((512 + 64) / (2 * 128))
    assert g["ch12_dsv2_numbers"] == "576"
    assert "**{glue:text}`ch12_groups`** groups" in markdown(nb)


def test_absorbed_equals_naive_and_rope_breaks_it(ch12):
    _, g = ch12
    assert float(g["ch12_absorb_err"]) < 1e-13
    assert float(g["ch12_decoupled_err"]) < 1e-13
    assert float(g["ch12_rope_gap"]) > 0.3 and float(g["ch12_rope_first_gap"]) < 1e-13
    assert g["ch12_small_cached"] == "24" and g["ch12_small_mha"] == str(2 * 4 * 16)


def test_the_step_costs_by_hand(ch12):
    _, g = ch12
    D, H, d, r, n = 5120, 128, 128, 512, 4097
    common = 2 * D * r + 2 * D * H * d
    naive = common + 4 * n * r * H * d + 4 * n * H * d
    absorbed = common + 2 * H * d * r + 4 * n * H * r + 2 * H * r * d
    weights = D * H * d + D * r + 2 * r * H * d
    assert g["ch12_flops_ratio"] == f"{naive / absorbed:.0f}"
    assert g["ch12_bytes_ratio"] == f"{(weights + n * r + 4 * n * H * d) / (weights + n * r):.1f}"
    assert g["ch12_abs_intensity"] == f"{absorbed / (2 * (weights + n * r)):.0f}"
    assert g["ch12_naive_gflops"] == f"{naive / 1e9:,.0f}"


def test_the_conversions_are_bounded_and_ordered(ch12):
    _, g = ch12
    assert g["ch12_tokens"] == "256"
    # bytes kept in float32: 2 x 30 x 3 x 64 x 4; one head 2 x 30 x 64 x 4; a latent 30 x r x 4
    assert g["ch12_full_bpt"] == "46,080" and g["ch12_mqa_bpt"] == "15,360" and g["ch12_svd256_bpt"] == "30,720"
    kl = {k: number(g[f"ch12_{k}_kl"]) for k in ("mean", "first", "svd128", "svd256")}
    top1 = {k: number(g[f"ch12_{k}_top1"]) for k in kl}
    ppl = {k: number(g[f"ch12_{k}_ppl"]) for k in kl}
    full_ppl = number(g["ch12_full_ppl"])
    assert 1 < full_ppl < 100                      # a model that reads English prose
    for k in kl:
        assert kl[k] > 0.05 and 0 <= top1[k] < 100 and ppl[k] > full_ppl, k
    # more of the stacked projection kept, closer to the full cache
    assert kl["svd256"] < kl["svd128"] and top1["svd256"] > top1["svd128"] and ppl["svd256"] < ppl["svd128"]
    assert number(g["ch12_energy128"]) < number(g["ch12_energy256"]) <= 100
    # the words that compare them agree with the figures
    word = "below" if kl["mean"] < 0.95 * kl["first"] else "above" if kl["mean"] > 1.05 * kl["first"] else "equal to"
    assert g["ch12_mean_vs_first"] == f"the mean KL of mean pooling is {word} that of keeping the first head"
    word = "below" if kl["svd128"] < 0.95 * kl["mean"] else "above" if kl["svd128"] > 1.05 * kl["mean"] else "equal to"
    assert g["ch12_svd_vs_mqa"] == f"the mean KL of the rank-128 latent is {word} that of mean pooling"


def test_the_self_checks_by_hand(ch12):
    _, g = ch12
    assert g["ch12_q1_bytes"] == f"{2 * 32 * 8 * 128 * 2 * 32_768:,}" and g["ch12_q1_gib"] == "4"
    assert g["ch12_q2_bytes"] == f"{61 * 576 * 2 * 32_768:,}"
    assert g["ch12_q3_groups"] == "2.25"


def test_the_page_states_its_time_sources_and_text(ch12):
    nb, g = ch12
    assert 0 < number(g["ch12_seconds"]) < 3600
    text = markdown(nb)
    for needed in ("https://arxiv.org/abs/2305.13245", "https://arxiv.org/abs/2405.04434",
                   "https://huggingface.co/deepseek-ai/DeepSeek-V3", "PSF License", "5% of the\noriginal pretraining compute",
                   "{glue:text}`ch12_tokens` tokens"):
        assert needed in text, needed


def test_the_chapter_shows_no_answer_but_links_its_exercise(ch12):
    from coursetools.answer_leaks import describe, leaks_in_notebook
    nb, _ = ch12
    leaks = leaks_in_notebook(nb, "ch12")
    assert not leaks, describe(leaks)
    text = markdown(nbformat.read(CH12, as_version=4))
    assert f"[{NAME} exercise](../../exercises/{NAME}.ipynb)" in text and f"[{NAME}](../../exercises/{NAME}.ipynb)" in text
    assert "Self-check questions" in text and "dropdown" in text


def test_the_part_is_in_the_toc_with_its_intro_page():
    toc = (ROOT / "_toc.yml").read_text()
    part = toc.index("caption: Making the cache smaller")
    assert toc.index("book/chapters/11_testing_the_tests") < part < toc.index("book/making_the_cache_smaller") \
        < toc.index("book/chapters/12_fewer_heads") < toc.index("caption: Appendix")
    assert "exercises/latent_attend_step" in toc
    intro = (ROOT / "book" / "intro.md").read_text()
    assert "(making_the_cache_smaller.md)" in intro and "(chapters/12_fewer_heads.ipynb)" in intro
    part_page = (ROOT / "book" / "making_the_cache_smaller.md").read_text()
    assert "(chapters/12_fewer_heads.ipynb)" in part_page and "PSF License" in part_page


# ---------------------------------------------------------------- the exercise notebooks


@pytest.mark.parametrize("folder", ["exercises", "solutions"])
def test_exercise_notebook_form(folder):
    nb = nbformat.read(ROOT / folder / f"{NAME}.ipynb", as_version=4)
    assert nb.metadata["kvcourse"] == {"exercise": NAME, "chapter": 12}
    assert nb.cells[0].source.startswith(f"# Exercise: {NAME}") and "Absorption" in nb.cells[0].source
    assert f"python -m graders grade exercises/{NAME}.ipynb" in nb.cells[0].source
    cell = answer_cell(nb)
    assert cell is nb.cells[1] and f"def {NAME}(x_t, cache, p, n_heads):" in cell.source
    assert ("raise NotImplementedError" in cell.source) == (folder == "exercises")
    assert nb.cells[-1].source == f'from public_checks import run_checks\n\nrun_checks("{NAME}", {NAME})'
    code = "\n".join(line.split("#", 1)[0] for line in nb.cells[3].source.splitlines())
    assert f"{NAME}(" not in code                       # the worked example states values, calls nothing


def _function_from(folder):
    ns = {}
    exec(answer_cell(nbformat.read(ROOT / folder / f"{NAME}.ipynb", as_version=4)).source, ns)
    return ns[NAME]


def test_the_public_checks_name_a_wrong_scale_and_a_cache_that_keeps_keys():
    right = _function_from("solutions")

    def sqrt_r(x_t, cache, p, n_heads):               # scores over sqrt(r): the latent's width
        r = p["Wdkv"].shape[1]
        d = p["Wq"].shape[1] // n_heads
        scaled = dict(p, Wq=p["Wq"] * math.sqrt(d) / math.sqrt(r))
        return right(x_t, cache, scaled, n_heads)

    failed = {o.description: o.message for o in evaluate(NAME, sqrt_r) if o.status == "failed"}
    assert any("sqrt(r)" in m for m in failed.values()), failed

    def keeps_keys(x_t, cache, p, n_heads):
        out, new = right(x_t, {"c": cache["c"]}, p, n_heads)
        return out, dict(new, k=new["c"] @ p["Wuk"])

    failed = {o.description: o.message for o in evaluate(NAME, keeps_keys) if o.status == "failed"}
    assert "first step from an empty cache: shapes, and only latents kept" in failed
