"""Hidden tests of the ``mutants`` exercise (chapter 11): testing the tests of the program builder.

Part 1, ``predict_catches()``: a dict from each mutant label the notebook lists to the set of
checks among "b", "c", "d" that catch it.  Graded label by label against what the course's
checks really do to that mutant: the grader applies the mutant to ``ga2/attn.py`` and runs
``ga2``'s checks on it (``ga2.mutants.evaluate``), once per grader process, on first use, or
reads the outcome kept in ``mutants_truth.json`` when its hash of ga2 and of this module is
current (``write_truth_table``): change the builder or a check and the expected answers follow.

Part 2, ``check_builder(builder) -> bool``: graded the way Examplar grades a test suite, with
wheats and chaffs.  Every builder is ``ga2/attn.py`` with a change applied here and compiled
here (no docstrings, a file name that names no file), sent to the sandbox as compiled code and
made into a module there (``registry.Module``): the learner's check gets a module with
``ga2.attn``'s interface and no source text.  Each builder is judged in a sandbox of its own,
with ``ga2``'s machine, arithmetic, instruction set, memory plan and checks importable, and
neither the builder itself (``ga2.attn``) nor ``ga2.mutants``.

- Wheats (``WHEATS``): the builder unchanged, the chapter's two equivalent changes, and more
  changes of program text that compute the same thing (independent instructions reordered,
  tiles in another order, values computed and never read, the same arithmetic written
  another way, fields that have no effect, an instruction split or two merged, the same
  instructions built by other code).  The check must accept every one (return True);
  rejecting one, or running past its time limit on one, makes part 2 worth zero, and the
  feedback names the kind of change.  The unchanged builder runs first and the mutants only
  once every wheat has been accepted (phases).
- Chaffs (``CHAFFS``): the chapter's 23 mutants and 16 more, among them mistakes that all four
  of the course's checks miss (requantizers half a percent off, the weights' 1.0 taken as 128,
  scales calibrated on the wrong data, mistakes that show only past 24 tokens).  A point for
  each one the check rejects (False, or an exception); the feedback says "caught X of N" and
  names each kind of bug it missed, never the mutant.

Nothing the submission prints or raises reaches the feedback (``quiet``): an exception counts
as a rejection, and its text is never read.
"""
from __future__ import annotations

import functools
import hashlib
import json
import marshal
import threading
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..checks import Fail
from .. import registry
from ..registry import Call, Exercise, Item, Lib, Module, Test, package_dir
from ..results import test_entry

PREDICT, CHECK = "predict_catches", "check_builder"
CHECKS = ("b", "c", "d")
PREDICT_POINTS = 2
BUILDER_NAME = "ga2.builder_under_test"   # every builder the check sees has this name, wheat or chaff
BUILDER_FILE = "<a GA-2 program builder>"  # the compiled code's file name: no file, no linecache entry
HIDDEN = ("attn", "mutants", "study", "report", "rtl", "__main__")   # not in the sandbox's ga2


@dataclass(frozen=True)
class Change:
    """A builder: ``ga2/attn.py`` with each ``(old, new)`` of ``edits`` applied (each ``old``
    must occur exactly once).  ``kind`` is what the feedback may say about it."""

    label: str
    kind: str
    edits: tuple = ()


class BadAnchor(ValueError):
    """An edit's text does not occur exactly once in the builder (the builder changed)."""


# ------------------------------------------------------------------------------ the wheats

UNCHANGED = "the course's builder itself, unchanged"
NEVER_READ = "values computed and never read"
REORDERED = "independent instructions reordered"
TILES = "tiles computed in another order"
ARITHMETIC = "the same arithmetic written another way"
NO_EFFECT = "an instruction field that has no effect"
SPLIT = "an instruction split in two, or two merged into one"
OTHER_CODE = "the same instructions built by other code"

