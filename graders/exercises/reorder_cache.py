"""Hidden tests of ``reorder_cache(cache, beam_idx)`` (chapter 7).

``cache`` is a list, one entry per layer, of dicts {"k", "v"} of arrays (B, G, T, d); the answer
is a new cache of the same form whose row i is a copy of old row beam_idx[i], in every layer, for
keys and values alike: (len(beam_idx), G, T, d) arrays of the input's dtype.  Indices may repeat
(two beams with one parent; one prompt expanded to K beams).  The input (the list, its dicts and
their arrays) is not modified.

The reference builds each new row by hand, one row at a time, with Python lists: no code shared
with an answer's fancy indexing.  That repeated rows do not share memory cannot be seen from the
grader's side (the arrays come back as data); the public checks write into the answer's rows to
test it, in the learner's own process.
"""
from __future__ import annotations

import numpy as np

from ..checks import Fail, describe, unchanged, with_right_answer
from ..registry import Call, Exercise, Ref, Test

FN = "reorder_cache"


# ------------------------------------------------------------------------------- reference


def reference(cache, beam_idx) -> list[dict]:
    """new[layer][name][i] = old[layer][name][beam_idx[i]], row by row."""
    rows = [int(i) for i in beam_idx]
    out = []
    for layer in cache:
        entry = {}
        for name in ("k", "v"):
            old = layer[name]
            entry[name] = np.array([np.array(old[i], copy=True) for i in rows], dtype=old.dtype).reshape(
                (len(rows),) + old.shape[1:])
        out.append(entry)
    return out


def _inverse(beam_idx):
    """The rows placed the other way round: new[beam_idx[i]] = old[i] (a permutation only)."""
    idx = [int(i) for i in beam_idx]
    if sorted(idx) != list(range(len(idx))):
        return None
    inverse = [0] * len(idx)
    for i, j in enumerate(idx):
        inverse[j] = i
    return inverse


# ---------------------------------------------------------------------------- checking


def _layers(value, n_layers: int, what: str = "the new cache") -> list:
    if not isinstance(value, (list, tuple)):
        raise Fail(f"{what} is {describe(value)}; expected a list of {n_layers} dicts (one per layer)")
    if len(value) != n_layers:
        raise Fail(f"{what} has {len(value)} entries; the cache has {n_layers} layers")
    for i, layer in enumerate(value):
        if not isinstance(layer, dict) or "k" not in layer or "v" not in layer:
            raise Fail(f"layer {i} of {what} is {describe(layer)}; expected a dict with 'k' and 'v'")
    return list(value)


def _diagnose(cache, beam_idx, layer: int, name: str, actual: np.ndarray) -> str | None:
    old = cache[layer][name]
    inverse = _inverse(beam_idx)
    if inverse is not None and np.array_equal(actual, old[inverse]):
        return ("its rows follow the inverse order: row i must be a copy of old row beam_idx[i] "
                "(new[i] = old[beam_idx[i]]), not the other way round")
    if np.array_equal(actual, old) and list(beam_idx) != list(range(old.shape[0])):
        return "it is the old array, not reordered"
    other = cache[layer]["v" if name == "k" else "k"]
    if np.array_equal(actual, other[[int(i) for i in beam_idx]]):
        return "it holds the other array's rows ('k' and 'v' swapped)"
    for axis, axis_name in ((1, "heads"), (2, "positions")):
        if old.shape[axis] == len(beam_idx) and np.array_equal(actual, np.take(old, beam_idx, axis=axis)):
            return f"it matches reordering the {axis_name} axis: beams are the first axis (B)"
    return None


