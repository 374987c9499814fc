"""The hidden tests of batched_decode_step (chapter 5) and reorder_cache (chapter 7): their
references agree with the engine (written apart: the grader never imports it), common mistakes
lose points with a diagnosis, and the feedback never shows a hidden input or expected value."""
import re

import numpy as np
import pytest

from graders import registry
from graders.exercises import batched_decode_step as ex_bds
from graders.exercises import reorder_cache as ex_rc

from grader_helpers import failed_outputs, grade_text

GOOD_BDS = """
import math
import numpy as np

def batched_decode_step(q, K, V, lengths):
    B, H, d = q.shape
    r = H // K.shape[1]
    out = np.empty_like(q)
    for b in range(B):
        n = int(lengths[b])
        keys = np.repeat(K[b, :, :n], r, axis=0)          # (H, n, d)
        values = np.repeat(V[b, :, :n], r, axis=0)
        s = np.einsum("hnd,hd->hn", keys, q[b]) / math.sqrt(d)
        w = np.exp(s - s.max(axis=-1, keepdims=True))
        out[b] = np.einsum("hn,hnd->hd", w / w.sum(axis=-1, keepdims=True), values)
    return out
"""

GOOD_RC = """
import numpy as np

def reorder_cache(cache, beam_idx):
    idx = np.asarray(beam_idx, dtype=np.int64)
    return [{"k": layer["k"][idx], "v": layer["v"][idx]} for layer in cache]
"""


def test_both_are_registered_with_sound_tests():
    for name, chapter in (("batched_decode_step", 5), ("reorder_cache", 7)):
        ex = registry.get(name)
        assert ex.chapter == chapter and ex.functions == (name,)
        tests = registry.tests(name)
        assert len(tests) >= 10 and len({t.name for t in tests}) == len(tests)
        assert not re.search(r"\bseed|issue|#\d", " ".join(t.name for t in tests), flags=re.IGNORECASE)


def test_the_batched_reference_agrees_with_the_engine():
    from kvcache.gqa import batched_decode_step, decode_attention
    rng = np.random.default_rng(0)
    for _ in range(30):
        G = int(rng.integers(1, 4))
        H, B, L, d = G * int(rng.integers(1, 4)), int(rng.integers(1, 5)), int(rng.integers(1, 10)), int(rng.integers(1, 7))
        q, K, V = rng.standard_normal((B, H, d)), rng.standard_normal((B, G, L, d)), rng.standard_normal((B, G, L, d))
        lengths = rng.integers(1, L + 1, size=B)
        want = ex_bds.reference(q, K, V, lengths)
        np.testing.assert_allclose(want, decode_attention(q, K, V, lengths), rtol=1e-10, atol=1e-12)
        for b, n in enumerate(lengths):           # anything beyond a length: the exercise's contract
            K[b, :, n:], V[b, :, n:] = np.inf, np.nan
        np.testing.assert_allclose(want, batched_decode_step(q, K, V, lengths), rtol=1e-10, atol=1e-12)


def test_the_reorder_reference_agrees_with_the_engine():
    from kvcache.cache import reorder_cache
    from kvcache.layouts import new_cache
    rng = np.random.default_rng(1)
    for _ in range(20):
        n_layers, B, G, T, d = (int(v) for v in rng.integers(1, 5, size=5))
        idx = rng.integers(0, B, size=int(rng.integers(1, B + 1)))
        kv = new_cache("contiguous", n_layers=n_layers, batch=B, kv_heads=G, head_dim=d, max_len=T,
                       dtype="float64", compute_dtype=np.float64)
        plan = kv.reserve(np.full(B, T))
        for layer in kv:
            layer.update(rng.standard_normal((B * T, G, d)), rng.standard_normal((B * T, G, d)), plan)
        cache = kv.as_dicts()
        kv.reorder(idx)
        for want, got, plain in zip(kv.as_dicts(), ex_rc.reference(cache, idx), reorder_cache(cache, idx)):
            for name in ("k", "v"):
                assert np.array_equal(want[name], got[name]) and np.array_equal(plain[name], got[name])
                assert not np.shares_memory(plain[name], cache[0][name])


def test_good_answers_get_full_marks():
    for source, name in ((GOOD_BDS, "batched_decode_step"), (GOOD_RC, "reorder_cache")):
        result = grade_text(source, name)
        assert result["status"] == "ok" and result["score"] == result["max_score"], failed_outputs(result)


