"""Timing the engine for chapters 5 and 7, with sizes chosen from the machine.

What the chapters time, on the model they build:

* ``calibrate(model)``: how fast this machine runs the model, in three numbers (``Calibration``):
  the matrix products' FLOP rate, the time per attention score, and a decode step's fixed cost,
  from a short and a longer recomputation and one decode step.  Every other measurement's time
  is predicted from them, so a plan can bound it before running it.
* ``prefill_times``: the same prompts prefilled ragged (packed end to end) and padded (every
  prompt right-padded to the longest).
* ``step_times_by_batch``: one decode step as sequences leave the batch (finished ones).
* ``product_times_by_rows``: the same step's matrix products alone (every layer's four and the
  output layer's), with 1, 2, ... rows: where one row takes numpy's matrix-vector path.
* ``step_times_by_context``: one decode step with the cache, and the same token recomputed from
  scratch, at several context lengths.

What to time is a pure function of the machine (``lessons.machine_facts.MachineFacts``: free memory,
usable CPUs) and of the calibration: ``plan_batch`` (chapter 5) and ``plan_contexts``
(chapter 7) take the largest sizes whose predicted time stays within a budget of seconds and
whose memory stays within a share of what is free, and say why in a sentence.  A slow or busy
machine measures smaller sizes; it never fails, and it never runs for minutes.

Every time is the fastest of several runs (another program can only slow a run down).  Nothing
here asserts a speed: the numbers belong to the machine and the moment that ran them.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from kvcache.config import ModelConfig
from kvcache.cost import layer_products
from kvcache.gqa import QUERY_BLOCK
from kvcache.linear import linear

from .machine_facts import MachineFacts
from .memory import GIB, format_bytes

__all__ = ["Calibration", "calibrate", "product_flops", "score_count", "BatchPlan", "batch_lengths",
           "batch_seconds", "batch_memory", "plan_batch", "ContextPlan", "context_seconds", "plan_contexts", "prefill_times",
           "step_times_by_batch", "step_weights", "product_times_by_rows", "step_times_by_context", "random_prompts"]

MEMORY_SHARE = 8                       # a measurement holds at most 1/8 of the free memory
ASSUMED_FREE_BYTES = 2 * GIB           # when Linux does not say
BATCH = 8                              # sequences in chapter 5's batch
NEW_TOKENS = 48                        # tokens generated in chapter 5's EOS run
LONGEST_PROMPTS = (512, 384, 256, 192, 128, 96, 64, 48, 32)
SMALLEST_CONTEXT = 16
LARGEST_CONTEXT = 4096
CALIBRATION_TOKENS = (64, 512)


def _best(fn, repeats: int) -> float:
    """The fastest of ``repeats`` calls of fn(), in seconds (after one call to warm up)."""
    fn()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def product_flops(cfg: ModelConfig, n_tokens: int) -> int:
    """FLOPs of the matrix products of ``n_tokens`` tokens through every layer, and of the output
    layer for one of them: what a forward pass costs besides attention."""
    return cfg.num_hidden_layers * n_tokens * layer_products(cfg) + 2 * cfg.hidden_size * cfg.vocab_size


def score_count(cfg: ModelConfig, n_new: int, n_cached: int = 0) -> int:
    """Attention scores computed when ``n_new`` tokens attend causally after ``n_cached`` cached
    ones, in every layer and query head.  Queries go in blocks of QUERY_BLOCK; each block scores
    every key up to its last query (the causal mask is applied to those), so a prefill of n
    tokens computes about n (n + QUERY_BLOCK) / 2 scores per head, not n (n + 1) / 2."""
    total = 0
    for lo in range(0, n_new, QUERY_BLOCK):
        hi = min(n_new, lo + QUERY_BLOCK)
        total += (hi - lo) * (n_cached + hi)
    return cfg.num_hidden_layers * cfg.num_attention_heads * total


@dataclass(frozen=True)
class Calibration:
    """How fast the engine runs on this machine, in three numbers that predict every measurement:
    the matrix products' FLOP rate, the time per attention score (its product, mask, exp, sum and
    weighted sum: memory traffic more than FLOPs), and a decode step's fixed cost (Python and the
    small products of one token, at batch 1)."""

    product_rate: float
    score_seconds: float
    step_seconds: float

    def __post_init__(self):
        for name in ("product_rate", "score_seconds", "step_seconds"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and np.isfinite(value) and value > 0):
                raise ValueError(f"calibration {name} must be a positive number, got {value!r}")

    def forward_seconds(self, cfg: ModelConfig, n_new: int, n_cached: int = 0) -> float:
        """Predicted time of ``n_new`` tokens of one sequence through the model."""
        return product_flops(cfg, n_new) / self.product_rate + score_count(cfg, n_new, n_cached) * self.score_seconds

    def step_seconds_at(self, cfg: ModelConfig, contexts) -> float:
        """Predicted time of one decode step for rows whose new tokens attend to ``contexts``
        keys (one entry per row)."""
        rows = len(contexts)
        flops = cfg.num_hidden_layers * rows * layer_products(cfg) + 2 * rows * cfg.hidden_size * cfg.vocab_size
        scores = cfg.num_hidden_layers * cfg.num_attention_heads * int(np.sum(contexts))
        return self.step_seconds + flops / self.product_rate + scores * self.score_seconds

    def sentence(self) -> str:
        return (f"products {self.product_rate / 1e9:.1f} GFLOP/s, {self.score_seconds * 1e9:.2f} ns per score, "
                f"{self.step_seconds * 1e3:.2f} ms fixed per step")


def calibrate(model, tokens=CALIBRATION_TOKENS, repeats: int = 3, seed: int = 0) -> Calibration:
    """Time the model recomputing a short and a longer sequence and one decode step; solve for
    the product rate and the time per score (two runs, two unknowns; the short run's fixed costs
    count as products, which only makes the predictions slower: safer for a budget)."""
    short, long_ = tokens
    cfg = model.config
    ids = random_prompts(cfg, [long_], seed)[0]
    t_short = _best(lambda: model.logits(ids[:short]), repeats)
    t_long = _best(lambda: model.logits(ids), max(1, repeats - 1))
    p_short, p_long = product_flops(cfg, short), product_flops(cfg, long_)
    s_short, s_long = score_count(cfg, short), score_count(cfg, long_)
    det = p_short * s_long - p_long * s_short
    inv_rate = (t_short * s_long - t_long * s_short) / det
    per_score = (p_short * t_long - p_long * t_short) / det
    if inv_rate <= 0 or per_score <= 0:           # a noisy pair: put all the time on each in turn
        inv_rate = t_short / p_short
        per_score = max(t_long - p_long * inv_rate, 0.1 * t_long) / s_long
    kv = model.new_cache(1, short + 1)
    model.prefill([ids[:short]], kv)

    def step():
        model.decode(ids[short:short + 1], kv)
        kv.crop(short)
    t_step = _best(step, 2 * repeats)
    step_fixed = max(t_step - product_flops(cfg, 1) * inv_rate, 0.25 * t_step)
    return Calibration(product_rate=1.0 / inv_rate, score_seconds=per_score, step_seconds=step_fixed)


def random_prompts(cfg, lengths, seed: int = 0) -> list[np.ndarray]:
    """Prompts of the given lengths, token ids drawn uniformly (fixed seed)."""
    cfg = ModelConfig.from_dict(cfg) if not isinstance(cfg, ModelConfig) else cfg
    rng = np.random.default_rng(seed)
    return [rng.integers(0, cfg.vocab_size, size=int(n)) for n in lengths]


def _free(facts: MachineFacts) -> tuple[int, str]:
    free = facts.free_memory_bytes
    if free is None:
        return ASSUMED_FREE_BYTES, f"{format_bytes(ASSUMED_FREE_BYTES)} assumed free (Linux did not say)"
    return free, f"{format_bytes(free)} free"


def _activation_bytes(cfg: ModelConfig, n_tokens: int, longest: int, itemsize: int = 4) -> int:
    """About the most memory a forward pass over n_tokens tokens holds: its activations (a few
    (N, D), (N, 2F) and (N, H d + 2 G d) arrays) and one block of attention scores."""
    width = 3 * cfg.hidden_size + 2 * cfg.intermediate_size + cfg.q_width + 2 * cfg.kv_width
    scores = 3 * cfg.num_attention_heads * min(longest, 512) * longest
    return itemsize * (n_tokens * width + scores + cfg.vocab_size)


def _cache_bytes(cfg: ModelConfig, rows: int, positions: int, itemsize: int = 4) -> int:
    return 2 * cfg.num_hidden_layers * rows * cfg.num_key_value_heads * positions * cfg.head_dim * itemsize


# ---------------------------------------------------------------------- chapter 5: one batch


@dataclass(frozen=True)
class BatchPlan:
    """What chapter 5 times: ``batch`` prompts of ``prompt_lengths`` tokens, prefilled ragged and
    padded ``repeats`` times each, then ``new_tokens`` greedy steps (with EOS and without); and the
    decode step timed at every live batch size.  ``predicted_seconds`` at the calibrated speeds,
    within ``budget_seconds`` when possible; ``memory_bytes`` at most, within ``memory_limit``."""

    prompt_lengths: tuple[int, ...]
    new_tokens: int
    repeats: int
    predicted_seconds: float
    budget_seconds: float
    memory_bytes: int
    memory_limit: int
    fits: bool
    reason: str

    @property
    def batch(self) -> int:
        return len(self.prompt_lengths)

    @property
    def longest(self) -> int:
        return max(self.prompt_lengths)

    @property
    def max_len(self) -> int:
        """L_max of the cache: the longest prompt and every new token."""
        return self.longest + self.new_tokens


def batch_lengths(longest: int, batch: int = BATCH, seed: int = 5) -> tuple[int, ...]:
    """Prompt lengths spread evenly from longest / 8 to longest, in a fixed shuffled order."""
    lengths = np.linspace(max(1, longest // 8), longest, batch).round().astype(int)
    return tuple(int(n) for n in np.random.default_rng(seed).permutation(lengths))


def batch_seconds(cal: Calibration, cfg: ModelConfig, lengths, new_tokens: int, repeats: int) -> float:
    """Predicted time of everything chapter 5 runs for these prompt lengths: ragged and padded
    prefills (repeats + 1 each), two greedy runs (with and without EOS: a prefill and new_tokens
    steps each), and a step at each live batch size (repeats + 1 each, plus a prefill)."""
    B, longest = len(lengths), max(lengths)
    ragged = sum(cal.forward_seconds(cfg, int(n)) for n in lengths)
    padded = B * cal.forward_seconds(cfg, longest)
    final = [int(n) + new_tokens for n in lengths]
    steps = new_tokens * cal.step_seconds_at(cfg, final)
    by_batch = sum(cal.step_seconds_at(cfg, [int(n) + 1 for n in lengths[:b]]) for b in range(1, B + 1))
    return (repeats + 1) * (ragged + padded) + 2 * (ragged + steps) + ragged + (repeats + 1) * by_batch


def batch_memory(cfg: ModelConfig, longest: int, batch: int = BATCH, new_tokens: int = NEW_TOKENS) -> int:
    """About the most memory chapter 5's runs hold: a padded prefill's activations and the cache."""
    return _activation_bytes(cfg, batch * longest, longest) + _cache_bytes(cfg, batch, longest + new_tokens)


def plan_batch(facts: MachineFacts, cal: Calibration, cfg, budget_seconds: float = 8.0, repeats: int = 3,
               batch: int = BATCH, new_tokens: int = NEW_TOKENS, seed: int = 5) -> BatchPlan:
    """The longest prompt (from ``LONGEST_PROMPTS``) whose whole chapter-5 run is predicted to
    take at most ``budget_seconds`` and to hold at most 1/MEMORY_SHARE of the free memory; the
    shortest candidate when none fits (``fits`` False, and the reason says so)."""
    cfg = ModelConfig.from_dict(cfg)
    free, free_words = _free(facts)
    limit = free // MEMORY_SHARE
    candidates = [n for n in LONGEST_PROMPTS if n + new_tokens <= cfg.max_position_embeddings] or [
        max(1, cfg.max_position_embeddings - new_tokens)]
    for longest in candidates:
        lengths = batch_lengths(longest, batch, seed)
        seconds = batch_seconds(cal, cfg, lengths, new_tokens, repeats)
        memory = batch_memory(cfg, longest, batch, new_tokens)
        if seconds <= budget_seconds and memory <= limit:
            fits = True
            reason = (f"prompts of up to {longest:,} tokens, the longest whose runs are predicted to take at most "
                      f"{budget_seconds:g} s here (about {seconds:.1f} s) and to hold at most an eighth of the "
                      f"{free_words}")
            break
    else:
        fits = False
        reason = (f"even the shortest prompts tried (up to {longest} tokens) are predicted to take {seconds:.0f} s "
                  f"here, past the {budget_seconds:g} s budget, or to hold more than an eighth of the {free_words}: "
                  "this machine is slow or busy, and the figures below come from the smallest runs")
    return BatchPlan(prompt_lengths=lengths, new_tokens=new_tokens, repeats=repeats, predicted_seconds=seconds,
                     budget_seconds=budget_seconds, memory_bytes=memory, memory_limit=limit, fits=fits,
                     reason=reason)


def prefill_times(model, prompts, repeats: int = 3) -> dict[str, float]:
    """The fastest of ``repeats`` prefills of ``prompts``, ragged and padded, in seconds."""
    longest = max(len(p) for p in prompts)
    out = {}
    for mode in ("ragged", "padded"):
        out[mode] = _best(lambda: model.prefill(prompts, model.new_cache(len(prompts), longest + 1),
                                                padded=mode == "padded"), repeats)
    return out


def step_times_by_batch(model, prompts, repeats: int = 3, seed: int = 0) -> list[float]:
    """One decode step's time with the first b sequences of ``prompts`` still running, for
    b = len(prompts) .. 1 (the others finished and left the batch), fastest of ``repeats``.
    Each timed step starts from the prompts' cache (the step's own position is forgotten)."""
    kv = model.new_cache(len(prompts), max(len(p) for p in prompts) + 1)
    model.prefill(prompts, kv)
    tokens = np.random.default_rng(seed).integers(0, model.config.vocab_size, size=len(prompts))
    times = []
    for b in range(len(prompts), 0, -1):
        live = kv.copy()
        live.select(np.arange(b))
        lengths = np.array(live.lengths)

        def step():
            model.decode(tokens[:b], live)
            live.crop(lengths)
        times.append(_best(step, repeats))
    return times


def step_weights(model) -> list[np.ndarray]:
    """Every weight matrix a decode step multiplies by, in the order it does: each layer's
    query-key-value, output, gate-up and down projections, then the output layer."""
    per_layer = [m for w in model.layers for m in (w.wqkv, w.wo, w.w_gate_up, w.w_down)]
    return per_layer + [model.lm_head]


def product_times_by_rows(model, rows, repeats: int = 3, seed: int = 0) -> list[float]:
    """The time of a decode step's matrix products alone, x W^T through ``kvcache.linear`` for
    every W of ``step_weights(model)``, with x of n rows for each n of ``rows``; the fastest of
    ``repeats`` passes, in seconds.  A row stands for a sequence: the inputs are random, since a
    product's time does not depend on its values."""
    rng = np.random.default_rng(seed)
    weights = step_weights(model)
    times = []
    for n in rows:
        inputs = {w.shape[1]: rng.standard_normal((int(n), w.shape[1])).astype(model.compute_dtype)
                  for w in weights}

        def products():
            for w in weights:
                linear(inputs[w.shape[1]], w)
        times.append(_best(products, repeats))
    return times


