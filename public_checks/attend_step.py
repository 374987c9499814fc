"""Public checks for the exercise ``attend_step(x_t, cache, p)`` (chapter 2).

A few small cases; the expected outputs (and what an answer that forgets to divide the scores
by sqrt(d) returns, or that keeps the cache newest row first) are stored in
``data/attend_step.json``.  The statement stresses two things these check: scores of about
10^4 must not give nan (subtract the maximum before exp), and the new row goes last.  The
hidden tests check more.
"""
import numpy as np

from ._data import array, load, mistake

DATA = load("attend_step")
SCALE_HINT = {"no_scale": "The scores seem not to be divided by sqrt(d)."}


def _empty(d):
    return {"k": np.zeros((0, d)), "v": np.zeros((0, d))}


def _weights(case):
    return {name: array(w) for name, w in case["p"].items()}


def _run(fn, X, p, d):
    cache, outs = _empty(d), []
    for x_t in X:
        result = fn(x_t, cache, p)
        assert isinstance(result, tuple) and len(result) == 2, (
            "attend_step should return a pair (out, new_cache)")
        out, cache = result
        outs.append(np.asarray(out, dtype=np.float64))
    return outs, cache


def check_first_step_shapes(fn):
    case = DATA["first_step_shapes"]
    out, new = fn(array(case["x"]), _empty(2), _weights(case))
    out = np.asarray(out)
    assert out.shape == (2,), f"with D = 3 and d = 2, out should have shape (2,), got {out.shape}"
    assert isinstance(new, dict) and set(new) >= {"k", "v"}, (
        "the new cache should be a dict with the keys 'k' and 'v'")
    for name in ("k", "v"):
        shape = np.shape(new[name])
        assert shape == (1, 2), (
            f"after one step from an empty cache, new_cache[{name!r}] should have shape (1, 2) "
            f"(one row of d = 2 numbers), got {shape}")


def check_first_step_is_own_value(fn):
    case = DATA["own_value"]
    out, _ = fn(array(case["x"]), _empty(3), _weights(case))
    out, v = np.asarray(out, dtype=np.float64), array(case["expected"])
    gap = float(np.max(np.abs(out - v))) if out.shape == v.shape else float("inf")
    assert gap < 1e-12, (
        f"the first token attends only to itself (weight 1), so out should be its value "
        f"x Wv = {np.round(v, 6).tolist()}; got {np.round(out, 6).tolist()}")


def check_three_tokens_by_hand(fn):
    case = DATA["three_tokens"]
    outs, cache = _run(fn, array(case["X"]), _weights(case), 2)
    for step, (got, want) in enumerate(zip(outs, case["expected"]), start=1):
        assert got.shape == (2,), f"step {step}: out should have shape (2,), got {got.shape}"
        gap = float(np.max(np.abs(got - want)))
        if gap > 1e-9:
            row = {"expected": want, "mistakes": {k: v[step - 1] for k, v in case["mistakes"].items()}}
            raise AssertionError(f"step {step}: out should be {np.round(want, 6).tolist()}, "
                                 f"got {np.round(got, 6).tolist()} (off by up to {gap:.1e}).{mistake(row, got.tolist(), SCALE_HINT)}")
    assert np.shape(cache["k"]) == (3, 2) and np.shape(cache["v"]) == (3, 2), (
        f"after three steps the cache should hold 3 rows, got shapes {np.shape(cache['k'])} "
        f"and {np.shape(cache['v'])}")


def check_input_cache_unchanged(fn):
    case = DATA["three_tokens"]
    k = np.array([[1.0, 0.0], [0.0, 1.0]])
    v = np.array([[1.0, 0.0], [0.0, 2.0]])
    k.flags.writeable = False
    v.flags.writeable = False
    cache = {"k": k, "v": v}
    try:
        fn(array(case["X"])[2], cache, _weights(case))
    except ValueError as err:
        if "read-only" in str(err):
            raise AssertionError("your function wrote into the arrays of the input cache "
                                 "(they were read-only here); build new arrays instead, "
                                 "for example with np.vstack") from None
        raise
    assert set(cache) == {"k", "v"}, f"the input cache's keys changed: {sorted(cache)}"
    for name, original in (("k", k), ("v", v)):
        now = cache[name]
        assert now is original, (
            f"the input cache's {name!r} was replaced by another array (now of shape {np.shape(now)}, "
            "it was (2, 2)): return a new dict instead of assigning into the one you were given")
    assert np.array_equal(k, [[1.0, 0.0], [0.0, 1.0]]) and np.array_equal(v, [[1.0, 0.0], [0.0, 2.0]]), (
        "the values in the input cache changed")


def check_random_against_causal_attention(fn):
    case = DATA["random"]
    X = array(case["X"])
    T, d = X.shape[0], len(case["p"]["Wq"][0])
    outs, _ = _run(fn, X, _weights(case), d)
    got, want = np.array(outs), array(case["expected"])
    assert got.shape == want.shape, f"expected {T} outputs of shape ({d},), got an array of shape {got.shape}"
    rel = float(np.max(np.linalg.norm(got - want, axis=1) / np.linalg.norm(want, axis=1)))
    assert rel < 1e-10, (
        f"decoding {T} random tokens one by one should give the rows of full causal attention; "
        f"the largest relative difference is {rel:.1e}.{mistake(case, got.tolist(), SCALE_HINT)}")


def check_cache_rows_in_order(fn):
    case = DATA["three_tokens"]
    _, cache = _run(fn, array(case["X"]), _weights(case), 2)
    for name in ("k", "v"):
        got = np.asarray(cache[name], dtype=np.float64)
        want = case["cache"][name]
        if got.shape == (3, 2) and np.allclose(got, want, rtol=0, atol=1e-12):
            continue
        hint = ""
        if got.shape == (3, 2) and np.allclose(got, case["cache_new_row_first"][name], rtol=0, atol=1e-12):
            hint = (" The new row seems to be put first: the cache keeps its rows in the order of the "
                    "tokens, oldest first, and the new token's row goes last.")
        raise AssertionError(f"after three steps, new_cache[{name!r}] should hold the rows "
                             f"{np.round(want, 6).tolist()} (token 0 first), got "
                             f"{np.round(got, 6).tolist()}.{hint}")


def check_large_scores(fn):
    case = DATA["large_scores"]
    with np.errstate(all="ignore"):
        outs, _ = _run(fn, array(case["X"]), _weights(case), 2)
    got, want = np.array(outs), array(case["expected"])
    if not np.all(np.isfinite(got)):
        raise AssertionError("with scores of about 10^4 the output holds nan or inf: exp(10^4) overflows. "
                             "Subtract the largest score from every score before exp (the weights do not "
                             "change, and the largest exponent becomes exp(0) = 1).")
    gap = float(np.max(np.abs(got - want)))
    assert gap < 1e-9, (f"with scores of about 10^4 the outputs should be {np.round(want, 6).tolist()}, got "
                        f"{np.round(got, 6).tolist()} (off by up to {gap:.1e}).{mistake(case, got.tolist(), SCALE_HINT)}")


CHECKS = [
    ("first step from an empty cache: shapes", check_first_step_shapes),
    ("first step: the output is the token's own value", check_first_step_is_own_value),
    ("three tokens worked out by hand", check_three_tokens_by_hand),
    ("the input cache is not modified", check_input_cache_unchanged),
    ("random tokens: equal to full causal attention, row by row", check_random_against_causal_attention),
    ("the cache keeps its rows oldest first, the new one last", check_cache_rows_in_order),
    ("scores of about 10^4 give no nan", check_large_scores),
]
