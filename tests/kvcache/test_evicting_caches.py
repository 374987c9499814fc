"""The caches that keep fewer tokens than they have seen: ``cache="window"`` (a ring buffer of
sinks and recent positions) and ``cache="h2o"`` (heavy hitters and recent positions).

* The ring buffer computes what full attention computes under the window mask, token by token,
  whatever the steps' sizes (the mask written out in ``lessons.fewer_tokens``).
* H2O's choices and outputs equal a direct simulation of one layer, written here token by token.
* With a budget at least the sequence's length, both give the plain cache's tokens.
* The invariants (``check()``) hold after every step, for random lengths, budgets, reorders.
* Memory stays the budget's, whatever the length; bad arguments are refused and change nothing.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from kvcache.__main__ import main
from kvcache.generate import beam_search, greedy
from kvcache.h2o import HeavyHitterLayerCache, keep_positions
from kvcache.model import Model
from kvcache.plan import plan_step
from kvcache.window import ring_slot
from lessons.fewer_tokens import logits_under_mask, window_mask

CONFIG = dict(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)


@pytest.fixture(scope="module")
def model():
    return Model.random(CONFIG, seed=3, dtype=np.float64)


def tokens(n, seed=0):
    return np.random.default_rng(seed).integers(0, CONFIG["vocab_size"], n)


def run_in_chunks(model, ids, cache, chunks):
    """Logits of every position, feeding ``ids`` to ``cache`` in steps of the given sizes, and
    checking the cache's invariants after each."""
    rows, at = [], 0
    for n in chunks:
        rows.append(model.forward(ids[at:at + n], [n], cache, every_token=True))
        cache.check()
        at += n
    return np.concatenate(rows)


# ---------------------------------------------------------------------- the ring buffer is the mask


@pytest.mark.parametrize("window,sinks", [(1, 0), (7, 0), (7, 3), (16, 4), (60, 0)])
@pytest.mark.parametrize("chunks", [[50], [1] * 50, [5, 3, 20, 1, 1, 20]])
def test_ring_buffer_equals_the_window_mask(model, window, sinks, chunks):
    ids = tokens(50, seed=window)
    expected = logits_under_mask(model, ids, window_mask(50, window, sinks))
    cache = model.new_cache(1, 64, kind="window", window=window, sinks=sinks)
    got = run_in_chunks(model, ids, cache, chunks)
    np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-9)
    assert cache.kept.tolist() == [min(50, window + sinks)]


def test_the_window_is_not_the_full_cache_once_it_is_exceeded(model):
    ids = tokens(40)
    full = model.logits(ids)
    got = run_in_chunks(model, ids, model.new_cache(1, 40, kind="window", window=8, sinks=2), [40])
    np.testing.assert_allclose(got[:10], full[:10], rtol=1e-9, atol=1e-9)   # all 10 positions fit
    assert np.abs(got[10:] - full[10:]).max() > 1e-3


def test_a_position_lives_in_its_ring_slot():
    assert ring_slot([0, 1, 2, 3, 4, 5, 6, 9], window=3, sinks=2).tolist() == [0, 1, 2, 3, 4, 2, 3, 3]


# ---------------------------------------------------------------------- H2O against a direct simulation


def simulate_h2o(q, k, v, budget, recent, sinks, score):
    """One layer of H2O written out token by token, one key/value head at a time, from the
    definition: q (T, H, d), k, v (T, G, d) -> out (T, H, d) and the positions each head holds
    at the end.  Token t evicts (when the head holds ``budget``) the position of smallest score
    that is neither < sinks nor > t - recent, the latest of equal ones; then query t attends to
    what the head holds, and its weights (summed over the head's query heads) are added to the
    scores ("sum") or replace them ("last")."""
    T, H, d = q.shape
    G = k.shape[1]
    r = H // G
    out = np.zeros_like(q)
    held_at_end = []
    for g in range(G):
        held, scores = [], {}
        for t in range(T):
            if len(held) == budget:
                candidates = [j for j in held if sinks <= j <= t - recent]
                low = min(scores[j] for j in candidates)
                victim = max(j for j in candidates if scores[j] == low)
                held.remove(victim)
                del scores[victim]
            held.append(t)
            scores[t] = 0.0
            if score == "last":
                scores = dict.fromkeys(scores, 0.0)
            for h in range(g * r, g * r + r):
                logits = np.array([q[t, h] @ k[j, g] for j in held]) / math.sqrt(d)
                w = np.exp(logits - logits.max())
                w /= w.sum()
                out[t, h] = sum(wi * v[j, g] for wi, j in zip(w, held))
                for wi, j in zip(w, held):
                    scores[j] += wi
        held_at_end.append(sorted(held))
    return out, held_at_end


