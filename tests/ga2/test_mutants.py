"""ga2.mutants: the anchors, the mutated builders, and the published chapter's mutation table."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from ga2 import attn, checks, mutants
from ga2.mutants import EQUIVALENT, MUTANTS, BadAnchor, Mutant
from published_figures import PUBLISHED_EQUIVALENT, PUBLISHED_MUTATION_TABLE, PUBLISHED_MUTATION_TOTALS


def test_labels_are_the_seeds():
    assert [m.label for m in MUTANTS] == list(PUBLISHED_MUTATION_TABLE)
    assert [m.label for m in EQUIVALENT] == PUBLISHED_EQUIVALENT


@pytest.mark.parametrize("mutant", MUTANTS + EQUIVALENT, ids=lambda m: m.label[:50])
def test_every_anchor_occurs_exactly_once_in_the_real_builder(mutant):
    """A refactoring of ga2/attn.py that loses an anchor must fail here, not disable a mutant."""
    source = mutants.builder_source()
    assert mutants.anchor_count(mutant, source) == 1
    mutated = mutants.mutate(mutant, source)
    assert mutated != source
    compile(mutated, "mutated attn.py", "exec")  # every mutant is still valid Python


def test_the_real_builder_is_the_file_of_ga2_attn():
    assert mutants.builder_path().resolve() == Path(attn.__file__).resolve()


def test_bad_anchors_are_reported():
    with pytest.raises(BadAnchor, match="0 times"):
        mutants.mutate(Mutant("nowhere", "this text is not in the builder", "x"))
    with pytest.raises(BadAnchor, match="times"):
        mutants.mutate(Mutant("everywhere", "def ", "def  "))
    with pytest.raises(BadAnchor):
        mutants.mutation_table([Mutant("nowhere", "this text is not in the builder", "x")], workers=0)


def test_a_mutated_builder_is_a_fresh_module_built_from_the_edited_text():
    transposed = next(m for m in MUTANTS if m.label == "keys are read without the transpose")
    module = mutants.load_mutant(transposed)
    assert module is not attn and module.__name__.startswith("ga2._mutant_")
    P = attn.default_params()
    scores = lambda prog: [i for i in prog if i.op == "MM" and i.A == attn.SP_Q8]  # noqa: E731
    ours, theirs = scores(attn.program(5, "cached", P)), scores(module.program(5, "cached", P))
    assert len(ours) == len(theirs) == 2
    assert all(i.tb == 1 for i in ours) and all(i.tb == 0 for i in theirs)
    # its check_pipeline checks the mutated builder itself
    worst, problems = module.check_pipeline(seeds=range(1), Ls=(5,), exact=True)
    assert problems and "integer reference" in " ".join(problems)


def test_checks_on_one_run_match_separate_runs_for_a_small_case():
    """(b), (c), (d) evaluated on one run equal each check run on its own (the published chapter's way)."""
    mutant = next(m for m in MUTANTS if m.label.startswith("q requantization scale is 3%"))
    module = mutants.load_mutant(mutant)
    kw = dict(seeds=range(2), Ls=(2, 9))
    result = mutants.evaluate(mutant, **kw)
    separate = {
        "b": bool(module.check_pipeline(bound=mutants.BOUND, **kw)[1]),
        "c": bool(module.check_pipeline(exact=True, **kw)[1]),
        "d": bool(module.check_pipeline(stagewise=True, **kw)[1]),
    }
    assert result.caught == separate == {"b": False, "c": False, "d": True}


def test_a_crashing_builder_is_caught_by_every_check():
    crash = Mutant("the softmax length is nonsense", 'build("SM", dst=SP_P, src=SP_S8, len=L)',
                   'build("SM", dst=SP_P, src=SP_S8, len=0)')
    result = mutants.evaluate(crash, seeds=range(1), Ls=(2,))
    assert result.caught == {"b": True, "c": True, "d": True}
    assert "ProgramError" in result.note and "'len'" in result.note


def test_the_mutation_table_of_the_seed(tmp_path):
    """The whole table, in worker processes, as `python -m ga2.mutants --json` writes it."""
    out = tmp_path / "table.json"
    root = Path(attn.__file__).resolve().parent.parent
    run = subprocess.run([sys.executable, "-m", "ga2.mutants", "--json", str(out)], capture_output=True,
                         text=True, timeout=900, cwd=root)
    assert run.returncode == 0, run.stdout + run.stderr
    table = json.loads(out.read_text())
    got = {row["label"]: (row["caught"]["b"], row["caught"]["c"], row["caught"]["d"]) for row in table["mutants"]}
    assert got == PUBLISHED_MUTATION_TABLE
    assert [row["label"] for row in table["equivalent"]] == PUBLISHED_EQUIVALENT
    assert all(not any(row["caught"].values()) for row in table["equivalent"])
    summary = table["summary"]
    assert (summary["b"], summary["c"], summary["d"], summary["any"], summary["mutants"]) == (
        PUBLISHED_MUTATION_TOTALS["b"], PUBLISHED_MUTATION_TOTALS["c"], PUBLISHED_MUTATION_TOTALS["d"], PUBLISHED_MUTATION_TOTALS["any"],
        PUBLISHED_MUTATION_TOTALS["of"])
    assert "caught: (b) accuracy bound 21 of 23; (c) exact integer reference 15 of 23; " \
           "(d) stage-wise real-number check 22 of 23; by any of them 23 of 23" in run.stdout


def test_run_as_a_script_uses_the_package_module(monkeypatch):
    """``__main__`` hands over to ga2.mutants.main, whose results pickle however the file is started.

    (Run by runpy without replacing sys.modules["__main__"], a MutantResult defined in the script
    could not be pickled back from the workers, and every mutant counted as caught.)
    """
    import pickle
    import runpy
    import warnings

    called = []
    monkeypatch.setattr(mutants, "main", lambda argv=None: called.append(argv) or 0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)   # "found in sys.modules": it is, on purpose
        with pytest.raises(SystemExit) as done:
            runpy.run_module("ga2.mutants", run_name="__main__")
    assert done.value.code == 0 and called == [None]
    result = mutants.MutantResult("m", False, {"b": True, "c": False, "d": True})
    assert pickle.loads(pickle.dumps(result)) == result


def test_format_and_json_of_results():
    results = [mutants.MutantResult("m1", False, {"b": True, "c": False, "d": True}),
               mutants.MutantResult("e1", True, {"b": False, "c": False, "d": False})]
    text = mutants.format_table(results)
    assert "m1" in text and "NOT CAUGHT" in text and "e1: NOT CAUGHT" in text
    data = mutants.to_json(results)
    assert data["mutants"][0]["caught"] == {"b": True, "c": False, "d": True}
    assert data["equivalent"][0]["label"] == "e1" and data["summary"]["any"] == 1


def test_check_names():
    assert set(checks.CHECKS) == {"a", "b", "c", "d"} and mutants.BOUND == 0.12
