"""Chapters 1 and 2, their exercises and public checks.

Each chapter notebook is executed once (module-scoped fixture); the numbers it states
through myst-nb glue are read back from the executed notebook and pinned against the
figures of the sources, written here as constants.  Timings are checked for presence
and sign only: no wall-time assertions.
"""
import contextlib
import io
import math
import re
from pathlib import Path

import nbformat
import numpy as np
import pytest

from chapter_notebooks import execute, glued
from public_checks import evaluate, run_checks, PublicCheckFailed

ROOT = Path(__file__).resolve().parents[2]
CHAPTERS = ROOT / "book" / "chapters"
CH1 = CHAPTERS / "01_attention_by_hand.ipynb"
CH2 = CHAPTERS / "02_decode_step.ipynb"
EXERCISES = {"softmax": 1, "causal_attention": 1, "attend_step": 2}
GLUE_ROLE = re.compile(r"\{glue:(?:text|md)?\}`([A-Za-z0-9_]+)(?::[^`]*)?`")

# The sources' figures.
FOUR_SCORES = [0.707, 0.354, 1.061, -0.707]
FOUR_WEIGHTS = [0.297, 0.208, 0.423, 0.072]
FOUR_OUTPUT = [1.07, 1.334]
STEP3_WEIGHTS = [0.248, 0.248, 0.503]
STEP2_OUT_ROUNDED = [0.33, 1.34]       # as usually quoted, two decimals
STEP3_OUT_ROUNDED = [0.75, 1.50]


# ---------------------------------------------------------------- executing the chapters




def numbers(text):
    """The numbers in a glued display string such as '(0.248, 0.248, 0.503)'."""
    return [float(x) for x in re.findall(r"-?\d+(?:\.\d+)?(?:e-?\d+)?", text)]


@pytest.fixture(scope="module")
def ch1():
    nb = execute(CH1)
    return nb, glued(nb)


@pytest.fixture(scope="module")
def ch2():
    nb = execute(CH2)
    return nb, glued(nb)


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
    # the rounded figures the text quotes are the seed's
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


# ---------------------------------------------------------------- both chapters: pages that build


@pytest.mark.parametrize("which", ["ch1", "ch2"])
def test_chapter_runs_cleanly_and_draws_its_figures(which, request):
    nb, g = request.getfixturevalue(which)
    errors = [o for c in nb.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors
    pngs = sum("image/png" in o.get("data", {}) for c in nb.cells for o in c.get("outputs", []))
    assert pngs >= 2
    prefix = which + "_"
    assert all(key.startswith(prefix) for key in g)
    used = {m for c in nb.cells if c.cell_type == "markdown" for m in GLUE_ROLE.findall(c.source)}
    assert used, "the chapter states no glued number"
    assert used <= set(g), f"glue keys used in the text but never glued: {sorted(used - set(g))}"


def test_glue_keys_are_unique_across_the_two_chapters(ch1, ch2):
    assert not set(ch1[1]) & set(ch2[1])


@pytest.mark.parametrize("path", [CH1, CH2])
def test_chapter_structure(path):
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


STORED = [CH1, CH2] + [ROOT / f / f"{n}.ipynb" for f in ("exercises", "solutions") for n in EXERCISES]


@pytest.mark.parametrize("path", STORED, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_notebooks_are_stored_without_outputs(path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None


# ---------------------------------------------------------------- exercise and solution notebooks


def cells_of(folder, name):
    nb = nbformat.read(ROOT / folder / f"{name}.ipynb", as_version=4)
    return nb, nb.cells


def strip_comments(src):
    return "\n".join(line.split("#", 1)[0] for line in src.splitlines())


@pytest.mark.parametrize("folder", ["exercises", "solutions"])
@pytest.mark.parametrize("name", list(EXERCISES))
def test_exercise_notebook_form(folder, name):
    nb, cells = cells_of(folder, name)
    assert nb.metadata["kvcourse"] == {"exercise": name, "chapter": EXERCISES[name]}
    assert nb.metadata["kernelspec"]["name"] == "python3"
    kinds = [c.cell_type for c in cells]
    assert kinds == ["markdown", "code", "markdown", "code", "markdown", "code"]
    statement, starter, _, example, checks_md, checks = cells
    assert statement.source.startswith(f"# Exercise: {name}")
    assert f"def {name}(" in statement.source
    assert f"python -m graders grade exercises/{name}.ipynb" in statement.source
    assert "hidden tests" in statement.source
    assert starter.metadata.get("tags") == ["answer"]
    assert [c for c in cells if "answer" in c.metadata.get("tags", [])] == [starter]
    assert starter.source.startswith("import numpy as np")
    assert f"def {name}(" in starter.source and '"""' in starter.source
    assert ("raise NotImplementedError" in starter.source) == (folder == "exercises")
    assert "kvcache" not in starter.source and "solutions" not in starter.source
    assert not re.search(rf"\b{name}\(", strip_comments(example.source)), "the worked example must not call the answer"
    assert checks_md.source.startswith("## Public checks") and "hidden tests" in checks_md.source
    assert checks.source == f'from public_checks import run_checks\n\nrun_checks("{name}", {name})'


@pytest.mark.parametrize("name", list(EXERCISES))
def test_starter_cells_report_not_implemented_and_solutions_pass(name):
    for folder in ("exercises", "solutions"):
        _, cells = cells_of(folder, name)
        namespace = {}
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(cells[1].source, namespace)          # the answer cell
            exec(cells[3].source, {})                 # the worked example runs on its own
            result = run_checks(name, namespace[name])
        if folder == "exercises":
            assert not result and "not implemented yet" in out.getvalue()
        else:
            assert result and "5 of 5 public checks passed" in out.getvalue()


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


@pytest.mark.parametrize("name, fn", [("softmax", good_softmax), ("causal_attention", good_causal),
                                      ("attend_step", good_step)])
def test_public_checks_pass_a_correct_answer(name, fn):
    outcomes = evaluate(name, fn)
    assert 3 <= len(outcomes) <= 5
    assert all(o.status == "passed" for o in outcomes), [o for o in outcomes if o.status != "passed"]


@pytest.mark.parametrize("name, fn, words", [
    ("softmax", naive_softmax, "Subtract the largest score"),
    ("softmax", whole_table_softmax, "each row should sum to 1"),
    ("causal_attention", causal_without_mask, "causal mask"),
    ("causal_attention", causal_without_scale, "sqrt(d)"),
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