WHEATS: tuple[Change, ...] = (
    Change("unchanged", UNCHANGED),
    Change("the last score tile always computes 4 positions", NEVER_READ,
           (("n = min(4, L - 4 * tile)", "n = 4"),)),
    Change("the last projection block always computes 4 rows", NEVER_READ,
           (("block_rows = min(4, rows - 4 * block)", "block_rows = 4"),)),
    Change("the cached program also projects q into the unused accumulators", NEVER_READ,
           (("    prog += project(SP_X, SP_WV, SP_VN, rows=1, acc_stride=4)\n    prog += [\n",
             "    prog += project(SP_X, SP_WV, SP_VN, rows=1, acc_stride=4)\n"
             "    prog += project(SP_X, SP_WQ, SP_ACC, rows=1, acc_stride=4)\n    prog += [\n"),)),
    Change("the value is appended before the key", REORDERED,
           (('        build("ST", src=SP_KC + new_row, dst=EX_KC + new_row, len=D),\n'
             '        build("ST", src=SP_VC + new_row, dst=EX_VC + new_row, len=D),\n',
             '        build("ST", src=SP_VC + new_row, dst=EX_VC + new_row, len=D),\n'
             '        build("ST", src=SP_KC + new_row, dst=EX_KC + new_row, len=D),\n'),)),
    Change("the new token is projected v, k, q", REORDERED,
           (("    prog += project(SP_X, SP_WQ, SP_Q, rows=1, acc_stride=4)\n"
             "    prog += project(SP_X, SP_WK, SP_KN, rows=1, acc_stride=4)\n"
             "    prog += project(SP_X, SP_WV, SP_VN, rows=1, acc_stride=4)\n",
             "    prog += project(SP_X, SP_WV, SP_VN, rows=1, acc_stride=4)\n"
             "    prog += project(SP_X, SP_WK, SP_KN, rows=1, acc_stride=4)\n"
             "    prog += project(SP_X, SP_WQ, SP_Q, rows=1, acc_stride=4)\n"),)),
    Change("the score tiles run from the last to the first", TILES,
           (("for tile in range(_ceil_div(L, 4)):", "for tile in reversed(range(_ceil_div(L, 4))):"),)),
    Change("the projection tiles run column by column", TILES,
           (("    for block in range(_ceil_div(rows, 4)):\n        block_rows = min(4, rows - 4 * block)\n"
             "        for col in range(D // 4):\n",
             "    for col in range(D // 4):\n        for block in range(_ceil_div(rows, 4)):\n"
             "            block_rows = min(4, rows - 4 * block)\n"),)),
    Change("the scores' multiplier is grouped as s_q s_k (16 / sqrt(d))", ARITHMETIC,
           (('s["q"] * s["k"] / math.sqrt(D) * SOFTMAX_INPUT_ONE', 's["q"] * s["k"] * (SOFTMAX_INPUT_ONE / math.sqrt(D))'),)),
    Change("the weights' requantizer is written as its constant", ARITHMETIC,
           (("mantissa_shift(WEIGHT_ONE / PROB_ONE)", "(16646144, 33)"),)),
    Change("the score tiles' output stride is d (they have one row)", NO_EFFECT,
           (("M=1, K=D, N=n, tb=1, lda=D, ldb=D, ldc=4)", "M=1, K=D, N=n, tb=1, lda=D, ldb=D, ldc=D)"),)),
    Change("the output is stored in two halves", SPLIT,
           (('        build("ST", src=SP_O8, dst=EX_OUT, len=D),\n',
             '        build("ST", src=SP_O8, dst=EX_OUT, len=D // 2),\n'
             '        build("ST", src=SP_O8 + D // 2, dst=EX_OUT + D // 2, len=D // 2),\n'),)),
    Change("the key and value caches are loaded by one LD", SPLIT,
           (('            build("LD", dst=SP_KC, src=EX_KC, len=(L - 1) * D),\n'
             '            build("LD", dst=SP_VC, src=EX_VC, len=(L - 1) * D),\n',
             '            build("LD", dst=SP_KC, src=EX_KC, len=EX_VC - EX_KC + (L - 1) * D),\n'),)),
    Change("the tile count is computed as (a + b - 1) // b", OTHER_CODE,
           (("    return -(-a // b)\n", "    return (a + b - 1) // b\n"),)),
)

# ------------------------------------------------------------------------------ the chaffs

SCALE = "wrong requantizer parameters"
SMALL = "requantizers a few percent off"
CALIBRATION = "tensor scales calibrated on the wrong data"
LONG = "mistakes that show only in long contexts"
CACHE = "the cache protocol"
TILING = "tiles, strides and transposes"
PLUMBING = "buffers, weights and lengths"

