"""The mutants exercise's grader: its builders (wheats that compute what the course's builder
computes, chaffs that do not), how they reach the sandbox (compiled, no source text, a ga2
without the builder), part 1 graded against what ga2's checks really do, and part 2 graded like
Examplar: a check that accepts everything, one that rejects everything and one that flags any
change of program text score zero, the course's own four checks score less than a careful
whole-loop check with its own scales, which scores highest."""
import hashlib
import inspect
import json
import linecache
import math
import marshal
import random
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from graders import Limits, grade_bytes, grade_file, grading, registry
from graders.batch import write_gradebook
from graders.checks import CallResult, Fail
from graders.exercises import mutants as ex
from graders.grading import Verdict
from graders.job import copy_package, prepared_copy
from graders.harness import make_module
from graders.registry import Lib
from graders.sandbox import SUBMISSION_SECONDS, TEST_SECONDS

from grader_helpers import ROOT, grade_text

import ga2.attn as course_builder
from ga2 import checks, plan

LIMITS = Limits()            # the exercise's own: 10 s a builder, 300 s a submission


def build(change, name="ga2.builder_for_a_test"):
    """The builder of ``change`` made as the harness makes it, in this process."""
    code = ex.compiled(change)
    return make_module({"name": name, "package": "ga2", "code": "c"}, lambda node: np.frombuffer(code, np.uint8))


def regions(spad, t):
    """The scratchpad's meaningful words after step t: what any stage-wise look may read."""
    spots = {"Q8": (plan.SP_Q8, plan.D), "KC": (plan.SP_KC, t * plan.D), "VC": (plan.SP_VC, t * plan.D),
             "S8": (plan.SP_S8, t), "P": (plan.SP_P, t), "W": (plan.SP_W, t), "O": (plan.SP_O, plan.D),
             "O8": (plan.SP_O8, plan.D)}
    return {name: spad[a:a + n].tolist() for name, (a, n) in spots.items()}


# ------------------------------------------------------------------ the builders themselves

def test_every_change_applies_once_to_the_builder_and_compiles():
    source = ex.builder_source()
    changes = ex.WHEATS + ex.chaffs()
    assert len(ex.WHEATS) >= 10 and len(ex.chaffs()) > 23
    assert len({c.label for c in changes}) == len(changes)
    for change in changes:
        text = ex.apply(change, source)                    # BadAnchor unless each edit occurs once
        assert (text == source) == (change.kind == ex.UNCHANGED), change.label
        assert isinstance(marshal.loads(ex.compiled(change, source)), type(compile("", "", "exec")))
    kinds = {c.kind for c in ex.WHEATS}
    assert {ex.NEVER_READ, ex.REORDERED, ex.TILES, ex.ARITHMETIC, ex.NO_EFFECT, ex.SPLIT, ex.OTHER_CODE} <= kinds
    assert {c.kind for c in ex.chaffs()} == set(ex.HINTS)
    with pytest.raises(ex.BadAnchor, match="0 times"):
        ex.apply(ex.Change("nowhere", ex.SCALE, (("this text is not in the builder", "x"),)))


def test_the_chapters_mutants_and_equivalent_changes_are_among_them():
    from ga2.mutants import EQUIVALENT, MUTANTS
    assert [c.label for c in ex.chapter_chaffs()] == [m.label for m in MUTANTS]
    assert [(c.edits[0]) for c in ex.chapter_chaffs()] == [(m.anchor, m.replacement) for m in MUTANTS]
    wheat_edits = {c.edits for c in ex.WHEATS}
    assert all(((m.anchor, m.replacement),) in wheat_edits for m in EQUIVALENT)


def test_a_builder_in_the_sandbox_has_no_source_text():
    builder = build(ex.WHEATS[0])
    for thing in (builder, builder.program, builder.attention_tail, builder.rq_params):
        with pytest.raises((OSError, TypeError)):
            inspect.getsource(thing)
    assert not hasattr(builder, "__file__") and builder.__doc__ is None and builder.program.__doc__ is None
    assert builder.program.__code__.co_filename == ex.BUILDER_FILE
    assert linecache.getlines(ex.BUILDER_FILE) == []
    P = course_builder.rq_params(course_builder.make_example(5, 1))
    assert builder.program(5, "cached", P) == course_builder.program(5, "cached", P)   # and it works


