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
"""
from __future__ import annotations

import numbers
import time

import numpy as np

from .cache import KVCache

__all__ = ["greedy", "beam_search", "log_softmax", "check_prompts"]

EXCLUDED = -1.0e9      # the score transformers gives a beam that must not be chosen


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """log softmax over the last axis, in float64: z - max - log(sum(exp(z - max)))."""
    z = np.asarray(logits, dtype=np.float64)
    z = z - z.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


# ---------------------------------------------------------------------- checking the arguments


def _check_count(value, name: str, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    return int(value)


def _eos_set(model, eos_token_id) -> np.ndarray:
    """EOS ids as an array (empty for None); each must be in the vocabulary."""
    if eos_token_id is None:
        return np.zeros(0, np.int64)
    ids = [eos_token_id] if isinstance(eos_token_id, numbers.Integral) and not isinstance(eos_token_id, bool) \
        else eos_token_id
    try:
        arr = model.check_tokens(list(ids), "eos_token_id")
    except TypeError:
        raise ValueError(f"eos_token_id must be a token id or a list of them, got {eos_token_id!r}") from None
    if len(arr) == 0:
        raise ValueError("eos_token_id is an empty list (use None for no EOS)")
    return arr


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
        max_len = _check_count(max_len, "max_len", 1)
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
    max_new_tokens = _check_count(max_new_tokens, "max_new_tokens", 0)
    eos = _eos_set(model, eos_token_id)
    arrays, L_max = check_prompts(model, prompts, max_new_tokens, max_len)
    if prefill not in ("ragged", "padded"):
        raise ValueError(f"prefill must be 'ragged' or 'padded', got {prefill!r}")
    out: list[list[int]] = [[] for _ in arrays]
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


# ---------------------------------------------------------------------- beam search


def _check_beam_options(num_beams, length_penalty, early_stopping):
    num_beams = _check_count(num_beams, "num_beams", 1)
    if isinstance(length_penalty, bool) or not isinstance(length_penalty, numbers.Real) \
            or not np.isfinite(length_penalty):
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
    max_new_tokens = _check_count(max_new_tokens, "max_new_tokens", 0)
    eos = _eos_set(model, eos_token_id)
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
    kv = model.new_cache(1, L_max, kind=cache, dtype=cache_dtype, capacity=K, **cache_options)
    logits = model.prefill([prompt_ids], kv)                           # (1, V): the prompt once

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
                          **_cache_state(kv)})

        # can the best running beam still beat the worst finished hypothesis?
        generated = t + 1
        best_length = max_new_tokens if early_stopping == "never" and length_penalty > 0 else generated
        best_possible = running_scores[0] / float(best_length) ** length_penalty
        worst = np.where(is_finished, finished_scores.min(), EXCLUDED)
        can_improve = can_improve and bool(np.any(best_possible > worst))
        all_done = early_stopping is True and is_finished.all()
        if not can_improve or all_done or ends.all():
            break
        # every beam holds the same prompt at the first step: the first reorder expands row 0
        kv.reorder(next_parent if kv.batch == K else np.zeros(K, np.int64))
        logits = model.decode(running[:, t], kv)
    return finished[0, : finished_len[0]].tolist()