HINTS = {
    SCALE: "An integer reference that shares the builder's rq_params agrees with it; derive the "
           "requantizer parameters yourself, from the tensor scales.",
    SMALL: "They hide in the quantization noise of an accuracy bound; only an exact comparison with "
           "parameters of your own sees them.",
    CALIBRATION: "Each tensor's scale stands for max|v| / 127 of that tensor: does your check look at the "
                 "example's scales, or only use them?",
    LONG: "The memory plan holds 32 tokens; a check that stops earlier cannot see what goes wrong after.",
    CACHE: "What a step appends matters only at the next step: check every step of a whole decode loop.",
    TILING: "Compare every output value of every step exactly.",
    PLUMBING: "Compare every value each of the two programs stores in EXT, at every step.",
}

# The chapter's 23 mutants (``ga2.mutants.MUTANTS``), by label: what kind of bug each is.
CHAPTER_KINDS = {
    "scores: the 1/sqrt(d) factor is left out": SCALE,
    "scores: the factor 16 (Q4.4 input of the softmax) is left out": SCALE,
    "weights: the factor 127 is left out": SCALE,
    "output: the scale leaves out the 127": SCALE,
    "output: uses the key scale instead of the value scale": SCALE,
    "q projection is requantized with the key weights' scale": SCALE,
    "q requantization scale is 3% too large": SMALL,
    "output requantization scale is 2% too large": SMALL,
    "keys are read without the transpose": TILING,
    "values are read transposed": TILING,
    "the value matrix stride is 4 instead of d": TILING,
    "score tiles step through the keys by 4 words, not 4 rows": TILING,
    "the new key is written one row past the cache end": CACHE,
    "the new key is never appended to the cache": CACHE,
    "the new value is appended to the key cache": CACHE,
    "the key cache load is one row short": CACHE,
    "the new token's hidden state is read from row 0": PLUMBING,
    "the softmax covers one position too few": PLUMBING,
    "the weights are requantized with the scores' parameters": SCALE,
    "the q projection uses the K weights": PLUMBING,
    "recompute: V is projected with the K weights": PLUMBING,
    "the output requantization covers 8 of 16 values": PLUMBING,
    "the output is stored from the int32 accumulators": PLUMBING,
}

NEW_CHAFFS: tuple[Change, ...] = (
    Change("the scores are multiplied by sqrt(d) instead of divided", SCALE,
           (("/ math.sqrt(D) * SOFTMAX_INPUT_ONE)", "* math.sqrt(D) * SOFTMAX_INPUT_ONE)"),)),
    Change("the new value is requantized with the key's parameters", SCALE,
           (('requantize(dst=SP_VC + new_row, src=SP_VN, n=D, params=P["v"])',
             'requantize(dst=SP_VC + new_row, src=SP_VN, n=D, params=P["k"])'),)),
    Change("the scores' requantizer applies a ReLU", SCALE,
           (('requantize(SP_S8, SP_S, L, P["scores"])',
             'build("RQ", dst=SP_S8, src=SP_S, len=L, m=P["scores"][0], s=P["scores"][1], relu=1)'),)),
    Change("the weights are requantized as if 1.0 were 128", SMALL,
           (("mantissa_shift(WEIGHT_ONE / PROB_ONE)", "mantissa_shift((WEIGHT_ONE + 1) / PROB_ONE)"),)),
    Change("the output requantization scale is 0.5% too large", SMALL,
           (('mantissa_shift(s["v"] / (WEIGHT_ONE * s["o"]))', 'mantissa_shift(1.005 * s["v"] / (WEIGHT_ONE * s["o"]))'),)),
    Change("the key requantization scale is 0.5% too small", SMALL,
           (('mantissa_shift(s["x"] * s["wk"] / s["k"])', 'mantissa_shift(0.995 * s["x"] * s["wk"] / s["k"])'),)),
    Change("the value scale is calibrated on the newest token only", CALIBRATION,
           (('"v": scale_for(example["V"])', '"v": scale_for(example["V"][-1])'),)),
    Change("the output scale is calibrated on the values instead of the output", CALIBRATION,
           (('"o": scale_for(example["out_float"])', '"o": scale_for(example["V"])'),)),
    Change("the score loop stops after 6 tiles (24 positions)", LONG,
           (("for tile in range(_ceil_div(L, 4)):", "for tile in range(min(_ceil_div(L, 4), 6)):"),)),
    Change("the weighted sum reads at most 24 weights", LONG,
           (("M=1, K=L, N=4", "M=1, K=min(L, 24), N=4"),)),
    Change("the cached program loads at most 24 rows of the key cache", LONG,
           (("src=EX_KC, len=(L - 1) * D)", "src=EX_KC, len=min(L - 1, 24) * D)"),)),
    Change("the new value is appended one row early", CACHE,
           (("dst=EX_VC + new_row,", "dst=EX_VC + new_row - D,"),)),
    Change("the output column tiles step by one column instead of four", TILING,
           (("B=SP_VC + 4 * col,", "B=SP_VC + col,"),)),
    Change("the softmax reads the int32 scores", PLUMBING,
           (('build("SM", dst=SP_P, src=SP_S8, len=L)', 'build("SM", dst=SP_P, src=SP_S, len=L)'),)),
    Change("the output is stored one word short (15 of 16 values)", PLUMBING,
           (('build("ST", src=SP_O8, dst=EX_OUT, len=D)', 'build("ST", src=SP_O8, dst=EX_OUT, len=D - 1)'),)),
    Change("recompute: the query is projected from row 0", PLUMBING,
           (("project(SP_X + (L - 1) * DM, SP_WQ, SP_Q,", "project(SP_X, SP_WQ, SP_Q,"),)),
)