WRONG = [
    ("batched_decode_step", GOOD_BDS.replace("np.repeat(K[b, :, :n], r, axis=0)", "np.tile(K[b, :, :n], (r, 1, 1))")
     .replace("np.repeat(V[b, :, :n], r, axis=0)", "np.tile(V[b, :, :n], (r, 1, 1))"), "reads head h // (H / G)"),
    ("batched_decode_step", GOOD_BDS.replace("n = int(lengths[b])", "n = K.shape[2]"),
     "each sequence must stop at its own length"),
    ("batched_decode_step", GOOD_BDS.replace(" / math.sqrt(d)", ""), "not divided by sqrt(d)"),
    ("batched_decode_step", GOOD_BDS.replace("n = int(lengths[b])", "n = max(1, int(lengths[b]) - 1)"),
     "one position too few"),
    ("batched_decode_step", """
import math
import numpy as np

def batched_decode_step(q, K, V, lengths):
    B, H, d = q.shape
    G, L = K.shape[1], K.shape[2]
    keys, values = np.repeat(K, H // G, axis=1), np.repeat(V, H // G, axis=1)
    s = np.einsum("bhld,bhd->bhl", keys, q) / math.sqrt(d)
    s = np.where(np.arange(L)[None, None, :] < np.asarray(lengths)[:, None, None], s, -np.inf)
    w = np.exp(s - s.max(axis=-1, keepdims=True))
    return np.einsum("bhl,bhld->bhd", w / w.sum(axis=-1, keepdims=True), values)
""", "0 times NaN is still NaN"),
    ("batched_decode_step", GOOD_BDS.replace("out = np.empty_like(q)", "out = np.empty(q.shape)"),
     "for float32 inputs it should be float32"),
    ("reorder_cache", """
import numpy as np

def reorder_cache(cache, beam_idx):
    idx = np.asarray(beam_idx)
    if sorted(idx.tolist()) == list(range(len(idx))):
        idx = np.argsort(idx)
    return [{"k": layer["k"][idx], "v": layer["v"][idx]} for layer in cache]
""", "inverse order"),
    ("reorder_cache", """
import numpy as np

def reorder_cache(cache, beam_idx):
    for layer in cache:
        layer["k"], layer["v"] = layer["k"][np.asarray(beam_idx)], layer["v"][np.asarray(beam_idx)]
    return cache
""", "leave the cache you were given as it was"),
    ("reorder_cache", """
import numpy as np

def reorder_cache(cache, beam_idx):
    return [{"k": layer["k"][np.asarray(beam_idx)], "v": layer["v"]} for layer in cache]
""", "it is the old array, not reordered"),
    ("reorder_cache", """
import numpy as np

def reorder_cache(cache, beam_idx):
    return [{"k": np.take(l["k"], beam_idx, axis=2), "v": np.take(l["v"], beam_idx, axis=2)} for l in cache]
""", "beams are the first axis"),
    ("reorder_cache", """
import numpy as np

def reorder_cache(cache, beam_idx):
    idx = np.asarray(beam_idx)
    return [{n: layer[n][idx].astype(np.float64) for n in ("k", "v")} for layer in cache]
""", "keep its dtype"),
]


@pytest.mark.parametrize("exercise, source, words", WRONG, ids=[f"{w[0]}-{i}" for i, w in enumerate(WRONG)])
def test_common_mistakes_lose_points_with_a_diagnosis(exercise, source, words):
    result = grade_text(source, exercise)
    assert result["status"] == "ok" and 0 <= result["score"] < result["max_score"]
    assert any(words in out for out in failed_outputs(result)), failed_outputs(result)


_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?:e[-+]?\d+)?")


@pytest.mark.parametrize("exercise, body", [
    ("batched_decode_step", "import numpy as np\ndef batched_decode_step(q, K, V, lengths):\n"
                            "    return 0.5 * q + 0.25\n"),
    ("reorder_cache", "import numpy as np\ndef reorder_cache(cache, beam_idx):\n"
                      "    idx = np.asarray(beam_idx)\n"
                      "    return [{n: l[n][idx] * 0.5 + 0.125 for n in ('k', 'v')} for l in cache]\n"),
])
def test_feedback_never_reveals_expected_values(exercise, body):
    result = grade_text(body, exercise)
    assert result["score"] < result["max_score"]
    for out in failed_outputs(result):
        for token in _NUMBER.findall(out.split("relative error")[0].replace("relative to the largest entry", "")):
            if "e" in token:
                assert re.fullmatch(r"-?\d\.\de[-+]\d+", token), (token, out)
            else:                                   # counts, shapes, sizes, positions
                assert abs(float(token)) <= 1000, (token, out)
