"""Chapter 1 (attention by hand), its exercises (softmax, causal_attention) and their public checks.

The numbers the chapter states through myst-nb glue are read back from the executed notebook and
pinned against the figures of the sources, written here as constants.
"""
import contextlib
import io
import math
import re

import nbformat
import numpy as np
import pytest

from chapter_notebooks import chapter_path, errors, executed, figures, numbers
from public_checks import PublicCheckFailed, evaluate, run_checks

CH1 = chapter_path("01_attention_by_hand")


# The sources' figures.
FOUR_SCORES = [0.707, 0.354, 1.061, -0.707]

FOUR_WEIGHTS = [0.297, 0.208, 0.423, 0.072]

FOUR_OUTPUT = [1.07, 1.334]

STEP3_WEIGHTS = [0.248, 0.248, 0.503]

STEP2_OUT_ROUNDED = [0.33, 1.34]       # as usually quoted, two decimals

STEP3_OUT_ROUNDED = [0.75, 1.50]


@pytest.fixture(scope="module")
def ch1():
    return executed(CH1)


# ---------------------------------------------------------------- chapter 1


def test_ch1_four_token_example(ch1):
    _, g = ch1
    assert numbers(g["ch1_a_scores"]) == FOUR_SCORES
    assert numbers(g["ch1_a_weights"]) == FOUR_WEIGHTS
    assert numbers(g["ch1_a_output"]) == FOUR_OUTPUT
    assert numbers(g["ch1_a_dots"]) == [1.0, 0.5, 1.5, -1.0]
    assert g["ch1_a_sqrt2"] == "1.4142"
    assert g["ch1_a_w3"] == pytest.approx(0.0722, abs=5e-5)


def test_ch1_stable_softmax(ch1):
    _, g = ch1
    assert numbers(g["ch1_big_weights"]) == [0.731, 0.269]
    assert g["ch1_exp_limit"] == pytest.approx(709.78, abs=0.01)
    assert g["ch1_float_max"] == "1.8 × 10³⁰⁸"


def test_ch1_three_token_steps(ch1):
    _, g = ch1
    r = math.exp(1 / math.sqrt(2))
    assert numbers(g["ch1_s1_out"]) == [1.0, 0.0]
    assert numbers(g["ch1_s2_weights"]) == [0.3302, 0.6698]
    step2 = numbers(g["ch1_s2_out"])
    assert step2 == [0.3302, 1.3395]
    assert step2 == [round(1 / (1 + r), 4), round(2 * r / (1 + r), 4)]
    assert np.round(step2, 2).tolist() == STEP2_OUT_ROUNDED
    assert abs(step2[1] - 4 / 3) > 6e-3               # (1/3, 4/3) would be wrong
    assert numbers(g["ch1_s3_weights"]) == STEP3_WEIGHTS
    assert numbers(g["ch1_s3_weights4"]) == [0.2483, 0.2483, 0.5035]
    step3 = numbers(g["ch1_s3_out"])
    assert step3 == [0.7517, 1.5035]
    assert np.round(step3, 2).tolist() == STEP3_OUT_ROUNDED
    # the rounded figures the text quotes are the decoding-with-a-KV-cache exercise's
    assert numbers(g["ch1_s2_weights2"]) == [0.33, 0.67]
    assert numbers(g["ch1_s2_out2"]) == STEP2_OUT_ROUNDED and g["ch1_s2_out2_second"] == "1.34"
    assert numbers(g["ch1_s3_weights2"]) == [0.25, 0.25, 0.5]
    assert numbers(g["ch1_s3_out2"]) == STEP3_OUT_ROUNDED
    assert g["ch1_s3_score_gap"] == "0.7071"
    assert g["ch1_ratio"] == pytest.approx(r, rel=1e-12)
    assert g["ch1_s2_gap"] == pytest.approx(2 * r / (1 + r) - 4 / 3, rel=1e-9)
    assert g["ch1_s3_gap"] == pytest.approx(r / (2 + r) - 0.5, rel=1e-9)


def test_ch1_last_row_is_the_decode_step(ch1):
    _, g = ch1
    assert g["ch1_lastrow_gap"] < 1e-15
    assert g["ch1_lastrow_out_gap"] < 1e-15
    assert g["ch1_lastrow_verdict"].split(":")[0] in ("exactly 0", f"{g['ch1_lastrow_gap']:.1e}")
    assert g["ch1_rows_relerr"] < 1e-12


