"""The registry and the hidden tests: references, independence, feedback.

The grader's references are cross-checked against the course's engine (``kvcache``): two
implementations written apart that agree.  The grader itself never imports the engine.
"""
import ast
import math
import re
from pathlib import Path

import numpy as np
import pytest

from graders import registry
from graders.exercises import attend_step as ex_attend
from graders.exercises import arithmetic_intensity as ex_ai
from graders.exercises import causal_attention as ex_causal
from graders.exercises import kv_cache_bytes as ex_kv
from graders.exercises import max_batch as ex_mb
from graders.exercises import prefill_time as ex_pf
from graders.exercises import softmax as ex_softmax
from graders.exercises import time_per_token as ex_tpt

from grader_helpers import GOOD, ROOT, failed_outputs, grade_text

EXERCISES = {"softmax", "causal_attention", "attend_step", "kv_cache_bytes", "max_batch",
             "arithmetic_intensity", "time_per_token", "prefill_time"}


def test_the_registry_has_every_exercise_with_sound_tests():
    assert EXERCISES <= set(registry.names())
    for name in registry.names():
        ex = registry.get(name)
        tests, items = registry.tests(name), registry.items(name)
        assert ex.name == name and ex.functions and len(tests) >= 5 and len(items) >= 5
        assert len({t.id for t in tests}) == len(tests) and len({t.name for t in tests}) == len(tests)
        assert len({i.name for i in items}) == len(items)
        assert all(i.points >= 0 and i.visibility == "visible" for i in items) and sum(i.points for i in items) > 0
        if ex.report is None:           # one entry per test: each is worth something
            assert all(t.points > 0 for t in tests) and [i.name for i in items] == [t.name for t in tests]
        assert all(c.fn in ex.functions for t in tests for c in t.calls)
    with pytest.raises(KeyError, match="no exercise named"):
        registry.get("no_such_exercise")


# The GA-2 exercise whose answer is a program runs it on the machine the learner programs: the
# simulator and its limits, never the course's program builder or arithmetic.
MACHINE_USERS = {"attention_tail.py": {"ga2.machine", "ga2.limits"}}
# Exercises whose question is about ga2 itself may import it (and only it): mutants asks what
# ga2's own checks make of mutants of ga2's own builder, so its grader runs them.
GA2_QUESTIONS = {"mutants.py"}


@pytest.mark.parametrize("path", sorted((ROOT / "graders").rglob("*.py")), ids=lambda p: p.name)
def test_the_grader_imports_nothing_of_the_course(path):
    tree = ast.parse(path.read_text())
    full = {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and not n.level}
    full |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    in_exercises = "exercises" in path.parts
    if in_exercises and path.name in GA2_QUESTIONS:
        allowed = {name for name in full if name.split(".")[0] == "ga2"}
    else:
        allowed = MACHINE_USERS.get(path.name, set()) if in_exercises else set()
        assert full & {"ga2", "ga2.attn", "ga2.quant"} == set()
    imported = {name.split(".")[0] for name in full - allowed}
    assert not imported & {"kvcache", "ga2", "solutions"}
    if "exercises" in path.parts:
        assert "public_checks" not in imported


def test_reference_figures_of_the_seeds():
    assert ex_kv.reference(32, 32, 128, 8192, 2) == 4 * 2 ** 30
    assert ex_kv.reference(32, 8, 128, 8192, 2) == 2 ** 30
    assert ex_ai.reference(4096, 128, 2) == pytest.approx((4 * 128 + 3) * 4096 / (4 * 2 * (4096 + 128)))
    assert round(ex_ai.reference(4096, 128, 2), 2) == 62.42
    assert ex_mb.reference(24 * 10 ** 9, 14 * 10 ** 9, 32, 32, 128, 4096, 2) == 4
    assert ex_mb.reference(10, 10, 1, 1, 1, 1, 1) == 0 and ex_mb.reference(5, 10, 1, 1, 1, 1, 1) == 0
    assert ex_tpt.reference(7 * 10 ** 9, 2, 600e9) == pytest.approx(7 * 2 / 600)
    assert ex_pf.reference(512, 7 * 10 ** 9, 125e12) == pytest.approx(512 * 14e9 / 125e12)
    # The decoding-with-a-KV-cache exercise's three tokens: outputs (1, 0), about (0.33, 1.34),
    # about (0.75, 1.50).
    X = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    p = {"Wq": np.eye(2), "Wk": np.eye(2), "Wv": np.diag([1.0, 2.0])}
    rows = ex_attend.causal_rows(X, p)
    assert np.allclose(rows[0], [1, 0]) and np.allclose(rows[1], [0.33, 1.34], atol=0.01)
    assert np.allclose(rows[2], [0.75, 1.5], atol=0.01)


