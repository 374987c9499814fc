"""Greedy decoding and beam search over the paged cache: the same tokens as the contiguous cache
and as transformers' generate(); the same tokens again with a pool so small that sequences are
preempted and recomputed; OutOfBlocks, before anything is written, when preemption is off; a
request that can never fit refused before any work.
"""
from __future__ import annotations

import numpy as np
import pytest

import kvcache.generate as generate
from engine_helpers import CONFIGS, engine_model, hf_generate, hf_generate_batch, hf_llama, random_prompts
from kvcache.generate import beam_search, greedy
from kvcache.model import Model
from kvcache.paged import OutOfBlocks, blocks_for

CONFIG = dict(vocab_size=60, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
MODEL = Model.random(CONFIG, seed=11, dtype=np.float64)
V = CONFIG["vocab_size"]


def prompts_of(lengths, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, V, size=n) for n in lengths]


def mid_batch_eos(outputs):
    """A token some outputs emit at step 2..5 and others never: it ends sequences mid-batch."""
    counts = {}
    for out in outputs:
        for tok in set(out[2:6]) - set(out[:2]):
            counts[tok] = counts.get(tok, 0) + 1
    for tok, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        if n < len(outputs):
            return tok
    raise AssertionError("no token ends some sequences mid-batch: change the seed")


def count_forwards(monkeypatch):
    calls = []
    original = Model.forward

    def forward(self, tokens, counts, cache):
        calls.append(len(counts))
        return original(self, tokens, counts, cache)
    monkeypatch.setattr(Model, "forward", forward)
    return calls


# ---------------------------------------------------------------------- equal to the contiguous cache


@pytest.mark.parametrize("block_size", [1, 3, 16])
def test_greedy_paged_equals_contiguous_with_eos_mid_batch(block_size):
    prompts = prompts_of(range(1, 31), seed=1)
    eos = mid_batch_eos(greedy(MODEL, prompts, 10))
    ref = greedy(MODEL, prompts, 10, eos_token_id=eos)
    assert any(len(o) < 10 for o in ref) and not all(len(o) < 10 for o in ref)
    trace = []
    assert greedy(MODEL, prompts, 10, eos_token_id=eos, cache="paged", block_size=block_size, trace=trace) == ref
    assert sum(t["preempted"] for t in trace) == 0            # the default pool never runs short
    for t in trace:                                           # finished sequences stop costing
        assert t["cache_batch"] == len(t["rows"]) == sum(len(o) > t["step"] for o in ref)


@pytest.mark.parametrize("k, lp, es", [(2, 1.0, False), (3, 2.0, True), (4, 0.0, "never"), (5, -0.5, False)])
def test_beam_search_paged_equals_contiguous(k, lp, es):
    for p in prompts_of((1, 6, 17), seed=2):
        eos = greedy(MODEL, [p], 4)[0][-1]
        for eos_id in (None, eos):
            ref = beam_search(MODEL, p, k, 9, eos_token_id=eos_id, length_penalty=lp, early_stopping=es)
            for block_size in (2, 16):
                assert beam_search(MODEL, p, k, 9, eos_token_id=eos_id, length_penalty=lp, early_stopping=es,
                                   cache="paged", block_size=block_size) == ref


def test_beams_share_the_prompt_by_reference_and_copy_only_partial_blocks():
    p = prompts_of((21,), seed=3)[0]
    paged, contiguous = [], []
    beam_search(MODEL, p, 4, 6, cache="paged", block_size=8, trace=paged)
    beam_search(MODEL, p, 4, 6, trace=contiguous)
    per_position = 2 * 2 * CONFIG["num_key_value_heads"] * 8 * 8     # k and v, 2 layers, G d float64
    assert contiguous[1]["cache_bytes_copied"] == 3 * 21 * per_position   # the prompt, copied to 3 rows
    # paged: the expansion copies nothing; the first decode copies the shared partial block
    # (21 = 2 x 8 + 5 positions) for 3 of the 4 beams, never the 16 positions of the full blocks
    assert paged[0]["cache_bytes_copied"] == 0
    assert paged[1]["cache_bytes_copied"] == 3 * 5 * per_position
    assert all(t["preemptions"] == 0 for t in paged)
    assert paged[-1]["cache_bytes_copied"] < contiguous[-1]["cache_bytes_copied"]


