"""Hidden tests of ``blocked_decode(q, K_buf, V_buf, seq_len, block)`` (chapter 8).

One query attends over the first ``seq_len`` rows of buffers of ``max_seq_len`` rows, read in
blocks of ``block`` rows with an online softmax (a running maximum and sum, the accumulator
rescaled when the maximum grows).  Returns ``(out, visited)``: ``out`` of shape (d_v,), equal
to softmax(K_buf[:t] q / sqrt(d)) V_buf[:t], and ``visited`` = ceil(t / block), the blocks the
loop read before its early exit.  Rows past ``seq_len`` may hold anything (NaN, inf, large
numbers) and must never change ``out``; the inputs are not modified.

The reference never walks blocks: it scores the first ``seq_len`` rows one by one with Python
floats and weighs them through the log-sum-exp (``math.fsum``), and counts blocks with integer
arithmetic, so it shares no code path with a blockwise answer.  The common mistakes are written
as variants, for the feedback.
"""
from __future__ import annotations

import functools
import math

import numpy as np

from ..checks import Fail, check_array, check_exact_int, describe, unchanged, with_right_answer
from ..registry import Call, Exercise, Test, case

FN = "blocked_decode"


# ------------------------------------------------------------------------------- reference


def reference_count(seq_len: int, block: int) -> int:
    """Blocks of ``block`` rows that cover ``seq_len`` rows."""
    return (seq_len + block - 1) // block


def reference(q, K_buf, V_buf, seq_len, *, rows=None, scale=None) -> np.ndarray:
    """softmax over the first ``rows`` (default ``seq_len``) keys of q . k_j / sqrt(d), times
    the same rows of V_buf, in Python floats.  ``scale`` replaces sqrt(d) (for the feedback)."""
    rows = seq_len if rows is None else rows
    d = q.shape[0]
    scale = math.sqrt(d) if scale is None else scale
    scores = [math.fsum(float(a) * float(b) for a, b in zip(K_buf[j], q)) / scale for j in range(rows)]
    top = max(scores)
    log_total = top + math.log(math.fsum(math.exp(s - top) for s in scores))
    weights = np.array([math.exp(s - log_total) for s in scores])
    return weights @ np.asarray(V_buf[:rows], dtype=np.float64)


def _not_rescaled(q, K_buf, V_buf, seq_len, block, *, rescale_sum: bool) -> np.ndarray:
    """The online softmax with the rescaling left out: each block's terms taken against the
    maximum of the blocks read so far, the earlier terms never multiplied by exp(M - M')."""
    d = q.shape[0]
    top, total, acc = -math.inf, 0.0, np.zeros(V_buf.shape[1])
    for lo in range(0, seq_len, block):
        hi = min(lo + block, seq_len)
        s = np.array([float(np.dot(K_buf[j], q)) / math.sqrt(d) for j in range(lo, hi)])
        new_top = max(top, float(s.max()))
        e = np.exp(s - new_top)
        total = (math.exp(top - new_top) * total if rescale_sum else total) + float(e.sum())
        acc = acc + e @ V_buf[lo:hi]
        top = new_top
    return acc / total


# ---------------------------------------------------------------------------- diagnosis


def _close(a, b) -> bool:
    return b is not None and np.shape(a) == np.shape(b) and bool(np.all(np.isfinite(b))) and \
        np.allclose(a, b, rtol=1e-7, atol=1e-10)


