"""The course's own notebooks against the grader: every solution gets full marks, every exercise's
starter gets zero with "not implemented yet", and every exercise the grader knows has both."""
import pytest

from graders import Limits, grade_file, registry

from grader_helpers import ROOT

SOLUTIONS = sorted((ROOT / "solutions").glob("*.ipynb"))
EXERCISES = sorted((ROOT / "exercises").glob("*.ipynb"))
LIMITS = Limits(test_seconds=5.0, submission_seconds=60.0)


def test_every_exercise_in_the_registry_has_a_solution_and_an_exercise_notebook():
    names = set(registry.names())
    assert names - {p.stem for p in SOLUTIONS} == set(), "exercises without solutions/NAME.ipynb"
    assert names - {p.stem for p in EXERCISES} == set(), "exercises without exercises/NAME.ipynb"


def test_every_solution_notebook_is_an_exercise_the_grader_knows():
    assert {p.stem for p in SOLUTIONS} - set(registry.names()) == set()


# The mutants solution is graded once, by tests/graders/test_mutants_exercise.py: it is part 2's
# careful check, whose full marks that file asserts along with how the other checks compare.
GRADED_ELSEWHERE = {"mutants"}


def test_every_solution_is_graded_somewhere():
    here = {p.stem for p in SOLUTIONS} - GRADED_ELSEWHERE
    assert here | GRADED_ELSEWHERE == set(registry.names())
    assert "grade_file(ROOT / \"solutions\" / \"mutants.ipynb\"" in (ROOT / "tests" / "graders" /
                                                                  "test_mutants_exercise.py").read_text()


@pytest.mark.parametrize("path", [p for p in SOLUTIONS if p.stem not in GRADED_ELSEWHERE], ids=lambda p: p.stem)
def test_solutions_get_full_marks(path):
    result = grade_file(path, limits=LIMITS)          # the exercise comes from the metadata
    assert result["exercise"] == path.stem
    assert result["status"] == "ok"
    assert result["score"] == result["max_score"] > 0, [t["output"] for t in result["tests"] if t["score"] == 0]


@pytest.mark.parametrize("path", EXERCISES, ids=lambda p: p.stem)
def test_untouched_exercises_get_zero_and_are_told_why(path):
    result = grade_file(path, limits=LIMITS)
    assert result["exercise"] == path.stem and result["score"] == 0
    assert all("not implemented yet" in t["output"] for t in result["tests"]), \
        {t["output"] for t in result["tests"]}
