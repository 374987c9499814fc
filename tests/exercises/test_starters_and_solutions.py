"""Every exercise of the catalogue, as its two notebooks hand it out: the learner's starter is
reported "not implemented yet" by the public checks, and the solution passes them all.

The functions are the ones the notebook's answer cells define (``course.catalogue`` names them),
run in a namespace of their own; the worked example runs on its own too, calling nothing of the
answer."""
import contextlib
import io
import re
from pathlib import Path

import nbformat
import pytest

from course.catalogue import EXERCISES
from public_checks import run_checks

ROOT = Path(__file__).resolve().parents[2]

#: How many public checks the first chapters' exercises have, counted from their notebooks' lists.
CHECK_COUNTS = {"causal_attention": 7, "softmax": 6, "attend_step": 7}


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


def _code(source: str) -> str:
    """``source`` without its comments."""
    return "\n".join(line.split("#", 1)[0] for line in source.splitlines())


#: mutants has two parts, each with its example and its answer, after a helper cell of its own.
TWO_PARTS = {"mutants"}
#: attention_tail's example takes two cells (the chip with the learner's requant, then the program).
SIX_CELLS = {e.name for e in EXERCISES} - TWO_PARTS - {"attention_tail"}
#: The answers to the first chapters' exercises start by importing numpy.
NUMPY_FIRST = {"causal_attention", "softmax", "attend_step"}
#: The exercises of the first twelve chapters link their chapter's page; the later ones name their
#: chapter in words ("chapter 13, \"Fewer bits\"").
LINKS_UNTIL = 12
#: The signatures part V's exercises are specified with, as the answer cell must define them.
SIGNATURES = {
    "latent_attend_step": ["latent_attend_step(x_t, cache, p, n_heads)"],
    "quantize_kv": ["quantize_kv(x, bits, axis)", "dequantize_kv(codes, scale, offset)"],
    "keep_positions": ["keep_positions(acc_scores, budget, n_sink, n_recent)"],
    "speculative_accept": ["speculative_accept(draft_tokens, q_probs, p_probs, uniforms)"],
}
#: The exercises whose examples never write the answer's call, not even in a comment.
NEVER_WRITTEN = {"kv_cache_bytes", "max_batch", "arithmetic_intensity", "prefill_time", "time_per_token",
                 "blocked_decode", "requant", "attention_tail"}


@pytest.mark.parametrize("folder", ["exercises", "solutions"])
@pytest.mark.parametrize("entry", EXERCISES, ids=lambda entry: entry.name)
def test_the_notebook_has_the_course_form(entry, folder):
    """Both notebooks of an exercise: the statement first, naming the command that grades it and
    the hidden tests; the answer in the first code cell (the starter raising NotImplementedError,
    the solution not), documented; the public checks last; no outputs stored; no engine anywhere;
    an example that does not call the answer; a link to its chapter (the first twelve chapters')."""
    nb = notebook(folder, entry)
    nbformat.validate(nb)
    name, cells = entry.name, nb.cells
    assert nb.metadata["kvcourse"] == {"exercise": name, "chapter": entry.chapter}
    assert nb.metadata["kernelspec"]["name"] == "python3"
    statement = cells[0]
    assert statement.cell_type == "markdown" and statement.source.startswith(f"# Exercise: {name}")
    answers = [c for c in cells if "answer" in c.metadata.get("tags", [])]
    source = "\n".join(c.source for c in answers)
    for fn in entry.functions:
        assert re.search(rf"^(def|class) {fn}\b", source, flags=re.M), fn
    assert ("raise NotImplementedError" in source) == (folder == "exercises")
    assert '"""' in source and "solutions" not in source
    assert cells[-2].source.startswith("## Public checks") and "hidden tests" in cells[-2].source
    checked = ", ".join(entry.functions)
    assert cells[-1].source == f'from public_checks import run_checks\n\nrun_checks("{name}", {checked})'
    assert all(not c.get("outputs") for c in cells if c.cell_type == "code")
    for cell in cells:
        assert "kvcache" not in cell.source or cell.cell_type == "markdown", "the learner's copy has no engine"
        assert not re.search(r"^\s*(from|import)\s+kvcache", cell.source, flags=re.M)
    examples = [c for c in cells[2:-1] if c.cell_type == "code" and c not in answers]
    if name != "BlockAllocator":                        # its example drives the learner's class
        for fn in entry.functions:
            assert not any(re.search(rf"\b{fn}\(", _code(c.source)) for c in examples), f"an example calls {fn}"
    if name not in TWO_PARTS:
        assert f"python -m graders grade exercises/{name}.ipynb" in statement.source
        assert "hidden tests" in statement.source
        assert answers == [cells[1]] and cells[1].metadata.get("tags") == ["answer"]
        assert "ga2" not in source                   # the grader's sandbox has no ga2
    if name in SIX_CELLS:
        assert [c.cell_type for c in cells] == ["markdown", "code", "markdown", "code", "markdown", "code"]
        if name != "BlockAllocator":                    # the statement shows the class's methods
            assert all(f"def {fn}(" in statement.source for fn in entry.functions)
    for signature in SIGNATURES.get(name, []):
        assert f"def {signature}:" in source, signature
    if name in NUMPY_FIRST:
        assert source.startswith("import numpy as np")
    if name in NEVER_WRITTEN:
        assert not any(f"{name}(" in c.source for c in examples)
    if entry.chapter <= LINKS_UNTIL:
        link = re.search(r"\((\.\./book/chapters/(\d\d)_[a-z0-9_]+\.ipynb)\)", statement.source)
        assert link and int(link.group(2)) == entry.chapter and (ROOT / folder / link.group(1)).resolve().exists()
