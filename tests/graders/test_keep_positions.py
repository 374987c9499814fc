"""The hidden tests of keep_positions (chapter 14): the reference against cases worked by hand
and against a brute force over every subset; right answers (a stable argsort, a selection loop
in plain Python) get full marks; common mistakes lose the tests they break, with the mistake
named; a refusal counts only with Python's own ValueError and the right answer beside it."""
import itertools

import numpy as np
import pytest

from graders import registry
from graders.checks import Fail, Raised
from graders.exercises import keep_positions as ex

from grader_helpers import failed_outputs, grade_text

ARGSORT = """
import numpy as np
def keep_positions(acc_scores, budget, n_sink, n_recent):
    if min(budget, n_sink, n_recent) < 0 or n_sink + n_recent > budget:
        raise ValueError("bad budget")
    scores = np.asarray(acc_scores, dtype=np.float64)
    t = len(scores)
    if t <= budget:
        return np.arange(t, dtype=np.int64)
    middle = np.arange(n_sink, t - n_recent)
    heavy = middle[np.argsort(-scores[middle], kind="stable")[: budget - n_sink - n_recent]]
    return np.sort(np.concatenate([np.arange(n_sink), heavy, np.arange(t - n_recent, t)])).astype(np.int64)
"""

LOOP = """
import numpy as np
def keep_positions(acc_scores, budget, n_sink, n_recent):
    for v in (budget, n_sink, n_recent):
        if v < 0:
            raise ValueError("negative")
    if n_sink + n_recent > budget:
        raise ValueError("too many")
    t = len(acc_scores)
    if t <= budget:
        return np.array(range(t), dtype=np.int64)
    chosen = set(range(n_sink)) | set(range(t - n_recent, t))
    for _ in range(budget - n_sink - n_recent):
        best = None
        for j in range(n_sink, t - n_recent):
            if j not in chosen and (best is None or acc_scores[j] > acc_scores[best]):
                best = j
        chosen.add(best)
    return np.array(sorted(chosen), dtype=np.int64)
"""


def brute_force(scores, budget, n_sink, n_recent):
    """Of every set of min(t, budget) positions holding the sinks and the recent ones, the one of
    largest total score; among equal totals, the one whose sorted positions come first."""
    t = len(scores)
    if t <= budget:
        return list(range(t))
    must = set(range(n_sink)) | set(range(t - n_recent, t))
    best = None
    for extra in itertools.combinations(range(n_sink, t - n_recent), budget - n_sink - n_recent):
        kept = sorted(must | set(extra))
        key = (-sum(scores[j] for j in extra), kept)
        best = key if best is None or key < best else best
    return best[1]


def test_the_worked_example_by_hand():
    # sink 0, recent 6 and 7 (6.0 is the largest score, kept as recent); heavy: 4 (4.0), 2 (3.0)
    assert ex.keep(*ex.WORKED_EXAMPLE) == [0, 2, 4, 6, 7]
    assert ex.keep(*ex.WORKED_EXAMPLE, recent_compete=True) == [0, 4, 6, 7]
    assert ex.keep(np.array([1.0, 2, 2, 2, 2, 1, 1, 3]), 4, 1, 1) == [0, 1, 2, 7]
    assert ex.keep(np.array([1.0, 2, 2, 2, 2, 1, 1, 3]), 4, 1, 1, ties="later") == [0, 3, 4, 7]
    assert ex.keep(np.arange(10.0), 0, 0, 0) == [] and ex.keep(np.arange(3.0), 5, 2, 2) == [0, 1, 2]
    assert ex.keep(np.arange(10.0), 3, 0, 0, minus_zero=True) == list(range(10))


def test_the_reference_agrees_with_a_brute_force_over_subsets():
    rng = np.random.default_rng(7)
    for _ in range(300):
        t = int(rng.integers(0, 11))
        budget = int(rng.integers(0, 12))
        n_sink = int(rng.integers(0, budget + 1))
        n_recent = int(rng.integers(0, budget - n_sink + 1))
        scores = (rng.integers(0, 3, t) / 2).tolist()              # many ties
        assert ex.keep(scores, budget, n_sink, n_recent) == brute_force(scores, budget, n_sink, n_recent)


def test_the_tests_are_a_table_of_sound_cases():
    tests = registry.tests("keep_positions")
    assert len(tests) >= 12 and all(t.points > 0 for t in tests)
    names = " ".join(t.name for t in tests)
    for edge in ("t <= budget", "ties", "StreamingLLM", "H2O", "degenerate budgets", "ValueError", "not modified"):
        assert edge in names, edge


