"""Public checks for the exercise ``batched_decode_step(q, K, V, lengths)`` (chapter 5).

A few small cases; the expected outputs (and what three common mistakes return: the lengths
ignored, query head h reading key/value head h % G, scores not divided by sqrt(d)) are stored in
``data/batched_decode_step.json``.  The statement stresses what three of them check: what lies
beyond a length changes nothing, NaN included; scores of about 10^4 must not give nan; the inputs
are not modified.  The hidden tests check more.
"""
import numpy as np

from ._data import array, load, mistake

DATA = load("batched_decode_step")
HINTS = {"all_positions": "Every sequence seems to attend to all L_max positions: stop at its own length.",
         "h_mod_G": "Query head h seems to read key/value head h % G; the H / G heads of a group are "
                    "consecutive, so head h reads head h // (H / G) (np.repeat, not np.tile).",
         "no_scale": "The scores seem not to be divided by sqrt(d)."}


def _inputs(case):
    return array(case["q"]), array(case["K"]), array(case["V"]), np.array(case["lengths"], dtype=np.int64)


def _call(fn, q, K, V, lengths):
    out = fn(q, K, V, lengths)
    assert isinstance(out, np.ndarray), f"batched_decode_step should return a numpy array, got {type(out).__name__}"
    return out


def _expect(got, case, what, tol=1e-9):
    want = np.asarray(case["expected"])
    assert got.shape == want.shape, f"{what}: expected shape (B, H, d) = {want.shape}, got {got.shape}"
    got = np.asarray(got, dtype=np.float64)
    assert np.all(np.isfinite(got)), f"{what}: the output contains NaN or infinity"
    gap = np.max(np.abs(got - want), axis=-1)                      # (B, H)
    if float(gap.max()) <= tol:
        return
    b, h = (int(i) for i in np.unravel_index(int(np.argmax(gap)), gap.shape))
    raise AssertionError(f"{what}: sequence {b}, query head {h} should be {np.round(want[b, h], 6).tolist()}, "
                         f"got {np.round(got[b, h], 6).tolist()}.{mistake(case, got.tolist(), HINTS)}")


def check_shape(fn):
    q, K, V, lengths = _inputs(DATA["shapes"])
    got = _call(fn, q, K, V, lengths)
    assert got.shape == (2, 4, 3), (
        f"q of shape (B, H, d) = (2, 4, 3) and K, V of shape (B, G, L_max, d) = (2, 2, 5, 3) should give "
        f"an output of shape (B, H, d) = (2, 4, 3); got {got.shape}")
    assert got.dtype == np.float64, f"float64 inputs should give a float64 output, got {got.dtype}"
    case = DATA["by_hand"]
    q, K, V, lengths = _inputs(case)
    got = _call(fn, q.astype(np.float32), K.astype(np.float32), V.astype(np.float32), lengths)
    assert got.dtype == np.float32, f"float32 inputs should give a float32 output (q's dtype), got {got.dtype}"
    _expect(got, case, "the by-hand case in float32", tol=1e-5)


def check_by_hand(fn):
    case = DATA["by_hand"]
    got = _call(fn, *_inputs(case))
    want = np.asarray(case["expected"])
    if got.shape == want.shape and not np.allclose(got[0], want[0], atol=1e-12):
        raise AssertionError(
            f"sequence 0 holds one position (lengths[0] = 1): both its query heads attend to that one key with "
            f"weight 1, so both outputs are its value {want[0, 0].tolist()}; got {np.round(got[0], 6).tolist()}."
            f"{mistake(case, got.tolist(), HINTS)}")
    _expect(got, case, "two sequences worked out by hand")


def check_grouped(fn):
    case = DATA["grouped"]
    _expect(_call(fn, *_inputs(case)), case, "6 query heads over 2 key/value heads, lengths (2, 7, 4)")


def check_nan_beyond_lengths(fn):
    case = DATA["grouped"]
    q, K, V, lengths = _inputs(case)
    for b, n in enumerate(lengths):
        K[b, :, n:] = np.nan
        V[b, :, n:] = np.nan
    with np.errstate(all="ignore"):
        got = _call(fn, q, K, V, lengths)
    if np.asarray(got).shape == np.shape(case["expected"]) and not np.all(np.isfinite(got)):
        raise AssertionError("with NaN beyond each length the output holds NaN: a weight of 0 times NaN is "
                             "still NaN, so what lies beyond a length must not take part in any product "
                             "(take each sequence's valid positions, or replace the others first)")
    _expect(got, case, "the same case with NaN beyond each length")


def check_inputs_unchanged(fn):
    q, K, V, lengths = _inputs(DATA["grouped"])
    before = [a.copy() for a in (q, K, V, lengths)]
    for a in (q, K, V, lengths):
        a.flags.writeable = False
    try:
        fn(q, K, V, lengths)
    except ValueError as err:
        if "read-only" in str(err):
            raise AssertionError("your function wrote into one of its inputs (they were read-only here): "
                                 "q, K, V and lengths must be left as they are") from None
        raise
    for name, a, b in zip(("q", "K", "V", "lengths"), (q, K, V, lengths), before):
        assert np.array_equal(a, b), f"{name} changed"


def check_large_scores(fn):
    case = DATA["large_scores"]
    with np.errstate(all="ignore"):
        got = _call(fn, *_inputs(case))
    if np.asarray(got).shape == np.shape(case["expected"]) and not np.all(np.isfinite(got)):
        raise AssertionError("with scores of about 10^4 the output holds NaN or infinity: exp(10^4) overflows. "
                             "Subtract each (sequence, head)'s largest score over its valid positions before exp.")
    _expect(got, case, "the by-hand case with queries and keys 100 times longer (scores of about 10^4)")


CHECKS = [
    ("the output's shape, and q's dtype (float64 and float32)", check_shape),
    ("two sequences worked out by hand (one of length 1)", check_by_hand),
    ("grouped heads and different lengths", check_grouped),
    ("NaN beyond the lengths changes nothing", check_nan_beyond_lengths),
    ("the inputs are not modified", check_inputs_unchanged),
    ("scores of about 10^4 give no NaN", check_large_scores),
]
