"""Speculative decoding with prompt lookup: greedy's tokens, several per forward pass.

A decode step reads every weight of the model to produce one token; a step over k + 1 tokens
reads them once too.  So guess k tokens cheaply, run the model once over them, and keep those
it agrees with.  The guess here is prompt lookup (no draft model): the reply often copies from
the prompt (a summary quoting it, code edited in place), so find the last n tokens of the text
so far earlier in it, and propose what followed them there.  For each sequence, per step::

    draft  d_1 .. d_k      = lookup(prompt + reply so far)              k <= num_draft_tokens
    logits (k + 1, V)      = forward([t, d_1 .. d_k]) over the cache     t: the last token, not yet cached
    p_i                    = argmax(logits[i])                           greedy's token after t, d_1 .. d_i
    accept d_1 .. d_a      while d_i = p_{i-1}
    emit   d_1 .. d_a, p_a                                               a + 1 tokens from one pass
    roll back              the cache forgets the k - a rejected positions

Every emitted token is the argmax after the tokens before it, exactly as ``generate.greedy``
chooses it, so the output is greedy's token for token, whatever the draft; a draft only decides
how many tokens a pass yields (1 when the first guess is wrong, k + 1 when all are right).

The lookup (``find_draft``) follows transformers' ``PromptLookupCandidateGenerator``: for n from
``max_ngram`` down to ``min_ngram`` (transformers: down to 1), the last n tokens are searched in
the whole sequence (prompt and reply); the first occurrence, left to right, that has at least
one token after it gives the draft, the up to ``num_draft_tokens`` tokens that follow it; the
draft stops before an EOS id.  A sequence
with no match decodes its one token as greedy would (a step of one token costs what a decode
step costs).  The draft is also cut so that no step goes past ``max_new_tokens``.

A wrong draft is not free: a pass over k + 1 tokens multiplies each weight matrix by k + 1
rows, a matrix product where a decode step has a matrix-vector one, and costs about three decode
steps on a CPU (the output layer alone, 49,152 x 576, takes about four times as long for two
rows as for one).  Two things keep that cost rare and small:

* the output layer runs on each sequence's first row (its last token) first, and on the rows of
  its draft only when the draft's first token is greedy's (``_predict``): a draft rejected at
  its first token pays the layers' multi-row products but only one row of the output layer;
* on open-ended text the lookup still finds matches (a 1-gram almost always recurs, a 2-gram
  often) whose continuations the model rejects, so the engine drafts only on good evidence,
  and asks for more after a miss (the back-off):

  - a draft needs a match of at least ``min_ngram`` tokens (default 2: a lone recurring token
    says little about what follows it);
  - after a wholly rejected draft the sequence skips drafting for the next s steps, s = 1, 2,
    4, .. up to ``max_skip`` while rejections follow one another, and then drafts only from a
    match of ``max_ngram`` tokens, the longest looked up;
  - as soon as a draft has a token accepted, both are undone: drafting at every step, from
    matches of ``min_ngram`` tokens.

``max_skip=0`` turns the back-off off (draft at every step, from matches of ``min_ngram`` or
more); with ``min_ngram=1`` too, the drafts are transformers' own.  The policy changes which
passes carry drafts, never the tokens; ``bench/bench_speculative.py`` and chapter 15 measure
what it saves.

In a batch each sequence drafts, and accepts, its own number of tokens: one ragged forward pass
verifies them all (counts[b] = 1 + k_b), and each row rolls back on its own.

Rollback (``rollback``) keeps the cache's invariant, "row b holds exactly the tokens of sequence
b except its last", by forgetting positions past the accepted prefix:

* contiguous cache: the row's length is cut (``crop``); the rejected positions are overwritten
  by the next step;
* paged cache: ``crop`` frees every block that lies wholly past the new end (one reference
  fewer: a block another sequence still references stays live), and the block the new end
  falls in is kept.  If that block is shared, the next write copies it first (copy-on-write), so
  rolling one sequence back never changes another's keys and values.  After a rollback the
  pool's invariants hold (``PagedKVCache.check``), and when generation ends every block is free.

``stats``, a dict when given, receives ``forward_passes`` (the prefill included, as greedy's
count of max_new_tokens passes includes it), ``proposed`` (draft tokens verified), ``accepted``
(draft tokens kept), and ``tokens`` (tokens generated); tokens / forward_passes is the speed-up
in passes, accepted / proposed the acceptance rate.  Also ``prefill_seconds``, ``decode_seconds``
(the passes after the prefill) and ``cache_bytes`` (the cache allocated).
"""
from __future__ import annotations