# ---------------------------------------------------------------------- against transformers


@pytest.fixture(scope="module", params=["gqa-untied", "mha-tied"])
def pair(request):
    hf = hf_llama(request.param, seed=3)
    return request.param, hf, engine_model(hf)


def test_greedy_paged_matches_transformers(pair):
    name, hf, model = pair
    prompts = random_prompts(CONFIGS[name]["vocab_size"], range(1, 25), seed=4)
    eos = mid_batch_eos(greedy(model, prompts, 8))
    want = hf_generate_batch(hf, prompts, max_new_tokens=8, eos_token_id=eos)
    assert greedy(model, prompts, 8, eos_token_id=eos, cache="paged", block_size=4) == want
    # a pool of a third of what the batch needs at its longest: preempted, recomputed, the same
    trace = []
    tight = sum(blocks_for(len(p) + 8, 4) for p in prompts) // 3
    assert greedy(model, prompts, 8, eos_token_id=eos, cache="paged", block_size=4, num_blocks=tight,
                  trace=trace) == want
    assert sum(t["preempted"] for t in trace) > 0


def test_beam_search_paged_matches_transformers(pair):
    """With and without an EOS that some hypotheses emit; the 17-token prompt holds token 0, the
    pad id the helper gives generate() (so its mask must be explicit)."""
    name, hf, model = pair
    vocab = CONFIGS[name]["vocab_size"]
    prompts = random_prompts(vocab, (1, 6, 17), seed=5)
    eos = mid_batch_eos(greedy(model, prompts + random_prompts(vocab, range(2, 12), seed=6), 8))
    settings = [(2, 1.0, False, None), (3, 2.0, True, eos), (4, 0.0, "never", None), (5, 1.0, False, eos),
                (3, -0.5, "never", eos), (4, 1.0, False, None)]
    for i, (k, lp, es, eos_id) in enumerate(settings):
        prompt = prompts[i % 3]
        want = hf_generate(hf, prompt, max_new_tokens=8, num_beams=k, length_penalty=lp, early_stopping=es,
                           eos_token_id=eos_id)
        assert beam_search(model, prompt, k, 8, eos_token_id=eos_id, length_penalty=lp, early_stopping=es,
                           cache="paged", block_size=4) == want, (k, lp, es)
        # beams preempted and recomputed beside the others: still the same hypothesis
        trace = []
        one_beam = blocks_for(len(prompt) + 7, 4)
        assert beam_search(model, prompt, k, 8, eos_token_id=eos_id, length_penalty=lp, early_stopping=es,
                           cache="paged", block_size=4, num_blocks=one_beam + 1, trace=trace) == want, (k, lp, es)
        assert trace[-1]["preemptions"] > 0 or len(trace) < 3


# ---------------------------------------------------------------------- when blocks run out


@pytest.mark.parametrize("block_size", [2, 5])
def test_a_tight_pool_preempts_and_gives_the_tokens_of_an_unlimited_one(block_size):
    prompts = prompts_of([3, 30, 9, 1, 17, 25, 6, 12], seed=6)
    eos = mid_batch_eos(greedy(MODEL, prompts, 16))
    want = greedy(MODEL, prompts, 16, eos_token_id=eos)
    longest = max(blocks_for(len(p) + 15, block_size) for p in prompts)
    for num_blocks in (longest, longest + 3, 2 * longest):
        trace = []
        got = greedy(MODEL, prompts, 16, eos_token_id=eos, cache="paged", block_size=block_size,
                     num_blocks=num_blocks, trace=trace)
        assert got == want, num_blocks
        assert sum(t["preempted"] for t in trace) > 0
        assert max(t["blocks_used"] for t in trace) <= num_blocks
        # the newest running sequence is the one preempted: never the oldest of a step
        for before, after in zip(trace, trace[1:]):
            if after["preempted"]:
                assert before["rows"][0] in after["rows"]