def test_references_agree_with_the_course_engine():
    from lessons import attention, memory, roofline
    rng = np.random.default_rng(0)
    for _ in range(20):
        T, D, d = (int(v) for v in rng.integers(1, 9, size=3))
        s = rng.standard_normal((T, d)) * 50
        assert np.allclose(ex_softmax.reference(s), attention.softmax(s), rtol=1e-12, atol=1e-300)
        Q, K, V = (rng.standard_normal((T, d)) for _ in range(3))
        assert np.allclose(ex_causal.reference(Q, K, V), attention.causal_attention(Q, K, V), rtol=1e-10)
        X = rng.standard_normal((T, D))
        p = {k: rng.standard_normal((D, d)) for k in ("Wq", "Wk", "Wv")}
        cache = {"k": np.zeros((0, d)), "v": np.zeros((0, d))}
        for t in range(T):
            out, cache_engine = attention.attend_step(X[t], cache, p)
            expected, keys, values = ex_attend.step(X[t], cache, p)
            assert np.allclose(out, expected, rtol=1e-10) and np.array_equal(cache_engine["k"], keys)
            cache = {"k": keys, "v": values}
        args = [int(v) for v in rng.integers(1, 200, size=5)]
        assert ex_kv.reference(*args) == memory.kv_cache_bytes(*args)
        gpu, weights = int(rng.integers(1, 10 ** 11)), int(rng.integers(1, 10 ** 11))
        assert ex_mb.reference(gpu, weights, *args[:3], 4096, 2) == memory.max_batch(gpu, weights, *args[:3], 4096, 2)
        n, dd, b = int(rng.integers(1, 10 ** 4)), int(rng.integers(1, 300)), int(rng.integers(1, 5))
        assert ex_ai.reference(n, dd, b) == pytest.approx(roofline.arithmetic_intensity(n, dd, b), rel=1e-12)
        assert ex_tpt.reference(7e9, 2, 1e12) == pytest.approx(roofline.time_per_token(7e9, 2, 1e12), rel=1e-12)
        assert ex_pf.reference(n, 7e9, 1e14) == pytest.approx(roofline.prefill_time(n, 7e9, 1e14), rel=1e-12)


WRONG = [
    ("softmax", """
        import numpy as np
        def softmax(scores):
            e = np.exp(scores)
            return e / e.sum(axis=-1, keepdims=True)
        """, "subtract each row's maximum score"),
    ("softmax", """
        import numpy as np
        def softmax(scores):
            e = np.exp(scores - np.max(scores))
            return e / e.sum(axis=0, keepdims=True)
        """, "down each column"),
    ("causal_attention", """
        import numpy as np
        def causal_attention(Q, K, V):
            S = Q @ K.T / np.sqrt(Q.shape[1])
            e = np.exp(S - S.max(axis=-1, keepdims=True))
            return (e / e.sum(axis=-1, keepdims=True)) @ V
        """, "without the causal mask"),
    ("causal_attention", """
        import numpy as np
        def causal_attention(Q, K, V):
            T = Q.shape[0]
            S = np.where(np.tril(np.ones((T, T), bool)), Q @ K.T, -np.inf)
            e = np.exp(S - S.max(axis=-1, keepdims=True))
            return (e / e.sum(axis=-1, keepdims=True)) @ V
        """, "not divided by sqrt(d)"),
    ("attend_step", """
        import numpy as np
        def attend_step(x_t, cache, p):
            q, k, v = x_t @ p["Wq"], x_t @ p["Wk"], x_t @ p["Wv"]
            cache["k"] = np.vstack([cache["k"], k[None]])
            cache["v"] = np.vstack([cache["v"], v[None]])
            s = cache["k"] @ q / np.sqrt(len(q))
            w = np.exp(s - s.max())
            return w / w.sum() @ cache["v"], cache
        """, "the input cache['k'] was modified"),
    ("attend_step", """
        import numpy as np
        def attend_step(x_t, cache, p):
            q, k, v = x_t @ p["Wq"], x_t @ p["Wk"], x_t @ p["Wv"]
            s = cache["k"] @ q / np.sqrt(len(q)) if len(cache["k"]) else np.zeros(1)
            V = cache["v"] if len(cache["k"]) else v[None]
            w = np.exp(s - s.max())
            return w / w.sum() @ V, {"k": np.vstack([cache["k"], k[None]]), "v": np.vstack([cache["v"], v[None]])}
        """, "append the new key and value first"),
    ("attend_step", """
        import numpy as np
        def attend_step(x_t, cache, p):
            q, k, v = x_t @ p["Wq"], x_t @ p["Wk"], x_t @ p["Wv"]
            K = np.vstack([cache["k"], k[None]]); V = np.vstack([cache["v"], v[None]])
            s = K @ q / np.sqrt(len(q)); w = np.exp(s - s.max())
            return (w / w.sum() @ V)[None, :], {"k": K, "v": V}
        """, "a vector, not a table"),
    ("kv_cache_bytes", """
        import numpy as np
        def kv_cache_bytes(n_layers, n_kv_heads, head_dim, n_tokens, bytes_per_value):
            return np.prod([2, n_layers, n_kv_heads, head_dim, n_tokens, bytes_per_value])
        """, "did the product overflow"),
    ("kv_cache_bytes", """
        def kv_cache_bytes(n_layers, n_kv_heads, head_dim, n_tokens, bytes_per_value):
            return float(n_layers * n_kv_heads * head_dim * n_tokens * bytes_per_value)
        """, "the cache holds a key AND a value"),
    ("kv_cache_bytes", """
        def kv_cache_bytes(n_layers, n_kv_heads, head_dim, n_tokens, bytes_per_value):
            return int(2.0 * n_layers * n_kv_heads * head_dim * n_tokens * bytes_per_value)
        """, "case 3 of 3: the result is off by a relative"),     # float64 is not exact past 2^53
    ("softmax", """
        import numpy as np
        def softmax(scores):
            s = np.asarray(scores, dtype=np.float32)
            e = np.exp(s - s.max(axis=-1, keepdims=True))
            return e / e.sum(axis=-1, keepdims=True)
        """, "it has dtype float32, which is not precise enough here: work in float64"),
    ("max_batch", """
        def max_batch(gpu_bytes, weight_bytes, n_layers, n_kv_heads, head_dim, seq_len, bytes_per_value):
            return (gpu_bytes - weight_bytes) // (2 * n_layers * n_kv_heads * head_dim * seq_len * bytes_per_value)
        """, "the result is negative here"),
    ("arithmetic_intensity", """
        def arithmetic_intensity(n, d, bytes_per_value):
            return (4 * d + 3) * n // (4 * bytes_per_value * (n + d))
        """, "use / rather than //"),
    ("time_per_token", """
        def time_per_token(n_params, bytes_per_param, bandwidth):
            return 1000 * n_params * bytes_per_param / bandwidth
        """, "milliseconds instead of seconds"),
    ("prefill_time", """
        def prefill_time(n_tokens, n_params, flops):
            return n_tokens * n_params / flops
        """, "2 operations per token"),
]