LENGTHS = (1, 2, 5, 13, 27, 32)


@pytest.mark.parametrize("change", ex.WHEATS[1:], ids=lambda c: c.label[:40])
def test_every_wheat_computes_what_the_course_builder_computes(change):
    """Outputs of both programs at every step, the scratchpad's meaningful words and the caches in
    EXT, for lengths up to the 32 the memory plan holds; and the course's checks find nothing."""
    builder = build(change)
    for L in LENGTHS:
        ours, theirs = course_builder.make_example(L, 3), builder.make_example(L, 3)
        assert builder.rq_params(theirs) == course_builder.rq_params(ours)
        for a, b in zip(course_builder.sequence(ours), builder.sequence(theirs), strict=True):
            assert (a.cached.output, a.recompute.output) == (b.cached.output, b.recompute.output), (L, a.t)
            assert regions(a.spad, a.t) == regions(b.spad, b.t), (L, a.t)
            assert np.array_equal(a.cached.ext_before[plan.EX_KC:plan.EX_OUT + plan.D],
                                  b.cached.ext_before[plan.EX_KC:plan.EX_OUT + plan.D]), (L, a.t)
        assert builder.int_reference(theirs, L) == course_builder.int_reference(ours, L)
    worst, found = checks.findings(builder, bound=0.12, exact=True, stagewise=True)
    assert found == []


@pytest.mark.parametrize("change", ex.chaffs(), ids=lambda c: c.label[:40])
def test_every_chaff_is_a_real_bug_that_a_decode_loop_shows(change):
    builder = build(change)
    for L, seed in ((9, 0), (32, 0), (32, 1)):
        ours, theirs = course_builder.make_example(L, seed), builder.make_example(L, seed)
        try:
            steps = builder.sequence(theirs)
        except Exception:  # noqa: BLE001 - a builder that crashes is a bug too
            return
        for a, b in zip(course_builder.sequence(ours), steps):
            if (a.cached.output, a.recompute.output) != (b.cached.output, b.recompute.output):
                return
    pytest.fail(f"{change.label!r} gives the course builder's outputs: it is not a mutant")