@pytest.mark.parametrize("budget,recent,sinks,score", [(6, 2, 0, "sum"), (6, 1, 2, "sum"), (9, 3, 1, "sum"),
                                                       (5, 5, 0, "sum"), (6, 2, 1, "last"), (40, 2, 0, "sum")])
@pytest.mark.parametrize("chunks", [[30], [1] * 30, [4, 9, 1, 16]])
def test_h2o_layer_equals_the_simulation(budget, recent, sinks, score, chunks):
    rng = np.random.default_rng(budget * 7 + recent)
    T, H, G, d = 30, 4, 2, 8
    q, k, v = (rng.standard_normal((T, n, d)) * 2 for n in (H, G, G))
    expected, held = simulate_h2o(q, k, v, budget, recent, sinks, score)
    layer = HeavyHitterLayerCache(1, G, d, 64, budget, recent, sinks, score, dtype="float64",
                                  compute_dtype=np.float64)
    at, got = 0, []
    for n in chunks:
        plan = layer.reserve([n])
        layer.update(k[at:at + n], v[at:at + n], plan)
        got.append(layer.attend(q[at:at + n], plan))
        layer.check()
        at += n
    np.testing.assert_allclose(np.concatenate(got), expected, rtol=1e-10, atol=1e-10)
    assert layer.kept_positions(0).tolist() == held


# ---------------------------------------------------------------------- a budget that holds everything


@pytest.mark.parametrize("kind,options", [("window", dict(window=60)), ("window", dict(window=52, sinks=8)),
                                          ("h2o", dict(budget=60, recent=1)),
                                          ("h2o", dict(budget=60, recent=8, sinks=4, score="last"))])
def test_a_budget_holding_everything_gives_the_plain_tokens(model, kind, options):
    prompts = [tokens(20, 1).tolist(), tokens(7, 2).tolist(), tokens(13, 3).tolist()]
    assert greedy(model, prompts, 30, cache=kind, **options) == greedy(model, prompts, 30)
    assert greedy(model, prompts, 30, cache=kind, **options) == greedy(model, prompts, 30, cache="paged",
                                                                       block_size=4)
    assert beam_search(model, prompts, 3, 25, cache=kind, **options) == beam_search(model, prompts, 3, 25)


def test_a_small_budget_changes_what_is_generated_and_keeps_its_memory(model):
    prompts = [tokens(30, 4).tolist()]
    plain = greedy(model, prompts, 60)
    for kind, options in (("window", dict(window=6, sinks=2)), ("h2o", dict(budget=8, recent=3))):
        trace = []
        out = greedy(model, prompts, 60, cache=kind, trace=trace, **options)
        assert out != plain
        assert len({step["cache_bytes"] for step in trace}) == 1          # allocated once
        assert max(step["cache_used_bytes"] for step in trace) == trace[0]["cache_bytes"]


def test_memory_is_the_budgets_whatever_max_len(model):
    small = model.new_cache(2, 16, kind="h2o", budget=8, recent=2)
    large = model.new_cache(2, 256, kind="h2o", budget=8, recent=2)
    assert small.nbytes == large.nbytes == 2 * 2 * CONFIG["num_hidden_layers"] * 2 * 8 * 8 * 8   # k and v
    window = model.new_cache(1, 256, kind="window", window=6, sinks=2)
    model.prefill([tokens(200).tolist()], window)
    assert window.nbytes == window.used_bytes == 2 * CONFIG["num_hidden_layers"] * 2 * 8 * 8 * 8
    assert window.kept.tolist() == [8] and window.lengths.tolist() == [200]


# ---------------------------------------------------------------------- invariants under random use


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_invariants_hold_after_every_step(model, data):
    kind = data.draw(st.sampled_from(["window", "h2o"]))
    if kind == "window":
        options = dict(window=data.draw(st.integers(1, 12)), sinks=data.draw(st.integers(0, 4)))
    else:
        budget = data.draw(st.integers(1, 12))
        recent = data.draw(st.integers(1, budget))
        options = dict(budget=budget, recent=recent, sinks=data.draw(st.integers(0, budget - recent)),
                       score=data.draw(st.sampled_from(["sum", "last"])))
    batch = data.draw(st.integers(1, 3))
    cache = model.new_cache(batch, 128, kind=kind, capacity=4, **options)
    lengths = [data.draw(st.integers(1, 30)) for _ in range(batch)]
    model.prefill([tokens(n, i).tolist() for i, n in enumerate(lengths)], cache)
    cache.check()
    for _ in range(data.draw(st.integers(1, 12))):
        if data.draw(st.booleans()):
            rows = data.draw(st.lists(st.integers(0, cache.batch - 1), min_size=1, max_size=4))
            cache.reorder(rows)
            cache.check()
        counts = [data.draw(st.integers(1, 5)) for _ in range(cache.batch)]
        model.forward(tokens(sum(counts), 9), counts, cache)
        cache.check()
        slots = options.get("budget", options.get("window", 0) + options.get("sinks", 0))
        assert (cache.kept == np.minimum(cache.lengths, slots)).all()


