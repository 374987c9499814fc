"""Speculative decoding with prompt lookup: greedy's tokens exactly, fewer forward passes.

Random float64 models (hypothesis: batches, ragged prompts, EOS mid-batch, draft lengths,
contiguous and paged, the pool's invariants after every rollback and every block free at the
end); the rollback of one row of a paged batch whose blocks another row shares; the real model
(SmolLM2-135M-Instruct) on a reply that copies its prompt and on an open-ended one, and against
transformers' own prompt lookup (``generate(..., prompt_lookup_num_tokens=K)``).
"""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings, strategies as st

from kvcache import speculative
from kvcache.__main__ import main
from kvcache.generate import greedy
from kvcache.model import Model
from kvcache.paged import PagedKVCache

# a small vocabulary: random prompts repeat n-grams, and greedy decoding of a random model falls
# into loops, so drafts are found and accepted as well as rejected
CONFIG = dict(vocab_size=12, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=160)
MODEL = Model.random(CONFIG, seed=5, dtype=np.float64)
V = CONFIG["vocab_size"]


# ---------------------------------------------------------------------- the lookup


def test_the_draft_follows_the_first_earlier_occurrence_of_the_longest_ngram():
    seq = np.array([1, 2, 3, 9, 1, 2, 3, 8, 7, 4, 1, 2, 3])
    # the 3-gram (1, 2, 3) occurs at 0 and 4: the first occurrence wins, as in transformers
    assert speculative.find_draft(seq, 4, 3).tolist() == [9, 1, 2, 3]
    assert speculative.find_draft(seq, 2, 3).tolist() == [9, 1]
    # no 3-gram or 2-gram recurs: the 1-gram 5 does, at 1
    assert speculative.find_draft(np.array([6, 5, 4, 3, 7, 5]), 10, 3).tolist() == [4, 3, 7, 5]
    # the continuation stops at the end of the sequence
    assert speculative.find_draft(np.array([4, 4, 4]), 10, 3).tolist() == [4]
    # nothing recurs, or the sequence is one token: no draft
    assert speculative.find_draft(np.array([1, 2, 3]), 10, 3).tolist() == []
    assert speculative.find_draft(np.array([1]), 10, 3).tolist() == []


def test_the_draft_needs_a_match_of_min_ngram_tokens():
    seq = np.array([5, 1, 2, 3, 1])                    # only the 1-gram [1] recurs
    assert speculative.find_draft(seq, 3, 3).tolist() == [2, 3, 1]
    assert speculative.find_draft(seq, 3, 3, min_ngram=2).tolist() == []
    seq = np.array([4, 1, 2, 3, 9, 1, 2])              # the 2-gram [1, 2] recurs, no 3-gram
    assert speculative.find_draft(seq, 2, 3, min_ngram=2).tolist() == [3, 9]
    assert speculative.find_draft(seq, 2, 3, min_ngram=3).tolist() == []


def test_the_accepted_prefix_stops_at_the_first_disagreement():
    assert speculative.accepted_prefix(np.array([3, 4, 5]), np.array([3, 4, 9, 1])) == 2
    assert speculative.accepted_prefix(np.array([3, 4, 5]), np.array([3, 4, 5, 1])) == 3
    assert speculative.accepted_prefix(np.array([3, 4, 5]), np.array([0, 4, 5, 1])) == 0
    assert speculative.accepted_prefix(np.array([], np.int64), np.array([7])) == 0


# ---------------------------------------------------------------------- identity with greedy


def mid_batch_eos(outputs):
    """A token some outputs emit after their second token and others never: EOS mid-batch."""
    for tok in range(V):
        hit = [tok in out[2:] and tok not in out[:2] for out in outputs]
        if any(hit) and not all(tok in out for out in outputs):
            return tok
    return None