def _check_cache(value, cache, beam_idx, expected, label: str = "") -> None:
    layers = _layers(value, len(cache), f"{label}the new cache")
    for i, (got_layer, want_layer) in enumerate(zip(layers, expected)):
        for name in ("k", "v"):
            got, want = got_layer[name], want_layer[name]
            where = f"{label}layer {i}, {name!r}"
            if not isinstance(got, np.ndarray):
                raise Fail(f"{where} is {describe(got)}; expected an array of shape {want.shape}")
            if got.shape != want.shape:
                raise Fail(f"{where} has shape {got.shape}; expected (len(beam_idx), G, T, d) = {want.shape}")
            if got.dtype != want.dtype:
                raise Fail(f"{where} has dtype {got.dtype}; the cache holds {want.dtype}: keep its dtype")
            if not np.array_equal(got, want):
                rows = [r for r in range(want.shape[0]) if not np.array_equal(got[r], want[r])]
                text = (f"{where}: {len(rows)} of {want.shape[0]} rows are not copies of the right old row "
                        f"(rows {', '.join(map(str, rows[:6]))}{', ...' if len(rows) > 6 else ''})")
                hint = _diagnose(cache, beam_idx, i, name, got)
                raise Fail(text + (f"; {hint}" if hint else ""))


def _cache(rng, n_layers, B, G, T, d, dtype=np.float64) -> list[dict]:
    return [{name: rng.standard_normal((B, G, T, d)).astype(dtype) for name in ("k", "v")}
            for _ in range(n_layers)]


def _shape(cache) -> str:
    B, G, T, d = cache[0]["k"].shape
    return f"{len(cache)} layer{'s' if len(cache) > 1 else ''}, B = {B}, G = {G}, T = {T}, d = {d}"


def _values_test(name, points, cases, anchor=None):
    """The new caches of ``cases`` against the reference.  ``anchor``: an ordinary case the test
    also calls, for a test whose answer is its input (the identity): it counts only together with
    the right answer there, so that returning the cache unchanged earns nothing."""
    expected = [reference(c, idx) for c, idx in cases]
    calls = [Call(FN, c) for c in cases] + ([Call(FN, anchor)] if anchor else [])

    def check(results):
        for k, ((cache, idx), exp) in enumerate(zip(cases, expected)):
            label = f"case {k + 1} of {len(cases)} ({_shape(cache)}): " if len(cases) > 1 else ""
            _check_cache(results[k].value, cache, idx, exp, label)
        if anchor:
            try:
                _check_cache(results[len(cases)].value, *anchor, reference(*anchor), "on an ordinary case, ")
            except Fail as fail:
                raise Fail(f"{fail} (this test counts only together with the right answer on an ordinary "
                           "case)") from None
    return Test(name, points, calls, check, step="case")


def _unmodified(before: list, after, what: str = "the input cache") -> None:
    """The list, its dicts and their arrays as they were (an array written into, or a dict entry
    replaced by another array, both show: the harness sends back the objects themselves)."""
    if not isinstance(after, list) or len(after) != len(before):
        raise Fail(f"{what} was modified: it now has {len(after) if isinstance(after, list) else 'no list of'} "
                   f"entries instead of {len(before)}")
    for i, (b, a) in enumerate(zip(before, after)):
        try:
            unchanged(b, a, f"layer {i} of {what}")
        except Fail as fail:
            raise Fail(f"{fail}: build new arrays and leave the cache you were given as it was "
                       "(the beam search still reads it)") from None


# ---------------------------------------------------------------------------- the tests