def test_check_finds_a_broken_invariant(model):
    cache = model.new_cache(1, 64, kind="h2o", budget=6, recent=2, sinks=1)
    model.prefill([tokens(20).tolist()], cache)
    cache.check()
    layer = cache[0]
    sink_slot = int(np.flatnonzero(layer.positions[0, 0] == 0)[0])
    layer.positions[0, 0, sink_slot] = 17 if 17 not in layer.positions[0, 0] else 16
    with pytest.raises(AssertionError, match="sink or recent|twice"):
        cache.check()
    window = model.new_cache(1, 64, kind="window", window=4, sinks=1)
    model.prefill([tokens(20).tolist()], window)
    window[1].positions[0, 1, 2] = 5
    with pytest.raises(AssertionError, match="head 1"):
        window.check()


# ---------------------------------------------------------------------- rows, crops, errors


def test_reorder_select_and_copy_carry_the_slots(model):
    cache = model.new_cache(2, 64, kind="h2o", budget=6, recent=2, capacity=3)
    model.prefill([tokens(20, 1).tolist(), tokens(11, 2).tolist()], cache)
    before = [layer.kept_positions(1).copy() for layer in cache]
    keys = cache[0].keys(1)
    twin = cache.copy()
    cache.reorder([1, 1, 0])
    for layer, held in zip(cache, before):
        assert layer.kept_positions(0).tolist() == layer.kept_positions(1).tolist() == held.tolist()
    np.testing.assert_array_equal(cache[0].keys(0), keys)
    cache.select([2])
    assert cache.lengths.tolist() == [20]
    assert twin.lengths.tolist() == [20, 11] and twin.kind == "h2o"
    twin.check()


def test_crop_before_any_eviction_and_refused_after(model):
    cache = model.new_cache(2, 64, kind="window", window=8, sinks=2)
    model.prefill([tokens(6, 1).tolist(), tokens(15, 2).tolist()], cache)
    with pytest.raises(ValueError, match="sequence 1 has evicted"):
        cache.crop(4)
    assert cache.lengths.tolist() == [6, 15] and cache.kept.tolist() == [6, 10]
    cache.crop([4, 15])
    assert cache.lengths.tolist() == [4, 15] and cache.kept.tolist() == [4, 10]
    cache.check()


@pytest.mark.parametrize("kind,options,message", [
    ("window", dict(window=0), "window must be"), ("window", dict(window=4, sinks=-1), "sinks must be"),
    ("window", dict(), "needs window"), ("h2o", dict(budget=4), "needs budget"),
    ("h2o", dict(budget=4, recent=0), "recent must be"), ("h2o", dict(budget=4, recent=3, sinks=2), "must not exceed"),
    ("h2o", dict(budget=4, recent=2, score="max"), "score must be"), ("window", dict(window=4, budget=3), "no option"),
])
def test_bad_options_are_refused(model, kind, options, message):
    with pytest.raises((ValueError, TypeError), match=message):
        model.new_cache(1, 16, kind=kind, **options)


def test_a_plan_not_the_steps_is_refused(model):
    cache = model.new_cache(1, 16, kind="window", window=4)
    layer = cache[0]
    plan = layer.reserve([2])
    with pytest.raises(ValueError, match="reserve the step again"):         # attend before update
        layer.attend(np.zeros((2, 4, 8)), plan)
    other = plan_step(np.array([2]), np.array([0]))                          # equal, but not the same
    layer.update(np.zeros((2, 2, 8)), np.zeros((2, 2, 8)), plan)
    with pytest.raises(ValueError, match="attend takes the plan"):
        layer.attend(np.zeros((2, 4, 8)), other)


# ---------------------------------------------------------------------- the command line


def run_cli(capsys, *flags):
    code = main(["generate", "--random", "--vocab-size", "64", "--hidden-size", "32", "--intermediate-size",
                 "48", "--layers", "2", "--heads", "4", "--kv-heads", "2", "--prompt-ids", *map(str, range(1, 21)),
                 "--max-new-tokens", "12", "--eos", "none", "--json", *flags])
    captured = capsys.readouterr()
    return code, captured