def checked_pool(seen):
    """An after_rollback hook: the paged pool's invariants (``check``) after every rollback."""
    def check(kv):
        seen.append(kv)
        if isinstance(kv, PagedKVCache):
            kv.check()
            # invariant 4 after a rollback: no table holds a block past its length's
            for table, length in zip(kv.block_tables, kv.lengths):
                assert len(table) == -(-int(length) // kv.block_size)
    return check


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lengths=st.lists(st.integers(1, 24), min_size=1, max_size=4), seed=st.integers(0, 10**6),
       new=st.integers(0, 40), k=st.integers(0, 8), ngram=st.integers(1, 4), use_eos=st.booleans(),
       cache=st.sampled_from(["contiguous", "paged"]), block_size=st.sampled_from([1, 3, 4, 16]),
       min_ngram=st.integers(1, 3), max_skip=st.sampled_from([0, 1, 32]))
def test_the_tokens_are_greedys(lengths, seed, new, k, ngram, use_eos, cache, block_size, min_ngram, max_skip):
    rng = np.random.default_rng(seed)
    prompts = [rng.integers(0, V, size=n) for n in lengths]
    eos = None
    if use_eos:
        eos = mid_batch_eos(greedy(MODEL, prompts, new))
    expected = greedy(MODEL, prompts, new, eos)
    options = {"block_size": block_size} if cache == "paged" else {}
    stats, seen = {}, []
    got = speculative.greedy(MODEL, prompts, new, eos, cache, num_draft_tokens=k, max_ngram=ngram, stats=stats,
                             after_rollback=checked_pool(seen), min_ngram=min_ngram, max_skip=max_skip, **options)
    assert got == expected
    assert stats["tokens"] == sum(map(len, expected))
    assert 0 <= stats["accepted"] <= stats["proposed"]
    assert stats["forward_passes"] <= max(map(len, expected))        # greedy's passes, at most
    if len(prompts) == 1 and new:
        # a pass gives one token and one more per accepted draft token
        assert stats["tokens"] == stats["forward_passes"] + stats["accepted"]
    if k == 0:
        assert stats["proposed"] == 0 and not seen
    if cache == "paged" and seen:
        assert seen[-1].num_free == seen[-1].num_blocks          # every block free at the end


def test_drafts_are_accepted_and_save_passes_in_a_ragged_batch_with_eos_mid_batch():
    rng = np.random.default_rng(3)
    prompts = [np.tile(rng.integers(0, V, size=5), 4), rng.integers(0, V, size=7), np.tile([1, 2, 3], 3)]
    eos = mid_batch_eos(greedy(MODEL, prompts, 48))
    assert eos is not None
    expected = greedy(MODEL, prompts, 48, eos)
    assert len({len(o) for o in expected}) > 1                       # some rows end before others
    for cache in ("contiguous", "paged"):
        stats, seen = {}, []
        got = speculative.greedy(MODEL, prompts, 48, eos, cache, num_draft_tokens=6, stats=stats,
                                 after_rollback=checked_pool(seen), **({"block_size": 4} if cache == "paged" else {}))
        assert got == expected
        assert stats["accepted"] > 0 and stats["proposed"] > stats["accepted"]     # both kinds of draft
        assert stats["forward_passes"] < max(map(len, expected))
        assert seen and all(s is seen[0] for s in seen)
        if cache == "paged":
            assert seen[0].num_free == seen[0].num_blocks


def test_a_pool_too_small_for_the_batch_is_refused_and_every_block_is_free_after(monkeypatch):
    from kvcache.paged import OutOfBlocks
    prompts = [np.tile([1, 2, 3, 4], 3), np.tile([5, 6, 7, 8], 3)]          # 3 blocks each
    made = []

    def new_cache(*args, **kwargs):
        made.append(Model.new_cache(MODEL, *args, **kwargs))
        return made[-1]

    monkeypatch.setattr(MODEL, "new_cache", new_cache)
    with pytest.raises(OutOfBlocks):
        speculative.greedy(MODEL, prompts, 30, cache="paged", block_size=4, num_blocks=8)
    assert len(made) == 1 and made[0].num_free == made[0].num_blocks == 8
    made[0].check()


