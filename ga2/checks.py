"""The checks of the attention program builder, and what each one shares with it.

    (a) loop equality    the cached and recompute programs give identical outputs at every
                         step of a decode loop (the cache persisting from step to step)
    (b) accuracy bound   (a), and the last step's error against floating point is under a bound
    (c) exact reference  (a), and every step's output equals ``int_reference``: the maths in
                         integers with no instructions, tiles or addresses.  It shares the
                         requantizer parameters (``rq_params``) with the builder, so it cannot
                         see a wrong scale: both sides are wrong the same way.
    (d) stage-wise       (a), and every stage's int8 values in the scratchpad are within one
                         level of the real-number arithmetic their scales stand for, applied to
                         the previous stage's values.  It shares nothing with the builder but the
                         memory plan (where to look), so it sees wrong scales; it does not look at
                         what is finally stored in EXT.

Every function takes the builder as a module (``ga2.attn`` or a mutated copy of it): its
``make_example``, ``rq_params`` and ``sequence`` are the things being checked.

To see what a check catches, make a builder with a mistake in it from the builder module itself,
without its text: ``rebuild`` copies a builder with some of its names replaced,
``edit_programs`` passes every program it builds through an edit (``with_fields`` changes an
instruction's fields), ``edit_params`` its requantizer parameters.  They work on any builder
module, a learner's copy of ``ga2.attn`` with an attention tail of their own included.
"""
from __future__ import annotations

import itertools
import math
import sys
import types
from typing import NamedTuple

import numpy as np

from .instructions import Instr, build
from .plan import D, SP_KC, SP_O8, SP_Q8, SP_S8, SP_VC, SP_W
from .quant import QMAX, matmul_int8, quantize, requant, round_half_away, saturate
from .softmax import ONE_IN, softmax_fixed_array

__all__ = ["Finding", "rel_error", "int_reference", "stagewise_problems", "findings", "check_pipeline",
           "CHECKS", "DEFAULT_SEEDS", "DEFAULT_LS", "DEFAULT_EXAMPLES",
           "rebuild", "edit_programs", "edit_params", "with_fields"]

CHECKS = {"a": "loop equality", "b": "accuracy bound", "c": "exact integer reference",
          "d": "stage-wise real-number check"}
DEFAULT_SEEDS = range(4)
DEFAULT_LS = (1, 2, 5, 9, 16, 24)
DEFAULT_EXAMPLES = DEFAULT_SEEDS   # the examples of each length: make_example(L, 100 * L + n), n in these


class Finding(NamedTuple):
    """One problem a check found: ``check`` is "a", "b", "c" or "d"."""

    check: str
    message: str

    def __str__(self) -> str:
        return self.message


def rel_error(example, out8) -> float:
    """Relative RMS error of an int8 output against the float output: |out8 * scale_o - out| / |out|."""
    out = np.asarray(example["out_float"], dtype=np.float64)
    got = np.asarray(out8, dtype=np.float64) * example["scales"]["o"]
    return float(np.sqrt(np.mean((got - out) ** 2)) / np.sqrt(np.mean(out ** 2)))


def _int8_operands(example, t: int):
    """int8 codes of the first t rows of X and of Wq, Wk, Wv, at the example's scales."""
    s = example["scales"]
    xq = quantize(example["X"][:t], s["x"])                                   # (t, DM)
    wq, wk, wv = (quantize(W, s[name]) for W, name in zip(example["W"], ("wq", "wk", "wv")))
    return xq, wq, wk, wv


def int_reference(example, t: int, params: dict) -> list[int]:
    """The int8 output of decode step t (tokens 0..t-1), straight from the maths.

    Whole matrices, no instructions, tiles or addresses; the same integer arithmetic as
    the machine (requantizer, int8 product, softmax unit) and the same ``params``::

        q8 = rq(x8[t-1] W8q, q)      K8 = rq(x8 W8k, k)      V8 = rq(x8 W8v, v)
        s8 = rq(K8 q8, scores)       w8 = rq(softmax_unit(s8), weights)
        out8 = rq(w8 V8, out)
    """
    xq, wq, wk, wv = _int8_operands(example, t)
    q8 = requant(matmul_int8(xq[-1:], wq)[0], *params["q"])                   # (D,)
    K8 = requant(matmul_int8(xq, wk), *params["k"])                           # (t, D)
    V8 = requant(matmul_int8(xq, wv), *params["v"])                           # (t, D)
    s8 = requant(matmul_int8(K8, q8[:, None])[:, 0], *params["scores"])       # (t,)
    w8 = requant(softmax_fixed_array(s8), *params["weights"])                 # (t,)
    out8 = requant(matmul_int8(w8[None, :], V8)[0], *params["out"])           # (D,)
    return [int(v) for v in out8]


