"""Hidden tests of ``attend_step(x_t, cache, p)`` (chapter 2).

One decode step of one attention head with a KV cache: q, k, v = x_t W; append k and v as a new
row of the cache; scores = K q / sqrt(d); stable softmax; out = weights V.  Returns
``(out, new_cache)``; the input cache (the dict and its arrays) must not change.  Decoding token
by token must give the rows of full causal attention.

The reference below computes each step the long way, from the whole prefix of tokens (row t of
causal attention), so it shares no code path with an incremental answer.
"""
from __future__ import annotations

import math

import numpy as np

from ..checks import Fail, as_array, check_array, describe, unchanged, with_right_answer
from ..registry import Call, Exercise, Ref, Test

FN = "attend_step"


# ------------------------------------------------------------------------------- reference


def _weights(scores: np.ndarray) -> np.ndarray:
    """Softmax of a vector through the log-sum-exp: exp(s - (m + log sum exp(s - m)))."""
    m = float(np.max(scores))
    log_total = m + math.log(float(np.sum(np.exp(scores - m))))
    return np.exp(scores - log_total)


def _row(q, keys, values, scale=None):
    """Attention of one query over the given keys and values."""
    d = q.shape[0]
    scale = math.sqrt(d) if scale is None else scale
    scores = np.array([float(np.dot(key, q)) for key in keys]) / scale
    return _weights(scores) @ values


def causal_rows(X, p):
    """Row t of causal attention of the token sequence X, for every t: the expected outputs of
    decoding X token by token from an empty cache."""
    Q, K, V = X @ p["Wq"], X @ p["Wk"], X @ p["Wv"]
    return np.array([_row(Q[t], K[: t + 1], V[: t + 1]) for t in range(X.shape[0])])


def step(x, cache, p):
    """The expected (out, new k, new v) of one step from a given cache."""
    q, k, v = x @ p["Wq"], x @ p["Wk"], x @ p["Wv"]
    keys = np.vstack([cache["k"], k[None, :]])
    values = np.vstack([cache["v"], v[None, :]])
    return _row(q, keys, values), keys, values


# ---------------------------------------------------------------------------- diagnosis


def _diagnose(x, cache, p, actual):
    """Name a common mistake when ``actual`` matches it (said alongside the error)."""
    q, k, v = x @ p["Wq"], x @ p["Wk"], x @ p["Wv"]
    keys = np.vstack([cache["k"], k[None, :]])
    values = np.vstack([cache["v"], v[None, :]])
    d = q.shape[0]
    variants = {
        "it matches scores that are not divided by sqrt(d)": lambda: _row(q, keys, values, scale=1.0),
        "it matches scores divided by d instead of sqrt(d)": lambda: _row(q, keys, values, scale=d),
        "it matches attending over the old cache only: append the new key and value first":
            lambda: _row(q, cache["k"], cache["v"]) if cache["k"].shape[0] else None,
        "it matches keys and values swapped": lambda: _row(q, values, keys),
        "it matches a query made with Wk instead of Wq": lambda: _row(k, keys, values),
    }
    for text, make in variants.items():
        try:
            guess = make()
        except Exception:  # noqa: BLE001 - a variant that does not apply
            continue
        if guess is not None and guess.shape == actual.shape and np.allclose(actual, guess, rtol=1e-7, atol=1e-10):
            return text
    return None


# ------------------------------------------------------------------------------ checking


def _unpack(value, what="attend_step"):
    """(out, new_cache) of a returned value, or a Fail that says what came back instead."""
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        raise Fail(f"{what} should return a pair (out, new_cache); it returned {describe(value)}")
    out, new_cache = value
    if not isinstance(new_cache, dict) or "k" not in new_cache or "v" not in new_cache:
        raise Fail(f"the new cache should be a dict with 'k' and 'v'; it is {describe(new_cache)}")
    return out, new_cache


