"""Generation with the cache against generation without it, and the engine's own promises.

The references recompute every step from the tokens (``Model.next_logits``, no cache at all):
a greedy loop and a beam search over Python lists, written here from transformers' definition.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from kvcache.generate import beam_search, greedy
from kvcache.model import Model

CONFIG = dict(vocab_size=60, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=96)
MODEL = Model.random(CONFIG, seed=11, dtype=np.float64)
V = CONFIG["vocab_size"]


def prompts_of(lengths, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, V, size=n) for n in lengths]


def log_probs(tokens):
    z = MODEL.next_logits(tokens)
    z = z - z.max()
    return z - np.log(np.exp(z).sum())


def naive_greedy(prompt, max_new, eos=None):
    seq, out = list(prompt), []
    for _ in range(max_new):
        tok = int(np.argmax(MODEL.next_logits(seq)))
        out.append(tok)
        seq.append(tok)
        if tok == eos:
            break
    return out


def naive_beam_search(prompt, k, max_new, eos=None, length_penalty=1.0, early_stopping=False):
    """Beam search without a cache: every beam's log-probabilities recomputed from its tokens."""
    eos_ids = [] if eos is None else [eos]
    n_cand = max(2, 1 + len(eos_ids)) * k
    beams = [((), 0.0)] + [((), -1e9)] * (k - 1)         # (new tokens, summed log p); one real beam
    finished = []                                         # (score / length ** penalty, tokens), best first
    can_improve = True
    for t in range(max_new):
        cands = []
        for tokens, score in beams:
            lp = log_probs(list(prompt) + list(tokens))
            cands += [(score + lp[v], tokens + (v,)) for v in range(V)]
        cands = sorted(cands, key=lambda c: -c[0])[:n_cand]
        ends = [c[1][-1] in eos_ids or t + 1 == max_new for c in cands]
        full = early_stopping is True and len(finished) == k
        if can_improve and not full:
            finished += [(c[0] / (t + 1) ** length_penalty, c[1]) for c, e in zip(cands[:k], ends[:k]) if e]
            finished = sorted(finished, key=lambda f: -f[0])[:k]
        beams = [(c[1], c[0] - 1e9 * e) for c, e in sorted(zip(cands, ends), key=lambda ce: -(ce[0][0] - 1e9 * ce[1]))][:k]
        best_len = max_new if early_stopping == "never" and length_penalty > 0 else t + 1
        if len(finished) == k:
            can_improve = can_improve and beams[0][1] / best_len ** length_penalty > min(f[0] for f in finished)
        if not can_improve or (early_stopping is True and len(finished) == k) or all(ends):
            break
    return list(finished[0][1])


# ---------------------------------------------------------------------- greedy


def test_prompts_of_lengths_1_to_50_in_one_batch_equal_recomputing():
    prompts = prompts_of(range(1, 51), seed=1)
    ours = greedy(MODEL, prompts, 6)
    for p, o in zip(prompts, ours):
        assert o == naive_greedy(p, 6)


def test_eos_mid_batch_stops_those_sequences_and_removes_them_from_the_batch():
    prompts = prompts_of(range(3, 23), seed=2)
    free = greedy(MODEL, prompts, 8)
    eos = free[0][2]                                      # the first sequence emits it at step 2
    trace = []
    ours = greedy(MODEL, prompts, 8, eos_token_id=eos, trace=trace)
    for p, o in zip(prompts, ours):
        assert o == naive_greedy(p, 8, eos)
    ended = [i for i, o in enumerate(ours) if o[-1] == eos]
    assert 0 in ended and len(ended) < len(prompts)
    for step in trace:                                    # a finished sequence computes no more
        for i in ended:
            assert (i in step["rows"]) == (step["step"] < len(ours[i]))
        assert step["cache_batch"] == len(step["rows"])
    assert trace[-1]["cache_batch"] < len(prompts)


def test_a_batch_equals_its_sequences_one_by_one():
    prompts = prompts_of((4, 1, 13, 7, 7, 2), seed=3)
    batch = greedy(MODEL, prompts, 10, eos_token_id=5)
    assert batch == [greedy(MODEL, [p], 10, eos_token_id=5)[0] for p in prompts]


@settings(max_examples=15, deadline=None)
@given(st.lists(st.integers(1, 20), min_size=1, max_size=6), st.integers(0, 1000))
def test_any_batch_equals_one_by_one_and_padded_equals_ragged(lengths, seed):
    prompts = prompts_of(lengths, seed=seed)
    ragged = greedy(MODEL, prompts, 4)
    assert ragged == greedy(MODEL, prompts, 4, prefill="padded")
    assert ragged == [greedy(MODEL, [p], 4)[0] for p in prompts]


def test_several_eos_ids_and_zero_new_tokens():
    prompts = prompts_of((5, 9), seed=4)
    free = greedy(MODEL, prompts, 6)
    eos = [free[0][1], free[1][3]]

    def cut(out):                                         # up to and with the first EOS of either id
        ends = [i for i, t in enumerate(out) if t in eos]
        return out[: ends[0] + 1] if ends else out

    assert greedy(MODEL, prompts, 6, eos_token_id=eos) == [cut(o) for o in free]
    assert len(cut(free[0])) <= 2
    assert greedy(MODEL, prompts, 0) == [[], []]


def test_a_float32_model_with_a_float32_cache_agrees_with_float64():
    m32 = Model.random(CONFIG, seed=11, dtype=np.float32)
    prompts = prompts_of((3, 17, 8), seed=5)
    assert greedy(m32, prompts, 6) == greedy(MODEL, prompts, 6)


