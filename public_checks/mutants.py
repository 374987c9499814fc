"""Public checks for the exercise ``mutants`` (chapter 11): ``predict_catches`` and ``check_builder``.

Part 1: the prediction has the right form (a set of checks among "b", "c", "d" for every mutant
the notebook lists), and agrees with chapter 11's table for the three mutants taken from it (the
stored values in ``data/mutants.json``).  The six new mutants are left to the hidden tests.

Part 2: the learner's check accepts the course's builder and chapter 11's two equivalent
changes, and rejects three of chapter 11's mutants.  Each variant is made from the builder
module itself (``ga2.checks.edit_programs`` and ``edit_params``: a copy of ``ga2.attn`` whose
programs or requantizer parameters pass through an edit), never from its text, so the checks
work in a learner's copy, where ``ga2.attn``'s attention tail is the learner's own answer.  The
hidden tests judge many more builders, each in a sandbox of its own.
"""
from ga2.checks import edit_params, edit_programs, with_fields
from ga2.plan import DM, D, EX_KC, EX_VC, SP_Q8, SP_WQ, SP_WV

from ._data import load

DATA = load("mutants")
LETTERS = ("b", "c", "d")


# ---------------------------------------------------------------- part 1

def _letters(value):
    """The prediction as a set of letters, or None when it is not a set of "b", "c", "d"."""
    if not isinstance(value, (set, frozenset, list, tuple)) or not all(isinstance(i, str) for i in value):
        return None
    letters = {item.strip().strip("()").strip().lower() for item in value}
    return letters if letters <= set(LETTERS) else None


def check_prediction_form(predict_catches, check_builder):
    got = predict_catches()
    assert isinstance(got, dict), f"predict_catches should return a dict, not a {type(got).__name__}"
    missing = [label for label in DATA["labels"] if label not in got]
    assert not missing, (f"no prediction for {len(missing)} of the {len(DATA['labels'])} mutants, e.g. "
                         f"{missing[0]!r} (use each label exactly as the notebook lists it)")
    for label in DATA["labels"]:
        assert _letters(got[label]) is not None, (
            f"the prediction for {label!r} should be a set of letters among 'b', 'c', 'd' (set() for none), "
            f"not {got[label]!r}")


def check_prediction_of_the_chapter_table(predict_catches, check_builder):
    got = predict_catches()
    assert isinstance(got, dict), f"predict_catches should return a dict, not a {type(got).__name__}"
    for label, caught in DATA["table"].items():
        assert label in got, f"there is no prediction for {label!r}"
        guess = _letters(got[label])
        assert guess == set(caught), (
            f"for {label!r} chapter 11's table says the checks {', '.join(caught) or 'none'} catch it; "
            f"your prediction is {sorted(guess) if guess is not None else got[label]!r}")


# ---------------------------------------------------------------- part 2

def _course_builder():
    """``ga2.attn``, when it can run: in a learner's copy its attention tail (chapter 10's
    exercise) and the requantizer (chapter 9's) are the learner's own answers, installed."""
    import ga2
    import ga2.attn as builder
    try:
        builder.sequence(builder.make_example(2, 0))
    except NotImplementedError:
        parts = getattr(ga2, "missing", lambda: [])() or ["requant", "attention_tail"]
        raise AssertionError(
            "the course's program builder (ga2.attn) cannot run in this copy of the course yet: it needs "
            f"GA-2's {' and '.join(parts)}, which are still starters (the exercises requant, chapter 9, and "
            "attention_tail, chapter 10). Part 2 needs the builder: finish those exercises, install your "
            'answers (ga2.install_from("requant.ipynb"), ga2.install_from("attention_tail.ipynb")) and run '
            "this cell again") from None
    return builder


def _is_score_tile(ins):
    return ins.op == "MM" and ins.A == SP_Q8                   # q times 4 key rows read as columns


def _is_projection(ins):
    return ins.op == "MM" and SP_WQ <= ins.B < SP_WV + DM * D  # a tile of x W


def _equivalents(builder):
    return {
        DATA["equivalent"][0]: edit_programs(builder, lambda L, variant, prog: [
            with_fields(ins, N=4) if _is_score_tile(ins) else ins for ins in prog]),
        DATA["equivalent"][1]: edit_programs(builder, lambda L, variant, prog: [
            with_fields(ins, M=4) if _is_projection(ins) else ins for ins in prog]),
    }


def _mutants(builder):
    return {
        DATA["mutants"][0]: edit_programs(builder, lambda L, variant, prog: [
            with_fields(ins, tb=0) if _is_score_tile(ins) else ins for ins in prog]),
        DATA["mutants"][1]: edit_programs(builder, lambda L, variant, prog: [
            ins for ins in prog if not (ins.op == "ST" and EX_KC <= ins.dst < EX_VC)]),
        # 2^2 = sqrt(16): the scores' multiplier without its 1/sqrt(d), exactly
        DATA["mutants"][2]: edit_params(builder, lambda P: {**P, "scores": (P["scores"][0], P["scores"][1] - 2)}),
    }


def _verdict(check_builder, builder):
    """True, False, or what else the learner's check returned (an exception is a rejection)."""
    try:
        verdict = check_builder(builder)
    except NotImplementedError:
        raise
    except Exception:  # noqa: BLE001 - an exception rejects the builder, as in the hidden tests
        return False
    if verdict is True or verdict is False or type(verdict).__name__ == "bool_":
        return bool(verdict)
    raise AssertionError(f"check_builder should return True or False, not a {type(verdict).__name__}")


def check_accepts_the_course_builder(predict_catches, check_builder):
    assert _verdict(check_builder, _course_builder()) is True, (
        "your check rejects the course's own builder (ga2.attn): a check must accept a correct builder")


def check_accepts_equivalent_changes(predict_catches, check_builder):
    for label, builder in _equivalents(_course_builder()).items():
        assert _verdict(check_builder, builder) is True, (
            f"your check rejects a correct builder: {label}. Chapter 11 shows why this change computes "
            "the same thing")


def check_rejects_chapter_mutants(predict_catches, check_builder):
    for label, builder in _mutants(_course_builder()).items():
        assert _verdict(check_builder, builder) is False, f"your check accepts a mutant: {label}"


CHECKS = [
    ("predict_catches gives a set of checks for every listed mutant", check_prediction_form),
    ("the predictions for the three mutants of chapter 11's table match it", check_prediction_of_the_chapter_table),
    ("check_builder accepts the course's builder (ga2.attn)", check_accepts_the_course_builder),
    ("check_builder accepts chapter 11's two equivalent changes", check_accepts_equivalent_changes),
    ("check_builder rejects three of chapter 11's mutants", check_rejects_chapter_mutants),
]
