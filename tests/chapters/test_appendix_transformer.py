"""The appendix (the transformer around attention): its tiny model's figures and its notes.

The numbers the appendix states through myst-nb glue are read back and pinned against the
transformer paper's sizes and arithmetic done here.
"""
import math

import nbformat
import pytest

from chapter_notebooks import (assert_glue_references_resolve, chapter_path, errors, executed, figures,
                               markdown)
from coursetools.answer_leaks import leaks_in_notebook

APPX = chapter_path("appendix_transformer")


EXACT_APPX = {"appx_vocab_size": "10", "appx_d_model": "16", "appx_n_heads": "2", "appx_head_dim": "8",
              "appx_n_layers": "2", "appx_cache_values": "64", "appx_attend_calls": "4",
              "appx_pe_min": "-1.00", "appx_pe_max": "1.00", "appx_ln_std": "1.000",
              "appx_greedy_logprob": "-5.12", "appx_beam_logprob": "-2.90", "appx_top_word": "cache",
              "appx_top_prob": "0.28", "appx_greedy_text": "the cache cache keys token values token",
              "appx_beam_text": "the cache every every every every token"}


@pytest.fixture(scope="module")
def appx():
    return executed(APPX)


# ---------------------------------------------------------------- appendix


def test_appendix_figures(appx):
    nb, g = appx
    assert not errors(nb)
    for key, want in EXACT_APPX.items():
        assert g[key] == want, key
    assert float(g["appx_perm_diff"]) < 1e-12
    assert float(g["appx_cache_max_diff"]) < 1e-12
    assert float(g["appx_beam_logprob"]) > float(g["appx_greedy_logprob"])
    assert figures(nb) >= 4


def test_appendix_leaves_room_for_the_last_words_labels():
    nb = nbformat.read(APPX, as_version=4)
    code = next(c.source for c in nb.cells if c.cell_type == "code" and "beam search wins the sequence" in c.source)
    assert "ax.set_xlim(0.7, n_new + 0.6)" in code     # the labels sit right of their points


def test_chapter_outputs_carry_no_stderr_and_no_warning(appx):
    """A warning printed while a chapter runs would appear on its page (with the build's paths)."""
    nb, _ = appx
    noisy = [(c.get("id"), o.get("text", "")[:200]) for c in nb.cells if c.cell_type == "code" for o in c.outputs
             if (o.get("output_type") == "stream" and o.get("name") == "stderr")
             or "Warning" in o.get("text", "") or "Warning" in o.get("data", {}).get("text/plain", "")]
    assert not noisy, noisy


def test_the_appendix_shows_no_answer(appx):
    """No graded function's source in the executed appendix (cells or outputs)."""
    from coursetools.answer_leaks import describe, leaks_in_notebook
    nb, _ = appx
    leaks = leaks_in_notebook(nb, "appx")
    assert not leaks, describe(leaks)


# the transformer paper: d_model 512, 8 heads, heads 64 wide, scores divided by sqrt(64) = 8
# chapter 10's four-token example: keys (1, 0), (0, 1), (1, 1), (-1, 0), query (1, 0.5)
FOUR_SCORES = [1.0, 0.5, 1.5, -1.0]


def test_appx_heads_width_and_scaling(appx):
    nb, g = appx
    assert_glue_references_resolve(nb, g, "appx_")
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