@pytest.mark.parametrize("kwargs, message", [
    ({"num_draft_tokens": -1}, "num_draft_tokens must be an integer >= 0"),
    ({"max_ngram": 0}, "max_ngram must be an integer >= 1"),
    ({"stats": []}, "stats must be a dict"),
    ({"max_skip": 1.5}, "max_skip must be an integer >= 0"),
    ({"min_ngram": 0}, "min_ngram must be an integer >= 1"),
    ({"max_new_tokens": -2}, "max_new_tokens must be an integer >= 0"),
])
def test_bad_arguments_are_refused_before_any_work(kwargs, message):
    args = {"max_new_tokens": 4, **kwargs}
    with pytest.raises(ValueError, match=message):
        speculative.greedy(MODEL, [[1, 2, 3]], args.pop("max_new_tokens"), **args)


def test_stats_are_greedys_passes_without_drafts():
    stats = {}
    out = speculative.greedy(MODEL, [[1, 2, 3, 1, 2]], 9, num_draft_tokens=0, stats=stats)
    assert out == greedy(MODEL, [[1, 2, 3, 1, 2]], 9)
    counts = {key: stats[key] for key in ("forward_passes", "proposed", "accepted", "tokens")}
    assert counts == {"forward_passes": 9, "proposed": 0, "accepted": 0, "tokens": 9}
    assert stats["prefill_seconds"] > 0 and stats["decode_seconds"] > 0 and stats["cache_bytes"] > 0


# ---------------------------------------------------------------------- when a sequence drafts


class Scripted:
    """A one-sequence model whose greedy reply is fixed: the logits after position i of the
    text (prompt, then reply) pick ``text[i + 1]``, whatever came before, so every draft is
    judged against a known reply.  Records the tokens each pass after the prefill checks."""

    def __init__(self, prompt, reply, vocab_size=20):
        self.text = list(prompt) + list(reply) + [0]
        self.config = SimpleNamespace(vocab_size=vocab_size, max_position_embeddings=100)
        self.checked = []

    def check_tokens(self, tokens, name="tokens"):
        return np.asarray(tokens, np.int64)

    def new_cache(self, batch, max_len, **options):
        return SimpleNamespace(lengths=np.zeros(batch, np.int64), nbytes=0, crop=lambda lengths: None)

    def _logits(self, positions):
        logits = np.zeros((len(positions), self.config.vocab_size))
        logits[np.arange(len(positions)), [self.text[i + 1] for i in positions]] = 1.0
        return logits

    def prefill(self, prompts, kv):
        kv.lengths[0] = len(prompts[0])
        kv.crop = lambda lengths: kv.lengths.__setitem__(0, lengths[0])
        return self._logits([len(prompts[0]) - 1])

    def forward(self, tokens, counts, kv, every_token=False):
        start = int(kv.lengths[0])
        kv.lengths[0] += len(tokens)
        self.checked.append(len(tokens))
        return self._logits(range(start, start + len(tokens)))


class ScriptedHidden(Scripted):
    """Scripted, with the engine's split of a pass (``forward_hidden``, then ``head`` on the rows
    wanted): a hidden state is its position; records how many rows each ``head`` call takes."""

    def __init__(self, prompt, reply, vocab_size=20):
        super().__init__(prompt, reply, vocab_size)
        self.head_rows = []

    def forward_hidden(self, tokens, counts, kv):
        start = int(kv.lengths[0])
        kv.lengths[0] += len(tokens)
        self.checked.append(len(tokens))
        return np.arange(start, start + len(tokens))[:, None]

    def head(self, hidden):
        self.head_rows.append(len(hidden))
        return self._logits(hidden[:, 0].tolist())


# the prompt, and a reply in which a 1-gram, 2-grams and a 3-gram of the text recur
PROMPT = [1, 2, 3, 4, 5, 6, 7, 8]
REPLY = [1, 2, 9, 10, 3, 4, 11, 1, 2, 3, 4, 5, 6, 12]


