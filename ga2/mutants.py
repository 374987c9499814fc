"""Testing the tests: which checks notice a one-line mistake in the program builder?

Each mutant replaces one anchored piece of text in the REAL builder, ``ga2/attn.py``,
read at run time.  An anchor must occur exactly once in that file (``BadAnchor``
otherwise), so a refactoring of the builder cannot silently disable a mutant.  The
mutated text is loaded as a fresh module (``ga2._mutant_N``) in a worker process and
its decode loops are run once; the four checks of ``ga2.checks`` are evaluated on that
one run, each including (a):

    (b) accuracy bound 12%     (c) exact integer reference     (d) stage-wise real-number check

A mutant is caught by a check when the check reports a problem or crashes (a crash or
a time-out of the builder itself is caught by all three).  A check that has caught the
mutant is not run again, and the run stops once all three have (``stop_early``): the
verdicts are those of the full run, the work is not.  ``EQUIVALENT`` holds two
changes that look like bugs and are not: no check should catch them.

A mutant can also be made without the builder's text, from the module itself (a copy of the
learner's ``ga2.attn`` whose attention tail is their own, say): ``ga2.checks`` has ``rebuild``,
``edit_programs``, ``edit_params`` and ``with_fields`` for that (this module takes them over).
``judge_builder`` applies the three checks to any builder module, however it was made.

    python -m ga2.mutants [--json OUT] [--workers 2] [--timeout 300]
"""
from __future__ import annotations

import argparse
import importlib.util
import itertools
import json
import multiprocessing
import sys
import time
from dataclasses import dataclass, field
from multiprocessing.connection import wait
from pathlib import Path

from . import checks
from .checks import edit_params, edit_programs, rebuild, with_fields  # noqa: F401 - part of this module's API

__all__ = [
    "Mutant", "MUTANTS", "EQUIVALENT", "BOUND", "BadAnchor", "MutantResult",
    "builder_path", "builder_source", "anchor_count", "mutate", "load_builder", "load_mutant", "find",
    "rebuild", "edit_programs", "edit_params", "with_fields",
    "judge_builder", "evaluate", "mutation_table", "summary", "to_json", "format_table", "main",
]

BOUND = 0.12  # check (b): twice the worst error of the correct builder on these examples


@dataclass(frozen=True)
class Mutant:
    """Replace ``anchor`` (which must occur exactly once in ga2/attn.py) by ``replacement``."""

    label: str
    anchor: str
    replacement: str


MUTANTS: tuple[Mutant, ...] = (
    Mutant("scores: the 1/sqrt(d) factor is left out",
           's["q"] * s["k"] / math.sqrt(D) * SOFTMAX_INPUT_ONE', 's["q"] * s["k"] * SOFTMAX_INPUT_ONE'),
    Mutant("scores: the factor 16 (Q4.4 input of the softmax) is left out",
           '/ math.sqrt(D) * SOFTMAX_INPUT_ONE)', '/ math.sqrt(D))'),
    Mutant("weights: the factor 127 is left out",
           'mantissa_shift(WEIGHT_ONE / PROB_ONE)', 'mantissa_shift(1 / PROB_ONE)'),
    Mutant("output: the scale leaves out the 127",
           'mantissa_shift(s["v"] / (WEIGHT_ONE * s["o"]))', 'mantissa_shift(s["v"] / s["o"])'),
    Mutant("output: uses the key scale instead of the value scale",
           'mantissa_shift(s["v"] / (WEIGHT_ONE * s["o"]))', 'mantissa_shift(s["k"] / (WEIGHT_ONE * s["o"]))'),
    Mutant("q projection is requantized with the key weights' scale",
           'mantissa_shift(s["x"] * s["wq"] / s["q"])', 'mantissa_shift(s["x"] * s["wk"] / s["q"])'),
    Mutant("q requantization scale is 3% too large",
           'mantissa_shift(s["x"] * s["wq"] / s["q"])', 'mantissa_shift(1.03 * s["x"] * s["wq"] / s["q"])'),
    Mutant("output requantization scale is 2% too large",
           'mantissa_shift(s["v"] / (WEIGHT_ONE * s["o"]))', 'mantissa_shift(1.02 * s["v"] / (WEIGHT_ONE * s["o"]))'),
    Mutant("keys are read without the transpose",
           'N=n, tb=1,', 'N=n, tb=0,'),
    Mutant("values are read transposed",
           'K=L, N=4, tb=0,', 'K=L, N=4, tb=1,'),
    Mutant("the value matrix stride is 4 instead of d",
           'lda=L, ldb=D,', 'lda=L, ldb=4,'),
    Mutant("score tiles step through the keys by 4 words, not 4 rows",
           'B=SP_KC + 4 * tile * D,', 'B=SP_KC + 4 * tile,'),
    Mutant("the new key is written one row past the cache end",
           'requantize(dst=SP_KC + new_row,', 'requantize(dst=SP_KC + new_row + D,'),
    Mutant("the new key is never appended to the cache",
           'build("ST", src=SP_KC + new_row, dst=EX_KC + new_row, len=D),', ''),
    Mutant("the new value is appended to the key cache",
           'dst=EX_VC + new_row,', 'dst=EX_KC + new_row,'),
    Mutant("the key cache load is one row short",
           'src=EX_KC, len=(L - 1) * D)', 'src=EX_KC, len=(L - 2) * D)'),
    Mutant("the new token's hidden state is read from row 0",
           'src=EX_X + (L - 1) * DM, len=DM)', 'src=EX_X, len=DM)'),
    Mutant("the softmax covers one position too few",
           'build("SM", dst=SP_P, src=SP_S8, len=L)', 'build("SM", dst=SP_P, src=SP_S8, len=L - 1)'),
    Mutant("the weights are requantized with the scores' parameters",
           'P["weights"]', 'P["scores"]'),
    Mutant("the q projection uses the K weights",
           'project(SP_X, SP_WQ, SP_Q,', 'project(SP_X, SP_WK, SP_Q,'),
    Mutant("recompute: V is projected with the K weights",
           'project(SP_X, SP_WV, SP_ACC,', 'project(SP_X, SP_WK, SP_ACC,'),
    Mutant("the output requantization covers 8 of 16 values",
           'requantize(dst=SP_O8, src=SP_O, n=D,', 'requantize(dst=SP_O8, src=SP_O, n=8,'),
    Mutant("the output is stored from the int32 accumulators",
           'build("ST", src=SP_O8, dst=EX_OUT,', 'build("ST", src=SP_O, dst=EX_OUT,'),
)

