"""Public checks for the exercise ``reorder_cache(cache, beam_idx)`` (chapter 7).

A few small caches of whole numbers (so that a printed row says which old row it came from); the
expected caches, and what the rows placed the other way round give, are stored in
``data/reorder_cache.json``.  One check writes into the answer's rows to see that a row copied
from the same parent as another does not share its memory, something only a check that runs in
your own process can see.
"""
import numpy as np

from ._data import array, load

DATA = load("reorder_cache")


def _cache(case):
    return [{name: array(layer[name]) for name in ("k", "v")} for layer in case["cache"]]


def _layers(got, n):
    assert isinstance(got, list), f"reorder_cache should return a list (one dict per layer), got {type(got).__name__}"
    assert len(got) == n, f"the new cache should have {n} layers like the old one, got {len(got)}"
    for i, layer in enumerate(got):
        assert isinstance(layer, dict) and {"k", "v"} <= set(layer), (
            f"layer {i} of the new cache should be a dict with 'k' and 'v'")
    return got


def _expect(got, case, what):
    want = case["expected"]
    _layers(got, len(want))
    for i, (g, w) in enumerate(zip(got, want)):
        for name in ("k", "v"):
            arr, exp = np.asarray(g[name]), np.asarray(w[name])
            assert arr.shape == exp.shape, (
                f"{what}: layer {i}, {name!r} should have shape (len(beam_idx), G, T, d) = {exp.shape}, got {arr.shape}")
            if not np.array_equal(arr, exp):
                row = next(r for r in range(exp.shape[0]) if not np.array_equal(arr[r], exp[r]))
                hint = ""
                inverse = case.get("mistakes", {}).get("inverse")
                if inverse is not None and np.array_equal(arr, np.asarray(inverse[i][name])):
                    hint = (" The rows seem placed the other way round: row i must be a copy of old row "
                            "beam_idx[i] (new[i] = old[beam_idx[i]]).")
                raise AssertionError(
                    f"{what}: layer {i}, {name!r}, row {row} should be a copy of old row {case['beam_idx'][row]}, "
                    f"{exp[row].tolist()}; got {arr[row].tolist()}.{hint}")


def check_repeated_parents(fn):
    case = DATA["repeats"]
    _expect(fn(_cache(case), list(case["beam_idx"])), case, "beam_idx = [2, 0, 0]")


def check_permutation(fn):
    case = DATA["permutation"]
    _expect(fn(_cache(case), np.array(case["beam_idx"])), case, "beam_idx = [1, 3, 0, 2]")


def check_expansion(fn):
    case = DATA["expand"]
    _expect(fn(_cache(case), np.zeros(4, dtype=np.int64)), case, "one prompt expanded to 4 beams")


def check_input_unchanged(fn):
    case = DATA["permutation"]
    cache = _cache(case)
    arrays = [(layer["k"], layer["v"]) for layer in cache]
    for k, v in arrays:
        k.flags.writeable = False
        v.flags.writeable = False
    try:
        fn(cache, np.array(case["beam_idx"]))
    except ValueError as err:
        if "read-only" in str(err):
            raise AssertionError("your function wrote into the arrays of the input cache (they were read-only "
                                 "here): build new arrays instead") from None
        raise
    assert len(cache) == len(arrays), "the input cache list changed length"
    for i, (layer, (k, v)) in enumerate(zip(cache, arrays)):
        assert set(layer) == {"k", "v"} and layer["k"] is k and layer["v"] is v, (
            f"layer {i} of the input cache was changed (an entry replaced or added): return new dicts instead")
    for i, (layer, want) in enumerate(zip(cache, case["cache"])):
        assert np.array_equal(layer["k"], want["k"]) and np.array_equal(layer["v"], want["v"]), (
            f"the values in layer {i} of the input cache changed")


def check_rows_do_not_share_memory(fn):
    case = DATA["repeats"]
    for beam_idx in ([2, 0, 0], [0, 0, 0]):       # rows 1 and 2 both copy old row 0
        cache = _cache(case)
        new = _layers(fn(cache, list(beam_idx)), len(cache))
        for i, layer in enumerate(new):
            for name in ("k", "v"):
                arr = layer[name]
                assert isinstance(arr, np.ndarray) and arr.flags.writeable, (
                    f"layer {i}, {name!r} of the new cache cannot be written to: the beam search appends the "
                    "next token's key and value to every row, so give each row its own memory")
                assert not np.shares_memory(arr, cache[i][name]), (
                    f"layer {i}, {name!r} of the new cache shares memory with the input cache: writing a new "
                    "token into a beam would change the old cache too")
                keep_other, keep_input = arr[2].copy(), cache[i][name].copy()
                arr[1] += 1000.0               # beam 1 appends something of its own
                assert np.array_equal(arr[2], keep_other), (
                    f"with beam_idx = {beam_idx}, writing into row 1 of layer {i}, {name!r} changed row 2: the "
                    "two rows copy the same parent but share memory, so one beam's next token would overwrite "
                    "the other's")
                assert np.array_equal(cache[i][name], keep_input), (
                    f"writing into row 1 of layer {i}, {name!r} of the new cache changed the input cache")
    cache = _cache(case)
    same = _layers(fn(cache, [0, 1, 2]), len(cache))          # the identity: still a new cache
    for i, layer in enumerate(same):
        for name in ("k", "v"):
            assert not np.shares_memory(np.asarray(layer[name]), cache[i][name]), (
                f"with beam_idx = [0, 1, 2] (every beam keeps its row), layer {i}, {name!r} of the new cache is "
                "the input's own memory: return copies even then, since the caller will write into them")


CHECKS = [
    ("repeated parents: beam_idx = [2, 0, 0]", check_repeated_parents),
    ("a permutation of 4 beams", check_permutation),
    ("one prompt expanded to 4 beams", check_expansion),
    ("the input cache is not modified", check_input_unchanged),
    ("repeated rows do not share memory", check_rows_do_not_share_memory),
]
