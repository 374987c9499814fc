"""The hidden tests of blocked_decode: the reference against the course's kernel (two
implementations written apart), right answers written several ways get full marks, and common
mistakes lose points with a diagnosis that reveals no hidden input or expected value."""
import re

import numpy as np
import pytest

from graders import registry
from graders.exercises import blocked_decode as ex

from grader_helpers import failed_outputs, grade_text

EXERCISE = "blocked_decode"

# A right answer, the way the chapter describes it; the mistakes below are edits of it.
RIGHT = """
import numpy as np

def blocked_decode(q, K_buf, V_buf, seq_len, block):
    d = q.shape[0]
    M, l, a, visited = -np.inf, 0.0, np.zeros(V_buf.shape[1]), 0
    for start in range(0, seq_len, block):                      # EXIT
        K, V = K_buf[start:start + block], V_buf[start:start + block]
        s = K @ q / np.sqrt(d)                                  # SCALE
        live = seq_len - start
        if live < len(s):
            s = np.where(np.arange(len(s)) < live, s, -np.inf)  # SCORES
            V = np.where((np.arange(len(s)) < live)[:, None], V, 0.0)  # VALUES
        M_new = max(M, s.max())
        p = np.exp(s - M_new)                                   # EXP
        r = np.exp(M - M_new)
        l = r * l + p.sum()                                     # SUM
        a = r * a + p @ V                                       # ACC
        M = M_new
        visited += 1
    return a / l, visited                                       # RETURN
"""


def edit(**lines):
    """RIGHT with the lines marked # NAME replaced (NAME=None deletes the line)."""
    out = []
    for line in RIGHT.splitlines():
        mark = re.search(r"# ([A-Z]+)$", line)
        if mark and mark[1] in lines:
            new = lines[mark[1]]
            if new is not None:
                out.append(line[: len(line) - len(line.lstrip())] + new)
        else:
            out.append(line)
    return "\n".join(out) + "\n"


ALSO_RIGHT = [
    RIGHT,
    # the whole loop over block indices, masks built with slicing, a copy of the last block
    """
import math
import numpy as np

def blocked_decode(q, K_buf, V_buf, seq_len, block):
    n_blocks = math.ceil(seq_len / block)
    m, l, acc = float("-inf"), 0.0, 0.0
    for b in range(n_blocks):
        lo, hi = b * block, min((b + 1) * block, seq_len)
        s = K_buf[lo:hi] @ q / math.sqrt(len(q))
        m2 = max(m, float(np.max(s)))
        p = np.exp(s - m2)
        l = l * math.exp(m - m2) + p.sum()
        acc = acc * math.exp(m - m2) + p @ V_buf[lo:hi]
        m = m2
    return np.asarray(acc / l, dtype=float), n_blocks
""",
]


@pytest.mark.parametrize("source", ALSO_RIGHT, ids=["masks", "slices"])
def test_right_answers_get_full_marks(source):
    result = grade_text(source, EXERCISE)
    assert result["status"] == "ok" and result["score"] == result["max_score"] > 0, failed_outputs(result)


WRONG = [
    ("floor count", edit(RETURN="return a / l, seq_len // block"), "round seq_len / block up"),
    ("one block too many", edit(RETURN="return a / l, seq_len // block + 1"), "no partial block"),
    ("no early exit", edit(EXIT="for start in range(0, K_buf.shape[0], block):",
                           SCORES="s = np.where(start + np.arange(len(s)) < seq_len, s, -np.inf)",
                           VALUES="V = np.where((start + np.arange(len(s)) < seq_len)[:, None], V, 0.0)"),
     "blocks of the whole buffer"),
    ("no value mask", edit(VALUES=None), "replace those value rows by zeros"),
    ("no score mask", edit(SCORES=None), "every row of the last block"),
    ("no rescale", edit(SUM="l = l + p.sum()", ACC="a = a + p @ V"), "never rescales"),
    ("accumulator not rescaled", edit(ACC="a = a + p @ V"), "but not the accumulator"),
    ("not divided by sqrt(d)", edit(SCALE="s = K @ q"), "not divided by sqrt(d)"),
    ("no running maximum", edit(EXP="p = np.exp(s); M_new = 0.0"), "subtract the running maximum"),
    ("a table, not a vector", edit(RETURN="return (a / l)[None, :], visited"), "one vector"),
    ("cleans the buffer in place", RIGHT.replace("    d = q.shape[0]\n",
                                                 "    d = q.shape[0]\n    K_buf[seq_len:] = 0.0\n"
                                                 "    V_buf[seq_len:] = 0.0\n"),
     "modified in place"),
]


