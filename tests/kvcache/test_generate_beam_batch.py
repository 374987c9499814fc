"""Beam search over a batch of prompts against transformers' batched beam search (generate() with
num_beams on a left-padded batch and its attention mask): the same hypotheses for every prompt,
with EOS ending some prompts' searches in the middle of the batch; paged as contiguous; the
cache holding B x K rows, and a prompt's rows leaving it when its search is over.

The EOS id is a token the first beams of some prompts emit early and others never (found by a
first run without EOS), so prompts finish at different steps of one batch.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from engine_helpers import CONFIGS, engine_model, hf_generate_batch, hf_llama, left_padded, random_prompts
from kvcache.generate import Hypothesis, assign_rows, beam_hypotheses, beam_search, log_softmax, top_candidates
from kvcache.paged import blocks_for

NEW = 8
LENGTHS = range(1, 31)


def early_token(outputs: list[list[int]]) -> int:
    """A token that some outputs emit at step 1..4 and others never: as EOS it ends some
    searches in the middle and leaves others running."""
    counts = {}
    for out in outputs:
        for tok in set(out[1:5]) - set(out[:1]):
            counts[tok] = counts.get(tok, 0) + 1
    for tok, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        if n < len(outputs) // 2:
            return tok
    raise AssertionError("no token would end some searches in the middle: change the seed")


def hf_beams(hf, prompts, k, **kwargs):
    """transformers' batched beam search: each prompt's best hypothesis (a list), or its
    num_return_sequences best (a list of lists), cut after EOS."""
    n = kwargs.get("num_return_sequences", 1)
    rows = hf_generate_batch(hf, prompts, max_new_tokens=kwargs.pop("max_new_tokens", NEW), num_beams=k, **kwargs)
    return rows if n == 1 else [rows[i * n:(i + 1) * n] for i in range(len(prompts))]


def hf_sequence_scores(hf, prompts, k, n, **kwargs) -> np.ndarray:
    """transformers' ``sequences_scores`` of a left-padded batch, (B, n)."""
    ids, mask = left_padded(prompts)
    with torch.inference_mode():
        out = hf.generate(ids, attention_mask=mask, do_sample=False, num_beams=k, num_return_sequences=n,
                          max_new_tokens=NEW, pad_token_id=kwargs.get("eos_token_id", 0),
                          output_scores=True, return_dict_in_generate=True, **kwargs)
    return out.sequences_scores.numpy().reshape(len(prompts), n)


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def pair(request):
    hf = hf_llama(request.param, seed=3)
    return request.param, hf, engine_model(hf)


@pytest.fixture(scope="module")
def batch(pair):
    """30 prompts of lengths 1 to 30 and an EOS that ends some of their searches mid-batch."""
    name, hf, model = pair
    prompts = random_prompts(CONFIGS[name]["vocab_size"], LENGTHS, seed=8)
    eos = early_token(beam_search(model, prompts, 3, NEW))
    return prompts, eos


SETTINGS = [(2, 1.0, False), (3, 0.0, True), (4, 2.0, "never"), (3, -0.5, False), (5, 1.0, "never")]


def test_a_batch_of_lengths_1_to_30_matches_transformers(pair, batch):
    name, hf, model = pair
    prompts, eos = batch
    mid_batch = 0
    for k, lp, es in SETTINGS:
        ours = beam_search(model, prompts, k, NEW, eos_token_id=eos, length_penalty=lp, early_stopping=es)
        assert ours == hf_beams(hf, prompts, k, eos_token_id=eos, length_penalty=lp, early_stopping=es), (k, lp, es)
        ended = [bool(o) and o[-1] == eos for o in ours]
        assert not all(ended)
        mid_batch += any(ended)
    assert mid_batch                                         # EOS ended some prompts' best, not all


def test_a_batch_equals_its_prompts_one_by_one(pair, batch):
    """Batching changes the cost, never a prompt's hypotheses or their scores."""
    name, hf, model = pair
    prompts, eos = batch
    together = beam_hypotheses(model, prompts, 3, NEW, eos_token_id=eos, length_penalty=1.5)
    for p, hyps in list(zip(prompts, together))[::4]:
        alone = beam_hypotheses(model, p, 3, NEW, eos_token_id=eos, length_penalty=1.5)
        assert [h.tokens for h in alone] == [h.tokens for h in hyps]
        # equal to rounding: a matrix product of more rows may add in another order
        assert [h.score for h in alone] == pytest.approx([h.score for h in hyps], rel=1e-12)