@pytest.mark.parametrize("exercise, source, words", WRONG, ids=[f"{w[0]}-{i}" for i, w in enumerate(WRONG)])
def test_common_mistakes_lose_points_with_a_diagnosis(exercise, source, words):
    result = grade_text(source, exercise)
    assert result["status"] == "ok" and 0 <= result["score"] < result["max_score"]
    assert any(words in out for out in failed_outputs(result)), failed_outputs(result)


_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?:e[-+]?\d+)?")


def test_an_expected_zero_is_never_named():
    """ "case 7 of 30: the result should be 0 here" gave away a hidden case's expected value."""
    from graders.checks import Fail, check_exact_int
    with pytest.raises(Fail) as info:
        check_exact_int(3, 0, "case 7 of 30: the result")
    assert "0" not in info.value.args[0].replace("30", "")
    with pytest.raises(Fail, match="far too large"):       # an int too big for a float ratio
        check_exact_int(10 ** 400, 12345, "the result")


@pytest.mark.parametrize("exercise", sorted(EXERCISES))
def test_feedback_never_reveals_expected_values(exercise):
    """Wrong answers (every output a constant) get feedback with shapes, counts, positions and
    relative errors only: no number the learner could read an expected value from."""
    fn = registry.get(exercise).functions[0]
    if exercise in ("softmax", "causal_attention"):
        body = "import numpy as np\ndef {fn}(*a):\n    return np.full(np.shape(a[0]), 0.5) + 0.25 * np.asarray(a[0])\n"
    elif exercise == "attend_step":
        body = ("import numpy as np\ndef {fn}(x, c, p):\n    k = x @ p['Wk']\n    "
                "return 0.5 * k, {{'k': np.vstack([c['k'], k[None]]), 'v': np.vstack([c['v'], k[None]])}}\n")
    elif exercise in ("kv_cache_bytes", "max_batch"):
        body = "def {fn}(*a):\n    return 12345\n"
    else:
        body = "def {fn}(*a):\n    return 0.123456\n"
    result = grade_text(body.format(fn=fn), exercise)
    assert result["score"] < result["max_score"]
    for out in failed_outputs(result):
        for token in _NUMBER.findall(out.split("relative error")[0].replace("relative to the largest entry", "")):
            if "e" in token:                       # a relative error, one significant digit: fine
                assert re.fullmatch(r"-?\d\.\de[-+]\d+", token), (token, out)
            else:                                  # counts, shapes, sizes, positions, limits
                assert abs(float(token)) <= 1000, (token, out)


def test_good_answers_get_full_marks():
    for exercise, source in GOOD.items():
        result = grade_text(source, exercise)
        assert result["score"] == result["max_score"] and result["status"] == "ok", \
            (exercise, failed_outputs(result))
