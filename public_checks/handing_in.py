"""What a learner is told about grading, worded for the copy of the course they have.

The course comes in two copies, and each says only what works in it:

    repository   the course's own checkout (self-study): the hidden tests come with it, and
                 ``python -m graders grade exercises/NAME.ipynb`` grades a notebook
    class        the learner's copy a class hands out (``make release``): no grader and no hidden
                 test; the learner runs the public checks here and hands in the notebook

``COPY`` says which copy this is: ``make release`` writes ``COPY = "class"`` into the copy it
makes, and words the exercise statements and the copy's README with the functions below, so
that every sentence about grading comes from this one place.
"""
from __future__ import annotations

__all__ = ["COPY", "COPIES", "statement", "after_checks", "how_to_hand_in"]

COPIES = ("repository", "class")
COPY = "repository"


def _copy(copy: str | None) -> str:
    copy = COPY if copy is None else copy
    if copy not in COPIES:
        raise ValueError(f"no copy of the course named {copy!r}: say one of {', '.join(COPIES)}")
    return copy


def statement(name: str, copy: str | None = None) -> str:
    """The last sentence of exercise ``name``'s statement (Markdown): how the answer is graded."""
    if _copy(copy) == "repository":
        return f"Your answer is graded by hidden tests: `python -m graders grade exercises/{name}.ipynb`."
    return ("Your answer is graded by hidden tests once you hand it in: run the public checks here, then "
            "hand in this notebook.")


def after_checks(name: str, copy: str | None = None) -> str:
    """The public checks' last line when every one of them passed."""
    if _copy(copy) == "repository":
        return f"{name}: public checks passed; hidden tests run at grading (python -m graders grade exercises/{name}.ipynb)."
    return f"{name}: public checks passed; hidden tests run at grading: hand in this notebook."


def how_to_hand_in(copy: str | None = None) -> str:
    """A README's paragraph on grading (Markdown)."""
    if _copy(copy) == "repository":
        return ("Each exercise notebook has public checks you run in place; the hidden tests grade it: "
                "`.venv/bin/python -m graders grade exercises/NAME.ipynb` prints one line per test and "
                "the score.")
    return ("Each exercise notebook has a statement, a starter cell to fill in, and public checks you "
            "run in place. Run the public checks here; hand in the notebook: the grade comes from "
            "hidden tests your course runs on it, which check more than the public ones.")