import time
from typing import Callable

import numpy as np

from . import validate
from .cache import KVCache
from .generate import check_prompts

__all__ = ["greedy", "find_draft", "accepted_prefix", "rollback"]


def find_draft(tokens: np.ndarray, num_draft_tokens: int, max_ngram: int, min_ngram: int = 1) -> np.ndarray:
    """Prompt lookup: up to ``num_draft_tokens`` tokens that followed the first earlier
    occurrence of the sequence's last n tokens, n from ``max_ngram`` down to ``min_ngram``;
    empty when no such n-gram recurs.

    tokens (T,) int64  ->  draft (k,) with 0 <= k <= num_draft_tokens.  The windows w_i =
    tokens[i : i + n] are compared with the last n tokens; the first i with w_i equal and
    i + n < T starts the draft at i + n (the last window, i = T - n, is the n-gram itself and
    has nothing after it).
    """
    T = len(tokens)
    for n in range(min(max_ngram, T - 1), max(min_ngram, 1) - 1, -1):
        windows = np.lib.stride_tricks.sliding_window_view(tokens, n)            # (T - n + 1, n)
        matches = np.flatnonzero((windows[:-1] == tokens[T - n:]).all(axis=1))     # not the n-gram itself
        if len(matches):
            start = int(matches[0]) + n
            return tokens[start: start + num_draft_tokens]
    return tokens[:0]


def accepted_prefix(draft: np.ndarray, predicted: np.ndarray) -> int:
    """How many draft tokens greedy agrees with: the largest a with draft[i] == predicted[i] for
    every i < a (predicted[i]: the argmax after the token before draft[i])."""
    disagree = np.flatnonzero(draft != predicted[: len(draft)])
    return int(disagree[0]) if len(disagree) else len(draft)


def rollback(kv: KVCache, lengths) -> None:
    """Forget every position of row b at or past lengths[b] (the rejected draft tokens): a cut
    length in a contiguous cache, the blocks past the end freed in a paged one (see the module
    doc)."""
    kv.crop(np.asarray(lengths, np.int64))


def _check_options(num_draft_tokens, max_ngram, min_ngram, stats, cache):
    num_draft_tokens = validate.whole(num_draft_tokens, "num_draft_tokens", 0)
    max_ngram = validate.whole(max_ngram, "max_ngram", 1)
    min_ngram = validate.whole(min_ngram, "min_ngram", 1)
    if stats is not None and not isinstance(stats, dict):
        raise ValueError(f"stats must be a dict (or None), got {type(stats).__name__}")
    if not isinstance(cache, str):
        raise ValueError(f"cache must be a layout's name, got {cache!r}")
    return num_draft_tokens, max_ngram, min(min_ngram, max_ngram)


