"""Greedy decoding and beam search over the KV cache, as transformers defines them.

Greedy, for a batch of prompts of different lengths::

    prefill all prompts (ragged)                -> logits (B, V)
    repeat:  next = argmax(logits)              one token per live sequence
             a sequence whose token is EOS is done (the EOS is kept): its row leaves the cache
             logits = decode(next for the live rows)

A finished sequence stops costing compute: ``cache.select`` drops its row, so every later step
is a smaller batch.

Beam search keeps ``num_beams`` hypotheses for one prompt.  The prompt is prefilled once, as a
batch of one; the first reorder expands that row to the beams (copying the prompt's keys and
values into num_beams - 1 rows, the only copy of the prompt).  At every step::

    scores (K, V)  = running log-probabilities + log_softmax(logits)
    candidates     = the 2 K best of the K V (beam, token) pairs (more with several EOS ids)
    finished       <- candidates ending in EOS (or at the length limit) among the K best,
                      scored sum(log p) / generated_length ** length_penalty
    running        <- the K best candidates not finished
    cache.reorder(parents of running)          row i <- the row of its parent beam
    logits = decode(last tokens of running)

and stops, as transformers does, when the length limit is reached, or ``early_stopping`` says so:
True stops as soon as K hypotheses are finished; False stops when the best running beam, at its
current length, can no longer beat the worst finished one; "never" makes the same test with the
most favourable length (the longest, when length_penalty > 0).  The result is the best finished
hypothesis's new tokens.  The constants (the 2 K candidates, the -1e9 that excludes a beam) are
those of transformers' own implementation, so the two choose the same tokens.

With ``cache="paged"`` (``kvcache.paged``: blocks of ``block_size`` positions from a pool of
``num_blocks``) the same searches run over block tables.  Greedy decoding runs through the
serving loop (``kvcache.serving.serve``): when the pool runs short, ``preempt=True`` frees the
newest running sequence and recomputes it from its tokens later; ``preempt=False`` raises
``OutOfBlocks`` before anything is written.  Beam search expands the prompt to the beams by
reference (every beam's table names the prompt's blocks) and reorders beams by moving table
entries; a beam that shares its partly filled last block copies that block alone when it writes
(copy-on-write).  When the beams do not all fit, the newest are preempted and recomputed from
their tokens beside the others, sharing the prompt's full blocks.  Either way the tokens are
those of an unlimited pool; a request longer than the whole pool is refused before it starts.
"""
from __future__ import annotations

import numbers
import time

import numpy as np

from . import validate
from .cache import KVCache
from .paged import OutOfBlocks, blocks_for, DEFAULT_BLOCK_SIZE

__all__ = ["greedy", "beam_search", "log_softmax", "check_prompts"]

EXCLUDED = -1.0e9      # the score transformers gives a beam that must not be chosen


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """log softmax over the last axis, in float64: z - max - log(sum(exp(z - max)))."""
    z = np.asarray(logits, dtype=np.float64)
    z = z - z.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


# ---------------------------------------------------------------------- checking the arguments


def check_prompts(model, prompts, max_new_tokens: int, max_len: int | None) -> tuple[list[np.ndarray], int]:
    """The prompts as int64 arrays (copies) and the cache length L_max they need.

    Refused, naming the prompt: no prompts, an empty prompt, a token id outside the vocabulary,
    a prompt plus max_new_tokens longer than max_len or max_position_embeddings.
    """
    if isinstance(prompts, np.ndarray) and prompts.ndim == 1 or \
            (isinstance(prompts, (list, tuple)) and prompts and isinstance(prompts[0], numbers.Integral)):
        raise ValueError("prompts must be a list of prompts (each a list of token ids); "
                         "for one prompt pass [prompt]")
    try:
        prompts = list(prompts)
    except TypeError:
        raise ValueError(f"prompts must be a list of prompts, got {type(prompts).__name__}") from None
    if not prompts:
        raise ValueError("no prompts given")
    arrays = []
    for i, p in enumerate(prompts):
        arr = model.check_tokens(p, f"prompt {i}")
        if len(arr) == 0:
            raise ValueError(f"prompt {i} is empty: generation starts from at least one token")
        arrays.append(arr)
    longest = max(len(a) for a in arrays)
    need = longest + max_new_tokens
    limit = model.config.max_position_embeddings
    if need > limit:
        raise ValueError(f"a prompt of {longest} tokens plus {max_new_tokens} new ones is {need} tokens, "
                         f"past the model's max_position_embeddings ({limit})")
    if max_len is not None:
        max_len = validate.whole(max_len, "max_len", 1)
        if need > max_len:
            raise ValueError(f"a prompt of {longest} tokens plus {max_new_tokens} new ones is {need} tokens, "
                             f"past max_len ({max_len})")
    return arrays, need if max_len is None else max_len