# ---------------------------------------------------------------------- beam search


@pytest.mark.parametrize("k, lp, es", [(2, 1.0, False), (3, 2.0, True), (4, 0.0, "never"), (3, -1.0, False),
                                       (5, 1.0, "never"), (2, 0.5, True)])
def test_beam_search_with_the_cache_equals_beam_search_without(k, lp, es):
    for p in prompts_of((1, 5, 11), seed=6):
        eos = naive_greedy(p, 3)[-1]                      # a token this prompt's continuation soon emits
        assert beam_search(MODEL, p, k, 7, eos_token_id=eos, length_penalty=lp, early_stopping=es) == \
            naive_beam_search(p, k, 7, eos, lp, es)
        assert beam_search(MODEL, p, k, 5, length_penalty=lp, early_stopping=es) == \
            naive_beam_search(p, k, 5, None, lp, es)


def test_beam_cache_is_expanded_once_and_reordered_by_parent():
    p = prompts_of((9,), seed=7)[0]
    trace = []
    beam_search(MODEL, p, 4, 6, trace=trace)
    assert trace[0]["parents"] == [0, 0, 0, 0]            # every beam descends from the prompt
    assert trace[0]["cache_batch"] == 1                   # the prompt was prefilled once
    # the expansion copies the prompt's 9 positions into 3 rows, in each of the 2 layers
    per_position = 2 * 2 * CONFIG["num_key_value_heads"] * 8 * 8    # k and v, layers, G d float64
    assert trace[1]["cache_bytes_copied"] == 3 * 9 * per_position
    for step in trace[1:]:
        assert step["cache_batch"] == 4


def test_num_beams_1_is_greedy_as_in_transformers():
    p = prompts_of((6,), seed=8)[0]
    assert beam_search(MODEL, p, 1, 8, eos_token_id=3) == greedy(MODEL, [p], 8, eos_token_id=3)[0]


# ---------------------------------------------------------------------- bad input


@pytest.mark.parametrize("call, message", [
    (lambda: greedy(MODEL, [[1, 2], []], 3), "prompt 1 is empty"),
    (lambda: greedy(MODEL, [], 3), "no prompts given"),
    (lambda: greedy(MODEL, [1, 2, 3], 3), "must be a list of prompts"),
    (lambda: greedy(MODEL, [[1, V]], 3), f"prompt 0: token id {V} at position 1 is outside the vocabulary"),
    (lambda: greedy(MODEL, [[1, -2]], 3), "token id -2"),
    (lambda: greedy(MODEL, [[1.0, 2.0]], 3), "integers"),
    (lambda: greedy(MODEL, [[1] * 90], 10), "past the model's max_position_embeddings \\(96\\)"),
    (lambda: greedy(MODEL, [[1] * 10], 10, max_len=16), "20 tokens, past max_len \\(16\\)"),
    (lambda: greedy(MODEL, [[1]], -1), "max_new_tokens must be an integer >= 0"),
    (lambda: greedy(MODEL, [[1]], 3, eos_token_id=V), "eos_token_id: token id"),
    (lambda: greedy(MODEL, [[1]], 3, eos_token_id=[]), "empty list"),
    (lambda: greedy(MODEL, [[1]], 3, cache="paged-ish"), "no cache layout 'paged-ish'"),
    (lambda: greedy(MODEL, [[1]], 3, cache_dtype="float8"), "cache dtype 'float8'"),
    (lambda: greedy(MODEL, [[1]], 3, prefill="left"), "prefill must be"),
    (lambda: greedy(MODEL, [[1]], 3, block_size=16), "cache layout 'contiguous' takes no option 'block_size'"),
    (lambda: beam_search(MODEL, [1, 2], 0, 3), "num_beams must be an integer >= 1"),
    (lambda: beam_search(MODEL, [1, 2], 2.5, 3), "num_beams"),
    (lambda: beam_search(MODEL, [], 2, 3), "prompt 0 is empty"),
    (lambda: beam_search(MODEL, [[1, 2], []], 2, 3), "prompt 1 is empty"),
    (lambda: beam_search(MODEL, [[1, 2], [3]], 2, 3, num_return_sequences=3), "num_return_sequences \\(3\\) must be at most"),
    (lambda: beam_search(MODEL, [[1, 2]], 1, 3, num_return_sequences=0), "num_return_sequences must be"),
    (lambda: beam_search(MODEL, [1], 2, 3, early_stopping="sometimes"), "early_stopping must be"),
    (lambda: beam_search(MODEL, [1], 2, 3, length_penalty=float("nan")), "length_penalty"),
    (lambda: beam_search(MODEL, [1] * 95, 2, 3), "max_position_embeddings"),
])
def test_bad_input_gets_a_clear_error(call, message):
    with pytest.raises((ValueError, TypeError), match=message):
        call()


def test_inputs_are_never_modified():
    prompts = prompts_of((4, 8), seed=9)
    copies = [p.copy() for p in prompts]
    listed = [list(map(int, p)) for p in prompts]
    weights = MODEL.layers[0].wqkv.copy()
    greedy(MODEL, prompts, 5, eos_token_id=7)
    greedy(MODEL, listed, 5, prefill="padded")
    beam_search(MODEL, prompts[1], 3, 5)
    MODEL.logits(prompts[0])
    assert all(np.array_equal(p, c) for p, c in zip(prompts, copies))
    assert listed == [list(map(int, c)) for c in copies]
    assert np.array_equal(MODEL.layers[0].wqkv, weights)