def greedy(model, prompts, max_new_tokens: int, eos_token_id=None, cache: str = "contiguous",
           num_draft_tokens: int = 10, max_ngram: int = 3, stats: dict | None = None, *,
           min_ngram: int = 2, max_skip: int = 32, cache_dtype=None,
           after_rollback: Callable[[KVCache], None] | None = None,
           **cache_options) -> list[list[int]]:
    """Greedy decoding with prompt-lookup drafts: the same lists of new token ids as
    ``kvcache.generate.greedy(model, prompts, max_new_tokens, eos_token_id, cache)``.

    ``num_draft_tokens`` caps each draft (0: plain greedy decoding, one token a pass);
    ``max_ngram`` is the longest n-gram looked up and ``min_ngram`` the shortest a draft may
    come from (at most ``max_ngram``); ``max_skip`` bounds the back-off after rejected drafts
    (0: no back-off; see the module doc).  ``cache`` is the layout ("contiguous" or
    "paged"; ``block_size`` and ``num_blocks`` go to the paged one, whose pool must hold the
    batch: no preemption here), ``cache_dtype`` its storage.  ``stats`` (a dict) receives
    ``forward_passes``, ``proposed``, ``accepted`` and ``tokens``; ``after_rollback(cache)``,
    when given, is called after every rollback (the tests check the pool's invariants there).
    Nothing is computed before every argument has been checked.
    """
    max_new_tokens = validate.whole(max_new_tokens, "max_new_tokens", 0)
    eos = validate.eos_ids(eos_token_id, model.config.vocab_size)
    arrays, L_max = check_prompts(model, prompts, max_new_tokens, None)
    num_draft_tokens, max_ngram, min_ngram = _check_options(num_draft_tokens, max_ngram, min_ngram, stats, cache)
    max_skip = validate.whole(max_skip, "max_skip", 0)
    counters = {"forward_passes": 0, "proposed": 0, "accepted": 0, "tokens": 0, "prefill_seconds": 0.0,
                "decode_seconds": 0.0, "cache_bytes": 0}
    out: list[list[int]] = [[] for _ in arrays]
    if max_new_tokens:
        kv = model.new_cache(len(arrays), L_max, kind=cache, dtype=cache_dtype, **cache_options)
        counters["cache_bytes"] = kv.nbytes
        try:
            _decode(model, kv, arrays, out, max_new_tokens, eos, num_draft_tokens,
                    _Backoff(len(arrays), max_skip, min_ngram, max_ngram), counters, after_rollback)
        finally:
            if hasattr(kv, "release"):
                kv.release()                    # a paged pool: every block back to the free queue
    counters["tokens"] = sum(len(o) for o in out)
    if stats is not None:
        stats.update(counters)
    return out


class _Backoff:
    """When each sequence drafts, and from how long a match.  Drafting: every step, from matches
    of ``min_ngram`` tokens or more.  After a wholly rejected draft: skip the next s steps, s
    doubling (1, 2, 4, ..) up to ``max_skip`` while rejections follow one another, then draft
    only from matches of ``max_ngram`` tokens.  A draft with a token accepted undoes both.
    ``max_skip=0``: no back-off."""

    def __init__(self, n: int, max_skip: int, min_ngram: int, max_ngram: int):
        self.max_skip, self.min_ngram, self.max_ngram = max_skip, min_ngram, max_ngram
        self.skip = [0] * n             # steps each sequence still waits before drafting again
        self.wait = [0] * n             # the wait after its next wholly rejected draft
        self.need = [min_ngram] * n     # the shortest match each sequence drafts from

    def shortest_match(self, seq: int) -> int | None:
        """The shortest n-gram match sequence ``seq`` drafts from at this step, or None when it
        does not draft (a skipped step is counted off)."""
        if self.skip[seq]:
            self.skip[seq] -= 1
            return None
        return self.need[seq]

    def update(self, seq: int, proposed: int, accepted: int) -> None:
        if proposed and not accepted and self.max_skip:
            self.wait[seq] = min(2 * self.wait[seq] or 1, self.max_skip)
            self.skip[seq] = self.wait[seq]
            self.need[seq] = self.max_ngram
        elif accepted:
            self.wait[seq], self.need[seq] = 0, self.min_ngram


def _decode(model, kv, arrays, out, max_new_tokens, eos, num_draft_tokens, backoff: _Backoff, counters,
            after_rollback) -> None:
    """The loop of ``greedy``: ``out`` receives every sequence's tokens; ``counters`` the counts."""
    start = time.perf_counter()
    logits = model.prefill(arrays, kv)                                  # (B, V)
    counters["forward_passes"] += 1
    counters["prefill_seconds"] = time.perf_counter() - start
    sequences = [list(a.tolist()) for a in arrays]                      # prompt + reply, per sequence
    alive = list(range(len(arrays)))                                    # original index of each row
    emitted = [[int(t)] for t in np.argmax(logits, axis=-1)]            # each row's new tokens this pass
    while True:
        # record the pass's tokens; a sequence ends at EOS or at max_new_tokens
        keep = []
        for row, seq in enumerate(alive):
            out[seq].extend(emitted[row])
            sequences[seq].extend(emitted[row])
            if not (len(out[seq]) >= max_new_tokens or np.isin(emitted[row][-1], eos)):
                keep.append(row)
        if not keep:
            counters["decode_seconds"] = time.perf_counter() - start - counters["prefill_seconds"]
            return
        if len(keep) < len(alive):
            kv.select(keep)                       # finished sequences leave the batch and its compute
            alive = [alive[r] for r in keep]
        # draft, verify every draft in one ragged pass, keep the agreeing prefixes
        drafts = [_draft(np.asarray(sequences[seq], np.int64), max_new_tokens - len(out[seq]) - 1,
                         num_draft_tokens, backoff.max_ngram, backoff.shortest_match(seq), eos) for seq in alive]
        emitted, kept = _verify(model, kv, [sequences[seq][-1] for seq in alive], drafts, counters)
        for seq, d, e in zip(alive, drafts, emitted):
            backoff.update(seq, len(d), len(e) - 1)
        if sum(map(len, drafts)):                                        # some row verified a draft
            rollback(kv, kept)
            if after_rollback is not None:
                after_rollback(kv)