#: The labels part 1 asks about, in the notebook's order: three of the chapter's table, six new.
PREDICTED = (
    "scores: the 1/sqrt(d) factor is left out",
    "q requantization scale is 3% too large",
    "the output is stored from the int32 accumulators",
    "the scores are multiplied by sqrt(d) instead of divided",
    "the weights are requantized as if 1.0 were 128",
    "the score loop stops after 6 tiles (24 positions)",
    "the value scale is calibrated on the newest token only",
    "the output is stored one word short (15 of 16 values)",
    "the new value is requantized with the key's parameters",
)


@functools.lru_cache(maxsize=1)
def chapter_chaffs() -> tuple[Change, ...]:
    """The chapter's 23 mutants, as ``ga2.mutants`` defines them, with their kinds."""
    from ga2.mutants import MUTANTS
    return tuple(Change(m.label, CHAPTER_KINDS[m.label], ((m.anchor, m.replacement),)) for m in MUTANTS)


def chaffs() -> tuple[Change, ...]:
    return chapter_chaffs() + NEW_CHAFFS


# ------------------------------------------------------------------------------ building them

def builder_source() -> str:
    """The text of the course's program builder, ``ga2/attn.py``, as it is now."""
    return (package_dir("ga2") / "attn.py").read_text(encoding="utf-8")


def apply(change: Change, source: str | None = None) -> str:
    """The builder's text with ``change`` applied (``BadAnchor`` unless each edit's text occurs once)."""
    text = builder_source() if source is None else source
    for old, new in change.edits:
        count = text.count(old)
        if count != 1:
            raise BadAnchor(f"{change.label!r}: {old!r} occurs {count} times in ga2/attn.py (must be once)")
        text = text.replace(old, new)
    return text


def compiled(change: Change, source: str | None = None) -> bytes:
    """The changed builder's module body, compiled as the sandbox gets it: ``marshal`` bytes of a
    code object without docstrings, whose file name names no file."""
    code = compile(apply(change, source), BUILDER_FILE, "exec", dont_inherit=True, optimize=2)
    return marshal.dumps(code)


def as_argument(change: Change, source: str | None = None) -> Module:
    return Module(BUILDER_NAME, compiled(change, source), package="ga2")


# ------------------------------------------------------------------------------ part 1

_truth_lock = threading.Lock()
_truth: dict[str, frozenset] = {}

# What the checks catch is found by running them: about 8 s of CPU, once per grader process.  Its
# outcome is kept next to this module with the hash of everything it depends on (ga2's modules
# and this one); a table whose hash is not the current one is ignored and the checks are run.
TRUTH_TABLE = Path(__file__).with_name("mutants_truth.json")


def truth_key() -> str:
    """The hash of what decides the truth: every module of ga2 and this module."""
    digest = hashlib.sha256()
    root = package_dir("ga2")
    for path in sorted(root.rglob("*.py")):
        if "__pycache__" not in path.parts:
            digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    digest.update(Path(__file__).read_bytes())
    return digest.hexdigest()


