"""What chapter 15 measures of speculative decoding, beside the engine (``kvcache.speculative``).

    PROMPTS                     chat prompts whose reply copies from the prompt, and open-ended ones
    weight_bytes(cfg)           bytes of weights a forward pass reads (float32), whatever its tokens
    pass_seconds(model, ids, sizes, repeats)
                                the best time of a pass of n new tokens over the same cache, per n
    expected_tokens_per_pass(a, k)
                                (1 - a^(k+1)) / (1 - a): tokens a pass yields when each of k draft
                                tokens is accepted with probability a, independently
    plan_rounds(first, budget)  how many alternating rounds fit in a time budget, from the first
    race(model, ids, eos, ...)  plain greedy and prompt-lookup greedy in alternating rounds: the
                                tokens (equal or not), the best times, the counts
    POLICIES                    when a sequence drafts: transformers' way and the engine's
    policy_passes(model, ...)   one prompt under one policy: the tokens and what each pass checked
    pass_cost(n, seconds)       a pass of n tokens in one-token passes, from the measured times
    load_average()              the machine's 1-minute load average (what timings are said with)
    small_model()               the float64 random model of the rollback and batch sections
    mid_batch_eos(outputs)      a token some rows emit early and others never: EOS mid-batch
    paged_rollback_steps(model) one row of a paged batch rolled back into a block another shares:
                                the pool's counts at every step

Timings are reported, never asserted: the chapter states them with the load they were taken at.
"""
from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass

import numpy as np

__all__ = ["PROMPTS", "COPYING", "OPEN_ENDED", "weight_bytes", "pass_seconds", "expected_tokens_per_pass",
           "plan_rounds", "Race", "race", "load_average", "small_model", "SMALL_CONFIG", "mid_batch_eos",
           "PoolState", "paged_rollback_steps", "ragged_passes", "POLICIES", "PolicyRun", "policy_passes",
           "pass_cost"]

CODE = "def add(a, b):\n    return a + b\n\ndef mul(a, b):\n    return a * b\n"
#: prompts whose reply copies from the prompt (a summary in its words, code edited in place, an
#: answer quoted from a passage), then open-ended ones
PROMPTS = {
    "summarise": "Summarise this passage in one sentence, reusing its words: The KV cache stores the keys "
                 "and values of every token a model has already read, so that each new token attends to "
                 "them without recomputing them.",
    "edit code": "Rewrite this code with the function renamed from add to plus, and nothing else changed:\n" + CODE,
    "answer from a passage": "Answer from this passage, quoting it. Passage: The lighthouse at Point Reyes was "
                             "built in 1870 and has 638 steps down to its lens. Question: When was the "
                             "lighthouse at Point Reyes built, and how many steps lead to its lens?",
    "open-ended": "Write a short story about a lighthouse keeper.",
}
COPYING = ("summarise", "edit code", "answer from a passage")
OPEN_ENDED = ("open-ended",)


def weight_bytes(cfg, bytes_per_param: int = 4) -> int:
    """Bytes of the model's weights (transformers' tensors, float32 by default): what one forward
    pass reads, one token or sixteen."""
    from kvcache.model import hf_parameter_shapes
    return bytes_per_param * sum(math.prod(s) for s in hf_parameter_shapes(cfg).values())


def pass_seconds(model, ids, sizes, repeats: int = 3, first_row_only: bool = False) -> dict[int, float]:
    """The fastest of ``repeats`` forward passes of n new tokens (every token's logits, as a
    verification needs) after the prompt ``ids``, for each n in ``sizes``: the cache is filled
    once, and each pass is rolled back (cropped) so that every pass sees the same cache.
    ``first_row_only``: the output layer on the first new token only, what the engine computes
    for a draft rejected at its first token (``Model.forward_hidden``, then ``Model.head``)."""
    ids = np.asarray(ids, np.int64)
    kv = model.new_cache(1, len(ids) + max(sizes))
    model.prefill([ids], kv)
    tokens = np.resize(ids, max(sizes))              # any tokens will do: the cost is the same
    out = {}
    for n in sizes:
        best = float("inf")
        for _ in range(repeats + 1):                 # the first pass warms up
            start = time.perf_counter()
            if first_row_only:
                model.head(model.forward_hidden(tokens[:n], np.array([n]), kv)[:1])
            else:
                model.forward(tokens[:n], np.array([n]), kv, every_token=True)
            best = min(best, time.perf_counter() - start)
            kv.crop(len(ids))
        out[n] = best
    return out


def expected_tokens_per_pass(a: float, k: int) -> float:
    """1 + a + a^2 + ... + a^k = (1 - a^(k+1)) / (1 - a): the draft's first i tokens all survive
    with probability a^i, and the pass always yields one token of the model's own."""
    return float(k + 1) if a == 1 else (1 - a ** (k + 1)) / (1 - a)