EQUIVALENT: tuple[Mutant, ...] = (
    Mutant("EQUIVALENT: the last score tile always computes 4 positions (extra scores are never read)",
           'n = min(4, L - 4 * tile)', 'n = 4'),
    Mutant("EQUIVALENT: the last projection block always computes 4 rows (extra rows are never read)",
           'block_rows = min(4, rows - 4 * block)', 'block_rows = 4'),
)


class BadAnchor(ValueError):
    """A mutant's anchor does not occur exactly once in the builder's source."""


@dataclass
class MutantResult:
    """What the checks made of one mutant: ``caught`` maps "b", "c", "d" to True/False."""

    label: str
    equivalent: bool
    caught: dict = field(default_factory=dict)
    note: str = ""
    seconds: float = 0.0

    @property
    def caught_by_any(self) -> bool:
        return any(self.caught.values())


# ---------------------------------------------------------------- applying a mutant
def builder_path() -> Path:
    """The file of the real program builder."""
    spec = importlib.util.find_spec("ga2.attn")
    return Path(spec.origin)


def builder_source() -> str:
    """The text of ga2/attn.py as it is now."""
    return builder_path().read_text(encoding="utf-8")


def anchor_count(mutant: Mutant, source: str | None = None) -> int:
    """How often the mutant's anchor occurs in the builder (it must be exactly once)."""
    return (builder_source() if source is None else source).count(mutant.anchor)


def enclosing_function(mutant: Mutant, source: str | None = None) -> str:
    """The name of the builder's top-level function whose text holds the mutant's anchor
    ("" when the anchor sits outside every function, in a module constant)."""
    import ast
    source = builder_source() if source is None else source
    at = source.index(mutant.anchor)
    line = source.count("\n", 0, at) + 1
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.lineno <= line <= node.end_lineno:
            return node.name
    return ""


def mutate(mutant: Mutant, source: str | None = None) -> str:
    """The builder's source with the mutant applied; ``BadAnchor`` unless the anchor is unique."""
    source = builder_source() if source is None else source
    count = source.count(mutant.anchor)
    if count != 1:
        raise BadAnchor(f"{mutant.label!r}: anchor {mutant.anchor!r} occurs {count} times in "
                        f"{builder_path()} (must be exactly once)")
    return source.replace(mutant.anchor, mutant.replacement)


_serial = itertools.count()