def _to_int8(real) -> np.ndarray:
    """The int8 code a real value (already divided by its scale) rounds to."""
    return saturate(round_half_away(np.asarray(real, dtype=np.float64)))


def stagewise_problems(example, step) -> list[str]:
    """Stages of a decode step whose int8 values stray more than one level from their meaning.

    From the scratchpad after the cached program of step t (``step["spad"]``), each stage is
    compared with the real-number arithmetic on the previous stage's int8 values:

        q       q8  ~ (x8[t-1] W8q) * sx * swq / sq
        k, v    K8  ~ (x8 W8k) * sx * swk / sk,   V8 likewise
        scores  s8  ~ (K8 sk) (q8 sq) / sqrt(D) * 16            (Q4.4)
        weights w8  ~ softmax(s8 / 16) * 127
        output  o8  ~ (w8 / 127) (V8 sv) / so
    """
    t, s = step["t"], example["scales"]          # a DecodeStep, or a mapping with "t" and "spad"
    words = np.asarray(step["spad"], dtype=np.int64)
    xq, wq, wk, wv = _int8_operands(example, t)
    problems = []

    def compare(stage, got, want):
        bad = int(np.count_nonzero(np.abs(np.asarray(got) - want) > 1))
        if bad:
            problems.append(f"step {t}: stage {stage}: {bad} of {np.size(want)} values are more than "
                            f"one level from the real-number result")

    q8 = words[SP_Q8:SP_Q8 + D]
    compare("q", q8, _to_int8(xq[-1] @ wq * (s["x"] * s["wq"] / s["q"])))
    K8 = words[SP_KC:SP_KC + t * D].reshape(t, D)
    compare("k", K8, _to_int8(xq @ wk * (s["x"] * s["wk"] / s["k"])))
    V8 = words[SP_VC:SP_VC + t * D].reshape(t, D)
    compare("v", V8, _to_int8(xq @ wv * (s["x"] * s["wv"] / s["v"])))
    s8 = words[SP_S8:SP_S8 + t]
    compare("scores", s8, _to_int8((K8 * s["k"]) @ (q8 * s["q"]) / math.sqrt(D) * ONE_IN))
    real = s8 / ONE_IN
    e = np.exp(real - real.max())
    w8 = words[SP_W:SP_W + t]
    compare("weights", w8, _to_int8(e / e.sum() * QMAX))
    o8 = words[SP_O8:SP_O8 + D]
    compare("output", o8, _to_int8((w8 / QMAX) @ (V8 * s["v"]) / s["o"]))
    return problems


def _guarded(check: str, where: str, contain: bool, fn, *args):
    """``fn(*args)``; a crash becomes a finding of ``check`` when ``contain`` is set."""
    try:
        return fn(*args), []
    except Exception as err:  # noqa: BLE001 - a crashing check counts as catching the mutant
        if not contain:
            raise
        return None, [Finding(check, f"{where}: check ({check}) crashed: {type(err).__name__}: {err}")]