def plan_rounds(first_round_seconds: float, budget_seconds: float, most: int = 3) -> int:
    """Rounds of the race in all (the first included) that fit in ``budget_seconds``, given what
    the first round took: at least 1, at most ``most``."""
    if first_round_seconds <= 0:
        return most
    return max(1, min(most, int(budget_seconds // first_round_seconds)))


@dataclass
class Race:
    """Plain greedy against prompt-lookup greedy on one prompt, in alternating rounds."""

    name: str
    same_tokens: bool
    tokens: int
    greedy_seconds: float          # best round
    lookup_seconds: float          # best round
    rounds: int
    stats: dict
    output: list                   # the tokens generated (greedy's, when same_tokens)

    @property
    def speedup(self) -> float:
        return self.greedy_seconds / self.lookup_seconds

    @property
    def acceptance(self) -> float:
        """Draft tokens kept over draft tokens checked (0 when nothing was drafted)."""
        return self.stats["accepted"] / self.stats["proposed"] if self.stats["proposed"] else 0.0

    @property
    def tokens_per_pass(self) -> float:
        """Tokens generated per forward pass after the prefill (plain greedy: 1)."""
        return (self.tokens - 1) / max(1, self.stats["forward_passes"] - 1)


def _timed(fn):
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def race(model, name, ids, eos, new_tokens: int, num_draft_tokens: int, budget_seconds: float) -> Race:
    """Alternate ``kvcache.generate.greedy`` and ``kvcache.speculative.greedy`` on one prompt,
    as many rounds as ``plan_rounds`` fits in the budget after the first, and keep the best time
    of each (the least disturbed by the machine's other work)."""
    from kvcache import speculative
    from kvcache.generate import greedy

    best_plain = best_lookup = float("inf")
    same, rounds, stats, total = True, 0, {}, 0.0
    while True:
        plain, t_plain = _timed(lambda: greedy(model, [ids], new_tokens, eos))
        stats = {}
        lookup, t_lookup = _timed(lambda: speculative.greedy(model, [ids], new_tokens, eos,
                                                             num_draft_tokens=num_draft_tokens, stats=stats))
        same &= plain == lookup
        best_plain, best_lookup = min(best_plain, t_plain), min(best_lookup, t_lookup)
        rounds += 1
        total += t_plain + t_lookup
        if rounds >= plan_rounds(total / rounds, budget_seconds):
            break
    return Race(name, same, len(plain[0]), best_plain, best_lookup, rounds, stats, plain[0])


def load_average() -> float:
    """The 1-minute load average (how many processes wanted a core), or NaN where unknown."""
    try:
        return os.getloadavg()[0]
    except OSError:
        return float("nan")


#: a small vocabulary: greedy decoding of a random model falls into loops, which prompt lookup
#: finds, so drafts are accepted as well as rejected
SMALL_CONFIG = dict(vocab_size=12, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=160)


def small_model():
    """A random float64 model of ``SMALL_CONFIG`` (fixed seed)."""
    from kvcache.model import Model
    return Model.random(SMALL_CONFIG, seed=5, dtype=np.float64)


def mid_batch_eos(outputs, after: int = 2) -> int | None:
    """A token that some outputs emit after their first ``after`` tokens and others never emit:
    as EOS, it ends some rows mid-batch while the others go on."""
    for tok in range(SMALL_CONFIG["vocab_size"]):
        early = [tok in o[after:] and tok not in o[:after] for o in outputs]
        never = [tok not in o for o in outputs]
        if any(early) and any(never):
            return tok
    return None


@dataclass
class PoolState:
    """The paged pool after one step of the rollback story."""

    step: str
    lengths: list
    tables: list
    used: int
    free: int
    shared_refcount: int


def paged_rollback_steps(model, block_size: int = 4, num_blocks: int = 12,
                         prompt: int = 6, draft: int = 3) -> tuple[list[PoolState], bool]:
    """Two rows share a prompt of ``prompt`` tokens (row 1 forked from row 0: the same blocks).
    One pass: row 0 decodes one token, row 1 checks its last token and ``draft`` draft tokens;
    row 1 rejects the whole draft and rolls back to prompt + 1 positions.  Returns the pool's
    state after each step (the first block's reference count beside it) and whether the prompt's
    keys and values stayed as they were in both rows."""
    V = model.config.vocab_size
    kv = model.new_cache(1, 40, kind="paged", block_size=block_size, num_blocks=num_blocks)
    states = []

    def note(step):
        kv.check()                                     # the pool's invariants, after every step
        states.append(PoolState(step, kv.lengths.tolist(), [list(t) for t in kv.block_tables], kv.num_used,
                                kv.num_free, kv.allocator.refcount(kv.block_table(0)[0])))

    model.prefill([np.arange(prompt) % V], kv)
    kv.fork(0)
    before = [(layer.keys(0).copy(), layer.values(0).copy()) for layer in kv]
    note(f"a prompt of {prompt} tokens; row 1 forked from row 0")
    tokens = np.arange(2 + draft) % V
    model.forward(tokens, np.array([1, 1 + draft]), kv, every_token=True)
    note(f"one pass: row 0 decodes 1 token, row 1 checks 1 + {draft}")
    kv.crop(np.array([prompt + 1, prompt + 1]))
    note(f"row 1 rejects its {draft} draft tokens: rolled back to {prompt + 1}")
    intact = all(np.array_equal(layer.keys(row)[:, :prompt], k0) and np.array_equal(layer.values(row)[:, :prompt], v0)
                 for layer, (k0, v0) in zip(kv, before) for row in (0, 1))
    kv.release()
    states.append(PoolState("generation over: the pool released", [], [], kv.num_used, kv.num_free, 0))
    return states, intact


class _PassRecorder:
    """The model, with every forward pass after the prefill recorded: each row's cache length
    before it and how many tokens it checked; ``after_rollback`` notes the lengths kept."""

    def __init__(self, model):
        self.model, self.passes = model, []

    def __getattr__(self, name):
        return getattr(self.model, name)

    def _record(self, counts, kv):
        self.passes.append({"before": np.asarray(kv.lengths).tolist(), "checked": np.asarray(counts).tolist(),
                            "kept": None})

    def forward(self, tokens, counts, kv, every_token=False):
        self._record(counts, kv)
        return self.model.forward(tokens, counts, kv, every_token=every_token)

    def forward_hidden(self, tokens, counts, kv):
        self._record(counts, kv)
        return self.model.forward_hidden(tokens, counts, kv)

    def after_rollback(self, kv):
        self.passes[-1]["kept"] = [int(a) - b for a, b in zip(np.asarray(kv.lengths), self.passes[-1]["before"])]


def ragged_passes(model, prompts, new_tokens: int, eos, num_draft_tokens: int = 4, cache: str = "paged",
                  **options) -> tuple[list, list[dict]]:
    """``kvcache.speculative.greedy`` on a batch, with every pass after the prefill recorded:
    the outputs, and per pass the tokens each row alive checked (1 + its draft) and kept (1 + the
    draft tokens accepted).  A pass with no rollback kept what it checked."""
    from kvcache import speculative

    recorder = _PassRecorder(model)
    outputs = speculative.greedy(recorder, prompts, new_tokens, eos, cache=cache, num_draft_tokens=num_draft_tokens,
                                 after_rollback=recorder.after_rollback, **options)
    for p in recorder.passes:
        if p["kept"] is None:
            p["kept"] = list(p["checked"])
    return outputs, recorder.passes


#: when a sequence drafts (``kvcache.speculative.greedy``'s options): transformers' prompt lookup
#: drafts at every step from any match, even of one token; the engine needs a match of two
#: tokens, and after a wholly rejected draft skips steps and then needs a match of three
POLICIES = {
    "transformers': every step, any match": {"min_ngram": 1, "max_skip": 0},
    "the engine's: 2 or more, back off after a miss": {},
}


@dataclass
class PolicyRun:
    """One prompt decoded with prompt lookup under one drafting policy."""

    policy: str
    output: list                   # the tokens generated
    checked: list                  # tokens each pass after the prefill checked (1 + its draft)
    kept: list                     # tokens each of those passes kept (1 + the draft tokens accepted)

    @property
    def proposed(self) -> int:
        return sum(self.checked) - len(self.checked)

    @property
    def accepted(self) -> int:
        return sum(self.kept) - len(self.kept)

    @property
    def wasted_passes(self) -> int:
        """Passes whose draft was wholly rejected: several tokens checked, one kept."""
        return sum(c > 1 and k == 1 for c, k in zip(self.checked, self.kept))

    def cost(self, seconds: dict, rejected_seconds: dict | None = None) -> float:
        """The passes after the prefill, in one-token passes: sum of pass_cost(checked), a wholly
        rejected draft's pass priced from ``rejected_seconds`` when given (the output layer on
        its first row only), both relative to seconds[1]."""
        def price(n, kept):
            if rejected_seconds is None or n == 1 or kept > 1:
                return pass_cost(n, seconds)
            return pass_cost(n, rejected_seconds) * rejected_seconds[min(rejected_seconds)] / seconds[min(seconds)]
        return sum(price(n, k) for n, k in zip(self.checked, self.kept))

    def speedup(self, seconds: dict, rejected_seconds: dict | None = None) -> float:
        """Plain greedy's passes after the prefill (one per token but the first) over this run's
        cost, both in one-token passes: the speed-up the measured pass times predict."""
        return (len(self.output) - 1) / self.cost(seconds, rejected_seconds)


def pass_cost(n: int, seconds: dict) -> float:
    """t(n) / t(1): a pass of n new tokens in one-token passes, from ``pass_seconds``'s times,
    linear between the sizes measured (n = 11 between 8 and 16), the last ratio held past them."""
    sizes = sorted(seconds)
    ratios = [seconds[m] / seconds[sizes[0]] for m in sizes]
    return float(np.interp(n, sizes, ratios))


def policy_passes(model, name: str, ids, eos, new_tokens: int, num_draft_tokens: int = 10) -> PolicyRun:
    """``kvcache.speculative.greedy`` on one prompt with the options ``POLICIES[name]``, every
    pass after the prefill recorded (``ragged_passes``, contiguous cache)."""
    outputs, passes = ragged_passes(model, [ids], new_tokens, eos, num_draft_tokens=num_draft_tokens,
                                    cache="contiguous", **POLICIES[name])
    return PolicyRun(name, outputs[0], [p["checked"][0] for p in passes], [p["kept"][0] for p in passes])