def test_cli_window_and_h2o(capsys):
    import json
    code, plain = run_cli(capsys)
    assert code == 0
    plain = json.loads(plain.out)
    for flags in (["--cache", "window", "--window", "40"], ["--cache", "window", "--window", "30", "--sinks", "4"],
                  ["--cache", "h2o", "--budget", "40", "--recent", "4"],
                  ["--cache", "h2o", "--budget", "40", "--recent", "4", "--sinks", "2"]):
        code, out = run_cli(capsys, *flags)
        assert code == 0, out.err
        result = json.loads(out.out)
        assert result["outputs"] == plain["outputs"] and result["cache"] == flags[1]
    code, out = run_cli(capsys, "--cache", "window", "--window", "4", "--sinks", "2")
    assert json.loads(out.out)["cache_bytes"] == 2 * 2 * 2 * 6 * 8 * 4          # 6 slots, float32
    for flags, message in ((["--cache", "window"], "needs --window"),
                           (["--cache", "h2o", "--budget", "8"], "needs --recent"),
                           (["--cache", "contiguous", "--window", "8"], "takes no --window"),
                           (["--cache", "window", "--window", "8", "--budget", "3"], "takes no --budget"),
                           (["--cache", "h2o", "--budget", "3", "--recent", "4"], "must not exceed")):
        code, out = run_cli(capsys, *flags)
        assert code == 1 and message in out.err, (flags, out.err)


# ---------------------------------------------------------------------- the real model


@pytest.fixture(scope="module")
def smollm2(smollm2_engine):
    return smollm2_engine


def test_smollm2_with_a_budget_holding_everything_gives_the_plain_tokens(smollm2):
    model, tokenizer = smollm2
    prompts = [tokenizer.encode("The key-value cache of a transformer"), tokenizer.encode("Sliding windows")]
    plain = greedy(model, prompts, 16)
    assert greedy(model, prompts, 16, cache="paged", block_size=4) == plain
    assert greedy(model, prompts, 16, cache="window", window=40) == plain
    assert greedy(model, prompts, 16, cache="window", window=36, sinks=4) == plain
    assert greedy(model, prompts, 16, cache="h2o", budget=40, recent=8) == plain


def test_smollm2_small_budgets_keep_their_invariants(smollm2):
    model, tokenizer = smollm2
    ids = tokenizer.encode("A cache that keeps every token grows without bound; one that keeps a few must "
                           "choose which, and the choice is the policy.")
    for kind, options in (("window", dict(window=8, sinks=4)), ("h2o", dict(budget=12, recent=4, sinks=1))):
        cache = model.new_cache(1, len(ids) + 8, kind=kind, **options)
        logits = model.prefill([ids], cache)
        cache.check()
        for _ in range(8):
            logits = model.decode(np.argmax(logits, axis=-1), cache)
            cache.check()
        assert cache.kept.tolist() == [12] and cache.lengths.tolist() == [len(ids) + 8]


# ---------------------------------------------------------------------- one eviction is keep_positions


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_each_eviction_keeps_what_keep_positions_keeps(data):
    """Before token p is written into a full head, the cache frees one slot; the positions left
    are keep_positions over the positions held (in order, with their scores), budget B - 1,
    the same sinks and R - 1 recent ones."""
    budget = data.draw(st.integers(2, 10))
    recent = data.draw(st.integers(1, budget))
    sinks = data.draw(st.integers(0, budget - recent))
    layer = HeavyHitterLayerCache(1, 2, 4, 64, budget, recent, sinks, dtype="float64", compute_dtype=np.float64)
    rng = np.random.default_rng(data.draw(st.integers(0, 10**6)))
    T = data.draw(st.integers(budget + 1, 40))
    q, k, v = (rng.standard_normal((T, n, 4)) for n in (4, 2, 2))
    for t in range(T):
        if layer.kept[0] == budget:
            held = {g: layer.kept_positions(0)[g] for g in range(2)}
            scores = {g: [layer.acc[0, g, int(np.flatnonzero(layer.positions[0, g] == p)[0])] for p in held[g]]
                      for g in range(2)}
        plan = layer.reserve([1])
        layer.update(k[t:t + 1], v[t:t + 1], plan)
        layer.attend(q[t:t + 1], plan)
        if t >= budget:
            for g in range(2):
                kept = held[g][keep_positions(scores[g], budget - 1, sinks, recent - 1)]
                assert layer.kept_positions(0)[g].tolist() == sorted(kept.tolist() + [t])


def test_keep_positions_by_hand():
    scores = np.array([5.0, 0.5, 3.0, 0.2, 4.0, 1.0, 6.0, 2.0])
    assert keep_positions(scores, 5, 1, 2).tolist() == [0, 2, 4, 6, 7]
    assert keep_positions([1.0, 2, 2, 2, 2, 1, 1, 3], 4, 1, 1).tolist() == [0, 1, 2, 7]
    assert keep_positions(scores, 9, 1, 2).tolist() == list(range(8))
    assert keep_positions(scores, 3, 0, 0).tolist() == [0, 4, 6] and keep_positions(scores, 0, 0, 0).size == 0
    with pytest.raises(ValueError):
        keep_positions(scores, 2, 2, 1)
    with pytest.raises(ValueError):
        keep_positions(scores, 4, -1, 1)