@pytest.mark.parametrize("source", [ARGSORT, LOOP], ids=["argsort", "loop"])
def test_a_right_answer_gets_full_marks(source):
    result = grade_text(source, "keep_positions")
    assert result["score"] == result["max_score"] > 0, failed_outputs(result)


WRONG = [
    (ARGSORT.replace('np.argsort(-scores[middle], kind="stable")', 'np.argsort(scores[middle], kind="stable")[::-1]'),
     "toward the later position"),
    (ARGSORT.replace("np.argsort(-scores[middle]", "np.argsort(scores[middle]"), "keeping the smallest scores"),
    (ARGSORT.replace("middle = np.arange(n_sink, t - n_recent)", "middle = np.arange(n_sink, t)")
            .replace("np.sort(np.concatenate", "np.unique(np.concatenate"), "recent positions compete"),
    (ARGSORT.replace("    if t <= budget:\n        return np.arange(t, dtype=np.int64)\n", ""),
     "when t <= budget"),
    (ARGSORT.replace("np.arange(t - n_recent, t)", "np.arange(t)[-n_recent:]")
            .replace("np.sort(np.concatenate", "np.unique(np.concatenate"), "-0 is 0"),
    (ARGSORT.replace("np.sort(np.concatenate", "(np.concatenate"), "not in increasing order"),
]


@pytest.mark.parametrize("source, words", WRONG, ids=[w for _, w in WRONG])
def test_a_common_mistake_loses_points_and_is_named(source, words):
    result = grade_text(source, "keep_positions")
    assert 0 <= result["score"] < result["max_score"]
    feedback = "\n".join(failed_outputs(result))
    assert words in feedback, feedback


def test_an_answer_that_never_refuses_loses_the_refusals_only():
    source = ARGSORT.replace('        raise ValueError("bad budget")', '        return np.zeros(0, dtype=np.int64)')
    result = grade_text(source, "keep_positions")
    failed = {t["name"] for t in result["tests"] if t["status"] != "passed"}
    assert failed == {t.name for t in registry.tests("keep_positions") if "ValueError" in t.name}, failed
    assert "should raise ValueError" in "\n".join(failed_outputs(result))


def test_an_answer_refusing_with_another_error_is_told_so():
    source = ARGSORT.replace('raise ValueError("bad budget")', 'raise IndexError("bad budget")')
    result = grade_text(source, "keep_positions")
    feedback = "\n".join(failed_outputs(result))
    assert "should raise ValueError" in feedback and "raised IndexError" in feedback


def test_an_answer_that_writes_into_its_input_or_returns_a_list_loses_that_test_only():
    writes = ARGSORT.replace("def keep_positions(", "def _rule(") + (
        "\ndef keep_positions(acc_scores, budget, n_sink, n_recent):\n"
        "    kept = _rule(acc_scores, budget, n_sink, n_recent)\n"
        "    acc_scores[:1] = -1.0\n"
        "    return kept\n")
    result = grade_text(writes, "keep_positions")
    failed = {t["name"] for t in result["tests"] if t["status"] != "passed"}
    assert failed == {"acc_scores is not modified"}, failed
    as_list = ARGSORT.replace(".astype(np.int64)\n", ".astype(np.int64).tolist()\n")
    result = grade_text(as_list, "keep_positions")
    failed = {t["name"] for t in result["tests"] if t["status"] != "passed"}
    assert failed == {"the answer is an int64 array"}, failed


def test_the_checks_read_positions_and_refusals():
    assert ex.positions(np.array([3, 4])) == [3, 4] and ex.positions([np.int64(2), 5]) == [2, 5]
    for value, words in ((np.array([1.0]), "dtype float64"), (np.zeros((1, 1), int), "1-D"), ([True], "int64 array"),
                         ("1", "int64 array")):
        with pytest.raises(Fail, match=words):
            ex.positions(value)
    good = (np.arange(5.0), 3, 1, 1)
    bad = [((np.arange(5.0), 1, 1, 1), "n_sink + n_recent > budget")]
    right = type("R", (), {"value": np.array(ex.keep(*good), np.int64)})
    ex._refuses(good, bad, [right, type("R", (), {"value": Raised("ValueError", ("ValueError", "Exception"))})])
    with pytest.raises(Fail, match="a class of its own"):
        ex._refuses(good, bad, [right, type("R", (), {"value": Raised("submission.ValueError",
                                                                       ("submission.ValueError", "Exception"))})])
    with pytest.raises(Fail, match="it returned"):
        ex._refuses(good, bad, [right, type("R", (), {"value": np.zeros(0, np.int64)})])
