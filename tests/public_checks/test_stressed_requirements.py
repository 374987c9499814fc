"""The public checks hold each exercise to what its statement stresses, as the hidden tests do:
the reference answers (solutions/) pass every check, and an answer that breaks one stressed
requirement (a softmax without its maximum subtracted, an input written into, a fork of a free
block allowed) fails the check of that requirement with words that say what is wrong, while the
checks of the rest still pass."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from public_checks import evaluate, load_checks

ROOT = Path(__file__).resolve().parents[2]


def _solution(exercise: str, name: str | None = None):
    """The reference answer's function (or class) ``name`` from ``solutions/EXERCISE.ipynb``."""
    nb = json.loads((ROOT / "solutions" / f"{exercise}.ipynb").read_text())
    namespace: dict = {}
    for cell in nb["cells"]:
        if "answer" in cell["metadata"].get("tags", []):
            exec("".join(cell["source"]), namespace)  # noqa: S102 - the course's own reference answer
    return namespace[name or exercise]


def _failed(exercise: str, *fns) -> dict[str, str]:
    """{description: message} of the checks ``fns`` fail."""
    return {o.description: o.message for o in evaluate(exercise, *fns) if o.status != "passed"}


EXERCISES = ("softmax", "causal_attention", "batched_decode_step", "blocked_decode", "latent_attend_step",
             "BlockAllocator")


@pytest.mark.parametrize("exercise", EXERCISES)
def test_the_reference_answer_passes_every_check(exercise):
    assert len(load_checks(exercise)) <= 7, "the public checks stay few"
    assert _failed(exercise, _solution(exercise)) == {}


def _softmax_unstable(s, axis=-1):
    e = np.exp(s)
    return e / e.sum(axis=axis, keepdims=True)


def test_softmax_written_in_place_fails_the_check_of_the_input():
    right = _solution("softmax")

    def in_place(scores):
        scores -= scores.max(axis=-1, keepdims=True)
        return right(scores)

    failed = _failed("softmax", in_place)
    check = "integer scores give float64 weights, and the array given is left as it was"
    assert list(failed) == [check] and "wrote into the array it was given" in failed[check]
    as_ints = _failed("softmax", lambda s: np.round(right(s) * 1000).astype(np.int64))
    assert check in as_ints


def _causal_unstable(Q, K, V):
    T, d = Q.shape
    S = Q @ K.T / math.sqrt(d)
    S[np.triu_indices(T, 1)] = -np.inf
    return _softmax_unstable(S) @ V


def test_causal_attention_unstable_or_in_place_fails_its_check():
    with np.errstate(all="ignore"):
        failed = _failed("causal_attention", _causal_unstable)
    assert list(failed) == ["scores of about 10^4 give no nan"] and "overflows" in failed["scores of about 10^4 give no nan"]
    right = _solution("causal_attention")

    def in_place(Q, K, V):
        Q /= math.sqrt(Q.shape[1])
        return right(Q * math.sqrt(Q.shape[1]), K, V)

    failed = _failed("causal_attention", in_place)
    assert list(failed) == ["Q, K and V are not modified"] and "wrote into Q, K or V" in failed["Q, K and V are not modified"]


def _batched_unstable(q, K, V, lengths):
    B, H, d = q.shape
    G = K.shape[1]
    out = np.zeros_like(q)
    for b in range(B):
        for h in range(H):
            g = h // (H // G)
            s = K[b, g, :lengths[b]] @ q[b, h] / math.sqrt(d)
            out[b, h] = _softmax_unstable(s) @ V[b, g, :lengths[b]]
    return out


def test_batched_decode_step_without_its_maximum_fails_the_large_scores_check():
    with np.errstate(all="ignore"):
        failed = _failed("batched_decode_step", _batched_unstable)
    assert list(failed) == ["scores of about 10^4 give no NaN"], failed
    assert "overflows" in failed["scores of about 10^4 give no NaN"]


def test_blocked_decode_masking_its_buffers_in_place_fails_the_check_of_the_inputs():
    right = _solution("blocked_decode")

    def in_place(q, K_buf, V_buf, seq_len, block):
        K_buf[seq_len:], V_buf[seq_len:] = 0.0, 0.0
        return right(q, K_buf, V_buf, seq_len, block)

    failed = _failed("blocked_decode", in_place)
    assert list(failed) == ["q, K_buf and V_buf are not modified"], failed
    assert "wrote into q, K_buf or V_buf" in failed["q, K_buf and V_buf are not modified"]


def _latent_unstable(x_t, cache, p, n_heads):
    C = np.vstack([cache["c"], (x_t @ p["Wdkv"])[None]])
    q = x_t @ p["Wq"]
    d = q.shape[0] // n_heads
    K, V = C @ p["Wuk"], C @ p["Wuv"]
    out = np.concatenate([_softmax_unstable(K[:, h * d:(h + 1) * d] @ q[h * d:(h + 1) * d] / math.sqrt(d))
                          @ V[:, h * d:(h + 1) * d] for h in range(n_heads)])
    return out, {"c": C}


def test_latent_attend_step_without_its_maximum_fails_the_large_scores_check():
    with np.errstate(all="ignore"):
        failed = _failed("latent_attend_step", _latent_unstable)
    assert list(failed) == ["scores of about 10^4 give no nan"], failed


def test_an_allocator_that_forks_a_free_block_fails_its_check():
    right = _solution("BlockAllocator")

    class ForksFreeBlocks(right):
        def fork(self, block):
            return block if self.refcount(block) == 0 else super().fork(block)

    failed = _failed("BlockAllocator", ForksFreeBlocks)
    check = "a fork of a free block raises ValueError and changes nothing"
    assert list(failed) == [check] and "should raise ValueError (the block is free)" in failed[check], failed


def test_batched_decode_step_in_float64_whatever_its_inputs_fails_the_dtype_check():
    right = _solution("batched_decode_step")
    failed = _failed("batched_decode_step", lambda q, K, V, lengths: right(q, K, V, lengths).astype(np.float64))
    check = "the output's shape, and q's dtype (float64 and float32)"
    assert list(failed) == [check] and "float32 inputs should give a float32 output" in failed[check], failed