def _diagnose(case, actual) -> str | None:
    """Name the mistake ``actual`` matches (said alongside the error)."""
    q, K, V, t, block = case
    N = K.shape[0]
    tail_bad = t < N and not (np.all(np.isfinite(K[t:])) and np.all(np.isfinite(V[t:])))
    if not np.all(np.isfinite(actual)):
        scores = np.abs(K[:t] @ q) / math.sqrt(q.shape[0])
        overflow = ("exp overflowed or 0/0 happened: subtract the running maximum before exp, and rescale what "
                    "you hold by exp(old max - new max) when it grows")
        tail = ("the rows past seq_len reached the result: set the scores of the last block's rows at or past "
                "seq_len to -inf, and replace those value rows by zeros before the weighted sum (a weight of 0 "
                "times NaN or inf is NaN)")
        if float(scores.max()) > 700.0:
            return f"{overflow}; or {tail}" if tail_bad else overflow
        return tail if tail_bad else overflow
    variants = {
        "it matches attention over every row of the buffer: only the first seq_len rows hold the sequence":
            lambda: reference(q, K, V, t, rows=N) if N > t and np.all(np.isfinite(K)) and np.all(np.isfinite(V))
            else None,
        "it matches attention over every row of the last block: set the scores of its rows at or past seq_len "
        "to -inf": lambda: reference(q, K, V, t, rows=min(N, reference_count(t, block) * block))
        if reference_count(t, block) * block > t and np.all(np.isfinite(K[:reference_count(t, block) * block]))
        and np.all(np.isfinite(V[:reference_count(t, block) * block])) else None,
        "it matches attention over seq_len - 1 rows: the row at position seq_len - 1 belongs to the sequence":
            lambda: reference(q, K, V, t, rows=t - 1) if t > 1 else None,
        "it matches attention over seq_len + 1 rows: rows from position seq_len on are not the sequence's":
            lambda: reference(q, K, V, t, rows=t + 1) if t < N and np.all(np.isfinite(K[:t + 1]))
            and np.all(np.isfinite(V[:t + 1])) else None,
        "it matches scores that are not divided by sqrt(d)": lambda: reference(q, K, V, t, scale=1.0),
        "it matches scores divided by d instead of sqrt(d)": lambda: reference(q, K, V, t, scale=float(q.shape[0])),
        "it matches an online softmax that never rescales: when a block brings a larger maximum, multiply the "
        "running sum and the accumulator by exp(old max - new max)":
            lambda: _not_rescaled(q, K, V, t, block, rescale_sum=False),
        "it matches an online softmax that rescales the running sum but not the accumulator: multiply both by "
        "exp(old max - new max)": lambda: _not_rescaled(q, K, V, t, block, rescale_sum=True),
    }
    for text, make in variants.items():
        try:
            with np.errstate(all="ignore"):
                guess = make()
        except (ValueError, OverflowError, ZeroDivisionError):
            continue
        if _close(actual, guess):
            return text
    return None


def _count_hint(value, case) -> str:
    _, K, _, t, block = case
    try:
        got = int(value)
    except (TypeError, ValueError, OverflowError):
        return ""
    if got == t // block and t % block:
        return "a partial last block is still a block the loop reads: round seq_len / block up"
    if got == t // block + 1 and t % block == 0:
        return "when block divides seq_len there is no partial block: the loop stops after seq_len / block blocks"
    if got == reference_count(K.shape[0], block) != reference_count(t, block):
        return "it counts the blocks of the whole buffer: the loop should stop once it has passed seq_len"
    if got == t:
        return "it counts rows, not blocks"
    return ""


# ------------------------------------------------------------------------------ checking


def _unpack(value, what="blocked_decode"):
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        raise Fail(f"{what} should return a pair (out, visited); it returned {describe(value)}")
    return value


def _check_count(value, case, what):
    expected = reference_count(case[3], case[4])
    if isinstance(value, np.ndarray) and value.shape == () and value.dtype.kind in "iu":
        value = value[()]
    try:
        check_exact_int(value, expected, what)
    except Fail as fail:
        hint = _count_hint(value, case) if isinstance(value, (int, np.integer)) else ""
        raise Fail(f"{fail}; {hint}" if hint else str(fail)) from None


def _check_cases(cases, expected, count, values, results):
    """Each case (q, K_buf, V_buf, seq_len, block), one call each: ``out`` is the reference's
    (when ``values``) and ``visited`` counts the blocks read (when ``count``)."""
    for k, (one, exp) in enumerate(zip(cases, expected)):
        label = f"case {k + 1} of {len(cases)}: " if len(cases) > 1 else ""
        out, visited = _unpack(results[k].value, f"{label}blocked_decode")
        if values:
            check_array(out, exp, f"{label}out", hint=functools.partial(_diagnose, one))
        if count:
            _check_count(visited, one, f"{label}visited")


def _inputs_unchanged(args, results):
    """q, K_buf, V_buf (their unused rows included), seq_len and block come back as they went."""
    q, K, V, t, b = args
    after = results[0].args_after
    for name, before, now in zip(("q", "K_buf", "V_buf"), (q, K, V), after):
        unchanged(before, now, name)
    if after[3] != t or after[4] != b:
        raise Fail("seq_len or block came back changed")