def test_without_preemption_a_tight_pool_raises_before_writing(monkeypatch):
    prompts = prompts_of([10, 10, 10, 10], seed=7)
    with pytest.raises(OutOfBlocks, match="preempt=False") as err:
        greedy(MODEL, prompts, 20, cache="paged", block_size=4, num_blocks=14, preempt=False)
    assert err.value.asked > err.value.free
    # the prompts alone (3 blocks each) need more than 10: refused before any forward pass
    calls = count_forwards(monkeypatch)
    with pytest.raises(OutOfBlocks, match="12 blocks asked for, 10 free"):
        greedy(MODEL, prompts, 5, cache="paged", block_size=4, num_blocks=10, preempt=False)
    assert calls == []
    with pytest.raises(OutOfBlocks, match="preempt=False"):
        beam_search(MODEL, prompts[0], 4, 12, cache="paged", block_size=4, num_blocks=8, preempt=False)
    # with room for everything, preempt=False changes nothing
    assert greedy(MODEL, prompts, 8, cache="paged", block_size=4, num_blocks=40, preempt=False) == \
        greedy(MODEL, prompts, 8)


def test_the_pool_running_short_in_a_step_leaves_the_cache_intact(monkeypatch):
    """The step that raises wrote nothing: the blocks and tables are what the step before left."""
    seen = {}
    original = generate._PagedBeams.step

    def step(self, parents, beam_tokens):
        seen["tables"] = [list(t) for t in self.kv.tables]
        seen["k"] = [a.copy() for a in self.kv.pool.k]
        seen["kv"] = self.kv
        return original(self, parents, beam_tokens)
    monkeypatch.setattr(generate._PagedBeams, "step", step)
    with pytest.raises(OutOfBlocks):
        beam_search(MODEL, prompts_of([10], seed=8)[0], 4, 12, cache="paged", block_size=4, num_blocks=9,
                    preempt=False)
    kv = seen["kv"]
    assert all(np.array_equal(a, b) for a, b in zip(kv.pool.k, seen["k"]))
    kv.check()


def test_a_request_that_can_never_fit_is_refused_up_front(monkeypatch):
    calls = count_forwards(monkeypatch)
    prompts = prompts_of([4, 40], seed=9)
    with pytest.raises(OutOfBlocks, match="request 1 \\(40 prompt tokens \\+ 10 new\\) can never fit") as err:
        greedy(MODEL, prompts, 10, cache="paged", block_size=8, num_blocks=6)
    assert (err.value.asked, err.value.free) == (blocks_for(49, 8), 6)
    with pytest.raises(OutOfBlocks, match="can never fit"):
        beam_search(MODEL, prompts[1], 3, 10, cache="paged", block_size=8, num_blocks=6)
    assert calls == []
    # exactly the room it needs is enough (its last token's key and value are never stored)
    assert greedy(MODEL, prompts[1:], 10, cache="paged", block_size=7, num_blocks=7) == greedy(MODEL, prompts[1:], 10)


def test_every_block_comes_back_after_beam_search(monkeypatch):
    finished = []
    original = generate._PagedBeams.finish

    def finish(self):
        original(self)
        finished.append(self.kv)
    monkeypatch.setattr(generate._PagedBeams, "finish", finish)
    p = prompts_of([13], seed=10)[0]
    for num_blocks in (None, 9):                 # 9: one beam of 13 + 9 positions and a block to spare
        beam_search(MODEL, p, 4, 10, cache="paged", block_size=3, num_blocks=num_blocks)
        kv = finished.pop()
        kv.check()
        assert kv.num_free == kv.num_blocks and not kv.pool.pinned


@pytest.mark.parametrize("call, error, message", [
    (lambda: greedy(MODEL, [[1]], 3, cache="paged", block_size=0), ValueError, "block_size"),
    (lambda: greedy(MODEL, [[1]], 3, cache="paged", num_blocks=0), ValueError, "num_blocks"),
    (lambda: greedy(MODEL, [[1]], 3, cache="paged", preempt="yes"), ValueError, "preempt"),
    (lambda: greedy(MODEL, [[1]], 3, cache="paged", prefill="padded"), ValueError, "ragged"),
    (lambda: greedy(MODEL, [[1]], 3, cache="paged", colour="red"), TypeError, "colour"),
    (lambda: greedy(MODEL, [[1]], 3, preempt=True), TypeError, "no option 'preempt'"),
    (lambda: beam_search(MODEL, [1], 2, 3, cache="paged", num_blocks=-1), ValueError, "num_blocks"),
    (lambda: beam_search(MODEL, [1], 2, 3, cache="paged", preempt=None), ValueError, "preempt"),
])
def test_bad_options_get_a_clear_error(call, error, message):
    with pytest.raises(error, match=message):
        call()