def make_tests() -> list[Test]:
    tests = []
    rng = np.random.default_rng(7101)
    tests.append(_values_test("a permutation of 4 beams (2 layers)", 2,
                              [(_cache(rng, 2, 4, 2, 5, 3), np.array([2, 0, 3, 1]))]))
    rng = np.random.default_rng(7102)
    identity = _cache(rng, 2, 3, 1, 4, 2)
    tests.append(_values_test("the identity: every beam keeps its own row", 1, [(identity, np.array([0, 1, 2]))],
                              anchor=(identity, np.array([2, 2, 0]))))
    rng = np.random.default_rng(7103)
    tests.append(_values_test("repeated parents: two beams continue beam 0, two continue beam 2", 2,
                              [(_cache(rng, 3, 4, 2, 6, 4), np.array([0, 0, 2, 2])),
                               (_cache(rng, 1, 5, 1, 3, 2), np.array([4, 1, 4, 4, 0]))]))
    rng = np.random.default_rng(7104)
    tests.append(_values_test("expanding one prompt to 4 beams (beam_idx = [0, 0, 0, 0])", 1,
                              [(_cache(rng, 2, 1, 2, 7, 3), np.array([0, 0, 0, 0]))]))
    rng = np.random.default_rng(7105)
    tests.append(_values_test("keeping fewer rows than there were (beam_idx = [3, 1])", 1,
                              [(_cache(rng, 2, 4, 2, 3, 2), np.array([3, 1]))]))
    rng = np.random.default_rng(7106)
    tests.append(_values_test("many layers (12), every one reordered the same way", 2,
                              [(_cache(rng, 12, 3, 2, 4, 2), np.array([1, 1, 0]))]))
    rng = np.random.default_rng(7107)
    tests.append(_values_test("beam_idx as a Python list", 1,
                              [(_cache(rng, 2, 3, 2, 3, 2), [2, 2, 0])]))

    rng = np.random.default_rng(7108)
    dtyped = [(_cache(rng, 2, 3, 2, 4, 3, dtype=np.float32), np.array([1, 0, 1])),
              (_cache(rng, 2, 2, 1, 5, 4, dtype=np.float16), np.array([1, 1]))]
    tests.append(_values_test("float32 and float16 caches keep their dtype", 1, dtyped))

    # the input is not modified: the list, its dicts, their arrays
    rng = np.random.default_rng(7109)
    kept, kept_idx = _cache(rng, 3, 4, 2, 3, 2), np.array([3, 3, 0, 1])

    def not_modified(results, cache=kept, idx=kept_idx):
        after = results[0].args_after
        _unmodified(cache, after[0])
        unchanged(idx, after[1], "beam_idx")
    tests.append(Test("the input cache (its list, dicts and arrays) and beam_idx are not modified", 2,
                      [Call(FN, (kept, kept_idx), capture_args=True)],
                      with_right_answer(not_modified, _values_test("", 0, [(kept, kept_idx)]).check)))

    # two reorders in a row equal one by the composed index: new2[i] = old[a[b[i]]]
    rng = np.random.default_rng(7110)
    chained, a, b = _cache(rng, 2, 4, 2, 5, 3), np.array([1, 1, 3, 0]), np.array([2, 0, 0, 1])
    composed = reference(chained, a[b])

    def two_steps(results, cache=chained):
        _check_cache(results[1].value, cache, a[b], composed, "after two reorders, ")
    tests.append(Test("two steps of beam search: reordering the reordered cache", 1,
                      [Call(FN, (chained, a)), Call(FN, (Ref(0), b))], two_steps, step="call"))

    rng = np.random.default_rng(7111)
    shaped = _cache(rng, 2, 3, 4, 6, 5)

    def structure(results):
        value = results[0].value
        if not isinstance(value, list):
            raise Fail(f"the new cache is {describe(value)}; expected a list (one dict per layer), "
                       "like the cache it was given")
        layers = _layers(value, 2)
        for i, layer in enumerate(layers):
            for name in ("k", "v"):
                got = layer[name]
                if not isinstance(got, np.ndarray) or got.shape != (2, 4, 6, 5):
                    raise Fail(f"layer {i}, {name!r} is {describe(got)}; expected shape "
                               "(len(beam_idx), G, T, d) = (2, 4, 6, 5)")
    tests.append(Test("returns a list of dicts {'k', 'v'} of shape (len(beam_idx), G, T, d)", 1,
                      [Call(FN, (shaped, np.array([2, 0])))],
                      with_right_answer(structure, _values_test("", 0, [(shaped, np.array([2, 0]))]).check)))

    rng = np.random.default_rng(7112)
    cases = []
    for _ in range(12):
        B = int(rng.integers(1, 7))
        cases.append((_cache(rng, int(rng.integers(1, 5)), B, int(rng.integers(1, 4)), int(rng.integers(1, 9)),
                             int(rng.integers(1, 6))), rng.integers(0, B, size=int(rng.integers(1, 7)))))
    tests.append(_values_test("12 random caches and indices (up to 4 layers, 6 beams, 8 positions)", 2, cases))
    return tests


EXERCISE = Exercise(name="reorder_cache", make_tests=make_tests)