def _stored_truth() -> dict[str, frozenset]:
    try:
        table = json.loads(TRUTH_TABLE.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(table, dict) or table.get("key") != truth_key():
        return {}
    return {label: frozenset(letters) for label, letters in table.get("truth", {}).items()}


def run_truth(label: str) -> frozenset:
    """The checks among b, c, d that catch the mutant ``label``, found by running them."""
    from ga2.mutants import MUTANTS, Mutant, evaluate
    known = {m.label: m for m in MUTANTS}
    if label in known:
        mutant = known[label]
    else:
        change = next(c for c in NEW_CHAFFS if c.label == label)
        (old, new), = change.edits
        mutant = Mutant(label, old, new)
    result = evaluate(mutant, equivalent=False)
    return frozenset(k for k in CHECKS if result.caught[k])


def write_truth_table() -> Path:
    """Run the checks on every mutant part 1 asks about and keep the outcome (``TRUTH_TABLE``)."""
    table = {"key": truth_key(), "truth": {label: sorted(run_truth(label)) for label in PREDICTED}}
    TRUTH_TABLE.write_text(json.dumps(table, indent=1) + "\n", encoding="utf-8")
    return TRUTH_TABLE


def truth(label: str) -> frozenset:
    """The checks among b, c, d that catch the mutant ``label``: the kept outcome of running them
    when it is current, else found by running them (once per process)."""
    with _truth_lock:
        if not _truth:
            _truth.update(_stored_truth())
        if label not in _truth:
            _truth[label] = run_truth(label)
        return _truth[label]


def _as_checks(value) -> frozenset | str:
    """A prediction as a set of check letters, or what is wrong with its form."""
    if isinstance(value, str):
        return "is a string; write a set of letters, like {'b', 'd'}, or set() for none"
    if not isinstance(value, (set, frozenset, list, tuple)):
        return "is not a set; write a set of letters among 'b', 'c', 'd', like {'b', 'd'}, or set() for none"
    letters = set()
    for item in value:
        letter = item.strip().strip("()").strip().lower() if isinstance(item, str) else None
        if letter not in CHECKS:
            return "holds something other than the letters 'b', 'c' and 'd'"
        letters.add(letter)
    return frozenset(letters)


def _judge_predictions(results) -> dict:
    """{label: (right, message)} for every label of part 1 (what the report turns into entries)."""
    value = results[0].value
    if not isinstance(value, dict):
        raise Fail(f"{PREDICT} must return a dict from each mutant's label to the set of checks that "
                   "catch it, like {'...': {'b', 'd'}}; it returned something else")
    verdicts = {}
    for label in PREDICTED:
        if label not in value:
            verdicts[label] = (False, "no prediction for this mutant: the dict needs its label as a key, "
                                      "exactly as the notebook writes it")
            continue
        guess = _as_checks(value[label])
        if isinstance(guess, str):
            verdicts[label] = (False, f"the prediction for this mutant {guess}")
            continue
        right = truth(label)
        wrong_in, left_out = len(guess - right), len(right - guess)
        if not wrong_in and not left_out:
            verdicts[label] = (True, "")
            continue
        # What is wrong, never how many: a count, set beside the size of the set, is the answer.
        parts = []
        if wrong_in:
            parts.append("names at least one check that does not catch it")
        if left_out:
            parts.append("leaves out at least one that does")
        verdicts[label] = (False, "not what the checks do: your set " + " and ".join(parts) + ". Ask what each "
                                  "check shares with the builder, and which lengths and examples it runs")
    return verdicts


# ------------------------------------------------------------------------------ part 2

ACCEPTED, REJECTED, NOT_A_BOOL, TODO = "accepted", "rejected", "not a bool", "not implemented"


def _judge_builder(results) -> str:
    """What the check said of one builder: accepted (True), rejected (False) or neither."""
    value = results[0].value
    if value is True or value is False:
        return ACCEPTED if value else REJECTED
    if isinstance(value, np.bool_):                  # np.all(...) and friends: a numpy bool is a bool
        return ACCEPTED if bool(value) else REJECTED
    return NOT_A_BOOL


def _outcome(verdict) -> str:
    """accepted, rejected (False or an exception), not a bool, timeout, crashed or not run."""
    if verdict.passed:
        return verdict.value
    if verdict.raised:
        return TODO if "is not implemented yet" in verdict.message else REJECTED
    if verdict.message.startswith(("not run", "not counted")):
        return "not run"
    if verdict.trouble is not None:
        return verdict.trouble.value              # "timeout" or "crashed"
    return NOT_A_BOOL                             # what came back could not be read


def _builder_tests(tests) -> tuple[list, list]:
    wheats = [t for t in tests if t.calls[0].fn == CHECK and t.phase in (1, 2)]
    mutants = [t for t in tests if t.calls[0].fn == CHECK and t.phase == 3]
    return wheats, mutants


def _change_of(test) -> Change:
    """The builder a part-2 test passes: "correct builder 3" is ``WHEATS[2]``, "mutant 5" ``chaffs()[4]``."""
    number = int(test.name.rsplit(" ", 1)[1])
    return (WHEATS if test.name.startswith("correct builder") else chaffs())[number - 1]


def _kind_of(test) -> str:
    return _change_of(test).kind


def _proceed(phase: int, verdicts: dict) -> str | None:
    """The other wheats run once the unchanged builder is accepted, the mutants once every wheat is."""
    tests = _tests_by_id()
    refused = [tid for tid, v in verdicts.items() if tid in tests and tests[tid].phase in (1, 2)
               and _outcome(v) != ACCEPTED]
    if refused:
        return "your check does not accept every correct builder, so part 2 counts nothing yet"
    return None


@functools.lru_cache(maxsize=1)
def _tests_by_id() -> dict:
    return {t.id: t for t in registry.tests("mutants")}


def _why_not_valid(wheats, verdicts) -> list[str]:
    """A line per way the check failed to accept correct builders, with the kinds of change."""
    kinds: dict[str, list[str]] = {}
    for test in wheats:
        verdict = verdicts[test.id]
        outcome = _outcome(verdict)
        if outcome in (ACCEPTED, "not run"):
            continue
        what = {REJECTED: "rejected (False, or an exception)",
                NOT_A_BOOL: f"neither accepted nor rejected: {CHECK} must return True or False",
                "timeout": f"no answer in time: {verdict.message}",
                }.get(outcome, f"no answer: {verdict.message}")
        kinds.setdefault(what, [])
        if _kind_of(test) not in kinds[what]:
            kinds[what].append(_kind_of(test))
    every = {_kind_of(t) for t in wheats}
    if len(kinds) == 1 and len(next(iter(kinds.values()))) == len(every):    # the same for all
        return [f"- all of them: {next(iter(kinds))}"]
    return [f"- {kind}: {what}" for what, found in kinds.items() for kind in found]


def _report(tests, verdicts) -> list[dict]:
    """The result's entries: one per prediction of part 1, then part 2's two (accepts every
    correct builder; rejects the hidden mutants)."""
    wheats, mutants = _builder_tests(tests)
    todo = any(_outcome(verdicts[t.id]) == TODO for t in wheats)
    valid, accepts = _accepts_entry(wheats, verdicts, todo)
    return _prediction_entries(tests, verdicts) + [accepts, _rejects_entry(mutants, verdicts, valid, todo)]


def _prediction_entries(tests, verdicts) -> list[dict]:
    part1 = next(t for t in tests if t.calls[0].fn == PREDICT)
    verdict = verdicts[part1.id]
    judged = verdict.value if verdict.passed and isinstance(verdict.value, dict) else None
    if judged is None:
        return [test_entry(f"part 1: {label}", PREDICT_POINTS, False, verdict.message or "not graded")
                for label in PREDICTED]
    return [test_entry(f"part 1: {label}", PREDICT_POINTS, *judged[label]) for label in PREDICTED]


def _accepts_entry(wheats, verdicts, todo: bool) -> tuple[bool, dict]:
    """Part 2's first entry: whether the check accepts every correct builder, and the entry that
    says so (or which builders it did not accept)."""
    problems = _why_not_valid(wheats, verdicts)
    valid = not problems and all(_outcome(verdicts[t.id]) == ACCEPTED for t in wheats)
    if not valid and not problems:      # not run at all (the function is missing, say)
        problems = [f"- all of them: {verdicts[wheats[0].id].message or 'not run'}"]
    header = ("your check rejects a correct builder. A check must accept every builder that computes the "
              "right thing, however its program text reads; the builders it did not accept:")
    if todo:
        header = f"{CHECK} is not implemented yet, so it accepts no builder:"
    return valid, test_entry(f"part 2: accepts every correct builder ({len(wheats)} of them)", 0, valid,
                             "" if valid else "\n".join([header] + problems))


def _rejects_entry(mutants, verdicts, valid: bool, todo: bool) -> dict:
    """Part 2's second entry: a point per mutant rejected, counted only for a valid check."""
    # a NotImplementedError is an exception too: on a mutant it rejects it
    outcomes = [(REJECTED if o == TODO else o, _kind_of(t))
                for o, t in ((_outcome(verdicts[t.id]), t) for t in mutants)]
    caught = sum(o == REJECTED for o, _ in outcomes)
    if not valid:
        message = (f"0 of {len(mutants)} points: part 2 counts the mutants only for a check that accepts every "
                   "correct builder (see the entry above)")
        if todo:
            message = f"{CHECK} is not implemented yet: write your answer in the starter cell; " + message
        score = 0
    else:
        message, score = "\n".join(_mutant_lines(mutants, verdicts, outcomes, caught)), caught
    return test_entry(f"part 2: rejects the hidden mutants ({len(mutants)} of them)", len(mutants),
                      valid and caught == len(mutants), message, score=score)


def _mutant_lines(mutants, verdicts, outcomes, caught: int) -> list[str]:
    """What a valid check caught, what it missed by kind (with a hint), and the mutants on which
    it timed out, returned something odd, or was not run."""
    missed = Counter(kind for outcome, kind in outcomes if outcome != REJECTED)
    totals = Counter(kind for _, kind in outcomes)
    lines = [f"caught {caught} of {len(mutants)}"]
    lines += [f"- missed {n} of {totals[kind]}: {kind}. {HINTS[kind]}" for kind, n in missed.items()]
    counts = Counter(outcome for outcome, _ in outcomes)
    if counts["timeout"]:
        slow = counts["timeout"]
        lines.append(f"your check ran past its time limit on {slow} mutant{'s' if slow > 1 else ''} "
                     "(a time-out does not count as rejecting)")
    if counts[NOT_A_BOOL]:
        odd = counts[NOT_A_BOOL]
        lines.append(f"{CHECK} returned something other than True or False for {odd} mutant"
                     f"{'s' if odd > 1 else ''} (only False or an exception counts as rejecting)")
    if counts["not run"]:
        why = next(verdicts[t.id].message for t in mutants if _outcome(verdicts[t.id]) == "not run")
        lines.append(f"{counts['not run']} mutants were not run: {why}")
    return lines


def _items(tests) -> list[Item]:
    wheats, mutants = _builder_tests(tests)
    return ([Item(f"part 1: {label}", PREDICT_POINTS) for label in PREDICTED]
            + [Item(f"part 2: accepts every correct builder ({len(wheats)} of them)", 0),
               Item(f"part 2: rejects the hidden mutants ({len(mutants)} of them)", len(mutants))])


def builder_test(name: str, change: Change, source: str, phase: int) -> Test:
    """The learner's check run on one builder (a correct one or a mutant), alone in its sandbox."""
    return Test(name, 0, [Call(CHECK, (as_argument(change, source),))], _judge_builder, isolated=True, phase=phase)


def make_tests() -> list[Test]:
    """Part 1's predictions, then the check on every correct builder (the unchanged one first, in
    a phase of its own), then on every mutant."""
    source = builder_source()
    return ([Test("part 1: what the checks catch", PREDICT_POINTS * len(PREDICTED), [Call(PREDICT, ())],
                  _judge_predictions)]
            + [builder_test(f"correct builder {k}", change, source, 1 if change.kind == UNCHANGED else 2)
               for k, change in enumerate(WHEATS, start=1)]
            + [builder_test(f"mutant {k}", change, source, 3) for k, change in enumerate(chaffs(), start=1)])


EXERCISE = Exercise(name="mutants", make_tests=make_tests,
                    libs=(Lib("ga2", hide=HIDDEN, parts=("requant",)),), quiet=True, test_seconds=10.0, submission_seconds=300.0,
                    proceed=_proceed, items=_items, report=_report)


if __name__ == "__main__":
    print(f"wrote {write_truth_table()}")
