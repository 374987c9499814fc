"""Every exercise of the catalogue, as its two notebooks hand it out: the learner's starter is
reported "not implemented yet" by the public checks, and the solution passes them all.

The functions are the ones the notebook's answer cells define (``course.catalogue`` names them),
run in a namespace of their own; the worked example runs on its own too, calling nothing of the
answer."""
import contextlib
import io
from pathlib import Path

import nbformat
import pytest

from course.catalogue import EXERCISES
from public_checks import run_checks

ROOT = Path(__file__).resolve().parents[2]

#: How many public checks the first chapters' exercises have, counted from their notebooks' lists.
CHECK_COUNTS = {"causal_attention": 5, "softmax": 5, "attend_step": 7}


def notebook(folder: str, entry):
    return nbformat.read(ROOT / folder / f"{entry.name}.ipynb", as_version=4)


def answers(folder: str, entry) -> list:
    """The graded functions (or class) of ``entry`` as ``folder``'s notebook defines them in its
    answer cells."""
    namespace = {}
    for cell in notebook(folder, entry).cells:
        if "answer" in cell.metadata.get("tags", []):
            exec(cell.source, namespace)
    return [namespace[fn] for fn in entry.functions]


def checked(name: str, functions) -> tuple[object, str]:
    """The public checks' report on ``functions``, and what they printed."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        report = run_checks(name, *functions)
    return report, out.getvalue()


@pytest.mark.parametrize("entry", EXERCISES, ids=lambda entry: entry.name)
def test_the_starter_is_reported_not_implemented(entry):
    report, said = checked(entry.name, answers("exercises", entry))
    assert not report and "not implemented yet" in said


@pytest.mark.parametrize("entry", EXERCISES, ids=lambda entry: entry.name)
def test_the_solution_passes_every_public_check(entry):
    report, said = checked(entry.name, answers("solutions", entry))
    assert report and "not implemented" not in said
    if entry.name in CHECK_COUNTS:
        n = CHECK_COUNTS[entry.name]
        assert f"{n} of {n} public checks passed" in said


#: The exercises whose worked example needs more than itself: BlockAllocator's drives the learner's
#: class, attention_tail's installs the learner's requant from the exercises folder, and mutants'
#: examples are spread over its two parts.
EXAMPLES_NOT_ALONE = {"BlockAllocator", "attention_tail", "mutants"}


@pytest.mark.parametrize("folder", ["exercises", "solutions"])
@pytest.mark.parametrize("entry", [e for e in EXERCISES if e.name not in EXAMPLES_NOT_ALONE],
                         ids=lambda entry: entry.name)
def test_the_worked_example_runs_on_its_own(entry, folder):
    """The cell after the statement's second part (the worked example, before the public
    checks) needs nothing the answer defines."""
    cells = notebook(folder, entry).cells
    example = cells[3]
    assert example.cell_type == "code" and "answer" not in example.metadata.get("tags", [])
    with contextlib.redirect_stdout(io.StringIO()):
        exec(example.source, {})