def test_the_copy_of_ga2_in_the_sandbox_has_no_builder(tmp_path):
    copy = copy_package(Lib("ga2", hide=ex.HIDDEN), tmp_path)
    names = {p.name for p in copy.iterdir()}
    assert {"machine.py", "quant.py", "softmax.py", "isa.py", "plan.py", "checks.py"} <= names
    assert not names & {"attn.py", "mutants.py", "study.py", "report.py", "rtl", "__main__.py"}
    numpy_site = str(Path(np.__file__).resolve().parent.parent)
    code = ("import sys; sys.path[:0] = sys.argv[1:]; import ga2; ga2.machine.Machine; ga2.checks.findings\n"
            "try:\n    import ga2.attn\nexcept ImportError:\n    print('no builder')\n")
    run = subprocess.run([sys.executable, "-I", "-S", "-c", code, str(tmp_path), numpy_site],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0 and run.stdout.strip() == "no builder", run.stderr


def test_each_run_gets_the_copy_compiled_and_its_interpreter_compiles_none_of_it(tmp_path):
    """The copy a run's folder gets is the copy above (the same sources, nothing more but their
    compiled forms), and the sandbox's interpreter (-B, a read-only folder) loads every module of
    it from those compiled files instead of compiling the source again."""
    lib = Lib("ga2", hide=ex.HIDDEN, parts=("requant",))
    plain = copy_package(lib, tmp_path / "plain")
    written = prepared_copy(lib).write(tmp_path / "run")
    assert prepared_copy(lib) is prepared_copy(lib)                    # made once per process
    sources = {p.relative_to(plain).as_posix(): p.read_bytes() for p in plain.rglob("*") if p.is_file()}
    files = {p.relative_to(written).as_posix(): p.read_bytes() for p in written.rglob("*") if p.is_file()}
    assert {k: v for k, v in files.items() if not k.startswith("__pycache__/")} == sources
    assert {k for k in files if k.startswith("__pycache__/")} == {
        f"__pycache__/{Path(k).stem}.{sys.implementation.cache_tag}.pyc" for k in sources}
    numpy_site = str(Path(np.__file__).resolve().parent.parent)
    code = "import sys; sys.path[:0] = sys.argv[1:]; import ga2, ga2.checks, ga2.machine"
    run = subprocess.run([sys.executable, "-I", "-S", "-B", "-v", "-c", code, str(tmp_path / "run"), numpy_site],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    loaded = {Path(line.split("'")[1]).name for line in run.stderr.splitlines()
              if line.startswith("# code object from") and str(written) in line}
    assert loaded == {Path(k).name for k in files if k.startswith("__pycache__/")}
    # a compiled file that does not match its source is not used: the source is
    (written / "plan.py").write_text((written / "plan.py").read_text() + "EDITED = 1\n")
    run = subprocess.run([sys.executable, "-I", "-S", "-B", "-c", code + "; print(ga2.plan.EDITED)",
                          str(tmp_path / "run"), numpy_site], capture_output=True, text=True, timeout=60)
    assert run.stdout.strip() == "1", run.stderr


def test_the_fingerprint_covers_ga2_which_the_builders_come_from(tmp_path, monkeypatch):
    files = {p.relative_to(registry.package_dir("ga2")).as_posix() for p in registry.lib_files("mutants")}
    assert {"attn.py", "checks.py", "machine.py", "mutants.py", "quant.py"} <= files
    copy = tmp_path / "ga2"
    shutil.copytree(registry.package_dir("ga2"), copy, ignore=shutil.ignore_patterns("__pycache__", "*.v"))
    real = registry.package_dir
    monkeypatch.setattr(registry, "package_dir", lambda name: copy if name == "ga2" else real(name))
    registry.fingerprint.cache_clear()
    try:
        before = registry.fingerprint("mutants")
        (copy / "attn.py").write_text((copy / "attn.py").read_text() + "\n# a change\n")
        registry.fingerprint.cache_clear()
        assert registry.fingerprint("mutants") != before
        other = registry.fingerprint("softmax")
        (copy / "quant.py").write_text((copy / "quant.py").read_text() + "\n# a change\n")
        registry.fingerprint.cache_clear()
        assert registry.fingerprint("softmax") == other          # an exercise without ga2 does not care
    finally:
        registry.fingerprint.cache_clear()


def test_the_exercise_has_limits_of_its_own_that_a_flag_overrides():
    exercise = registry.get("mutants")
    assert Limits().resolved(exercise.test_seconds, exercise.submission_seconds).test_seconds == 10
    assert Limits(test_seconds=1.5).resolved(exercise.test_seconds).test_seconds == 1.5
    assert Limits().resolved().as_dict()["test_seconds"] == TEST_SECONDS
    assert Limits().resolved().submission_seconds == SUBMISSION_SECONDS


def test_the_gradebook_has_a_column_per_part():
    items = registry.items("mutants")
    assert [i.points for i in items] == [2] * len(ex.PREDICTED) + [0, len(ex.chaffs())]
    assert len(registry.tests("mutants")) == 1 + len(ex.WHEATS) + len(ex.chaffs())


def test_the_gradebook_columns_are_the_results_entries(tmp_path):
    items = registry.items("mutants")
    result = {"status": "ok", "score": 3, "max_score": 57, "isolation": "bwrap", "execution_time": 1,
              "sha256": "x", "output": "", "tests": [{"name": i.name, "score": 1.0} for i in items]}
    out = tmp_path / "gb.csv"
    write_gradebook(out, "mutants", {"a.py": result})
    header = out.read_text().splitlines()[0]
    assert "t01 part 1: scores: the 1/sqrt(d) factor is left out" in header
    assert f"t{len(items):02d} part 2: rejects the hidden mutants" in header
    assert "correct builder 1" not in header          # the runs are not columns


# ------------------------------------------------------------------ part 1

# What the mutation table of the course on the GA-2 accelerator says of three of its mutants.
PUBLISHED_MUTATION_ROWS = {"scores: the 1/sqrt(d) factor is left out": {"b", "d"},
              "q requantization scale is 3% too large": {"d"},
              "the output is stored from the int32 accumulators": {"b", "c"}}


def test_part_1_is_graded_against_what_the_checks_do(monkeypatch):
    for label, caught in PUBLISHED_MUTATION_ROWS.items():
        assert ex.truth(label) == caught
    # every check stops at 24 tokens, and a change that bites only past them escapes all four
    assert ex.truth("the score loop stops after 6 tiles (24 positions)") == frozenset()
    # the expected answers come from running ga2's checks, not from a table: change what the
    # checks say and the expected answer follows
    import ga2.mutants
    label = "the weights are requantized as if 1.0 were 128"
    monkeypatch.setattr(ga2.mutants, "evaluate", lambda mutant, **kw: ga2.mutants.MutantResult(
        mutant.label, False, {"b": True, "c": False, "d": True}))
    monkeypatch.setattr(ex, "_truth", {})
    monkeypatch.setattr(ex, "truth_key", lambda: "ga2 with other checks")     # the kept outcome is stale
    assert ex.truth(label) == {"b", "d"}


def test_part_1_feedback_says_what_is_wrong_without_the_answer():
    right = {label: ex.truth(label) for label in ex.PREDICTED}
    answer = {**right}
    answer[ex.PREDICTED[0]] = ["(B)", " d "]                  # lists and letter forms are fine
    answer[ex.PREDICTED[1]] = {"b", "d"}                       # one check too many
    answer[ex.PREDICTED[2]] = set()                            # two left out
    answer[ex.PREDICTED[3]] = "bd"                             # a string
    answer[ex.PREDICTED[4]] = {"a"}                            # (a) is part of every check
    del answer[ex.PREDICTED[5]]
    got = ex._judge_predictions([CallResult(answer)])
    assert got[ex.PREDICTED[0]] == (True, "")
    assert "names at least one check that does not catch it" in got[ex.PREDICTED[1]][1]
    assert "leaves out at least one that does" in got[ex.PREDICTED[2]][1]
    assert "is a string" in got[ex.PREDICTED[3]][1]
    assert "other than the letters" in got[ex.PREDICTED[4]][1]
    assert "no prediction for this mutant" in got[ex.PREDICTED[5]][1]
    assert all(got[label] == (True, "") for label in ex.PREDICTED[6:])
    for label in ex.PREDICTED[1:3]:                            # neither the checks' letters nor a count
        assert not any(f"'{c}'" in got[label][1] or f"({c})" in got[label][1] for c in "bcd")
        assert not any(ch.isdigit() for ch in got[label][1])
    answer[ex.PREDICTED[1]] = set(right[ex.PREDICTED[1]] ^ {"b", "c", "d"})
    if len(answer[ex.PREDICTED[1]]) == 2:                      # a set of two, both wrong: not said as such
        assert "2" not in ex._judge_predictions([CallResult(answer)])[ex.PREDICTED[1]][1]
    with pytest.raises(Fail, match="must return a dict"):
        ex._judge_predictions([CallResult([1, 2])])


def test_the_notebook_lists_the_mutants_the_grader_asks_about():
    import nbformat
    nb = nbformat.read(ROOT / "exercises" / "mutants.ipynb", as_version=4)
    cell = next(c for c in nb.cells if c.cell_type == "code" and c.source.startswith("MUTANTS = ["))
    namespace = {}
    exec(cell.source.split("\nfor ")[0], namespace)
    listed = namespace["MUTANTS"]
    assert [label for label, _, _ in listed] == list(ex.PREDICTED)
    by_label = {c.label: c for c in ex.chaffs()}
    assert all(by_label[label].edits == ((old, new),) for label, old, new in listed)
    assert json.loads((ROOT / "public_checks" / "data" / "mutants.json").read_text())["labels"] == list(ex.PREDICTED)


# ------------------------------------------------------------------ part 2: the done-when cases

ACCEPT_ALL = """
    def predict_catches():
        return {}

    def check_builder(builder):
        return True
    """

REJECT_ALL = ACCEPT_ALL.replace("return True", "return False")

COURSE_CHECKS = """
    from ga2 import checks

    def predict_catches():
        return {}

    def check_builder(builder):
        worst, found = checks.findings(builder, bound=0.12, exact=True, stagewise=True, stop_early=True)
        return not found
    """


def listing_digest(builder) -> str:
    P = builder.rq_params(builder.make_example(3, 0))
    text = "\n".join(str(i) for L in (1, 3, 9) for v in ("cached", "recompute") for i in builder.program(L, v, P))
    return hashlib.sha256(text.encode()).hexdigest()


def code_digest(builder) -> str:
    names = sorted(n for n, f in vars(builder).items() if inspect.isfunction(f) and f.__module__ == builder.__name__)
    return hashlib.sha256(b"".join(getattr(builder, n).__code__.co_code for n in names)).hexdigest()


# A learner who computed these digests of the course's builder in their notebook and wrote them in.
TEXT_FLAGGERS = {
    "instructions": (listing_digest, """
        import hashlib

        def predict_catches():
            return {}

        def check_builder(builder):
            P = builder.rq_params(builder.make_example(3, 0))
            text = "\\n".join(str(i) for L in (1, 3, 9) for v in ("cached", "recompute")
                              for i in builder.program(L, v, P))
            return hashlib.sha256(text.encode()).hexdigest() == "DIGEST"
        """),
    "bytecode": (code_digest, """
        import hashlib
        import inspect

        def predict_catches():
            return {}

        def check_builder(builder):
            names = sorted(n for n, f in vars(builder).items()
                           if inspect.isfunction(f) and f.__module__ == builder.__name__)
            code = b"".join(getattr(builder, n).__code__.co_code for n in names)
            return hashlib.sha256(code).hexdigest() == "DIGEST"
        """),
}


def part_2(result):
    valid = next(t for t in result["tests"] if t["name"].startswith("part 2: accepts"))
    caught = next(t for t in result["tests"] if t["name"].startswith("part 2: rejects"))
    return valid, caught


def judged_here(source):
    """Part 2's entries for a check given as source, judged in this process: every builder made
    as the harness makes it, the check called on it, and the exercise's own report.  (The sandbox's
    part is tested by the gradings below; this is the scoring, for many checks, quickly.)"""
    namespace = {}
    exec(textwrap.dedent(source), namespace)
    tests, verdicts = registry.tests("mutants"), {}
    for test in tests:
        if test.calls[0].fn != ex.CHECK:
            verdicts[test.id] = Verdict(False, "not judged here")
            continue
        arg = test.calls[0].args[0]
        builder = make_module({"name": arg.name, "package": arg.package, "code": "c"},
                              lambda node, code=arg.code: np.frombuffer(code, np.uint8))
        try:
            value = namespace[ex.CHECK](builder)
        except Exception:  # noqa: BLE001 - an exception rejects the builder
            verdicts[test.id] = Verdict(False, f"{ex.CHECK} raised an exception", raised=True)
        else:
            verdicts[test.id] = Verdict(True, value=ex._judge_builder([CallResult(value)]))
    entries = ex._report(tests, verdicts)
    return part_2({"tests": entries})


@pytest.fixture(scope="module")
def careful():
    """The solution's check: whole decode loops up to 32 tokens, both programs, every step compared
    bit for bit with an integer reference built from scales and parameters of its own."""
    return grade_file(ROOT / "solutions" / "mutants.ipynb", limits=LIMITS)


def test_a_careful_whole_loop_check_with_its_own_scales_scores_everything(careful):
    assert careful["status"] == "ok"
    assert careful["score"] == careful["max_score"] == 2 * len(ex.PREDICTED) + len(ex.chaffs())
    valid, caught = part_2(careful)
    assert valid["status"] == "passed" and caught["score"] == caught["max_score"] == len(ex.chaffs())
    assert caught["output"] == f"caught {len(ex.chaffs())} of {len(ex.chaffs())}"
    assert len(careful["runs"]) == 1 + len(ex.WHEATS) + len(ex.chaffs())     # a sandbox per builder


def test_the_course_checks_catch_less_than_the_careful_check(careful):
    """All four of the course's checks together: valid, but the hidden set has mistakes they all miss."""
    valid, caught = judged_here(COURSE_CHECKS)
    assert valid["status"] == "passed"
    assert 23 <= caught["score"] < part_2(careful)[1]["score"]
    assert caught["output"].startswith(f"caught {caught['score']:g} of {len(ex.chaffs())}")
    for kind in (ex.SMALL, ex.LONG, ex.CALIBRATION):             # what the course's checks miss, by kind
        assert f": {kind}. {ex.HINTS[kind]}" in caught["output"]
    assert not any(c.label in caught["output"] for c in ex.chaffs())   # kinds, never the mutant


def test_a_check_that_accepts_everything_scores_zero():
    valid, caught = judged_here(ACCEPT_ALL)
    assert valid["status"] == "passed" and caught["score"] == 0
    assert caught["output"].startswith(f"caught 0 of {len(ex.chaffs())}")


def test_a_check_that_rejects_everything_scores_zero_and_is_stopped_early(monkeypatch):
    """The builders run in an order drawn for each grading (fixed here); once a correct builder
    is rejected, no more mutants are run, and the other correct builders stop once the unchanged
    one is rejected."""
    monkeypatch.setattr(grading, "_chance", random.Random(3))
    seen = []
    result = grade_bytes(textwrap.dedent(REJECT_ALL).encode(), "submission.py", "mutants", limits=LIMITS,
                         progress=lambda done, total: seen.append((done, total)))
    valid, caught = part_2(result)
    assert valid["status"] == "failed" and caught["score"] == 0
    assert "your check rejects a correct builder" in valid["output"]
    assert f"- {ex.UNCHANGED}: rejected" in valid["output"]
    assert 2 <= len(result["runs"]) <= 1 + len(ex.WHEATS)      # part 1 and the first builders only
    # the progress counts the tests no longer run as done: it reaches its total, and only goes forward
    total = len(registry.tests("mutants"))
    assert seen[0] == (0, total) and seen[-1] == (total, total)
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)


@pytest.mark.parametrize("how", sorted(TEXT_FLAGGERS))
def test_a_check_that_flags_any_change_of_program_text_scores_zero(how):
    """Graded in the sandbox for the bytecode (the sandbox's builder is the one compiled here), in
    this process for the instructions."""
    digest, source = TEXT_FLAGGERS[how]
    source = textwrap.dedent(source).replace("DIGEST", digest(build(ex.WHEATS[0])))
    if how == "bytecode":
        valid, caught = part_2(grade_text(source, "mutants", limits=LIMITS))
    else:
        valid, caught = judged_here(source)
    assert caught["score"] == 0 and valid["status"] == "failed"
    assert f"- {ex.UNCHANGED}:" not in valid["output"]           # it does accept the course's builder ...
    for kind in (ex.REORDERED, ex.TILES, ex.NEVER_READ, ex.SPLIT):   # ... and no change of its text
        assert f"- {kind}: rejected" in valid["output"]
    assert f"0 of {len(ex.chaffs())} points" in caught["output"]


def test_nothing_of_the_submission_reaches_the_result():
    source = ACCEPT_ALL.replace("return True", "print('SPOKEN-WORDS'); raise ValueError('SECRET-WORDS')")
    result = grade_text(source.replace("return {}", "print('SPOKEN-WORDS'); return {}"), "mutants", limits=LIMITS)
    text = json.dumps(result)
    assert "SECRET-WORDS" not in text and "SPOKEN-WORDS" not in text
    assert "not kept" in result["submission_output"]
    assert part_2(result)[0]["status"] == "failed"         # an exception rejects: here, the correct builder


# ------------------------------------------------------------------ the public checks, and the CLI

def test_the_public_checks_run_in_the_sandbox_on_both_functions():
    """`graders check` runs the exercise's public checks on the submission's two functions, with
    the whole of ga2 there (the public checks are public: they build their mutants from ga2.attn)."""
    from graders import check_file
    report = check_file(ROOT / "solutions" / "mutants.ipynb")
    assert report["problem"] is None, report["problem"]
    assert [o["status"] for o in report["outcomes"]] == ["passed"] * 5
    untouched = check_file(ROOT / "exercises" / "mutants.ipynb")
    assert [o["status"] for o in untouched["outcomes"]] == ["not implemented"] * 5


def test_the_public_checks_name_what_a_wrong_check_does():
    from public_checks import evaluate
    namespace = {}
    exec(textwrap.dedent(COURSE_CHECKS), namespace)
    outcomes = {o.description: o for o in evaluate("mutants", namespace["predict_catches"], namespace[ex.CHECK])}
    assert outcomes["check_builder accepts the course's builder (ga2.attn)"].status == "passed"
    assert outcomes["check_builder rejects three of chapter 11's mutants"].status == "passed"
    assert "no prediction for 9 of the 9 mutants" in outcomes[
        "predict_catches gives a set of checks for every listed mutant"].message
    exec(textwrap.dedent(REJECT_ALL), namespace)
    outcomes = {o.description: o for o in evaluate("mutants", namespace["predict_catches"], namespace[ex.CHECK])}
    assert "rejects the course's own builder" in outcomes["check_builder accepts the course's builder (ga2.attn)"].message


def test_the_public_checks_say_when_the_builder_cannot_run_yet(monkeypatch):
    """In a learner's copy the builder runs only once their requantizer and attention tail are in."""
    from public_checks import evaluate
    import ga2.attn

    def starter(*args, **kwargs):
        raise NotImplementedError("ga2.attn.attention_tail is the exercise attention_tail of chapter 10")
    monkeypatch.setattr(ga2.attn, "attention_tail", starter)
    namespace = {}
    exec(textwrap.dedent(ACCEPT_ALL), namespace)
    outcomes = evaluate("mutants", namespace["predict_catches"], namespace[ex.CHECK])
    part_2 = [o for o in outcomes if o.description.startswith("check_builder")]
    assert all(o.status == "failed" and "cannot run in this copy of the course yet" in o.message
               and "attention_tail" in o.message for o in part_2)


def test_the_list_shows_the_parts(capsys):
    from graders.cli import main
    assert main(["list"]) == 0
    line = next(l for l in capsys.readouterr().out.splitlines() if l.startswith("mutants"))
    parts = len(registry.items("mutants"))
    assert f"{len(registry.tests('mutants'))} tests in {parts} parts" in line
    assert f"{sum(i.points for i in registry.items('mutants')):g} points" in line


def test_the_kept_truth_of_part_1_is_current_and_is_what_the_checks_do():
    """``mutants_truth.json`` (rerun ``python -m graders.exercises.mutants`` after changing ga2 or
    the exercise) holds what running the checks gives; a stale one is ignored."""
    stored = ex._stored_truth()
    assert set(stored) == set(ex.PREDICTED), "mutants_truth.json is out of date"
    assert stored == {label: ex.run_truth(label) for label in ex.PREDICTED}


def test_a_stale_kept_truth_is_ignored(monkeypatch):
    monkeypatch.setattr(ex, "truth_key", lambda: "a hash of another ga2")
    assert ex._stored_truth() == {}