# ---------------------------------------------------------------- the page builds


def test_the_chapter_runs_cleanly_and_draws_its_figures(ch1):
    nb, _ = ch1
    assert not errors(nb)
    assert figures(nb) >= 2


def test_chapter_structure():
    path = CH1
    nb = nbformat.read(path, as_version=4)
    assert nb.metadata["kernelspec"]["name"] == "python3"
    md = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    assert md.lstrip().startswith("# ")
    assert md.count("\n# ") == 0, "one title per chapter"
    assert "## Self-check questions" in md and ":class: dropdown" in md
    assert md.index("## Self-check questions") < md.index("## Exercises")
    links = re.findall(r"\]\((\.\./\.\./exercises/[a-z_]+\.ipynb)\)", md[md.index("## Exercises"):])
    assert links
    for link in links:
        assert (path.parent / link).resolve().exists(), link
    code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    assert "from lessons.attention import" in code
    assert "def softmax" not in code and "def attend_step" not in code, "the engine is imported, not redefined"


# ---------------------------------------------------------------- exercise and solution notebooks


# ---------------------------------------------------------------- public checks: right and wrong answers


def good_softmax(s):
    s = np.asarray(s, dtype=np.float64)
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def naive_softmax(s):
    e = np.exp(np.asarray(s, dtype=np.float64))
    return e / e.sum(axis=-1, keepdims=True)


def whole_table_softmax(s):
    s = np.asarray(s, dtype=np.float64)
    e = np.exp(s - s.max())
    return e / e.sum()


def good_causal(Q, K, V, mask=True, scale=True):
    T, d = Q.shape
    S = Q @ K.T / (math.sqrt(d) if scale else 1.0)
    if mask:
        S = np.where(np.tril(np.ones((T, T), dtype=bool)), S, -np.inf)
    return good_softmax(S) @ V


def causal_without_mask(Q, K, V):
    return good_causal(Q, K, V, mask=False)


def causal_without_scale(Q, K, V):
    return good_causal(Q, K, V, scale=False)


@pytest.mark.parametrize("name, fn", [("softmax", good_softmax), ("causal_attention", good_causal)])
def test_public_checks_pass_a_correct_answer(name, fn):
    outcomes = evaluate(name, fn)
    assert 3 <= len(outcomes) <= 7          # few, the statement's stressed requirements among them
    assert all(o.status == "passed" for o in outcomes), [o for o in outcomes if o.status != "passed"]


@pytest.mark.parametrize("name, fn, words", [
    ("softmax", naive_softmax, "Subtract the largest score"),
    ("softmax", whole_table_softmax, "each row should sum to 1"),
    ("causal_attention", causal_without_mask, "causal mask"),
    ("causal_attention", causal_without_scale, "sqrt(d)"),
])
def test_public_checks_fail_a_wrong_answer_with_a_useful_message(name, fn, words):
    failed = [o for o in evaluate(name, fn) if o.status == "failed"]
    assert failed
    assert any(words in o.message for o in failed), [o.message for o in failed]
    with contextlib.redirect_stdout(io.StringIO()), pytest.raises(PublicCheckFailed):
        run_checks(name, fn)


# ---------------------------------------------------------------- an expert's reading


def test_ch1_the_overflow_limits_of_the_formats_a_model_computes_in(ch1):
    """e^x overflows above ln(largest): float32's largest is (2 - 2**-23) 2**127, float16's
    (2 - 2**-10) 2**15 = 65,504; a model's softmax runs in float32, not float64."""
    import math
    _, g = ch1
    assert g["ch1_exp_limit_f32"] == f"{math.log((2 - 2**-23) * 2**127):.2f}" == "88.72"
    assert g["ch1_exp_limit_f16"] == f"{math.log(65504):.2f}" == "11.09"


def test_ch1_says_what_its_code_is_and_what_attention_can_make():
    md = "\n".join(c.source for c in nbformat.read(CH1, as_version=4).cells if c.cell_type == "markdown")
    flat = " ".join(md.split())
    assert "the course's own engine, `lessons.attention`" not in flat      # the engine is kvcache
    assert "reference implementation of attention, `lessons.attention`" in flat
    assert "does not invent new directions" not in flat                   # (1,0) and (0,2) average to (0.5, 1)
    assert "convex hull" in flat
    assert "{glue:text}`ch1_exp_limit_f32`" in flat and "arxiv.org/abs/2302.05442" in flat