@pytest.mark.parametrize("name, source, words", WRONG, ids=[w[0] for w in WRONG])
def test_common_mistakes_lose_points_with_a_diagnosis(name, source, words):
    result = grade_text(source, EXERCISE)
    assert result["status"] == "ok" and 0 <= result["score"] < result["max_score"], name
    assert any(words in out for out in failed_outputs(result)), failed_outputs(result)


_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?:e[-+]?\d+)?")


def test_feedback_never_reveals_hidden_inputs_or_expected_values():
    """Wrong answers get feedback with shapes, case numbers, positions and relative errors: no
    number the learner could read a hidden input (a length, a block) or an expected value from."""
    wrong = "import numpy as np\ndef blocked_decode(q, K, V, t, b):\n    return np.full(V.shape[1], 0.5), 7\n"
    result = grade_text(wrong, EXERCISE)
    assert result["score"] < result["max_score"]
    tests = {test.name: test for test in registry.tests(EXERCISE)}
    for out in failed_outputs(result):
        text = out.split("relative error")[0].replace("relative to the largest entry", "")
        text = re.sub(r"case \d+ of \d+|differs in \d+ of \d+ entries", "", text)
        text = re.sub(r"entries [\d\-, .]+", "", text)
        text = re.sub(r"shape \([\d, ]*\)|\(d_v,\) = \(\d+,\)|float64|sqrt\(d\)", "", text)
        for token in _NUMBER.findall(text):
            if "e" in token:                       # a relative error, one significant digit: fine
                assert re.fullmatch(r"-?\d\.\de[-+]\d+", token), (token, out)
            else:
                assert token in ("0", "1"), (token, out)
    assert len(tests) >= 12


def test_the_reference_agrees_with_the_course_kernel():
    """The grader's reference (Python floats, no blocks) against kvcache.kernel (blockwise, numpy):
    two implementations written apart."""
    from kvcache.kernel import blocked_decode
    rng = np.random.default_rng(0)
    for _ in range(40):
        N = int(rng.integers(1, 60))
        t = int(rng.integers(1, N + 1))
        d, d_v, block = int(rng.integers(1, 7)), int(rng.integers(1, 7)), int(rng.integers(1, 70))
        q, K, V = rng.standard_normal(d) * 4, rng.standard_normal((N, d)) * 4, rng.standard_normal((N, d_v))
        K[t:], V[t:] = np.nan, np.inf
        out, visited = blocked_decode(q, K, V, t, block)
        assert np.allclose(out, ex.reference(q, K, V, t), rtol=1e-10, atol=1e-12)
        assert visited == ex.reference_count(t, block)


def test_every_hidden_test_passes_the_course_kernel_directly():
    """Each hidden test's check, fed what kvcache.kernel.blocked_decode returns for its calls,
    passes: the tests ask for nothing the chapter's kernel does not do."""
    from graders.checks import CallResult
    from kvcache.kernel import blocked_decode
    for test in registry.tests(EXERCISE):
        results = []
        for call in test.calls:
            args = [a.copy() if isinstance(a, np.ndarray) else a for a in call.args]
            value = blocked_decode(*args)
            results.append(CallResult(value, args, args))
        test.check(results)