# ---------------------------------------------------------------------- chapter 7: context lengths


@dataclass(frozen=True)
class ContextPlan:
    """What chapter 7 times: one decode step at each of ``contexts`` (tokens attended), with the
    cache and recomputed from scratch, ``repeats`` times each."""

    contexts: tuple[int, ...]
    repeats: int
    predicted_seconds: float
    budget_seconds: float
    memory_bytes: int
    memory_limit: int
    reason: str

    @property
    def largest(self) -> int:
        return self.contexts[-1]


def context_seconds(cal: Calibration, cfg: ModelConfig, n: int, repeats: int) -> float:
    """Predicted time of measuring context n: a prefill of n - 1 tokens, then repeats + 1 cached
    steps and repeats + 1 recomputations of all n tokens."""
    return (cal.forward_seconds(cfg, n - 1)
            + (repeats + 1) * (cal.forward_seconds(cfg, n) + cal.step_seconds_at(cfg, [n])))


def plan_contexts(facts: MachineFacts, cal: Calibration, cfg, budget_seconds: float = 6.0,
                  repeats: int = 3) -> ContextPlan:
    """Contexts 16, 32, 64, ... up to the largest power of two (at most LARGEST_CONTEXT and the
    model's max_position_embeddings) whose measurements are predicted to take at most
    ``budget_seconds`` in all and to hold at most 1/MEMORY_SHARE of the free memory; at least
    the first three whatever the machine."""
    cfg = ModelConfig.from_dict(cfg)
    free, free_words = _free(facts)
    limit = free // MEMORY_SHARE
    top = min(LARGEST_CONTEXT, cfg.max_position_embeddings)
    contexts, seconds, memory = [], 0.0, 0
    n = SMALLEST_CONTEXT
    stopped = f"{top:,} tokens is the most this chapter measures"
    while n <= top:
        cost = context_seconds(cal, cfg, n, repeats)
        need = _activation_bytes(cfg, n, n) + _cache_bytes(cfg, 1, n)
        if len(contexts) >= 3 and (seconds + cost > budget_seconds or need > limit):
            stopped = (f"{n:,} tokens would take the measurements past {budget_seconds:g} s"
                       if seconds + cost > budget_seconds
                       else f"{n:,} tokens would hold more than an eighth of the {free_words}")
            break
        contexts.append(n)
        seconds += cost
        memory = max(memory, need)
        n *= 2
    reason = (f"contexts from {contexts[0]} to {contexts[-1]:,} tokens, predicted to take {seconds:.1f} s in all "
              f"here; {stopped}")
    return ContextPlan(contexts=tuple(contexts), repeats=repeats, predicted_seconds=seconds,
                       budget_seconds=budget_seconds, memory_bytes=memory, memory_limit=limit, reason=reason)


def step_times_by_context(model, contexts, repeats: int = 3, seed: int = 0) -> dict[str, list[float]]:
    """For each context n: the cached decode step that makes token n's successor (its query
    attends to n keys) and the same logits recomputed from all n tokens, fastest of ``repeats``."""
    cached, recompute = [], []
    for n in contexts:
        if n < 2:
            raise ValueError(f"a decode step needs a context of at least 2 tokens, got {n}")
        ids = random_prompts(model.config, [n], seed + n)[0]
        kv = model.new_cache(1, n)
        model.prefill([ids[:-1]], kv)

        def step():
            model.decode(ids[-1:], kv)
            kv.crop(n - 1)
        cached.append(_best(step, repeats))
        recompute.append(_best(lambda: model.next_logits(ids), repeats))
    return {"contexts": list(contexts), "cached": cached, "recompute": recompute}
