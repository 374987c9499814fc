"""The hidden tests of speculative_accept (chapter 15): the reference against cases worked by hand
and against the lessons' rule (two implementations written apart that agree), right answers
(a loop, or searchsorted over normalised leftovers) get full marks, and common mistakes lose the
tests they break, with the mistake named; the distribution test catches a rule that is wrong in
distribution only."""
import numpy as np
import pytest

from graders import registry
from graders.exercises import speculative_accept as ex

from grader_helpers import failed_outputs, grade_text

LOOP = """
import numpy as np
def speculative_accept(draft_tokens, q_probs, p_probs, uniforms):
    k = len(draft_tokens)
    out = []
    for i in range(k):
        x = int(draft_tokens[i])
        if uniforms[i] < p_probs[i, x] / q_probs[i, x]:
            out.append(x)
            continue
        r = np.maximum(0.0, p_probs[i] - q_probs[i])
        return out + [int(np.flatnonzero(np.cumsum(r) > uniforms[k] * r.sum())[0])]
    return out + [int(np.flatnonzero(np.cumsum(p_probs[k]) > uniforms[k] * p_probs[k].sum())[0])]
"""

SEARCHSORTED = """
import numpy as np
def speculative_accept(draft_tokens, q_probs, p_probs, uniforms):
    k = len(draft_tokens)
    x = np.asarray(draft_tokens, dtype=int)
    kept = uniforms[:k] * q_probs[np.arange(k), x] < p_probs[np.arange(k), x]
    a = k if kept.all() else int(np.argmin(kept))
    r = p_probs[k] if a == k else np.maximum(0.0, p_probs[a] - q_probs[a])
    c = np.cumsum(r / r.sum())
    return np.append(x[:a], np.searchsorted(c, uniforms[k], side="right")).astype(np.int64)
"""


def test_the_worked_example_by_hand():
    draft, q, p, u = ex.WORKED_EXAMPLE
    # 0.6 / 0.5 > 1: kept; 0.4 / 0.7 = 0.571 < 0.7: rejected; r = (0.2, 0.1, 0), 0.5 * 0.3 = 0.15 < 0.2
    assert ex.accept(draft, q, p, u) == [1, 0]
    # 0.5 < 0.571: kept; p_2 = (0.5, 0.25, 0.25): the running sum 0.5 is not past 0.5, 0.75 is
    assert ex.accept(draft, q, p, np.array([0.9, 0.5, 0.5])) == [1, 2, 1]


def test_the_constructed_cases_by_hand():
    assert ex.accept(*ex.REJECT_FIRST) == [3]          # r = (0, 0, 1/4, 1/8), 0.7 * 3/8 = 0.2625 > 1/4
    assert ex.accept(*ex.ALL_ACCEPTED) == [2, 0, 1, 1]
    assert ex.accept(*ex.EQUAL_RATIO) == [1] and ex.accept(*ex.EQUAL_RATIO_MIRRORED) == [0]
    assert ex.accept(*ex._with_uniforms(ex.REJECT_FIRST, [0.5, 0.0, 0.2])) == [2]   # 0.2 * 3/8 < 1/4
    assert ex.accept(*ex._with_uniforms(ex.NO_DRAFT, [0.1])) == [0]
    assert ex.accept(*ex.EDGES_OF_THE_DRAW) == [3]
    assert ex.accept(*ex.ON_A_BOUNDARY) == [2]
    assert ex.accept(*ex.PROB_ABOVE) == [2, 2, 2, 1]
    assert ex.accept(*ex.NO_DRAFT) == [2]              # running sums 0.125, 0.625, 0.75: past 0.7 at 2


def test_the_reference_agrees_with_the_lessons_rule():
    from lessons.speculative_sampling import speculative_accept
    rng = np.random.default_rng(5)
    for _ in range(300):
        k, V = int(rng.integers(0, 9)), int(rng.integers(2, 30))
        args = ex.random_case(rng, k, V, agree=float(rng.random())) if k else (
            np.zeros(0, np.int64), np.zeros((0, V)), rng.dirichlet(np.ones(V))[None], rng.random(1))
        assert ex.accept(*args) == speculative_accept(*args)


def test_the_distribution_grid_gives_p_exactly_and_a_wrong_rule_does_not():
    calls = ex._distribution_calls()
    freq = np.zeros(4)
    wrong = np.zeros(4)
    for args, weight in calls:
        freq[ex.accept(*args)[0]] += weight / len(ex.GRID)
        wrong[ex.accept(*args, which_u="i")[0]] += weight / len(ex.GRID)
    assert np.allclose(freq, [0.125, 0.25, 0.375, 0.25], rtol=0, atol=1e-12)
    assert ex.P0.tolist() == [0.125, 0.25, 0.375, 0.25]
    assert np.abs(wrong - ex.P0).max() > 0.02