def _shape_dtype(args, results):
    """``out`` is a float64 vector of shape (d_v,) = (5,) and ``visited`` an integer."""
    out, visited = _unpack(results[0].value)
    if not isinstance(out, np.ndarray):
        raise Fail(f"out is {describe(out)}; expected a numpy array of shape (d_v,) = (5,)")
    if out.shape != (5,):
        raise Fail(f"out has shape {out.shape}; expected (d_v,) = (5,), one vector")
    if out.dtype != np.float64:
        raise Fail(f"out has dtype {out.dtype}; expected float64 for float64 inputs")
    if isinstance(visited, (bool, np.bool_)) or not isinstance(visited, (int, np.integer)):
        raise Fail(f"visited is {describe(visited)}; expected an integer")


def _with_right_answer(prop, args, results):
    """``prop`` counting only together with the right answer (out and visited) on the same call."""
    right = functools.partial(_check_cases, [args], [reference(*args[:4])], True, True)
    return with_right_answer(functools.partial(prop, args), right)(results)


# ------------------------------------------------------------------------------ the inputs


def _buffers(rng, N, d, d_v=None, scale=1.0):
    d_v = d if d_v is None else d_v
    return (rng.standard_normal(d) * scale, rng.standard_normal((N, d)) * scale,
            rng.standard_normal((N, d_v)))


def _case(rng, N, d, t, block, d_v=None, scale=1.0, tail=None):
    """A case whose buffer rows past t are set to ``tail`` (a number, or "random")."""
    q, K, V = _buffers(rng, N, d, d_v, scale)
    if tail is not None and tail != "random":
        K[t:], V[t:] = tail, tail
    return (q, K, V, t, block)


def _cases(seed, *shapes, **options):
    """One case per (N, d, seq_len, block[, tail or a dict of options]), drawn in turn from a
    generator seeded with ``seed``; ``options`` (d_v, scale, tail) apply to every case."""
    rng = np.random.default_rng(seed)
    cases = []
    for shape in shapes:
        own = dict(options)
        if len(shape) > 4:
            own.update(shape[4] if isinstance(shape[4], dict) else {"tail": shape[4]})
        cases.append(_case(rng, *shape[:4], **own))
    return cases


def _infinite_tails(seed):
    """Unused rows of inf, of -inf, and of inf, -inf and NaN mixed."""
    rng = np.random.default_rng(seed)
    cases = [_case(rng, 40, 4, 21, 8, tail=np.inf), _case(rng, 40, 4, 17, 16, tail=-np.inf)]
    q, K, V, t, b = _case(rng, 40, 4, 10, 4)
    K[t:], V[t:] = np.inf, -np.inf
    K[t + 1::2], V[t + 1::2] = -np.inf, np.nan
    return cases + [(q, K, V, t, b)]


def _large_tails(seed):
    """Tail keys that would win the softmax if counted, and tail values far from the others."""
    rng = np.random.default_rng(seed)
    cases = []
    for N, d, t, b in [(60, 4, 23, 8), (32, 3, 9, 4)]:
        q, K, V, _, _ = _case(rng, N, d, t, b)
        K[t:] *= 50.0
        V[t:] += 100.0
        cases.append((q, K, V, t, b))
    return cases


def _growing_maximum(seed):
    """The largest score arrives late: every block raises the maximum, so the running sum and the
    accumulator must be rescaled each time (a missing rescale is wrong by a visible factor)."""
    rng = np.random.default_rng(seed)
    cases = []
    for N, d, t, b in [(64, 4, 48, 8), (40, 2, 31, 6)]:
        q, K, V, _, _ = _case(rng, N, d, t, b)
        ramp = np.linspace(-3.0, 9.0, t)[:, None] * q[None, :] / float(q @ q) * math.sqrt(d)
        K[:t] = ramp + 0.1 * K[:t]
        cases.append((q, K, V, t, b))
    return cases


def _random_cases(seed, n):
    """``n`` random buffers, lengths, blocks, tails and scales."""
    rng = np.random.default_rng(seed)
    cases = []
    for _ in range(n):
        N = int(rng.integers(1, 90))
        t = int(rng.integers(1, N + 1))
        d, d_v = int(rng.integers(1, 9)), int(rng.integers(1, 9))
        block = int(rng.choice([1, 2, 3, 4, 5, 8, 16, 31, 32, 64, 100]))
        tail = [None, "random", np.nan, np.inf][int(rng.integers(0, 4))]
        cases.append(_case(rng, N, d, t, block, d_v=d_v, scale=float(rng.choice([0.5, 1.0, 3.0])), tail=tail))
    return cases