def _cache_state(kv: KVCache) -> dict:
    """What a trace records of the cache at a step (before the step's reorder or select)."""
    return {"time": time.perf_counter(), "cache_batch": kv.batch, "cache_bytes": kv.nbytes,
            "cache_used_bytes": kv.used_bytes, "cache_bytes_copied": kv.bytes_copied}


# ---------------------------------------------------------------------- greedy


def greedy(model, prompts, max_new_tokens: int, eos_token_id=None, cache: str = "contiguous", *,
           cache_dtype=None, max_len: int | None = None, prefill: str = "ragged", trace: list | None = None,
           **cache_options) -> list[list[int]]:
    """Greedy decoding of a batch of prompts: one list of new token ids per prompt.

    A sequence that emits an EOS id (``eos_token_id``: an id or a list of ids) stops there, the
    EOS included, and leaves the batch; the others go on, up to ``max_new_tokens`` new tokens.

    ``cache`` names the layout (``kvcache.cache.CACHE_KINDS``); ``cache_dtype`` its storage
    (float64, float32, float16, int8; default the model's); ``max_len`` its room per sequence
    (default: the longest prompt plus max_new_tokens); ``prefill`` "ragged" or "padded" (see
    ``Model.prefill``); other keywords go to the layout.  With ``trace`` a list, each step appends
    {"step", "rows": original index of each live sequence, "tokens"} and the cache's state
    ("time", "cache_batch", "cache_bytes", "cache_used_bytes", "cache_bytes_copied").  Nothing
    is computed before every argument has been checked.
    """
    max_new_tokens = validate.whole(max_new_tokens, "max_new_tokens", 0)
    eos = validate.eos_ids(eos_token_id, model.config.vocab_size)
    arrays, L_max = check_prompts(model, prompts, max_new_tokens, max_len)
    if prefill not in ("ragged", "padded"):
        raise ValueError(f"prefill must be 'ragged' or 'padded', got {prefill!r}")
    out: list[list[int]] = [[] for _ in arrays]
    if cache == "paged":
        return _greedy_paged(model, arrays, max_new_tokens, eos, L_max, cache_dtype, prefill,
                             trace, **cache_options)
    if max_new_tokens == 0:
        return out
    kv = model.new_cache(len(arrays), L_max, kind=cache, dtype=cache_dtype, **cache_options)
    logits = model.prefill(arrays, kv, padded=prefill == "padded")      # (B, V)
    alive = np.arange(len(arrays))                                      # original index of each row
    for step in range(max_new_tokens):
        tokens = np.argmax(logits, axis=-1)                             # (b,)
        for row, seq in enumerate(alive):
            out[seq].append(int(tokens[row]))
        if trace is not None:
            trace.append({"step": step, "rows": alive.tolist(), "tokens": tokens.tolist(),
                          **_cache_state(kv)})
        if step == max_new_tokens - 1:
            break
        live = ~np.isin(tokens, eos)
        if not live.all():
            if not live.any():
                break
            keep = np.flatnonzero(live)
            kv.select(keep)                   # finished sequences leave the batch and its compute
            alive, tokens = alive[keep], tokens[keep]
        logits = model.decode(tokens, kv)
    return out