def test_the_tests_are_a_table_of_sound_cases():
    tests = registry.tests("speculative_accept")
    assert len(tests) >= 12 and all(t.points > 0 for t in tests)
    names = " ".join(t.name for t in tests)
    for edge in ("k = 0", "all k draft tokens accepted", "one-hot", "distributed as p_probs[0]", "not modified"):
        assert edge in names, edge


@pytest.mark.parametrize("source", [LOOP, SEARCHSORTED], ids=["loop", "searchsorted"])
def test_a_right_answer_gets_full_marks(source):
    result = grade_text(source, "speculative_accept")
    assert result["score"] == result["max_score"] > 0, failed_outputs(result)


WRONG = [
    (LOOP.replace("r = np.maximum(0.0, p_probs[i] - q_probs[i])", "r = p_probs[i]"), "from p_probs[i] itself"),
    (LOOP.replace("uniforms[k] * r.sum()", "uniforms[i] * r.sum()"), "uniforms[i], the number that decided"),
    (LOOP.replace("    return out + [int(np.flatnonzero(np.cumsum(p_probs[k])", "    return out\n    [int(np.flatnonzero(np.cumsum(p_probs[k])"),
     "only the k accepted tokens"),
    (LOOP.replace("return out + [int(np.flatnonzero(np.cumsum(r) > uniforms[k] * r.sum())[0])]",
                  "return out + [x, int(np.flatnonzero(np.cumsum(r) > uniforms[k] * r.sum())[0])]"),
     "keeping the rejected draft token"),
    (LOOP.replace("return out + [int(np.flatnonzero(np.cumsum(r) > uniforms[k] * r.sum())[0])]",
                  "return out + [int(np.argmax(r))]"), "argmax of max(0, p - q)"),
    (LOOP.replace("uniforms[i] < p_probs[i, x] / q_probs[i, x]", "uniforms[i] < q_probs[i, x] / p_probs[i, x]"),
     "the ratio is p(x) / q(x)"),
    (LOOP.replace("uniforms[i] < p_probs[i, x] / q_probs[i, x]", "uniforms[i] <= p_probs[i, x] / q_probs[i, x]"),
     "strictly below"),
]


@pytest.mark.parametrize("source, words", WRONG, ids=[w for _, w in WRONG])
def test_a_common_mistake_loses_points_and_is_named(source, words):
    result = grade_text(source, "speculative_accept")
    assert 0 <= result["score"] < result["max_score"]
    feedback = "\n".join(failed_outputs(result))
    assert words in feedback, feedback


def test_a_rule_wrong_in_distribution_fails_the_distribution_test_with_the_reason():
    result = grade_text(LOOP.replace("uniforms[k] * r.sum()", "uniforms[i] * r.sum()"), "speculative_accept")
    test = next(t for t in result["tests"] if "distributed as p_probs[0]" in t["name"])
    assert test["score"] == 0 and "no longer uniform" in test["output"], test["output"]


def test_a_valid_rule_drawing_the_other_way_passes_the_distribution_test_only():
    """Inverse-CDF from the top (the largest j) is a valid sampler: right in distribution, not the
    rule's exact tokens."""
    source = LOOP.replace("int(np.flatnonzero(np.cumsum(r) > uniforms[k] * r.sum())[0])",
                          "int(np.flatnonzero(np.cumsum(r[::-1]) > uniforms[k] * r.sum())[0]) * -1 + len(r) - 1")
    result = grade_text(source, "speculative_accept")
    passed = {t["name"]: t["status"] == "passed" for t in result["tests"]}
    assert passed[next(n for n in passed if "distributed as p_probs[0]" in n)]
    assert not passed[next(n for n in passed if n.startswith("the first draft token rejected"))]


def test_an_answer_that_writes_into_its_inputs_loses_the_test_of_it():
    source = LOOP.replace("def speculative_accept(", "def _rule(") + (
        "\ndef speculative_accept(draft_tokens, q_probs, p_probs, uniforms):\n"
        "    out = _rule(draft_tokens, q_probs, p_probs, uniforms)\n"
        "    q_probs[...] = 0.5\n"
        "    return out\n")
    result = grade_text(source, "speculative_accept")
    failed = {t["name"] for t in result["tests"] if t["status"] != "passed"}
    assert failed == {"the inputs are not modified"}, failed


def test_the_grader_refuses_what_is_not_a_list_of_tokens():
    for value, words in (([1.5], "not a whole number"), (np.zeros((1, 1), int), "a list of token ids"),
                         ("1", "a list of token ids"), ([True], "expected a token id")):
        with pytest.raises(ex.Fail, match=words):
            ex.tokens(value)
    assert ex.tokens(np.array([3, 4])) == [3, 4] and ex.tokens((np.int64(2), 5.0)) == [2, 5]