def test_the_back_off_drafts_from_longer_matches_after_a_rejection():
    """With drafts of 4 and the default policy, pass by pass after the prefill (P: the prompt):
    P + [1]: only the 1-gram [1] recurs, no draft (min_ngram 2); P + [1, 2]: [1, 2] recurs, draft
    3 4 5 6, wholly rejected (the reply says 9); the next step is skipped; then the sequence
    drafts only from 3-gram matches: P + [.., 10, 3, 4] has the 2-gram [3, 4] but no draft; P +
    [.., 11, 1, 2, 3] has the 3-gram [1, 2, 3]: draft 4 5 6 (the room left before the 14th
    token), all accepted."""
    for model in (Scripted(PROMPT, REPLY), ScriptedHidden(PROMPT, REPLY)):
        stats = {}
        assert speculative.greedy(model, [PROMPT], len(REPLY), num_draft_tokens=4, stats=stats) == [REPLY]
        assert model.checked == [1, 5, 1, 1, 1, 1, 1, 1, 1, 4]
        counts = {key: stats[key] for key in ("forward_passes", "proposed", "accepted", "tokens")}
        assert counts == {"forward_passes": 11, "proposed": 7, "accepted": 3, "tokens": 14}


def test_the_output_layer_reads_past_a_draft_only_when_its_first_token_is_right():
    """The passes of the test above, split: the rejected draft (3 4 5 6, where the reply says 9)
    takes the output layer for its first row only; the accepted one (4 5 6) for all 4 rows, the
    first, then the 3 after it."""
    model = ScriptedHidden(PROMPT, REPLY)
    assert speculative.greedy(model, [PROMPT], len(REPLY), num_draft_tokens=4) == [REPLY]
    assert model.head_rows == [1] * 9 + [1, 3]


def test_without_back_off_every_step_drafts_from_its_match():
    """max_skip=0: the step after the rejection drafts nothing only because nothing matches, the
    2-gram [3, 4] gives a draft (rejected: the reply says 11), and [1, 2] gives 3 4 5 6, all
    accepted.  With min_ngram=1 too (transformers' lookup), the first step drafts from [1]."""
    model = Scripted(PROMPT, REPLY)
    stats = {}
    assert speculative.greedy(model, [PROMPT], len(REPLY), num_draft_tokens=4, stats=stats, max_skip=0) == [REPLY]
    assert model.checked == [1, 5, 1, 1, 1, 5, 1, 1, 5]
    assert (stats["proposed"], stats["accepted"], stats["forward_passes"]) == (12, 4, 10)
    model = Scripted(PROMPT, REPLY)
    assert speculative.greedy(model, [PROMPT], len(REPLY), num_draft_tokens=4, max_skip=0, min_ngram=1) == [REPLY]
    assert model.checked[0] == 5                                 # P + [1]: the 1-gram [1] drafts 2 3 4 5


def test_an_accepted_draft_undoes_the_back_off():
    """A rejection, then a draft from a 3-gram with a token accepted: the sequence drafts from a
    2-gram match again.  Pass by pass: P + [1, 2] drafts 3 4 5 6, rejected (9); one step
    skipped; [2, 9, 1] and [9, 1, 2] recur nowhere; [1, 2, 3] drafts 4 5 6 7, and 4 is accepted
    (then 8); [4, 8] recurs nowhere; [8, 1] recurs (the prompt's end and the reply's start):
    a draft of 2 (the room left), both accepted."""
    reply = [1, 2, 9, 1, 2, 3, 4, 8, 1, 2, 9, 12]
    model = Scripted(PROMPT, reply)
    stats = {}
    assert speculative.greedy(model, [PROMPT], len(reply), num_draft_tokens=4, stats=stats) == [reply]
    assert model.checked == [1, 5, 1, 1, 1, 5, 1, 3]
    assert (stats["proposed"], stats["accepted"], stats["forward_passes"]) == (10, 3, 9)


# ---------------------------------------------------------------------- rollback and copy-on-write


