"""One measurement harness for every smaller cache of Part V: a changed cache judged against the
full float32 cache on the fixed text (``lessons.reference_text``), teacher-forced.

Chapter 4 judged the cache's number formats this way (``lessons.precision``); this module keeps
its measures and adds what a smaller cache is for, the bytes it keeps.  At every position t of
the text the model has read the true tokens 0 .. t, and its next-token distribution p_t is
compared with the full float32 cache's r_t::

    mean KL         (1 / (T-1)) sum_t KL(r_t || p_t),  KL(r || p) = sum_v r(v) log(r(v) / p(v))
    top-1 agreement share of positions t where argmax p_t = argmax r_t
    perplexity      exp(-(1 / (T-1)) sum_t log p_t(token t+1))

over the T - 1 positions that have a next token.  KL is 0 and top-1 is 1 exactly when nothing
changed; perplexity is the text's own figure (lower: less surprised), to read beside the full
cache's.

Cache bytes per token count **everything** a cache keeps for one more token, in every layer:
keys and values, latent vectors, codes and their scales or offsets, a share of a full-precision
window: ``kept_bytes_per_token`` sums ``Kept`` parts, each a count of numbers per token and
layer (a fraction where a part is shared by a group of tokens) and a width in bits.
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from .precision import kl_divergence, log_softmax, perplexity, top1_agreement

__all__ = ["Kept", "kept_bytes_per_token", "full_cache", "Judgement", "judge", "judge_logits", "judge_rows"]


@dataclass(frozen=True)
class Kept:
    """One part of what a cache keeps per token and layer: ``numbers`` of ``bits`` bits each."""

    what: str
    numbers: Fraction | int
    bits: int


def kept_bytes_per_token(n_layers: int, parts) -> Fraction:
    """Bytes one more token adds to the cache: n_layers x sum over parts of numbers x bits / 8
    (a Fraction: a part shared by several tokens may leave a fraction of a byte)."""
    if n_layers < 1:
        raise ValueError(f"n_layers must be at least 1, got {n_layers}")
    total = Fraction(0)
    for part in parts:
        if part.numbers < 0 or part.bits < 1:
            raise ValueError(f"{part.what}: numbers must be >= 0 and bits >= 1, got {part.numbers}, {part.bits}")
        total += Fraction(part.numbers) * part.bits / 8
    return n_layers * total


def full_cache(n_kv_heads: int, head_dim: int, bits: int = 32) -> tuple[Kept, Kept]:
    """The parts of an ordinary cache: a key and a value of ``head_dim`` numbers per key/value head."""
    return (Kept("keys", n_kv_heads * head_dim, bits), Kept("values", n_kv_heads * head_dim, bits))


@dataclass(frozen=True)
class Judgement:
    """A cache judged by the harness against the full float32 cache."""

    name: str
    bytes_per_token: float
    kl_mean: float
    top1: float               # share of positions, 0 .. 1
    perplexity: float
    positions: int            # positions judged (tokens of the text - 1)


def judge_logits(name: str, reference: np.ndarray, logits: np.ndarray, ids, bytes_per_token) -> Judgement:
    """The measures of ``logits`` (T, V) against ``reference`` (T, V), the full float32 cache's
    logits on the same tokens ``ids`` (T,): row t predicts ids[t + 1], so the last row has
    nothing to predict and is left out."""
    ids = np.asarray(ids)
    if reference.shape != logits.shape or reference.shape[0] != len(ids) or len(ids) < 2:
        raise ValueError(f"logits {logits.shape} and reference {reference.shape} must both be "
                         f"(T, V) for the {len(ids)} tokens, with T >= 2")
    kl = kl_divergence(reference[:-1], logits[:-1])
    return Judgement(name, float(bytes_per_token), float(kl.mean()),
                     top1_agreement(reference[:-1], logits[:-1]), perplexity(logits, ids), len(ids) - 1)


def judge_rows(names, reference: np.ndarray, rows: np.ndarray, ids, bytes_per_token,
               chunk: int = 16) -> list[Judgement]:
    """``judge_logits`` of every row: rows (n, T, V), names and bytes_per_token one per row.  The
    same measures (KL = sum_v r (log r - log p), top-1, perplexity from log p_t(token t+1)), with
    the reference's log-probabilities taken once for all the rows, and each row's ``chunk``
    positions at a time, in float64 (arrays of a few megabytes, which the allocator reuses, where a
    whole row's would be fresh memory, page by page, for every row)."""
    ids = np.asarray(ids)
    rows = np.asarray(rows)
    if rows.ndim != 3 or rows.shape[1:] != reference.shape or reference.shape[0] != len(ids) or len(ids) < 2:
        raise ValueError(f"rows {rows.shape} must be (n, T, V) and reference {reference.shape} (T, V) for the "
                         f"{len(ids)} tokens, with T >= 2")
    if not len(names) == len(bytes_per_token) == len(rows):
        raise ValueError(f"{len(rows)} rows need as many names ({len(names)}) and byte counts ({len(bytes_per_token)})")
    n = len(ids) - 1                                            # positions with a next token
    log_r = log_softmax(reference[:n])
    r = np.exp(log_r)
    best = np.argmax(reference[:n], axis=-1)
    judged = []
    for name, logits, kept in zip(names, rows, bytes_per_token):
        kl, agree, nll = np.empty(n), np.empty(n, bool), np.empty(n)
        for lo in range(0, n, chunk):
            at = slice(lo, min(lo + chunk, n))
            log_p = log_softmax(logits[at])
            kl[at] = np.maximum((r[at] * (log_r[at] - log_p)).sum(axis=-1), 0.0)
            agree[at] = np.argmax(logits[at], axis=-1) == best[at]
            nll[at] = -log_p[np.arange(at.stop - lo), ids[lo + 1: at.stop + 1]]
        judged.append(Judgement(name, float(kept), float(kl.mean()), float(agree.mean()),
                                float(np.exp(nll.mean())), n))
    return judged


def judge(name: str, model, ids, reference: np.ndarray, parts) -> Judgement:
    """Run ``model`` over the text ``ids`` (every position from the true tokens before it) and
    judge its logits against ``reference``; its cache keeps ``parts`` in each of its layers."""
    bytes_per_token = kept_bytes_per_token(model.config.num_hidden_layers, parts)
    return judge_logits(name, reference, model.logits(ids), ids, bytes_per_token)
