"""The worked examples of the attention exercises state the answer's values, never its code.

A worked example that computes the output in plain numpy is the answer without its ``def``; these
show the inputs and what the function must return, and the statement works one output through
in numbers.  The values are checked here against a reference of this file's own (a loop over
positions, written for this test), so a typo in a notebook's table cannot teach a wrong answer.
"""
import math
import re
from pathlib import Path

import nbformat
import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
NAMES = ("causal_attention", "attend_step", "batched_decode_step", "latent_attend_step", "speculative_accept",
         "quantize_kv", "keep_positions")


def weights(scores):
    """Softmax of a short list by the definition, in Python floats."""
    top = max(scores)
    e = [math.exp(s - top) for s in scores]
    return [x / sum(e) for x in e]


def attend(q, keys, values):
    w = weights([sum(a * b for a, b in zip(q, k)) / math.sqrt(len(q)) for k in keys])
    return [sum(wi * v[j] for wi, v in zip(w, values)) for j in range(len(values[0]))]


def example(folder, name):
    nb = nbformat.read(ROOT / folder / f"{name}.ipynb", as_version=4)
    namespace = {}
    exec(nb.cells[3].source, namespace)
    return nb.cells[2].source, nb.cells[3].source, namespace


@pytest.mark.parametrize("folder", ["exercises", "solutions"])
@pytest.mark.parametrize("name", NAMES)
def test_the_example_computes_nothing_of_the_answer(folder, name):
    _, code, _ = example(folder, name)
    code = "\n".join(line.split("#", 1)[0] for line in code.splitlines())
    for sign in ("np.exp", "@", "softmax", "np.sqrt", ".max(", "sum("):
        assert sign not in code, sign


@pytest.mark.parametrize("folder", ["exercises", "solutions"])
def test_causal_attention_example(folder):
    text, _, ns = example(folder, "causal_attention")
    Q, K, V = ns["Q"].tolist(), ns["K"].tolist(), ns["V"].tolist()
    rows = [attend(Q[i], K[: i + 1], V[: i + 1]) for i in range(len(Q))]
    assert np.allclose(ns["expected"], rows, atol=5e-5)
    w1 = weights([0.0, 1 / math.sqrt(2)])
    for value in (*w1, *rows[1], *rows[2], *weights([1 / math.sqrt(2), 1 / math.sqrt(2), math.sqrt(2)])):
        assert f"{value:.4f}" in text, value


@pytest.mark.parametrize("folder", ["exercises", "solutions"])
def test_attend_step_example(folder):
    text, _, ns = example(folder, "attend_step")
    x, p, cache = ns["x_t"].tolist(), ns["p"], ns["cache"]
    proj = {n: [sum(x[i] * p[n][i][j] for i in range(len(x))) for j in range(p[n].shape[1])]
            for n in ("Wq", "Wk", "Wv")}
    keys = cache["k"].tolist() + [proj["Wk"]]
    values = cache["v"].tolist() + [proj["Wv"]]
    out = attend(proj["Wq"], keys, values)
    assert np.allclose(ns["expected_out"], out, atol=5e-5)
    assert ns["expected_cache"]["k"].tolist() == keys and ns["expected_cache"]["v"].tolist() == values
    assert len(cache["k"]) == 1
    for value in out:
        assert f"{value:.4f}" in text