def load_builder(source: str, name: str | None = None):
    """Execute ``source`` (a version of ga2/attn.py) as a fresh module inside the ga2 package."""
    name = name or f"ga2._mutant_{next(_serial)}"
    spec = importlib.util.spec_from_loader(name, loader=None)
    module = importlib.util.module_from_spec(spec)  # __package__ = "ga2": relative imports resolve
    sys.modules[name] = module  # dataclasses and the checks look the module up by name
    try:
        exec(compile(source, f"<{name}: mutated {builder_path()}>", "exec"), module.__dict__)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def load_mutant(mutant: Mutant | str):
    """The builder with ``mutant`` (or the mutant of that label) applied, as a module
    (``load_mutant(m).program(...)``)."""
    return load_builder(mutate(find(mutant) if isinstance(mutant, str) else mutant))


def find(label: str) -> Mutant:
    """The mutant (of ``MUTANTS`` or ``EQUIVALENT``) with this label."""
    for mutant in MUTANTS + EQUIVALENT:
        if mutant.label == label:
            return mutant
    raise KeyError(f"no mutant labelled {label!r}")


# ---------------------------------------------------------------- judging a mutant
def judge_builder(builder, seeds=checks.DEFAULT_SEEDS, Ls=checks.DEFAULT_LS, bound: float = BOUND,
                  machine=None) -> tuple[dict, str]:
    """Which of checks (b), (c), (d) catch the builder module ``builder``: ``({"b", "c", "d": bool},
    the first problem found)``.  One run of its decode loops, each check including (a); a crash
    of the builder itself is caught by all three."""
    try:
        _, found = checks.findings(builder, seeds, Ls, bound=bound, exact=True, stagewise=True,
                                   contain_crashes=True, machine=machine, stop_early=True)
    except Exception as err:  # noqa: BLE001 - the builder crashed: every check notices
        return {"b": True, "c": True, "d": True}, f"crashed: {type(err).__name__}: {err}"
    kinds = {f.check for f in found}
    loop = "a" in kinds
    caught = {"b": loop or "b" in kinds, "c": loop or "c" in kinds, "d": loop or "d" in kinds}
    return caught, found[0].message if found else ""


def evaluate(mutant: Mutant, seeds=checks.DEFAULT_SEEDS, Ls=checks.DEFAULT_LS, bound: float = BOUND,
             equivalent: bool | None = None, machine=None) -> MutantResult:
    """Run the mutated builder's decode loops once and apply checks (b), (c), (d) to the run.

    ``machine`` replaces the simulator class (default: ``ga2.machine.Machine``).
    """
    equivalent = mutant in EQUIVALENT if equivalent is None else equivalent
    start = time.perf_counter()
    result = MutantResult(mutant.label, equivalent)
    try:
        builder = load_mutant(mutant)
    except BadAnchor:
        raise
    except Exception as err:  # noqa: BLE001 - the mutated text does not even load: every check notices
        result.caught = {"b": True, "c": True, "d": True}
        result.note = f"crashed: {type(err).__name__}: {err}"
    else:
        result.caught, result.note = judge_builder(builder, seeds, Ls, bound, machine)
    result.seconds = time.perf_counter() - start
    return result


def _worker(conn, mutant, seeds, Ls, bound, equivalent, machine):
    """Process entry: evaluate one mutant and send the result back."""
    try:
        conn.send(evaluate(mutant, seeds, Ls, bound, equivalent, machine))
    finally:
        conn.close()


def _context():
    methods = multiprocessing.get_all_start_methods()
    return multiprocessing.get_context("fork" if "fork" in methods else "spawn")


def mutation_table(mutants=None, workers: int = 2, timeout: float = 300.0, seeds=checks.DEFAULT_SEEDS,
                   Ls=checks.DEFAULT_LS, bound: float = BOUND, machine=None) -> list[MutantResult]:
    """Evaluate every mutant (default: the 23 and the 2 equivalent changes), ``workers`` at a time.

    Every anchor is checked before anything runs (``BadAnchor``).  Each mutant runs in its own
    process; one that does not answer within ``timeout`` seconds is killed and counts as caught.
    ``workers=0`` evaluates in this process, one after another, without a time-out.
    ``machine`` replaces the simulator class (it must be importable by the workers).
    """
    mutants = tuple(MUTANTS + EQUIVALENT if mutants is None else mutants)
    source = builder_source()
    for mutant in mutants:
        mutate(mutant, source)  # raises BadAnchor before any work is done
    seeds, Ls = tuple(seeds), tuple(Ls)
    if workers <= 0:
        return [evaluate(m, seeds, Ls, bound, machine=machine) for m in mutants]

    ctx = _context()
    results: list[MutantResult | None] = [None] * len(mutants)
    pending = list(enumerate(mutants))
    running: dict = {}  # connection -> (index, process, start time)
    while pending or running:
        while pending and len(running) < workers:
            index, mutant = pending.pop(0)
            receiver, sender = ctx.Pipe(duplex=False)
            args = (sender, mutant, seeds, Ls, bound, mutant in EQUIVALENT, machine)
            process = ctx.Process(target=_worker, args=args, daemon=True)
            process.start()
            sender.close()  # the child holds the only sending end: EOF when it dies
            running[receiver] = (index, process, time.monotonic())
        for receiver in wait(list(running), timeout=0.5):
            index, process, started = running.pop(receiver)
            try:
                results[index] = receiver.recv()
            except EOFError:  # the worker died without answering (e.g. killed by the system)
                results[index] = MutantResult(mutants[index].label, mutants[index] in EQUIVALENT,
                                              {"b": True, "c": True, "d": True},
                                              f"worker died (exit code {process.exitcode})",
                                              time.monotonic() - started)
            receiver.close()
            process.join()
        now = time.monotonic()
        for receiver, (index, process, started) in list(running.items()):
            if now - started > timeout:
                process.kill()
                process.join()
                receiver.close()
                del running[receiver]
                results[index] = MutantResult(mutants[index].label, mutants[index] in EQUIVALENT,
                                              {"b": True, "c": True, "d": True},
                                              f"timed out after {timeout:.0f} s", now - started)
    return results