def test_num_return_sequences_and_scores_match_transformers(pair, batch):
    name, hf, model = pair
    prompts, eos = batch
    some = prompts[::3]
    for k, n, lp in ((3, 3, 1.0), (4, 2, 0.5)):
        ours = beam_search(model, some, k, NEW, eos_token_id=eos, length_penalty=lp, num_return_sequences=n)
        assert ours == hf_beams(hf, some, k, eos_token_id=eos, length_penalty=lp, num_return_sequences=n)
        hyps = beam_hypotheses(model, some, k, NEW, eos_token_id=eos, length_penalty=lp)
        scores = np.array([[h.score for h in hs[:n]] for hs in hyps])
        # transformers adds the log-probabilities in float32: a relative 1e-5 of a sum of 8
        np.testing.assert_allclose(scores, hf_sequence_scores(hf, some, k, n, eos_token_id=eos,
                                                              length_penalty=lp), rtol=1e-5)
    # one prompt: a list of n lists; its first is what num_return_sequences=1 returns
    top3 = beam_search(model, prompts[4], 3, NEW, eos_token_id=eos, num_return_sequences=3)
    assert len(top3) == 3 and top3[0] == beam_search(model, prompts[4], 3, NEW, eos_token_id=eos)


def test_hypotheses_scores_are_the_models_log_probabilities(pair, batch):
    """Each hypothesis's log_prob recomputed without the cache, and score = log_prob / len ** lp."""
    name, hf, model = pair
    prompts, eos = batch
    lp = 2.0
    for p, hyps in zip(prompts[::7], beam_hypotheses(model, prompts[::7], 4, NEW, eos_token_id=eos,
                                                      length_penalty=lp)):
        assert len(hyps) == 4 and all(isinstance(h, Hypothesis) for h in hyps)
        assert [h.score for h in hyps] == sorted((h.score for h in hyps), reverse=True)
        for h in hyps:
            tokens = np.array(h.tokens)
            logp = log_softmax(model.logits(np.concatenate([p, tokens])))
            steps = np.arange(len(p) - 1, len(p) + len(tokens) - 1)
            assert h.log_prob == pytest.approx(float(logp[steps, tokens].sum()), rel=1e-9)
            assert h.score == pytest.approx(h.log_prob / len(tokens) ** lp, rel=1e-12)


def test_the_cache_holds_b_times_k_rows_and_a_finished_prompt_leaves_it(pair, batch):
    name, hf, model = pair
    prompts, eos = batch
    K = 3
    trace = []
    beam_search(model, prompts, K, NEW, eos_token_id=eos, early_stopping=True, trace=trace)
    assert trace[0]["cache_batch"] == len(prompts)                # the prefill: one row per prompt
    assert trace[0]["prompts"] == list(range(len(prompts)))
    for before, after in zip(trace, trace[1:]):
        assert after["cache_batch"] == K * len(after["prompts"])  # B x K rows, B the prompts still on
        assert set(after["prompts"]) <= set(before["prompts"])
        assert len(after["parents"]) == len(after["prompts"]) and all(len(p) == K for p in after["parents"])
    assert len(trace[-1]["prompts"]) < len(prompts)              # some searches ended before the last


@pytest.mark.parametrize("block_size", [2, 16])
def test_paged_batch_equals_contiguous_and_transformers(pair, batch, block_size):
    name, hf, model = pair
    prompts, eos = batch
    prompts = prompts[::2]
    want = hf_beams(hf, prompts, 3, eos_token_id=eos, length_penalty=0.5)
    assert beam_search(model, prompts, 3, NEW, eos_token_id=eos, length_penalty=0.5) == want
    assert beam_search(model, prompts, 3, NEW, eos_token_id=eos, length_penalty=0.5, cache="paged",
                       block_size=block_size) == want
    # a pool with one block to spare per prompt: the K beams of a prompt cannot all write their
    # own last block, so beams are preempted and recomputed; the same hypotheses
    trace = []
    tight = sum(blocks_for(len(p), block_size) for p in prompts) + len(prompts)
    assert beam_search(model, prompts, 3, NEW, eos_token_id=eos, length_penalty=0.5, cache="paged",
                       block_size=block_size, num_blocks=tight, trace=trace) == want
    assert trace[-1]["preemptions"] > 0


def test_top_candidates_is_the_head_of_a_stable_sort():
    rng = np.random.default_rng(0)
    for C, n in ((50, 6), (200, 10), (7, 7), (5, 9)):
        scores = np.round(rng.normal(size=(4, C)), 1)        # rounded: many ties
        want = np.argsort(-scores, axis=1, kind="stable")[:, :n]
        assert np.array_equal(top_candidates(scores, n), want), (C, n)


@pytest.mark.parametrize("call, message", [
    (lambda m: beam_hypotheses(m, [[1, 2]], 1, 3), "num_beams >= 2"),
    (lambda m: beam_search(m, [[1, 2], [1, 9999]], 2, 3), "prompt 1: token id 9999"),
    (lambda m: beam_search(m, [[1]] * 3, 2, 3, cache="paged", block_size=4, num_blocks=2), "the 3 prompts"),
    (lambda m: beam_search(m, [[1], [2] * 20], 2, 5, cache="paged", block_size=4, num_blocks=5),
     "prompt 1\\) can never fit"),
])
def test_bad_batches_get_a_clear_error(pair, call, message):
    name, hf, model = pair
    with pytest.raises(ValueError, match=message):
        call(model)