def findings(builder, seeds=DEFAULT_SEEDS, Ls=DEFAULT_LS, bound=None, exact=False, stagewise=False,
             contain_crashes=False, machine=None, stop_early=False) -> tuple[float, list[Finding]]:
    """Run the decode loops of ``builder`` once and apply the chosen checks to that run.

    Returns the worst last-step error and the findings, each tagged with its check.  With
    ``contain_crashes`` a crash inside check (c) or (d) becomes a finding of that check
    (a crash of the builder itself still propagates: it breaks every check).  ``machine``
    replaces the simulator class (the benchmark runs a naive one).

    ``stop_early`` is for verdicts, not reports: a check that has found one problem is not
    run again, and the loops stop once every chosen check has found one (or (a) has, which
    every check includes).  The worst error is then that of the examples run so far.
    """
    chosen = {check for check, on in (("b", bound is not None), ("c", exact), ("d", stagewise)) if on}
    worst, found, caught = 0.0, [], set()

    def note(new):
        found.extend(new)
        caught.update(f.check for f in new)

    def done(check=None) -> bool:
        if not stop_early:
            return False
        if check is not None:
            return check in caught or "a" in caught
        return "a" in caught or chosen <= caught

    for L in Ls:
        for seed in seeds:
            example = builder.make_example(L, 100 * L + seed)
            where = f"L={L} seed={seed}"
            steps = builder.sequence(example) if machine is None else builder.sequence(example, machine=machine)
            for step in steps:
                at = f"{where} step {step.t}"
                if step.cached.output != step.recompute.output:
                    note([Finding("a", f"{at}: cached and recompute outputs differ")])
                if exact and not done("c"):
                    want, crash = _guarded("c", at, contain_crashes, builder.int_reference, example, step.t)
                    note(crash)
                    if not crash and step.cached.output != want:
                        note([Finding("c", f"{at}: differs from the integer reference")])
                if stagewise and not done("d"):
                    problems, crash = _guarded("d", at, contain_crashes, stagewise_problems, example, step)
                    note(crash + [Finding("d", f"{where} {p}") for p in problems or []])
                if done():
                    return worst, found
            error = rel_error(example, steps[-1].cached.output)
            worst = max(worst, error)
            if bound is not None and error > bound:
                note([Finding("b", f"{where}: error {error:.3f} over the bound {bound}")])
            if done():
                return worst, found
    return worst, found


def check_pipeline(builder, seeds=DEFAULT_SEEDS, Ls=DEFAULT_LS, bound=None, exact=False, stagewise=False):
    """``(worst_error, problems)`` of the chosen checks on ``builder``'s decode loops (messages)."""
    worst, found = findings(builder, seeds, Ls, bound, exact, stagewise)
    return worst, [f.message for f in found]


# ---------------------------------------------------------------- builders made from a builder
_rebuilt = itertools.count()


def rebuild(builder, name: str | None = None, **replacements):
    """A copy of the builder module ``builder`` in which ``replacements`` stand for its names.

    Every function of the module is copied with the copy's namespace as its globals, so a
    replaced ``program`` is the one the copy's ``sequence`` calls, and a replaced ``rq_params``
    the one its ``int_reference`` uses.  Nothing of the module's text is read: this works on a
    builder whose source is not there (the learner's copy, with their own attention tail).
    """
    name = name or f"ga2._rebuilt_{next(_rebuilt)}"
    copy = types.ModuleType(name)
    namespace = copy.__dict__
    own = vars(builder)
    namespace.update({k: v for k, v in own.items() if k not in ("__name__", "__spec__", "__loader__")})
    namespace["__name__"] = name
    namespace.update(replacements)
    for key, value in list(namespace.items()):
        if key in replacements or not isinstance(value, types.FunctionType) or value.__globals__ is not own:
            continue                                # only the builder's own functions are copied
        fresh = types.FunctionType(value.__code__, namespace, value.__name__, value.__defaults__,
                                   value.__closure__)
        fresh.__kwdefaults__ = value.__kwdefaults__
        fresh.__qualname__, fresh.__doc__ = value.__qualname__, value.__doc__
        fresh.__dict__.update(value.__dict__)
        namespace[key] = fresh
    sys.modules[name] = copy          # the builder's check_pipeline finds itself by name
    return copy


def edit_programs(builder, edit):
    """The builder with every program passed through ``edit(L, variant, program) -> program``."""
    original = builder.program

    def program(L, variant, params, beyond_plan=False):
        return list(edit(L, variant, list(original(L, variant, params, beyond_plan=beyond_plan))))
    return rebuild(builder, program=program)


def edit_params(builder, edit):
    """The builder with its requantizer parameters passed through ``edit(params) -> params``
    (the programs and the builder's own ``int_reference`` both see the edited ones)."""
    original = builder.rq_params

    def rq_params(example):
        return edit(dict(original(example)))
    return rebuild(builder, rq_params=rq_params)


def with_fields(ins: Instr, **changes) -> Instr:
    """``ins`` with some of its fields changed: ``with_fields(mm, tb=0)``."""
    return build(ins.op, **{**ins.fields, **changes})