def cases_test(name, points, cases, *, count=True, values=True) -> Test:
    """A test of several cases, one call each."""
    expected = [reference(q, K, V, t) for q, K, V, t, _ in cases]
    return case(name, points, [Call(FN, c) for c in cases], _check_cases, cases, expected, count, values,
                step="case")


def property_test(name, points, args, prop, capture_args=False) -> Test:
    """A test of a property of one call, counting only together with the right answer."""
    return case(name, points, [Call(FN, args, capture_args)], _with_right_answer, prop, args)


# --------------------------------------------------------------------------------- the tests

NAN, INF, RANDOM = np.nan, np.inf, "random"      # what fills the rows past seq_len


def make_tests() -> list[Test]:
    # The first case is the note's shapes: head size 8, a buffer of 4096 rows, the first decode
    # step after a 32-token prompt (seq_len 33), blocks of 32: one full block and one of a single row.
    return [
        cases_test("the first decode step after a 32-token prompt: seq_len 33 in a buffer of 4096 rows, head size "
                   "8, blocks of 32", 2, _cases(8001, (4096, 8, 33, 32, 0.0))),
        cases_test("seq_len = 1: one block, and the output is the first value row", 1,
                   _cases(8002, (16, 4, 1, 4, RANDOM), (9, 3, 1, 1, NAN))),
        cases_test("seq_len a multiple of the block: no partial block, no extra block", 2,
                   _cases(8003, (80, 4, 64, 16, RANDOM), (40, 3, 32, 32, RANDOM), (100, 5, 96, 8, NAN))),
        cases_test("seq_len = max_seq_len: the whole buffer, its last block cut short by the buffer's end", 1,
                   _cases(8004, (50, 4, 50, 16), (33, 6, 33, 32))),
        cases_test("a block larger than the whole buffer: one block", 1,
                   _cases(8005, (20, 3, 13, 64, RANDOM), (20, 3, 20, 64), (7, 2, 5, 1000, NAN))),
        cases_test("NaN in the unused rows of both buffers: the result must not see them", 2,
                   _cases(8006, (64, 4, 37, 16), (30, 5, 12, 5), (48, 3, 47, 8), tail=NAN)),
        cases_test("inf and -inf in the unused rows: the result must not see them", 1, _infinite_tails(8007)),
        cases_test("large numbers in the unused rows: only the first seq_len rows count", 2, _large_tails(8008)),
        cases_test("large scores (about 1e4): the running maximum keeps exp from overflowing", 1,
                   _cases(8009, (48, 4, 40, 8, {"scale": 70.0, "tail": NAN}), (24, 3, 24, 5, {"scale": -60.0}))),
        cases_test("the maximum score grows from block to block: what is held must be rescaled", 2,
                   _growing_maximum(8010)),
        cases_test("visited counts the blocks read: ceil(seq_len / block), for ten lengths and blocks", 2,
                   _cases(8011, *[(64, 2, t, b) for t, b in [(1, 1), (1, 64), (15, 16), (16, 16), (17, 16), (63, 7),
                                                             (64, 8), (5, 2), (2, 64), (64, 64)]], tail=NAN),
                   values=False),
        cases_test("block = 1: one row per block", 1, _cases(8012, (12, 3, 9, 1), tail=NAN)),
        cases_test("head width d = 1", 1, _cases(8013, (20, 1, 14, 4, RANDOM), (6, 1, 6, 4))),
        cases_test("values wider than the keys (d_v = 7, d = 3)", 1, _cases(8014, (30, 3, 19, 4), d_v=7, tail=NAN)),
        property_test("q, K_buf and V_buf are not modified (their unused rows included)", 1,
                      *_cases(8015, (24, 4, 10, 4), tail=NAN), _inputs_unchanged, capture_args=True),
        property_test("out has shape (d_v,) and dtype float64; visited is an integer", 1,
                      *_cases(8016, (20, 3, 11, 4), d_v=5, tail=NAN), _shape_dtype),
        cases_test("30 random buffers, lengths and blocks (N up to 89, d and d_v up to 8)", 3, _random_cases(8017, 30)),
    ]


EXERCISE = Exercise(name="blocked_decode", make_tests=make_tests)