def test_inputs_are_never_modified(pair, batch):
    name, hf, model = pair
    prompts, eos = batch
    copies = [p.copy() for p in prompts]
    beam_search(model, prompts, 3, 4, eos_token_id=eos, cache="paged", block_size=4)
    assert all(np.array_equal(a, b) for a, b in zip(prompts, copies))


def test_assign_rows_copies_only_a_parents_extra_children():
    """After cache.reorder(gather), beam j's row holds its parent's row; a row is copied only for
    a beam whose parent's row another beam kept (or lies past the new batch)."""
    rng = np.random.default_rng(1)
    for _ in range(200):
        n_rows = int(rng.integers(1, 9))
        n = int(rng.integers(1, 9))
        sources = rng.integers(0, n_rows, size=n)
        gather, row_of = assign_rows(sources, n_rows)
        assert sorted(row_of.tolist()) == list(range(n))          # every row of the new batch, once
        assert np.array_equal(gather[row_of], sources)            # beam j's row is its parent's
        kept = len({int(r) for r in sources if r < n})            # parents whose row a child keeps
        assert int((gather != np.arange(n)).sum()) == n - kept
    # a swap moves nothing: each beam keeps its parent's row
    assert assign_rows(np.array([1, 0]), 2)[0].tolist() == [0, 1]


def test_a_beam_step_copies_the_rows_of_extra_children_only(pair, batch):
    name, hf, model = pair
    prompts, eos = batch
    p = prompts[20]
    K, trace = 4, []
    beam_search(model, p, K, NEW, trace=trace)
    cfg = model.config
    per_position = 2 * cfg.num_hidden_layers * cfg.num_key_value_heads * cfg.head_dim * 8     # float64
    for t, (before, after) in enumerate(zip(trace, trace[1:])):
        extra = K - len(set(before["parents"]))                   # children beyond a parent's first
        positions = len(p) + t                                    # what the rows held at the reorder
        assert after["cache_bytes_copied"] - before["cache_bytes_copied"] == extra * positions * per_position


# ---------------------------------------------------------------------- the real model

CHAT = ["What is the capital of France?", "Is water wet? Answer yes or no.", "Say hello.",
        "What is 2 + 2? Reply with the number only."]


@pytest.fixture(scope="module")
def smollm2(smollm2_engine, smollm2_transformers):
    """The engine and transformers on the installed SmolLM2-135M-Instruct GGUF file, float32."""
    model, tokenizer = smollm2_engine
    return model, tokenizer, smollm2_transformers


@pytest.mark.parametrize("cache", ["contiguous", "paged"])
def test_a_batch_of_chat_prompts_on_the_real_model_matches_transformers(smollm2, cache):
    """Four chat prompts of 33 to 45 tokens, 3 beams, 12 new tokens, EOS the end-of-turn token:
    one prompt's search ends mid-batch (its rows leave the cache), the others run to the limit."""
    model, tokenizer, hf = smollm2
    prompts = [tokenizer.chat_ids(text) for text in CHAT]
    eos = tokenizer.eos_token_id
    trace = []
    ours = beam_search(model, prompts, 3, 12, eos_token_id=eos, cache=cache, trace=trace)
    assert ours == hf_generate_batch(hf, prompts, max_new_tokens=12, num_beams=3, eos_token_id=eos)
    assert any(o[-1] == eos for o in ours) and not all(o[-1] == eos for o in ours)
    assert len(trace[-1]["prompts"]) < len(prompts)          # a search ended before the last step
    assert tokenizer.decode(ours[0]) == "The capital of France is Paris."


@pytest.mark.parametrize("cache_dtype", ["float16", "int8"])
def test_cache_dtype_passes_through_to_every_row_of_the_batch(pair, batch, cache_dtype):
    """The batch in a 2-byte or int8 cache: the same hypotheses as each prompt alone in that cache,
    and the cache really is in that format (its bytes per position)."""
    name, hf, model = pair
    prompts, eos = batch
    some = prompts[::6]
    together = beam_search(model, some, 3, NEW, eos_token_id=eos, cache_dtype=cache_dtype)
    assert together == [beam_search(model, p, 3, NEW, eos_token_id=eos, cache_dtype=cache_dtype) for p in some]
    for cache in ("contiguous", "paged"):
        trace = []
        beam_search(model, some, 3, 2, cache=cache, cache_dtype=cache_dtype, trace=trace)
        float64 = []
        beam_search(model, some, 3, 2, cache=cache, trace=float64)
        d = model.config.head_dim
        # per position and head: d values of 2 bytes, or d of 1 byte and a float32 scale; float64's 8 d
        want = 2 * d / (8 * d) if cache_dtype == "float16" else (d + 4) / (8 * d)
        assert trace[0]["cache_bytes"] / float64[0]["cache_bytes"] == pytest.approx(want, rel=1e-12)