# ---------------------------------------------------------------- reporting
def summary(results) -> dict:
    """Counts of the table: caught per check among real mutants, by any, equivalents caught."""
    real = [r for r in results if not r.equivalent]
    fake = [r for r in results if r.equivalent]
    return {
        "mutants": len(real),
        "b": sum(r.caught["b"] for r in real),
        "c": sum(r.caught["c"] for r in real),
        "d": sum(r.caught["d"] for r in real),
        "any": sum(r.caught_by_any for r in real),
        "equivalent": len(fake),
        "equivalent_caught": sum(r.caught_by_any for r in fake),
    }


def to_json(results) -> dict:
    """``{"mutants": [{"label", "caught": {"b", "c", "d"}, "note"}], "equivalent": [...], "summary"}``."""
    row = lambda r: {"label": r.label, "caught": dict(r.caught), "note": r.note}  # noqa: E731
    return {"mutants": [row(r) for r in results if not r.equivalent],
            "equivalent": [row(r) for r in results if r.equivalent],
            "summary": summary(results)}


def format_table(results) -> str:
    """The table as text, with the totals and the equivalent changes below it."""
    word = lambda v: "caught" if v else "NOT CAUGHT"  # noqa: E731
    width = max(len(r.label) for r in results)
    lines = [f"{'':{width}s}  {'(b) accuracy':>13s} {'(c) exact':>11s} {'(d) stagewise':>14s}"]
    for r in results:
        if not r.equivalent:
            lines.append(f"{r.label:{width}s}  {word(r.caught['b']):>13s} {word(r.caught['c']):>11s} "
                         f"{word(r.caught['d']):>14s}")
    s = summary(results)
    n = s["mutants"]
    lines += ["", f"caught: (b) accuracy bound {s['b']} of {n}; (c) exact integer reference {s['c']} of {n}; "
                  f"(d) stage-wise real-number check {s['d']} of {n}; by any of them {s['any']} of {n}"]
    fakes = [r for r in results if r.equivalent]
    if fakes:
        lines += ["", "Changes that look like bugs and are not:"]
        lines += [f"{r.label}: {'caught' if r.caught_by_any else 'NOT CAUGHT'}" for r in fakes]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ga2.mutants", description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", metavar="OUT", help="also write the table as JSON to OUT")
    parser.add_argument("--workers", type=int, default=2, help="worker processes (default 2; 0: in this process)")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds before a mutant counts as caught")
    args = parser.parse_args(argv)
    print("NOTE: this deliberately breaks copies of the program builder (ga2/attn.py); "
          "'caught' is EXPECTED: it shows the checks notice the mistake.\n")
    start = time.perf_counter()
    results = mutation_table(workers=args.workers, timeout=args.timeout)
    print(format_table(results))
    print(f"\n({len(results)} builders checked in {time.perf_counter() - start:.1f} s)")
    if args.json:
        Path(args.json).write_text(json.dumps(to_json(results), indent=2) + "\n", encoding="utf-8")
    s = summary(results)
    return 0 if s["any"] == s["mutants"] and s["equivalent_caught"] == 0 else 1


if __name__ == "__main__":
    # Run the package's copy of this module, not this __main__ one: the workers' results then
    # pickle as ga2.mutants.MutantResult however the file was started (python -m, or runpy
    # without a __main__ swap, where a __main__ class cannot be found and every worker "dies").
    from ga2.mutants import main as _package_main

    sys.exit(_package_main())