def test_rolling_back_one_row_keeps_the_blocks_another_row_shares():
    """Two rows share a prompt's blocks (fork); one verifies a draft and rolls back, across a
    block boundary, into a block the other still references: the next write copies that block
    (copy-on-write), and the other row's keys and values never change."""
    bs = 4
    kv = MODEL.new_cache(1, 40, kind="paged", block_size=bs, num_blocks=12)
    MODEL.prefill([np.arange(8) % V], kv)                      # 8 positions: 2 full blocks
    kv.fork(0)                                                  # row 1 shares both blocks
    before = [(layer.keys(0), layer.values(0)) for layer in kv]
    shared = kv.block_table(0)
    # row 1 verifies 3 draft tokens after its last one (positions 8..11), row 0 decodes one
    MODEL.forward(np.array([5, 1, 2, 3, 4]), np.array([1, 4]), kv, every_token=True)
    kv.check()
    speculative.rollback(kv, [9, 7])                             # row 1 keeps 7: inside shared block 1
    kv.check()
    assert kv.block_table(1) == shared and kv.lengths.tolist() == [9, 7]
    assert kv.allocator.refcount(shared[1]) == 2
    MODEL.forward(np.array([6, 9]), np.array([1, 1]), kv)        # row 1 writes position 7: a copy
    kv.check()
    assert kv.block_table(1)[0] == shared[0] and kv.block_table(1)[1] not in shared
    for layer, (k0, v0) in zip(kv, before):
        np.testing.assert_array_equal(layer.keys(0)[:, :8], k0)
        np.testing.assert_array_equal(layer.values(0)[:, :8], v0)
    kv.release()
    kv.check()
    assert kv.num_free == kv.num_blocks


def test_rollback_in_a_contiguous_cache_forgets_the_rejected_positions():
    prompt = np.arange(6) % V
    kv = MODEL.new_cache(1, 20)
    MODEL.prefill([prompt], kv)
    reference = kv.copy()
    MODEL.forward(np.array([3, 4, 5]), np.array([3]), kv, every_token=True)
    speculative.rollback(kv, [7])
    MODEL.forward(np.array([8]), np.array([1]), kv)
    MODEL.forward(np.array([3, 8]), np.array([2]), reference)
    assert kv.lengths.tolist() == reference.lengths.tolist() == [8]
    for a, b in zip(kv, reference):
        np.testing.assert_allclose(a.keys(0), b.keys(0), rtol=1e-12, atol=1e-12)


