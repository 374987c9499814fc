"""Greedy decoding and beam search against transformers' generate(): the same tokens.

The EOS id of each test is a token the model emits in the middle of some sequences (found by a
first run without EOS), so sequences finish at different steps of one batch.
"""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from engine_helpers import CONFIGS, engine_model, hf_generate, hf_generate_batch, hf_llama, random_prompts
from kvcache.generate import beam_search, greedy

NEW = 8


def mid_batch_eos(outputs: list[list[int]]) -> int:
    """A token that some outputs emit at step 2..5 and others never: it ends sequences mid-batch."""
    counts = {}
    for out in outputs:
        for tok in set(out[2:6]) - set(out[:2]):
            counts[tok] = counts.get(tok, 0) + 1
    if not counts:
        raise AssertionError("no token would end a sequence in the middle: change the seed")
    # the most common such token that still leaves some sequences running to the end
    for tok, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        if n < len(outputs):
            return tok
    raise AssertionError("every candidate EOS ends every sequence")


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def pair(request):
    hf = hf_llama(request.param, seed=3)
    return request.param, hf, engine_model(hf)


def test_greedy_batch_of_lengths_1_to_30_with_eos_mid_batch(pair):
    name, hf, model = pair
    prompts = random_prompts(CONFIGS[name]["vocab_size"], range(1, 31), seed=4)
    free = greedy(model, prompts, NEW)
    eos = mid_batch_eos(free)
    ours = greedy(model, prompts, NEW, eos_token_id=eos)
    stopped = [len(o) < NEW for o in ours]
    assert any(stopped) and not all(stopped)                 # EOS really fired in the middle
    assert all(o[-1] == eos for o, s in zip(ours, stopped) if s)
    assert ours == hf_generate_batch(hf, prompts, max_new_tokens=NEW, eos_token_id=eos)
    # and one by one, unpadded (left padding is transformers' own device; it must not matter)
    for p, o in list(zip(prompts, ours))[::7]:
        assert o == hf_generate(hf, p, max_new_tokens=NEW, eos_token_id=eos)


BEAM_GRID = list(itertools.product([2, 3, 5], [1.0, 0.0, 2.0, -0.5], [False, True, "never"]))


def test_beam_search_matches_transformers(pair):
    name, hf, model = pair
    vocab = CONFIGS[name]["vocab_size"]
    prompts = random_prompts(vocab, (1, 6, 17), seed=5)
    eos = mid_batch_eos(greedy(model, prompts + random_prompts(vocab, range(2, 12), seed=6), NEW))
    fired = 0
    # every (num_beams, length_penalty, early_stopping) once, the prompts taking turns
    for i, (k, lp, es) in enumerate(BEAM_GRID):
        prompt = prompts[i % len(prompts)]
        ours = beam_search(model, prompt, k, NEW, eos_token_id=eos, length_penalty=lp, early_stopping=es)
        ref = hf_generate(hf, prompt, max_new_tokens=NEW, num_beams=k, length_penalty=lp,
                          early_stopping=es, eos_token_id=eos)
        assert ours == ref, (k, lp, es, list(prompt))
        fired += eos in ours
    assert fired                                             # some best hypotheses end with EOS


def test_beam_search_without_eos_and_one_beam(pair):
    name, hf, model = pair
    prompt = random_prompts(CONFIGS[name]["vocab_size"], (9,), seed=7)[0]
    for k in (1, 4):
        assert beam_search(model, prompt, k, NEW) == hf_generate(hf, prompt, max_new_tokens=NEW, num_beams=k)


def test_early_stopping_settings_where_they_change_the_result(pair):
    """EOS ids chosen among the model's most frequent tokens: with some, stopping at K finished
    hypotheses (True), at the heuristic (False) or never gives different best hypotheses."""
    name, hf, model = pair
    vocab = CONFIGS[name]["vocab_size"]
    prompts = random_prompts(vocab, (1, 6, 17), seed=5)
    new = 10
    frequent = np.bincount(np.concatenate(greedy(model, prompts, new) +
                                          [beam_search(model, p, 5, new) for p in prompts]), minlength=vocab)
    differing = 0
    for eos in np.argsort(-frequent, kind="stable")[:4]:
        for prompt, k, lp in itertools.product(prompts, (2, 3, 5), (1.0, 2.0)):
            outs = {}
            for es in (False, True, "never"):
                outs[es] = beam_search(model, prompt, k, new, eos_token_id=int(eos), length_penalty=lp,
                                       early_stopping=es)
            differing += len({tuple(o) for o in outs.values()}) > 1
            if len({tuple(o) for o in outs.values()}) > 1 or k == 3:    # every differing case, and a sample
                for es, ours in outs.items():
                    assert ours == hf_generate(hf, prompt, max_new_tokens=new, num_beams=k, length_penalty=lp,
                                               early_stopping=es, eos_token_id=int(eos)), (eos, k, lp, es)
    assert differing > 0