@pytest.mark.parametrize("folder", ["exercises", "solutions"])
def test_batched_decode_step_example(folder):
    text, _, ns = example(folder, "batched_decode_step")
    q, K, V, lengths = ns["q"], ns["K"], ns["V"], ns["lengths"]
    B, H, _ = q.shape
    r = H // K.shape[1]
    out = [[attend(q[b, h].tolist(), K[b, h // r, : lengths[b]].tolist(), V[b, h // r, : lengths[b]].tolist())
            for h in range(H)] for b in range(B)]
    assert np.allclose(ns["expected"], out, atol=5e-5)
    assert np.isnan(K[1, :, 3]).all() and (K[0, :, 2:] == 9).all()      # what must change nothing
    for value in out[1][3]:
        assert f"{value:.4f}" in text
    assert re.search(r"3 /\\!/ 2 = 1", text)


@pytest.mark.parametrize("folder", ["exercises", "solutions"])
def test_latent_attend_step_example(folder):
    """Each head's keys and values rebuilt from the latents by hand, then attended as usual."""
    text, _, ns = example(folder, "latent_attend_step")
    x, p, cache = ns["x_t"].tolist(), ns["p"], ns["cache"]
    latents = [row[0] for row in cache["c"].tolist()] + [sum(x[i] * p["Wdkv"][i][0] for i in range(len(x)))]
    q = [sum(x[i] * p["Wq"][i][j] for i in range(len(x))) for j in range(2)]
    out = [attend([q[h]], [[c * p["Wuk"][0][h]] for c in latents], [[c * p["Wuv"][0][h]] for c in latents])[0]
           for h in range(2)]
    assert np.allclose(ns["expected_out"], out, atol=5e-5)
    assert [row[0] for row in ns["expected_cache"]["c"].tolist()] == latents and len(cache["c"]) == 1
    for value in (*out, *weights([1.0, 2.0]), *weights([-1.0, -2.0])):
        assert f"{value:.4f}" in text, value


@pytest.mark.parametrize("folder", ["exercises", "solutions"])
def test_speculative_accept_example(folder):
    """The rule walked by hand over the example's three positions, for both sets of uniforms."""
    text, _, ns = example(folder, "speculative_accept")
    draft, q, p = ns["draft_tokens"].tolist(), ns["q_probs"].tolist(), ns["p_probs"].tolist()
    assert p[1][2] / q[1][2] == pytest.approx(0.5714, abs=1e-4) and p[0][1] / q[0][1] > 1
    # rejected at 0.7: r = (0.3 - 0.1, 0.3 - 0.2, 0), the first running sum past 0.5 * 0.3
    assert 0.3 - 0.1 > 0.5 * ((0.3 - 0.1) + (0.3 - 0.2)) and ns["expected"][(0.9, 0.7, 0.5)] == [1, 0]
    # accepted at 0.5 < 0.571: p_2's running sums 0.5, 0.75: 0.5 is not past 0.5
    assert ns["expected"][(0.9, 0.5, 0.5)] == [draft[0], draft[1], 1]
    for words in ("0.571", "(0.2, 0.1, 0)", "0.15", "`[1, 0]`", "`[1, 2, 1]`"):
        assert words in text, words


@pytest.mark.parametrize("folder", ["exercises", "solutions"])
def test_quantize_kv_example(folder):
    """The codes worked by hand: per channel every number lies on its channel's grid (x comes back
    exactly); per token, token 0's outlier takes the range and 0.0 and -0.5 share code 0."""
    text, _, ns = example(folder, "quantize_kv")
    x = ns["x"].tolist()
    ch = ns["expected_per_channel"]
    for t in range(3):
        for j in range(4):
            assert ch["codes"][t][j] * ch["scale"][0][j] + ch["offset"][0][j] == x[t][j]
    # channel 0: (0.0 + 0.5) / 0.5 = 1; channel 2: (6 - 2) / 2 = 2; channel 3 constant
    assert ch["codes"][:, 0].tolist() == [1, 3, 0] and ch["codes"][:, 2].tolist() == [3, 0, 2]
    assert ch["scale"][0, 3] == 0 and ch["codes"][:, 3].tolist() == [0, 0, 0]
    tok = ns["expected_per_token"]
    # token 0: step 8.5 / 3; (0 + 0.5) / 2.833 = 0.18 and (1 + 0.5) / 2.833 = 0.53 round to 0 and 1
    assert tok["codes"][0].tolist() == [0, 0, 3, 1] and round(0.5 / (8.5 / 3)) == 0 and round(1.5 / (8.5 / 3)) == 1
    assert tok["codes"][2].tolist() == [0, 1, 3, 1] and round(1.5 / (6.5 / 3)) == 1
    for words in ("1.5 / 3 = 0.5", "8.5 / 3 = 2.83", "(2.8333, 0.5, 2.1667)"):
        assert words in text, words


@pytest.mark.parametrize("folder", ["exercises", "solutions"])
def test_keep_positions_example(folder):
    """The example walked by hand: the sink, the two recent positions whatever their scores, and
    the two largest scores between them; the tie example of the text; the special cases."""
    text, _, ns = example(folder, "keep_positions")
    scores = ns["acc_scores"].tolist()
    between = {j: scores[j] for j in range(1, 6)}                       # after the sink, before the recent
    heaviest = sorted(sorted(between, key=lambda j: -between[j])[:2])
    assert ns["expected"][(5, 1, 2)] == sorted([0, *heaviest, 6, 7]) == [0, 2, 4, 6, 7]
    assert max(scores) == scores[6]                                     # the recent one with the largest score
    assert ns["expected"][(5, 0, 5)] == list(range(3, 8)) and ns["expected"][(9, 1, 2)] == list(range(8))
    for words in ("`[0, 2, 4, 6, 7]`", "`[0, 1, 2, 7]`", "(1, 2, 2, 2, 2, 1, 1, 3)", "4 (4.0) and position 2 (3.0)"):
        assert words in text, words