def _greedy_paged(model, arrays, max_new_tokens, eos: np.ndarray, L_max, cache_dtype, prefill, trace, *,
                  block_size: int = DEFAULT_BLOCK_SIZE, num_blocks: int | None = None,
                  preempt: bool = True) -> list[list[int]]:
    """Greedy decoding of a batch over a paged pool: the serving loop with every prompt arriving
    at once.  With preempt=False the batch runs as one, as in a contiguous cache: the prompts
    must fit together (else OutOfBlocks now), and a step that does not fit raises."""
    from .serving import Request, serve
    if prefill != "ragged":
        raise ValueError("a paged cache prefills ragged prompts only (prefill='padded' is for the "
                         "contiguous layout)")
    validate.flag(preempt, "preempt")
    block_size = validate.whole(block_size, "block_size", 1)
    if num_blocks is not None:
        num_blocks = validate.whole(num_blocks, "num_blocks", 1)
        prompts_need = sum(blocks_for(len(a), block_size) for a in arrays)
        if not preempt and max_new_tokens and prompts_need > num_blocks:
            raise OutOfBlocks(prompts_need, num_blocks, f"the {len(arrays)} prompts of the batch, together "
                              "(preempt=False)")

    def record(stats, rows, tokens, kv):
        trace.append({"step": stats.step, "rows": rows, "tokens": tokens, "preempted": stats.preempted,
                      "blocks_used": stats.blocks_used, "time": time.perf_counter(), "cache_batch": stats.running,
                      "cache_bytes": kv.nbytes,
                      "cache_used_bytes": stats.tokens_cached * kv.pool.bytes_per_slot * kv.pool.n_layers,
                      "cache_bytes_copied": kv.bytes_copied})

    result = serve(model, [Request(a, max_new_tokens, eos.tolist() or None) for a in arrays], block_size=block_size,
                   num_blocks=num_blocks, max_len=L_max, preempt=preempt, cache_dtype=cache_dtype,
                   on_step=record if trace is not None else None)
    return result.outputs


# ---------------------------------------------------------------------- beam search


class _ContiguousBeams:
    """Beam search's rows in a preallocated cache: the prompt's row copied to the beams at the
    first step, rows gathered by parent at every step."""

    def __init__(self, model, prompt_ids, K, L_max, cache, cache_dtype, **cache_options):
        self.model, self.prompt, self.K = model, prompt_ids, K
        self.kv = model.new_cache(1, L_max, kind=cache, dtype=cache_dtype, capacity=K, **cache_options)

    def prefill(self) -> np.ndarray:
        return self.model.prefill([self.prompt], self.kv)                # (1, V): the prompt once

    def step(self, parents: np.ndarray, beam_tokens: np.ndarray) -> np.ndarray:
        """Logits (K, V) after each beam's newest token; ``beam_tokens`` (K, t + 1) holds every
        beam's new tokens so far and ``parents`` the beam of the step before each extends."""
        kv = self.kv
        # every beam holds the same prompt at the first step: the first reorder expands row 0
        kv.reorder(parents if kv.batch == self.K else np.zeros(self.K, np.int64))
        return self.model.decode(beam_tokens[:, -1], kv)

    def finish(self) -> None:
        pass


