"""Public checks for the exercise ``latent_attend_step(x_t, cache, p, n_heads)`` (chapter 12).

A few small cases; the expected outputs, the latents, and what an answer that forgets to divide
the scores by sqrt(d) (or divides by sqrt(r)) returns are stored in
``data/latent_attend_step.json``.  The statement stresses what two of them check: the input cache
is not modified, and scores of about 10^4 must not give nan.  The hidden tests check more.
"""
import numpy as np

from ._data import array, load, mistake

DATA = load("latent_attend_step")
SCALE_HINTS = {"no_scale": "The scores seem not to be divided by sqrt(d).",
               "latent_scale": "The scores seem divided by sqrt(r), the latent's width: divide by sqrt(d), "
                               "the width of one head."}


def _empty(r):
    return {"c": np.zeros((0, r))}


def _weights(case):
    return {name: array(w) for name, w in case["p"].items()}


def _run(fn, case):
    """Decode the case's tokens one by one from an empty cache: the outputs and the last cache."""
    p = _weights(case)
    cache, outs = _empty(p["Wdkv"].shape[1]), []
    for x_t in array(case["X"]):
        result = fn(x_t, cache, p, case["n_heads"])
        assert isinstance(result, tuple) and len(result) == 2, (
            "latent_attend_step should return a pair (out, new_cache)")
        out, cache = result
        outs.append(np.asarray(out, dtype=np.float64))
    return outs, cache


def _rows_match(case, outs, what):
    for step, (got, want) in enumerate(zip(outs, case["expected"]), start=1):
        assert got.shape == (len(want),), (
            f"{what}, step {step}: out should have shape (H d,) = ({len(want)},), got {got.shape}")
        gap = float(np.max(np.abs(got - want)))
        if gap > 1e-9:
            row = {"expected": want, "mistakes": {k: v[step - 1] for k, v in case["mistakes"].items()}}
            raise AssertionError(f"{what}, step {step}: out should be {np.round(want, 6).tolist()}, got "
                                 f"{np.round(got, 6).tolist()} (off by up to {gap:.1e})."
                                 f"{mistake(row, got.tolist(), SCALE_HINTS)}")


def check_first_step_shapes(fn):
    case = DATA["first_step_shapes"]
    out, new = fn(array(case["x"]), _empty(4), _weights(case), case["n_heads"])
    out = np.asarray(out)
    assert out.shape == (6,), f"with H = 3 heads of d = 2, out should have shape (6,), got {out.shape}"
    assert isinstance(new, dict) and set(new) == {"c"}, (
        f"the new cache should be a dict holding only 'c', the latents; it has {sorted(map(str, new)) if isinstance(new, dict) else type(new).__name__}")
    assert np.shape(new["c"]) == (1, 4), (
        f"after one step from an empty cache, new_cache['c'] should have shape (1, 4) (one latent of "
        f"r = 4 numbers), got {np.shape(new['c'])}")


def check_worked_example(fn):
    case = DATA["worked_example"]
    outs, cache = _run(fn, case)
    _rows_match(case, outs, "the worked example")
    assert np.allclose(np.asarray(cache["c"], dtype=np.float64), case["latents"], atol=1e-12), (
        f"after the three tokens the cache should hold the latents {case['latents']}, got "
        f"{np.round(np.asarray(cache['c'], dtype=np.float64), 6).tolist()}")


def check_input_cache_unchanged(fn):
    case = DATA["worked_example"]
    c = np.array([[1.0], [2.0]])
    c.flags.writeable = False
    cache = {"c": c}
    try:
        fn(array(case["X"])[2], cache, _weights(case), case["n_heads"])
    except ValueError as err:
        if "read-only" in str(err):
            raise AssertionError("your function wrote into the input cache's array (it was read-only "
                                 "here); build a new one instead, for example with np.vstack") from None
        raise
    assert set(cache) == {"c"} and cache["c"] is c, (
        "the input cache dict changed: return a new dict instead of assigning into the one you were given")
    assert np.array_equal(c, [[1.0], [2.0]]), "the values in the input cache changed"


def check_random_against_full_attention(fn):
    case = DATA["random"]
    outs, _ = _run(fn, case)
    _rows_match(case, outs, "6 random tokens, H = 3, d = 2, r = 4")


def check_one_head(fn):
    case = DATA["one_head"]
    outs, _ = _run(fn, case)
    _rows_match(case, outs, "one head (H = 1, d = 3, r = 2)")


def check_large_scores(fn):
    case = DATA["large_scores"]
    with np.errstate(all="ignore"):
        outs, _ = _run(fn, case)
    if not all(np.all(np.isfinite(o)) for o in outs):
        raise AssertionError("with scores of about 10^4 the output holds nan or inf: exp(10^4) overflows. "
                             "Subtract each head's largest score before exp (the weights do not change).")
    _rows_match(case, outs, "the worked example with Wq and Wuk 100 times larger (scores of about 10^4)")


CHECKS = [
    ("first step from an empty cache: shapes, and only latents kept", check_first_step_shapes),
    ("the worked example, three tokens one by one", check_worked_example),
    ("the input cache is not modified", check_input_cache_unchanged),
    ("random tokens: equal to full causal multi-head attention, row by row", check_random_against_full_attention),
    ("one head", check_one_head),
    ("scores of about 10^4 give no nan", check_large_scores),
]