def _decode_calls(X, p, d):
    """Token-by-token decoding: step t gets the cache that step t - 1 returned."""
    empty = {"k": np.zeros((0, d)), "v": np.zeros((0, d))}
    calls = [Call(FN, (X[0], empty, p))]
    calls += [Call(FN, (X[t], Ref(t - 1, (1,)), p)) for t in range(1, X.shape[0])]
    return calls


def _check_decoding(sequences):
    """Check a test made of one or more decoding runs laid end to end (``sequences`` is a list of
    (X, p) in call order).  Each step's output must be the matching row of causal attention."""
    expected_rows = [causal_rows(X, p) for X, p in sequences]

    def check(results):
        k = 0
        for number, ((X, p), rows) in enumerate(zip(sequences, expected_rows), start=1):
            label = f"sequence {number} of {len(sequences)}, " if len(sequences) > 1 else ""
            cache = {"k": np.zeros((0, rows.shape[1])), "v": np.zeros((0, rows.shape[1]))}
            for t in range(X.shape[0]):
                where = f"{label}step {t + 1} of {X.shape[0]}"
                out, new_cache = _unpack(results[k].value, f"{where}: attend_step")
                check_array(out, rows[t], f"{where}: the output",
                            hint=lambda a, x=X[t], c=cache, p=p: _diagnose(x, c, p, a))
                _, keys, values = step(X[t], cache, p)
                cache = {"k": keys, "v": values}
                k += 1
    return check


def _with_a_right_answer(prop, x, cache, p):
    """``prop`` (a check of a property: the inputs left as they were, the shapes) counting only
    together with the right answer on the same call: an answer that computes nothing leaves its
    inputs alone too."""
    out, keys, values = step(x, cache, p)

    def right(results):
        got, new = _unpack(results[0].value)
        check_array(got, out, "the output", hint=lambda a: _diagnose(x, cache, p, a))
        for key, expected in (("k", keys), ("v", values)):
            check_array(new[key], expected, f"new_cache[{key!r}]")
    return with_right_answer(prop, right)


def _random_params(rng, D, d, scale=1.0):
    return {name: rng.standard_normal((D, d)) * scale for name in ("Wq", "Wk", "Wv")}


def _random_cache(rng, t, d):
    return {"k": rng.standard_normal((t, d)), "v": rng.standard_normal((t, d))}


def _decode_test(name, points, sequences):
    calls = []
    for X, p in sequences:
        base = len(calls)
        d = p["Wq"].shape[1]
        for call in _decode_calls(X, p, d):
            args = tuple(Ref(a.call + base, a.path) if isinstance(a, Ref) else a for a in call.args)
            calls.append(Call(FN, args))
    return Test(name, points, calls, _check_decoding(sequences), step="call")


# --------------------------------------------------------------------------------- the tests