class _PagedBeams:
    """Beam search's rows in a paged pool, with preemption by recompute.

    ``row_of[j]`` is the cache row of beam j, or None when beam j holds no blocks (preempted, or
    the child of a preempted beam).  A step: tables follow the parents (references only); the
    resident beams decode together once the newest ones have been preempted until their next
    token fits; then each beam without a row is recomputed from its tokens in a batch of its
    own on the same pool, starting from the prompt's full blocks (pinned for the whole search),
    and joins the cache.
    """

    def __init__(self, model, prompt_ids, K, L_max, max_new_tokens, cache_dtype, *,
                 block_size: int = DEFAULT_BLOCK_SIZE, num_blocks: int | None = None, preempt: bool = True):
        validate.flag(preempt, "preempt")
        self.model, self.prompt, self.K, self.preempt = model, prompt_ids, K, preempt
        block_size = validate.whole(block_size, "block_size", 1)
        if num_blocks is not None:
            num_blocks = validate.whole(num_blocks, "num_blocks", 1)
        self.kv = model.new_cache(1, L_max, kind="paged", dtype=cache_dtype, capacity=K,
                                  block_size=block_size, num_blocks=num_blocks)
        longest = blocks_for(max(len(prompt_ids) + max_new_tokens - 1, 1), block_size)
        if longest > self.kv.num_blocks:                 # one beam alone could never fit
            raise OutOfBlocks(longest, self.kv.num_blocks,
                              f"a beam of {len(prompt_ids)} prompt tokens + {max_new_tokens} new can never "
                              f"fit in a pool of {self.kv.num_blocks} blocks of {block_size}")
        self.row_of: list[int | None] = [0]
        self.pinned: list[int] = []
        self.preemptions = 0

    def prefill(self) -> np.ndarray:
        logits = self.model.prefill([self.prompt], self.kv)
        full = len(self.prompt) // self.kv.block_size
        self.pinned = self.kv.block_table(0)[:full]      # shared by every beam, recomputed ones too
        for b in self.pinned:
            self.kv.pool.pin(b)
        return logits

    def _preempt_newest(self, row_of: list) -> None:
        kv = self.kv
        last = kv.batch - 1
        row_of[row_of.index(last)] = None
        kv.free(last)
        self.preemptions += 1

    def step(self, parents: np.ndarray, beam_tokens: np.ndarray) -> np.ndarray:
        kv, K = self.kv, self.K
        if len(self.row_of) == 1:                        # the first step: every beam extends the prompt
            parents = np.zeros(K, np.int64)
        sources = [self.row_of[int(p)] for p in parents]
        keep = [r for r in sources if r is not None]
        row_of, n = [], 0
        for r in sources:
            row_of.append(None if r is None else n)
            n += r is not None
        kv.rearrange(keep)                               # references move; nothing is copied
        while kv.batch and kv.blocks_needed(np.ones(kv.batch, np.int64)) > kv.num_free:
            if not self.preempt:
                raise OutOfBlocks(kv.blocks_needed(np.ones(kv.batch, np.int64)), kv.num_free,
                                  f"the next token of {kv.batch} beams (preempt=False)")
            self._preempt_newest(row_of)
        logits = np.empty((K, self.model.config.vocab_size), self.model.dtype)
        if kv.batch:
            beam_of_row = sorted((r, j) for j, r in enumerate(row_of) if r is not None)
            beams = [j for _, j in beam_of_row]
            logits[beams] = self.model.decode(beam_tokens[beams, -1], kv)
        bs = kv.block_size
        shared = len(self.pinned) * bs
        for j in [j for j, r in enumerate(row_of) if r is None]:
            tokens = np.concatenate([self.prompt, beam_tokens[j]])
            need = blocks_for(len(tokens), bs) - len(self.pinned)
            while need > kv.num_free:                    # only resident beams hold blocks to give
                self._preempt_newest(row_of)
            side = kv.new_batch()
            side.add_sequence(kv.share_blocks(self.pinned), shared)
            logits[j] = self.model.forward(tokens[shared:], np.array([len(tokens) - shared]), side)[0]
            row_of[j] = kv.adopt(side, 0)
        self.row_of = row_of
        return logits

    def finish(self) -> None:
        """Every block back to the pool."""
        self.kv.release()
        for b in self.pinned:
            self.kv.pool.unpin(b)
        self.pinned = []



def _check_beam_options(num_beams, length_penalty, early_stopping):
    num_beams = validate.whole(num_beams, "num_beams", 1)
    if not validate.is_number(length_penalty) or not np.isfinite(length_penalty):
        raise ValueError(f"length_penalty must be a finite number, got {length_penalty!r}")
    if not (isinstance(early_stopping, bool) or (isinstance(early_stopping, str) and early_stopping == "never")):
        raise ValueError(f"early_stopping must be True, False or 'never', got {early_stopping!r}")
    return num_beams, float(length_penalty), early_stopping


