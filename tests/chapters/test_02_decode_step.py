"""Chapter 2 (the decode step), its exercise (attend_step) and its public checks.

The numbers the chapter states through myst-nb glue are read back from the executed notebook and
pinned against the figures of the sources and arithmetic done here.  Timings are checked for
presence and sign only: no wall-time assertions.
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

CH2 = chapter_path("02_decode_step")


@pytest.fixture(scope="module")
def ch2():
    return executed(CH2)


# ---------------------------------------------------------------- chapter 2


def test_ch2_three_tokens_through_the_cache(ch2):
    _, g = ch2
    assert numbers(g["ch2_s2_out"]) == [0.3302, 1.3395]
    assert numbers(g["ch2_s3_out"]) == [0.7517, 1.5035]


def test_ch2_decode_equals_prefill(ch2):
    _, g = ch2
    assert 0 <= g["ch2_decode_relerr"] < 1e-12
    assert 0 <= g["ch2_mixed_relerr"] < 1e-12
    assert g["ch2_input_unchanged"] == "unchanged"


def test_ch2_old_keys_never_change_with_a_causal_mask(ch2):
    _, g = ch2
    assert g["ch2_change_causal"] < 1e-12
    assert g["ch2_change_full"] > 1e-2


def test_ch2_counts(ch2):
    _, g = ch2
    assert g["ch2_cache_bytes_4096"] == "4,194,304"
    assert g["ch2_flop_limit"] == 769
    assert g["ch2_flop_ratio_max"] == pytest.approx(806_453_248 / 1_343_488, rel=1e-12)
    assert g["ch2_grow_fc"] == pytest.approx((6 * 768 * 64 * 4096 + 2 * 64 * 4096 * 4097)
                                             / (6 * 768 * 64 * 512 + 2 * 64 * 512 * 513), rel=1e-12)
    assert g["ch2_grow_fr"] == pytest.approx((2 * 768 * 64 * 4096 + 2 * 769 * 64 * 4096 * 4097)
                                             / (2 * 768 * 64 * 512 + 2 * 769 * 64 * 512 * 513), rel=1e-12)
    # the copy of the 4095-row cache into a 4096-row one, for keys and for values, float64
    assert g["ch2_copy_mb"] == pytest.approx(2 * (4095 + 4096) * 64 * 8 / 1e6)


def test_ch2_measurement_is_reported(ch2):
    """Measured on whatever machine runs the test: present, positive, consistent; never timed."""
    _, g = ch2
    assert g["ch2_t_max"] == 4096
    assert g["ch2_machine"]
    for key in ("ch2_cached_us_max", "ch2_recompute_us_max", "ch2_ratio_max", "ch2_ratio_max_median",
                "ch2_cached_us_min", "ch2_ratio_min", "ch2_copy_us", "ch2_attend_us", "ch2_parts_us",
                "ch2_whole_us",
                "ch2_rate_cached", "ch2_rate_recompute", "ch2_total_c_max", "ch2_total_r_max",
                "ch2_grow_c", "ch2_grow_r", "ch2_direct_c_ms", "ch2_direct_r_ms",
                "ch2_sum_c_ms", "ch2_sum_r_ms"):
        assert isinstance(g[key], float) and g[key] > 0, key
    assert g["ch2_ratio_max"] == pytest.approx(g["ch2_recompute_us_max"] / g["ch2_cached_us_max"])
    assert 0 < g["ch2_copy_share"] <= 100
    assert g["ch2_copy_us"] + g["ch2_attend_us"] < g["ch2_parts_us"]           # the share is of the parts
    assert g["ch2_ratio_max"] <= g["ch2_ratio_peak"] and g["ch2_ratio_peak_t"] in (16, 32, 64, 128, 256, 512, 1024, 2048, 4096)
    for key in ("ch2_expo_c", "ch2_expo_r"):
        assert g[key] == pytest.approx(math.log(g[key.replace("expo", "grow")]) / math.log(8))
    words = {"close to linear", "between linear and quadratic", "close to quadratic", "faster than quadratic"}
    assert g["ch2_shape_c"] in words and g["ch2_shape_r"] in words


# ---------------------------------------------------------------- the page builds


def test_the_chapter_runs_cleanly_and_draws_its_figures(ch2):
    nb, _ = ch2
    assert not errors(nb)
    assert figures(nb) >= 2


def test_chapter_structure():
    path = CH2
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


def good_step(x, cache, p, scale=True, in_place=False):
    q, k, v = x @ p["Wq"], x @ p["Wk"], x @ p["Wv"]
    K, V = np.vstack([cache["k"], k[None]]), np.vstack([cache["v"], v[None]])
    s = K @ q / (math.sqrt(q.shape[0]) if scale else 1.0)
    out = good_softmax(s) @ V
    if in_place:
        cache["k"], cache["v"] = K, V
        return out, cache
    return out, {"k": K, "v": V}


def step_mutating_cache(x, cache, p):
    return good_step(x, cache, p, in_place=True)


def step_without_scale(x, cache, p):
    return good_step(x, cache, p, scale=False)


def step_writing_into_arrays(x, cache, p):
    out, new = good_step(x, cache, p)
    if len(cache["k"]):
        cache["k"][0] = 0.0                       # scribbles on the caller's array
    return out, new


@pytest.mark.parametrize("name, fn", [("attend_step", good_step)])
def test_public_checks_pass_a_correct_answer(name, fn):
    outcomes = evaluate(name, fn)
    assert 3 <= len(outcomes) <= 7          # few: the hidden tests do the rest
    assert all(o.status == "passed" for o in outcomes), [o for o in outcomes if o.status != "passed"]


@pytest.mark.parametrize("name, fn, words", [
    ("attend_step", step_mutating_cache, "input cache"),
    ("attend_step", step_writing_into_arrays, "wrote into the arrays of the input cache"),
    ("attend_step", step_without_scale, "sqrt(d)"),
])
def test_public_checks_fail_a_wrong_answer_with_a_useful_message(name, fn, words):
    failed = [o for o in evaluate(name, fn) if o.status == "failed"]
    assert failed
    assert any(words in o.message for o in failed), [o.message for o in failed]
    with contextlib.redirect_stdout(io.StringIO()), pytest.raises(PublicCheckFailed):
        run_checks(name, fn)