def make_tests() -> list[Test]:
    tests = []

    # The statement's worked example: D = d = 2, Wq = Wk = I, Wv = diag(1, 2).
    X = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    p = {"Wq": np.eye(2), "Wk": np.eye(2), "Wv": np.diag([1.0, 2.0])}
    tests.append(_decode_test("the worked example of the statement, three tokens one by one", 2, [(X, p)]))

    # t = 0: one key, weight 1, so the output is the new token's value.
    rng = np.random.default_rng(1001)
    x, p = rng.standard_normal(4), _random_params(rng, 4, 3)
    empty = {"k": np.zeros((0, 3)), "v": np.zeros((0, 3))}
    out0, _, _ = step(x, empty, p)

    def first_step(results, expected=out0, x=x, p=p):
        out, _ = _unpack(results[0].value)
        check_array(out, expected, "the output of the first step",
                    hint=lambda a: _diagnose(x, empty, p, a))
    tests.append(Test("the first step, from an empty cache (t = 0): the output is the new value", 1,
                      [Call(FN, (x, empty, p))], first_step))

    # t = 1: one cached token, two weights.
    rng = np.random.default_rng(1013)
    x1, p1, cache1 = rng.standard_normal(3), _random_params(rng, 3, 2), _random_cache(rng, 1, 2)
    out1, _, _ = step(x1, cache1, p1)

    def second_step(results, expected=out1, x=x1, p=p1, cache=cache1):
        out, _ = _unpack(results[0].value)
        check_array(out, expected, "the output", hint=lambda a: _diagnose(x, cache, p, a))
    tests.append(Test("one step from a cache of one token (t = 1)", 1, [Call(FN, (x1, cache1, p1))],
                      second_step))

    # One step from a given cache of 5 tokens.
    rng = np.random.default_rng(1002)
    x, p, cache = rng.standard_normal(6), _random_params(rng, 6, 4), _random_cache(rng, 5, 4)
    out5, _, _ = step(x, cache, p)

    def from_cache(results, expected=out5, x=x, p=p, cache=cache):
        out, _ = _unpack(results[0].value)
        check_array(out, expected, "the output", hint=lambda a: _diagnose(x, cache, p, a))
    tests.append(Test("one step from a cache of 5 tokens (D = 6, d = 4)", 1, [Call(FN, (x, cache, p))],
                      from_cache))

    # The new cache: the old rows, then the new key and value.
    rng = np.random.default_rng(1003)
    x, p, cache = rng.standard_normal(5), _random_params(rng, 5, 3), _random_cache(rng, 4, 3)
    _, keys, values = step(x, cache, p)

    def new_cache_rows(results, keys=keys, values=values):
        _, new = _unpack(results[0].value)
        for key, expected, what in (("k", keys, "key"), ("v", values, "value")):
            arr = new[key]
            if not isinstance(arr, np.ndarray):
                raise Fail(f"new_cache[{key!r}] is {describe(arr)}; expected an array")
            if arr.ndim != 2 or arr.shape[1] != expected.shape[1]:
                raise Fail(f"new_cache[{key!r}] has shape {arr.shape}; expected (t + 1, d) = {expected.shape}")
            if arr.shape[0] != expected.shape[0]:
                raise Fail(f"new_cache[{key!r}] has {arr.shape[0]} rows; after one step from a cache of "
                           f"{expected.shape[0] - 1} rows it should have {expected.shape[0]}")
            other = values if key == "k" else keys
            if np.allclose(arr, other, rtol=1e-9, atol=1e-12) and not np.allclose(expected, other):
                raise Fail("new_cache['k'] and new_cache['v'] look swapped")
            check_array(arr[:-1], expected[:-1], f"the old rows of new_cache[{key!r}]")
            check_array(arr[-1], expected[-1], f"the last row of new_cache[{key!r}] (the new {what}, x_t W_{key})")
    tests.append(Test("the new cache: the old rows, then the new key and value as the last row", 2,
                      [Call(FN, (x, cache, p))], new_cache_rows))

    # The input cache: the dict keeps its entries.
    rng = np.random.default_rng(1004)
    x, p, cache = rng.standard_normal(4), _random_params(rng, 4, 2), _random_cache(rng, 3, 2)

    def dict_unchanged(results, cache=cache):
        after = results[0].args_after
        unchanged({k: v.shape for k, v in cache.items()},
                  {k: getattr(v, "shape", v) for k, v in after[1].items()} if isinstance(after[1], dict)
                  else after[1], "the input cache")
        unchanged(cache, after[1], "the input cache")
    tests.append(Test("the input cache dict is left as it was (same keys, same arrays)", 1,
                      [Call(FN, (x, cache, p), capture_args=True)], _with_a_right_answer(dict_unchanged, x, cache, p)))

    # The input arrays: not modified in place (even when the dict entries were replaced).
    rng = np.random.default_rng(1005)
    x, p, cache = rng.standard_normal(3), _random_params(rng, 3, 3), _random_cache(rng, 6, 3)

    def arrays_unchanged(results, x=x, p=p, cache=cache):
        original = results[0].originals_after
        unchanged(cache, original[1], "the input cache")
        unchanged(x, original[0], "x_t")
        unchanged(p, original[2], "the parameters p")
    tests.append(Test("the input cache arrays (and x_t, p) are not modified in place", 1,
                      [Call(FN, (x, cache, p), capture_args=True)],
                      _with_a_right_answer(arrays_unchanged, x, cache, p)))

    # Decoding token by token equals causal attention.
    rng = np.random.default_rng(1006)
    X, p = rng.standard_normal((9, 7)), _random_params(rng, 7, 5)
    tests.append(_decode_test("decoding 9 tokens one by one gives the rows of causal attention "
                              "(D = 7, d = 5)", 3, [(X, p)]))

    # d = 1.
    rng = np.random.default_rng(1007)
    X, p = rng.standard_normal((6, 3)), _random_params(rng, 3, 1)
    tests.append(_decode_test("head width d = 1 (6 tokens, D = 3)", 1, [(X, p)]))

    # Large scores: without subtracting the maximum, exp overflows.
    rng = np.random.default_rng(1008)
    X = rng.standard_normal((5, 4)) * 30.0
    p = {"Wq": rng.standard_normal((4, 4)) * 10.0, "Wk": rng.standard_normal((4, 4)) * 10.0,
         "Wv": rng.standard_normal((4, 4))}
    tests.append(_decode_test("large scores (about 10^4): the softmax must be stable", 1, [(X, p)]))

    # Shape and dtype of out.
    rng = np.random.default_rng(1009)
    x, p, cache = rng.standard_normal(5), _random_params(rng, 5, 3), _random_cache(rng, 2, 3)

    def out_shape(results):
        out, _ = _unpack(results[0].value)
        if not isinstance(out, np.ndarray):
            raise Fail(f"out is {describe(out)}; expected a numpy array of shape (d,) = (3,)")
        if out.shape != (3,):
            raise Fail(f"out has shape {out.shape}; expected (d,) = (3,), a vector, not a table")
        if out.dtype != np.float64:
            raise Fail(f"out has dtype {out.dtype}; expected float64 for float64 inputs")
    tests.append(Test("out has shape (d,) and dtype float64", 1, [Call(FN, (x, cache, p))],
                      _with_a_right_answer(out_shape, x, cache, p)))

    # The structure of what comes back.
    rng = np.random.default_rng(1010)
    x, p, cache = rng.standard_normal(4), _random_params(rng, 4, 2), _random_cache(rng, 1, 2)

    def structure(results):
        _, new = _unpack(results[0].value)
        for key in ("k", "v"):
            arr = new[key]
            if not isinstance(arr, np.ndarray) or arr.shape != (2, 2):
                raise Fail(f"new_cache[{key!r}] is {describe(arr)}; expected an array of shape (t + 1, d) = (2, 2)")
    tests.append(Test("returns (out, new_cache), new_cache a dict of 'k' and 'v' of shape (t + 1, d)", 1,
                      [Call(FN, (x, cache, p))], _with_a_right_answer(structure, x, cache, p)))

    # A long cache.
    rng = np.random.default_rng(1011)
    x, p, cache = rng.standard_normal(16), _random_params(rng, 16, 8, 0.25), _random_cache(rng, 300, 8)
    out_long, _, _ = step(x, cache, p)

    def long_cache(results, expected=out_long):
        out, _ = _unpack(results[0].value)
        check_array(out, expected, "the output", hint=lambda a: _diagnose(x, cache, p, a))
    tests.append(Test("one step from a long cache (t = 300, D = 16, d = 8)", 1, [Call(FN, (x, cache, p))],
                      long_cache))

    # Many random decoding runs of non-round sizes.
    rng = np.random.default_rng(1012)
    sequences = []
    for D, d, T in [(3, 2, 4), (5, 7, 6), (8, 3, 11), (2, 5, 3), (11, 6, 7), (4, 4, 13)]:
        sequences.append((rng.standard_normal((T, D)), _random_params(rng, D, d)))
    tests.append(_decode_test("six random decoding runs of non-round sizes (D from 2 to 11, d from 2 to 7)",
                              3, sequences))
    return tests


EXERCISE = Exercise(name="attend_step", make_tests=make_tests)
