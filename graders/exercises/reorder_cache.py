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

import functools

import numpy as np

from ..checks import Fail, describe, unchanged, with_right_answer
from ..registry import Call, Exercise, Ref, Test, case

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


def _check_values(cases, expected, anchor, results):
    """Each case's new cache is the reference's; then the anchor's, if any."""
    for k, ((cache, idx), exp) in enumerate(zip(cases, expected)):
        label = f"case {k + 1} of {len(cases)} ({_shape(cache)}): " if len(cases) > 1 else ""
        _check_cache(results[k].value, cache, idx, exp, label)
    if anchor:
        try:
            _check_cache(results[len(cases)].value, *anchor, reference(*anchor), "on an ordinary case, ")
        except Fail as fail:
            raise Fail(f"{fail} (this test counts only together with the right answer on an ordinary "
                       "case)") from None


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


def _not_modified(args, results):
    cache, idx = args
    after = results[0].args_after
    _unmodified(cache, after[0])
    unchanged(idx, after[1], "beam_idx")


def _structure(args, results):
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


def _with_right_answer(prop, args, results):
    """``prop`` counting only together with the right answer on the same call."""
    right = functools.partial(_check_values, [args], [reference(*args)], None)
    return with_right_answer(functools.partial(prop, args), right)(results)


def _two_steps(cache, a, b, results):
    """Two reorders in a row equal one by the composed index: new2[i] = old[a[b[i]]]."""
    _check_cache(results[1].value, cache, a[b], reference(cache, a[b]), "after two reorders, ")


def values_test(name, points, cases, anchor=None) -> Test:
    """The new caches of ``cases`` against the reference.  ``anchor``: an ordinary case the test
    also calls, for a test whose answer is its input (the identity): it counts only together with
    the right answer there, so that returning the cache unchanged earns nothing."""
    calls = [Call(FN, c) for c in cases] + ([Call(FN, anchor)] if anchor else [])
    return case(name, points, calls, _check_values, cases, [reference(c, idx) for c, idx in cases], anchor,
                step="case")


def property_test(name, points, args, prop, capture_args=False) -> Test:
    """A property of one call, counting only together with the right answer."""
    return case(name, points, [Call(FN, args, capture_args)], _with_right_answer, prop, args)


def two_steps_test(name, points, cache, a, b) -> Test:
    return case(name, points, [Call(FN, (cache, a)), Call(FN, (Ref(0), b))], _two_steps, cache, a, b, step="call")


def _cases(seed, *rows, dtype=np.float64):
    """One case (cache, beam_idx) per ((n_layers, B, G, T, d), beam_idx), the caches drawn in turn
    from a generator seeded with ``seed``."""
    rng = np.random.default_rng(seed)
    return [(_cache(rng, *shape, dtype=dtype), idx) for shape, idx in rows]


def _identity(seed):
    """The identity and, as its anchor, an ordinary reorder of the same cache."""
    cache = _cache(np.random.default_rng(seed), 2, 3, 1, 4, 2)
    return [(cache, np.array([0, 1, 2]))], (cache, np.array([2, 2, 0]))


def _two_dtypes(seed):
    rng = np.random.default_rng(seed)
    return [(_cache(rng, 2, 3, 2, 4, 3, dtype=np.float32), np.array([1, 0, 1])),
            (_cache(rng, 2, 2, 1, 5, 4, dtype=np.float16), np.array([1, 1]))]


def _random_cases(seed, n):
    rng = np.random.default_rng(seed)
    cases = []
    for _ in range(n):
        B = int(rng.integers(1, 7))
        cases.append((_cache(rng, int(rng.integers(1, 5)), B, int(rng.integers(1, 4)), int(rng.integers(1, 9)),
                             int(rng.integers(1, 6))), rng.integers(0, B, size=int(rng.integers(1, 7)))))
    return cases


# ---------------------------------------------------------------------------- the tests


def make_tests() -> list[Test]:
    identity, anchor = _identity(7102)
    return [
        values_test("a permutation of 4 beams (2 layers)", 2, _cases(7101, ((2, 4, 2, 5, 3), np.array([2, 0, 3, 1])))),
        values_test("the identity: every beam keeps its own row", 1, identity, anchor=anchor),
        values_test("repeated parents: two beams continue beam 0, two continue beam 2", 2,
                    _cases(7103, ((3, 4, 2, 6, 4), np.array([0, 0, 2, 2])), ((1, 5, 1, 3, 2), np.array([4, 1, 4, 4, 0])))),
        values_test("expanding one prompt to 4 beams (beam_idx = [0, 0, 0, 0])", 1,
                    _cases(7104, ((2, 1, 2, 7, 3), np.array([0, 0, 0, 0])))),
        values_test("keeping fewer rows than there were (beam_idx = [3, 1])", 1,
                    _cases(7105, ((2, 4, 2, 3, 2), np.array([3, 1])))),
        values_test("many layers (12), every one reordered the same way", 2,
                    _cases(7106, ((12, 3, 2, 4, 2), np.array([1, 1, 0])))),
        values_test("beam_idx as a Python list", 1, _cases(7107, ((2, 3, 2, 3, 2), [2, 2, 0]))),
        values_test("float32 and float16 caches keep their dtype", 1, _two_dtypes(7108)),
        property_test("the input cache (its list, dicts and arrays) and beam_idx are not modified", 2,
                      *_cases(7109, ((3, 4, 2, 3, 2), np.array([3, 3, 0, 1]))), _not_modified, capture_args=True),
        two_steps_test("two steps of beam search: reordering the reordered cache", 1,
                       *_cases(7110, ((2, 4, 2, 5, 3), np.array([1, 1, 3, 0])))[0], np.array([2, 0, 0, 1])),
        property_test("returns a list of dicts {'k', 'v'} of shape (len(beam_idx), G, T, d)", 1,
                      *_cases(7111, ((2, 3, 4, 6, 5), np.array([2, 0]))), _structure),
        values_test("12 random caches and indices (up to 4 layers, 6 beams, 8 positions)", 2, _random_cases(7112, 12)),
    ]


EXERCISE = Exercise(name="reorder_cache", make_tests=make_tests)