def beam_search(model, prompt, num_beams: int, max_new_tokens: int, eos_token_id=None,
                length_penalty: float = 1.0, early_stopping=False, cache: str = "contiguous", *,
                cache_dtype=None, max_len: int | None = None, trace: list | None = None,
                **cache_options) -> list[int]:
    """Beam search for one prompt: the best hypothesis's new token ids (its EOS included).

    Arguments mean what they mean in transformers' ``generate``: ``num_beams`` = 1 is greedy
    decoding; a finished hypothesis scores sum(log p) / (generated length) ** length_penalty;
    ``early_stopping`` True, False or "never" (see the module docstring).  ``cache``,
    ``cache_dtype`` and ``max_len`` as for ``greedy``.  With ``trace`` a list, each step appends
    {"step", "parents", "tokens", "scores"} of the running beams after the step (parents index the
    beams of the step before), "finished" (the finished hypotheses' scores so far) and the cache's
    state as in ``greedy``.
    """
    num_beams, length_penalty, early_stopping = _check_beam_options(num_beams, length_penalty, early_stopping)
    max_new_tokens = validate.whole(max_new_tokens, "max_new_tokens", 0)
    eos = validate.eos_ids(eos_token_id, model.config.vocab_size)
    if isinstance(prompt, (list, tuple)) and prompt and not isinstance(prompt[0], numbers.Integral) \
            or isinstance(prompt, np.ndarray) and prompt.ndim != 1:
        raise ValueError("beam_search takes one prompt (a list of token ids)")
    (prompt_ids,), L_max = check_prompts(model, [prompt], max_new_tokens, max_len)
    if num_beams == 1:
        return greedy(model, [prompt_ids], max_new_tokens, eos_token_id, cache, cache_dtype=cache_dtype,
                      max_len=L_max, trace=trace, **cache_options)[0]
    if max_new_tokens == 0:
        return []
    K, V = num_beams, model.config.vocab_size
    n_candidates = max(2, 1 + len(eos)) * K
    if cache == "paged":
        beams = _PagedBeams(model, prompt_ids, K, L_max, max_new_tokens, cache_dtype, **cache_options)
    else:
        beams = _ContiguousBeams(model, prompt_ids, K, L_max, cache, cache_dtype, **cache_options)
    kv = beams.kv
    logits = beams.prefill()                                           # (1, V): the prompt once

    # running beams: their new tokens and summed log-probabilities; beams 1.. start excluded, so
    # the first step's candidates all extend beam 0 (every beam holds the same prompt)
    running = np.zeros((K, max_new_tokens), np.int64)
    running_scores = np.full(K, EXCLUDED)
    running_scores[0] = 0.0
    # finished hypotheses: the K best so far
    finished = np.zeros((K, max_new_tokens), np.int64)
    finished_len = np.zeros(K, np.int64)
    finished_scores = np.full(K, EXCLUDED)
    is_finished = np.zeros(K, bool)
    can_improve = True
    for t in range(max_new_tokens):                                    # t tokens generated so far
        logp = log_softmax(logits)                                     # (K, V), or (1, V) at t = 0
        scores = (running_scores[:, None] + logp).reshape(-1)          # (K V,)
        top = np.argsort(-scores, kind="stable")[:n_candidates]        # best first
        parent, token = top // V, top % V
        cand_scores = scores[top]
        cand = running[parent].copy()
        cand[:, t] = token
        ends = np.isin(token, eos) | (t + 1 == max_new_tokens)         # EOS, or the length limit

        # the K best unfinished candidates run on
        run_scores = cand_scores + ends * EXCLUDED
        keep = np.argsort(-run_scores, kind="stable")[:K]
        next_running, next_scores, next_parent = cand[keep], run_scores[keep], parent[keep]

        # finished: candidates among the K best that end, scored per generated token
        just_finished = ends & (np.arange(n_candidates) < K)
        fin = cand_scores / float(t + 1) ** length_penalty
        if early_stopping is True and is_finished.all():
            fin = fin + EXCLUDED
        if not can_improve:
            fin = fin + EXCLUDED
        fin = fin + (~just_finished) * EXCLUDED
        merged_scores = np.concatenate([finished_scores, fin])
        best = np.argsort(-merged_scores, kind="stable")[:K]
        merged = np.concatenate([finished, cand])
        merged_len = np.concatenate([finished_len, np.full(n_candidates, t + 1)])
        merged_done = np.concatenate([is_finished, just_finished])
        finished, finished_len = merged[best], merged_len[best]
        finished_scores, is_finished = merged_scores[best], merged_done[best]

        running, running_scores = next_running, next_scores
        if trace is not None:
            trace.append({"step": t, "parents": next_parent.tolist(), "tokens": next_running[:, t].tolist(),
                          "scores": next_scores.tolist(), "finished": finished_scores[is_finished].tolist(),
                          "preemptions": getattr(beams, "preemptions", 0), **_cache_state(kv)})

        # can the best running beam still beat the worst finished hypothesis?
        generated = t + 1
        best_length = max_new_tokens if early_stopping == "never" and length_penalty > 0 else generated
        best_possible = running_scores[0] / float(best_length) ** length_penalty
        worst = np.where(is_finished, finished_scores.min(), EXCLUDED)
        can_improve = can_improve and bool(np.any(best_possible > worst))
        all_done = early_stopping is True and is_finished.all()
        if not can_improve or all_done or ends.all():
            break
        logits = beams.step(next_parent, running[:, : t + 1])
    beams.finish()
    return finished[0, : finished_len[0]].tolist()