def test_every_token_logits_are_each_positions():
    tokens = np.array([2, 7, 1, 1, 5])
    kv = MODEL.new_cache(2, 12)
    MODEL.prefill([[3, 3], [4]], kv)
    logits = MODEL.forward(tokens, np.array([3, 2]), kv, every_token=True)
    np.testing.assert_allclose(logits[:3], MODEL.logits([3, 3, 2, 7, 1])[2:], rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(logits[3:], MODEL.logits([4, 1, 5])[1:], rtol=1e-9, atol=1e-9)


# ---------------------------------------------------------------------- the CLI


def test_hidden_states_then_the_output_layer_are_every_tokens_logits():
    kv, again = MODEL.new_cache(2, 12), MODEL.new_cache(2, 12)
    for cache in (kv, again):
        MODEL.prefill([[3, 3], [4]], cache)
    tokens, counts = np.array([2, 7, 1, 1, 5]), np.array([3, 2])
    hidden = MODEL.forward_hidden(tokens, counts, kv)
    assert hidden.shape == (5, CONFIG["hidden_size"]) and kv.lengths.tolist() == [5, 3]
    logits = MODEL.forward(tokens, counts, again, every_token=True)
    np.testing.assert_allclose(MODEL.head(hidden), logits, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(MODEL.head(hidden[3:4]), logits[3:4], rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="5 tokens given for counts summing to 4"):
        MODEL.forward_hidden(tokens, np.array([2, 2]), kv)
    assert kv.lengths.tolist() == [5, 3]                             # nothing written


def test_cli_prompt_lookup_prints_the_acceptance(capsys):
    argv = ["generate", "--random", "--vocab-size", "12", "--hidden-size", "32", "--layers", "2", "--heads", "4",
            "--kv-heads", "2", "--intermediate-size", "48", "--dtype", "float64", "--seed", "5",
            "--prompt-ids", "1", "2", "3", "1", "2", "3", "1", "2", "--max-new-tokens", "24", "--eos", "none"]
    assert main(argv + ["--prompt-lookup", "6"]) == 0
    out = capsys.readouterr().out
    assert main(argv) == 0
    plain = capsys.readouterr().out
    assert out.splitlines()[0] == plain.splitlines()[0]               # the same tokens
    line = next(x for x in out.splitlines() if x.startswith("prompt lookup:"))
    stats = {}
    speculative.greedy(Model.random(dict(CONFIG, max_position_embeddings=4096), seed=5, dtype=np.float64),
                       [[1, 2, 3, 1, 2, 3, 1, 2]], 24, None, num_draft_tokens=6, stats=stats)
    assert f"{stats['accepted']}/{stats['proposed']} draft tokens accepted" in line
    assert f"{stats['tokens'] / stats['forward_passes']:.2f} tokens per forward pass" in line
    assert "tokens/s" in line
    assert main(argv + ["--prompt-lookup", "-1"]) == 1
    assert "num_draft_tokens must be an integer >= 0" in capsys.readouterr().err
    assert main(argv + ["--prompt-lookup", "3", "--beams", "2"]) == 1
    assert "--prompt-lookup" in capsys.readouterr().err


# ---------------------------------------------------------------------- the real model

NAME = "smollm2-135m-instruct"
CODE = "def add(a, b):\n    return a + b\n\ndef mul(a, b):\n    return a * b\n"
COPYING = "Repeat this code exactly:\n" + CODE
OPEN = "Write a short story about a lighthouse keeper."


@pytest.fixture(scope="module")
def engine(smollm2_engine):
    return smollm2_engine


@pytest.mark.parametrize("cache", ["contiguous", "paged"])
def test_real_model_copying_reply_is_greedys_in_fewer_passes(engine, cache):
    model, tokenizer = engine
    ids = tokenizer.chat_ids(COPYING)
    expected = greedy(model, [ids], 40, model.config.eos_token_id)
    stats, seen = {}, []
    got = speculative.greedy(model, [ids], 40, model.config.eos_token_id, cache, num_draft_tokens=10, stats=stats,
                             after_rollback=checked_pool(seen))
    assert got == expected
    assert "return a + b" in tokenizer.decode(got[0])                  # the reply copies the prompt
    assert stats["accepted"] >= len(got[0]) // 2
    assert stats["forward_passes"] * 2 <= len(got[0])
    if cache == "paged":
        assert seen[-1].num_free == seen[-1].num_blocks


def test_real_model_open_ended_batch_is_greedys(engine):
    model, tokenizer = engine
    prompts = [tokenizer.chat_ids(OPEN), tokenizer.chat_ids(COPYING)]
    expected = greedy(model, prompts, 20, model.config.eos_token_id)
    stats = {}
    assert speculative.greedy(model, prompts, 20, model.config.eos_token_id, "paged", stats=stats,
                              max_skip=0, min_ngram=1) == expected
    assert stats["proposed"] > stats["accepted"] > 0


def test_real_model_agrees_with_transformers_prompt_lookup(engine, smollm2_transformers):
    hf = smollm2_transformers
    model, tokenizer = engine
    ids = tokenizer.chat_ids(COPYING)
    with torch.no_grad():
        out = hf.generate(torch.tensor([ids]), max_new_tokens=30, do_sample=False, prompt_lookup_num_tokens=5,
                          eos_token_id=2, pad_token_id=2, attention_mask=torch.ones(1, len(ids), dtype=torch.long))
    theirs = out[0, len(ids):].tolist()
    ours = speculative.greedy(model, [ids], 30, 2, num_draft_tokens=5)[0]
    assert ours == theirs
    assert "return a * b" in tokenizer.decode(ours)