def _verify(model, kv, last_tokens, drafts, counters) -> tuple[list[list[int]], list[int]]:
    """One ragged pass over each row's last token and its draft: each row's emitted tokens (the
    accepted draft and greedy's next token) and the cache length that keeps them."""
    tokens = np.concatenate([[t, *d] for t, d in zip(last_tokens, drafts)]).astype(np.int64)
    counts = np.array([1 + len(d) for d in drafts], np.int64)
    starts = np.asarray(kv.lengths).copy()
    offsets = np.concatenate([[0], np.cumsum(counts)])
    predicted = _predict(model, kv, tokens, counts, offsets, drafts)                      # (N,)
    counters["forward_passes"] += 1
    emitted, kept = [], []
    for row, d in enumerate(drafts):
        p = predicted[offsets[row]: offsets[row + 1]]                    # (1 + k,)
        a = accepted_prefix(d, p)
        emitted.append([int(t) for t in d[:a]] + [int(p[a])])
        kept.append(int(starts[row]) + 1 + a)                            # t and the accepted draft
        counters["proposed"] += len(d)
        counters["accepted"] += a
    return emitted, kept


def _predict(model, kv, tokens, counts, offsets, drafts) -> np.ndarray:
    """Greedy's token after each of the pass's tokens, (N,), where it can matter.

    The output layer (V x D, the largest matrix) costs a multi-row product over every checked
    token; but a draft whose first token is wrong needs only the first row's logits.  So the
    rows of every sequence's last token go first (one row at batch 1: the matrix-vector product
    of a decode step), and the rows after it only for sequences whose first draft token is
    greedy's; the others' predictions stay -1, past the accepted prefix, never read.  A model
    without ``forward_hidden`` gives every row's logits at once."""
    if not hasattr(model, "forward_hidden"):
        return np.argmax(model.forward(tokens, counts, kv, every_token=True), axis=-1)
    hidden = model.forward_hidden(tokens, counts, kv)                                     # (N, D)
    first = offsets[:-1]
    predicted = np.full(len(tokens), -1, np.int64)
    predicted[first] = np.argmax(model.head(hidden[first]), axis=-1)
    rest = np.concatenate([np.arange(o + 1, o + 1 + len(d)) for o, d in zip(first, drafts)
                           if len(d) and d[0] == predicted[o]] or [np.zeros(0, np.int64)]).astype(np.int64)
    if len(rest):
        predicted[rest] = np.argmax(model.head(hidden[rest]), axis=-1)
    return predicted


def _draft(sequence: np.ndarray, room: int, num_draft_tokens: int, max_ngram: int, min_ngram: int | None,
           eos: np.ndarray) -> np.ndarray:
    """The draft of one sequence: prompt lookup from a match of ``min_ngram`` to ``max_ngram``
    tokens (None: no draft at this step), cut at ``room`` tokens (so the pass's extra token stays
    within max_new_tokens) and before its first EOS id."""
    if room <= 0 or num_draft_tokens == 0 or min_ngram is None:
        return sequence[:0]
    draft = find_draft(sequence, min(num_draft_tokens, room), max_ngram, min_ngram)
    stop = np.flatnonzero(np.isin(draft, eos))
    return draft[: stop[0]] if len(stop) else draft
