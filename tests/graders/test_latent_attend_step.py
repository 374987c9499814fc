"""The hidden tests of latent_attend_step (chapter 12): the reference against numbers worked by
hand and against the course's engine (two implementations written apart that agree), a right
answer (absorbed, or naive: both are right) gets full marks, and common mistakes lose the tests
they break, with the mistake named."""
import math

import numpy as np
import pytest

from graders import registry
from graders.exercises import latent_attend_step as ex

from grader_helpers import failed_outputs, grade_text

ABSORBED = """
import numpy as np
def latent_attend_step(x_t, cache, p, n_heads):
    C = np.vstack([cache["c"], (x_t @ p["Wdkv"])[None]])
    r, width = p["Wuk"].shape
    d = width // n_heads
    q = (x_t @ p["Wq"]).reshape(n_heads, d)
    a = np.einsum("hd,rhd->hr", q, p["Wuk"].reshape(r, n_heads, d))
    s = a @ C.T / np.sqrt(d)
    w = np.exp(s - s.max(axis=1, keepdims=True))
    w /= w.sum(axis=1, keepdims=True)
    out = np.einsum("hr,rhd->hd", w @ C, p["Wuv"].reshape(r, n_heads, d))
    return out.reshape(width), {"c": C}
"""

NAIVE = """
import numpy as np
def latent_attend_step(x_t, cache, p, n_heads):
    C = np.vstack([cache["c"], (x_t @ p["Wdkv"])[None]])
    K, V = C @ p["Wuk"], C @ p["Wuv"]
    d = K.shape[1] // n_heads
    q = x_t @ p["Wq"]
    out = []
    for h in range(n_heads):
        cols = slice(h * d, (h + 1) * d)
        s = K[:, cols] @ q[cols] / np.sqrt(d)
        w = np.exp(s - s.max())
        out.append((w / w.sum()) @ V[:, cols])
    return np.concatenate(out), {"c": C}
"""


def test_the_worked_example_by_hand():
    # c = x1 + x2: latents 1, 2, 2; q = x.  Step 2: head 0 scores (1, 2), head 1 scores (-1, -2).
    X, p, H = ex.WORKED_EXAMPLE[0]
    rows = ex.causal_rows(X, p, H)
    w = 1 / (1 + math.e ** -1)                               # softmax of (2, 1)'s larger weight
    np.testing.assert_allclose(rows[0], [1.0, 2.0], rtol=1e-15)
    np.testing.assert_allclose(rows[1], [(1 - w) + 2 * w, 2 * (w + 2 * (1 - w))], rtol=1e-14)
    assert np.round(rows[1], 4).tolist() == [1.7311, 2.5379]
    # step 3, x = (0, 2): head 0's query is 0 (equal weights: the mean latent 5/3); head 1's
    # scores are 2 (-1, -2, -2)
    e = np.exp([-2.0, -4.0, -4.0])
    np.testing.assert_allclose(rows[2], [5 / 3, 2 * (e @ [1, 2, 2]) / e.sum()], rtol=1e-14)


def test_the_reference_agrees_with_the_engine_and_the_lessons():
    from kvcache.gqa import causal_attention
    from lessons.latent_attention import decompress, empty_latent_cache, latent_attend_step
    rng = np.random.default_rng(7)
    for _ in range(12):
        T, D, H, d, r = (int(v) for v in rng.integers(1, 7, size=5))
        X = rng.standard_normal((T, D))
        p = {"Wq": rng.standard_normal((D, H * d)), "Wdkv": rng.standard_normal((D, r)),
             "Wuk": rng.standard_normal((r, H * d)), "Wuv": rng.standard_normal((r, H * d))}
        rows = ex.causal_rows(X, p, H)
        K, V = decompress(X @ p["Wdkv"], p, H)
        engine = causal_attention((X @ p["Wq"]).reshape(T, H, d), K, V).reshape(T, H * d)
        np.testing.assert_allclose(rows, engine, rtol=1e-10, atol=1e-12)
        cache = empty_latent_cache(r)
        for t in range(T):
            out, cache = latent_attend_step(X[t], cache, p, H)
            np.testing.assert_allclose(out, rows[t], rtol=1e-10, atol=1e-12)


def test_the_tests_are_a_table_of_sound_cases():
    tests = registry.tests("latent_attend_step")
    assert len(tests) >= 12 and all(t.points > 0 for t in tests)
    names = " ".join(t.name for t in tests)
    for edge in ("t = 0", "H = 1", "r = 1", "large scores", "only the latents", "not modified"):
        assert edge in names, edge


@pytest.mark.parametrize("source", [ABSORBED, NAIVE], ids=["absorbed", "naive"])
def test_a_right_answer_gets_full_marks(source):
    result = grade_text(source, "latent_attend_step")
    assert result["score"] == result["max_score"] > 0, failed_outputs(result)


WRONG = [
    (ABSORBED.replace(" / np.sqrt(d)", ""), "not divided by sqrt(d)"),
    (ABSORBED.replace(" / np.sqrt(d)", " / np.sqrt(r)"), "divided by sqrt(r)"),
    (ABSORBED.replace(" / np.sqrt(d)", " / np.sqrt(width)"), "divided by sqrt(H d)"),
    (ABSORBED.replace('return out.reshape(width), {"c": C}',
                      'return out.reshape(width), {"c": C, "k": C @ p["Wuk"], "v": C @ p["Wuv"]}'),
     "should hold only 'c'"),
    (NAIVE.replace("K, V = C @ p[\"Wuk\"], C @ p[\"Wuv\"]", "K, V = C @ p[\"Wuv\"], C @ p[\"Wuk\"]"),
     "Wuk and Wuv swapped"),
    (NAIVE.replace("cols = slice(h * d, (h + 1) * d)", "cols = slice(0, d)"), "head 0's columns"),
    (ABSORBED.replace("w = np.exp(s - s.max(axis=1, keepdims=True))", "w = np.exp(s)"), "contains NaN"),
]


@pytest.mark.parametrize("source, words", WRONG, ids=[w for _, w in WRONG])
def test_a_common_mistake_loses_points_and_is_named(source, words):
    result = grade_text(source, "latent_attend_step")
    assert 0 <= result["score"] < result["max_score"]
    feedback = "\n".join(failed_outputs(result))
    assert words in feedback, feedback


def test_a_step_that_writes_into_the_input_cache_loses_the_test_of_it():
    source = ABSORBED.replace('C = np.vstack([cache["c"], (x_t @ p["Wdkv"])[None]])',
                              'C = np.vstack([cache["c"], (x_t @ p["Wdkv"])[None]])\n'
                              '    cache["c"] = C')
    result = grade_text(source, "latent_attend_step")
    failed = {t["name"] for t in result["tests"] if t["status"] != "passed"}
    assert failed == {"the input cache dict is left as it was (same key, same array)"}, failed
