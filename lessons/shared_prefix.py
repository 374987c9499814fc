"""Every policy at a budget, from the full cache's prefix: exact, and a fraction of the work.

A cache of budget B evicts nothing before it holds B positions, so under every policy of chapter
14 the queries 0 .. B - 1 see what the full cache shows them, and so do their keys and values in
every layer.  One full pass over the text (``full_pass``) keeps each layer's queries, keys and
values; a policy then recomputes only the rows p >= start (start <= B), from the embeddings up,
each layer's attention reading the full pass's keys and values below ``start`` and the rows' own
above (``tail_logits``)::

    row p, layer l:  attends to  K_l[j], V_l[j] for the j <= p the policy lets it see,
                     K_l[j] from the full pass for j < start, from the recomputed rows for j >= start

Several policies recompute the same rows, so they run together, stacked as a batch of rows through
each layer's matrices (the same arithmetic, fewer and larger calls).  What a policy lets a row
see, it says per layer through ``visible(layer, rows, full, q, K)``, a (G, n, T) mask per
key/value head:

- a rule about positions (``PositionRule``: a window, sinks and a window) is the same mask in
  every layer; one that hides a key from a query before ``start`` is refused (its rows there
  are not the full cache's: start earlier);
- an evicting cache (``Evicting``: H2O, TOVA) decides token by token from the attention it has
  seen, exactly as ``kvcache.h2o`` does, but from the layer's scores computed for all rows at
  once: within a layer, the queries and keys do not depend on what the layer keeps, only the
  eviction's bookkeeping is sequential;
- SnapKV (``SnapKV``, arXiv 2404.14469) chooses once, at the end of the prompt, from the
  attention of the prompt's last queries, then keeps every new token.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from kvcache.linear import linear
from kvcache.norm import rms_norm, swiglu
from kvcache.rope import apply_rope

__all__ = ["FullPass", "full_pass", "tail_logits", "PositionRule", "Evicting", "SnapKV", "QUERY_BLOCK"]

QUERY_BLOCK = 128          # queries per block of the full pass's attention: bounds its (G, r, m, T) scores


def _softmax_rows(s: np.ndarray) -> np.ndarray:
    """Softmax over the last axis, in place: exp(s - max) / sum (-inf gives 0)."""
    s -= s.max(axis=-1, keepdims=True)
    np.exp(s, out=s)
    s /= s.sum(axis=-1, keepdims=True)
    return s


def _scores(q: np.ndarray, K: np.ndarray) -> np.ndarray:
    """q (n, H, d), K (T, G, d) -> (G, r, n, T): q_h . k_j / sqrt(d), head h = g r + i reading group g
    (both operands made contiguous first: numpy hands a strided product to a slow loop, not BLAS)."""
    n, H, d = q.shape
    G = K.shape[1]
    qg = np.ascontiguousarray((q * q.dtype.type(1 / math.sqrt(d))).reshape(n, G, H // G, d).transpose(1, 2, 0, 3))
    Kt = np.ascontiguousarray(K.transpose(1, 2, 0))                     # (G, d, T)
    return (qg.reshape(G, -1, d) @ Kt).reshape(G, H // G, n, len(K))


def _weighted_values(w: np.ndarray, V: np.ndarray) -> np.ndarray:
    """w (G, r, n, T), V (T, G, d) -> (n, H, d): each head's weighted sum of its group's values."""
    G, r, n, T = w.shape
    Vg = np.ascontiguousarray(V.transpose(1, 0, 2))                     # (G, T, d)
    return (w.reshape(G, r * n, T) @ Vg).reshape(G, r, n, -1).transpose(2, 0, 1, 3).reshape(n, G * r, -1)


def attention(q: np.ndarray, K: np.ndarray, V: np.ndarray, visible: np.ndarray) -> np.ndarray:
    """Masked attention: q (n, H, d), K, V (T, G, d), visible (G or 1, n, T) -> (n, H, d),
    softmax over the visible keys of q_h . k_j / sqrt(d), then the weighted sum of values."""
    n, H, d = q.shape
    G = K.shape[1]
    s = _scores(q, K)                                                   # (G, r, n, T)
    np.copyto(s, -np.inf, where=~visible[:, None])
    return _weighted_values(_softmax_rows(s), V)


@dataclass
class FullPass:
    """One pass of the full cache over ``ids``: each layer's rotated queries (T, H, d), keys and
    values (T, G, d), the final hidden states (T, D), the weights of every layer and head on
    the first ``first`` positions (L, H, T, first), and the scores of a filled evicting cache."""

    ids: np.ndarray
    queries: list
    keys: list
    values: list
    hidden: np.ndarray
    on_first: np.ndarray
    filled: list           # per layer, {("sum" | "last", B): (G, B)}: see ``_causal_blocks``

    def logits(self, model, rows) -> np.ndarray:
        """The full cache's logits at ``rows`` (a slice or indices) -> (n, V)."""
        return model._head(self.hidden[rows])


def _project(model, w, x, cos, sin):
    """One layer's rotated queries (n, H, d), keys and values (n, G, d) of the hidden states x."""
    cfg = model.config
    n = len(x)
    H, G, d = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
    qkv = linear(rms_norm(x, w.attn_norm, cfg.rms_norm_eps), w.wqkv)
    qk = apply_rope(qkv[:, : cfg.q_width + cfg.kv_width].reshape(n, H + G, d), cos, sin)
    return qk[:, :H], qk[:, H:], qkv[:, cfg.q_width + cfg.kv_width:].reshape(n, G, d)


def _finish(model, w, x, o):
    """The rest of a layer after attention: x + o W_o, then the MLP's residual (in place on x)."""
    cfg = model.config
    x += linear(o.reshape(len(x), -1), w.wo)
    x += swiglu(rms_norm(x, w.mlp_norm, cfg.rms_norm_eps), w.w_gate_up, w.w_down)
    return x


def _causal_blocks(q, K, V, first: int, fills=()):
    """Causal attention of T queries to their own T keys, QUERY_BLOCK queries at a time (a block's
    scores are (G, r, m, T): small enough to stay in cache, where one (H, T, T) array would be
    hundreds of MB of fresh pages) -> out (T, H, d), the weights on the first ``first`` positions
    (H, T, first), and for each budget B of ``fills`` the scores an evicting cache holds when it
    fills, summed over the r heads of a group: ("sum", B) the weights of queries 0 .. B - 1,
    ("last", B) those of query B - 1 alone, each (G, B)."""
    T, H, d = q.shape
    out = np.empty_like(q)
    on_first = np.empty((H, T, first), q.dtype)
    total = np.zeros((K.shape[1], T))                                   # summed weights of the queries so far
    filled = {}
    for lo in range(0, T, QUERY_BLOCK):
        hi = min(T, lo + QUERY_BLOCK)
        s = _scores(q[lo:hi], K[:hi])                                   # (G, r, m, hi)
        np.copyto(s, -np.inf, where=np.arange(hi)[None, :] > np.arange(lo, hi)[:, None])
        w = _softmax_rows(s)
        on_first[:, lo:hi] = w[..., :first].reshape(H, hi - lo, first)
        out[lo:hi] = _weighted_values(w, V[:hi])
        per_query = w.sum(axis=1, dtype=np.float64)                     # (G, m, hi)
        for B in (B for B in fills if lo < B <= hi):
            filled["sum", B] = total[:, :B] + per_query[:, : B - lo, :B].sum(axis=1)
            filled["last", B] = per_query[:, B - 1 - lo, :B]
        total[:, :hi] += per_query.sum(axis=1)
    return out, on_first, filled


def full_pass(model, ids, first: int = 4, fills=()) -> FullPass:
    """The full cache's pass over ``ids`` (teacher-forced), keeping what ``tail_logits`` reads;
    ``fills``: the budgets an ``Evicting`` policy will be run at."""
    ids = model.check_tokens(ids)
    cos, sin = model._rope(np.arange(len(ids)))
    x = model._embed_rows(ids)
    queries, keys, values, on_first, filled = [], [], [], [], []
    for w in model.layers:
        q, k, v = _project(model, w, x, cos, sin)
        o, weights, scores = _causal_blocks(q, k, v, first, fills)
        queries.append(q)
        keys.append(k)
        values.append(v)
        on_first.append(weights)
        filled.append(scores)
        x = _finish(model, w, x, o)
    return FullPass(ids, queries, keys, values, x, np.array(on_first), filled)


# ---------------------------------------------------------------------- what a row may see


@dataclass
class PositionRule:
    """A policy that is a mask: ``rule(p, j)`` (arrays broadcast) says whether the query at p sees
    the key at j <= p; the same in every layer and head."""

    name: str
    rule: object

    def visible(self, layer: int, rows: np.ndarray, full: FullPass, q, K) -> np.ndarray:
        j = np.arange(len(K))[None, :]
        p = rows[:, None]
        return ((j <= p) & self.rule(p, j))[None]

    def hides_before(self, start: int) -> bool:
        """Whether a query p < start is kept from a key j <= p: then its rows are not the full
        cache's, and recomputing from ``start`` would not be exact."""
        p, j = np.arange(start)[:, None], np.arange(start)[None, :]
        return bool(((j <= p) & ~np.asarray(self.rule(p, j), bool)).any())


@dataclass
class Evicting:
    """The engine's ``cache="h2o"`` rule, replayed on one layer's scores (``kvcache.h2o``): a
    budget of B positions per key/value head, the ``recent`` newest and ``sinks`` first always
    kept; when token p arrives, the kept position of smallest score among the others leaves (the
    latest of equal ones); then p's weights are added to the scores (``score="sum"``, H2O) or
    replace them (``"last"``, TOVA).  Rows start at the budget or before: before it nothing leaves."""

    name: str
    budget: int
    recent: int
    sinks: int = 0
    score: str = "sum"

    def _first_scores(self, layer: int, full: FullPass) -> np.ndarray:
        """(G, B): the scores when the cache fills, from the full pass: the summed weights of
        queries 0 .. B - 1 of each group (``"sum"``) or those of query B - 1 alone (``"last"``)."""
        key = (self.score, self.budget)
        if key not in full.filled[layer]:
            raise ValueError(f"the full pass kept no scores at budget {self.budget}: pass it in fills")
        return full.filled[layer][key]

    def visible(self, layer: int, rows: np.ndarray, full: FullPass, q, K) -> np.ndarray:
        if rows[0] > self.budget:
            raise ValueError(f"an evicting cache's rows start at its budget {self.budget} or before, not {rows[0]}")
        G, T = K.shape[1], len(K)
        acc = np.zeros((G, T))
        acc[:, : self.budget] = self._first_scores(layer, full)
        kept = np.zeros((G, T), bool)
        kept[:, : self.budget] = True
        s_all = _scores(q, K)                                           # (G, r, n, T)
        seen = np.empty((G, len(rows), T), bool)
        heads = np.arange(G)
        early = int(np.searchsorted(rows, self.budget))                # rows before the cache is full
        seen[:, :early] = np.arange(T)[None, None, :] <= rows[:early, None]
        for i, p in enumerate(rows[early:], early):
            self._evict(acc, kept, heads, int(p))
            w = s_all[:, :, i, : p + 1].copy()
            np.copyto(w, -np.inf, where=~kept[:, None, : p + 1])
            w = _softmax_rows(w).sum(axis=1)                            # (G, p + 1)
            if self.score == "sum":
                acc[:, : p + 1] += w
            else:
                acc[:, : p + 1] = w
            seen[:, i] = kept
        return seen

    def _evict(self, acc, kept, heads, p: int) -> None:
        """Token p arrives at a full cache: each head drops its kept, unprotected position of
        smallest score (the latest of equal ones), and p takes its place with score 0."""
        j = np.arange(p)
        candidate = kept[:, :p] & (j >= self.sinks) & (j <= p - self.recent)
        key = np.where(candidate, acc[:, :p], np.inf)
        lowest = candidate & (key == key.min(axis=1, keepdims=True))
        victim = p - 1 - np.argmax(lowest[:, ::-1], axis=1)
        kept[heads, victim] = False
        acc[heads, victim] = 0.0
        kept[:, p] = True
        acc[:, p] = 0.0


def pooled_window_scores(full: FullPass, layer: int, prompt: int, window: int, kernel: int) -> np.ndarray:
    """SnapKV's vote (G, prompt - window): the weights the prompt's last ``window`` queries give
    each earlier position, summed over those queries and the r heads of a group, then averaged
    over ``kernel`` neighbours (zeros past the ends, as a padded average pool does)."""
    q = full.queries[layer][prompt - window:prompt]
    s = _scores(q, full.keys[layer][:prompt])                           # (G, r, window, prompt)
    p = np.arange(prompt - window, prompt)[:, None]
    np.copyto(s, -np.inf, where=np.arange(prompt)[None, :] > p)
    vote = _softmax_rows(s)[..., : prompt - window].sum(axis=(1, 2), dtype=np.float64)
    padded = np.pad(vote, ((0, 0), (kernel // 2, kernel // 2)))
    return np.stack([np.convolve(row, np.ones(kernel) / kernel, mode="valid") for row in padded])


@dataclass
class SnapKV:
    """SnapKV's cache: the full prompt of ``prompt`` tokens is read (prefill), then each layer's
    key/value head keeps the ``window`` last prompt positions (the observation window) and the
    ``budget - window`` earlier ones of highest pooled vote (``pooled_window_scores``; ties to the
    earlier position); every token after the prompt is kept.  Rows start at the prompt's end."""

    name: str
    budget: int
    prompt: int
    window: int = 32
    kernel: int = 5

    def kept_in_prompt(self, layer: int, full: FullPass) -> np.ndarray:
        """(G, prompt) bool: the prompt positions each key/value head keeps."""
        vote = pooled_window_scores(full, layer, self.prompt, self.window, self.kernel)
        chosen = np.argsort(-vote, axis=1, kind="stable")[:, : self.budget - self.window]
        kept = np.zeros((len(vote), self.prompt), bool)
        np.put_along_axis(kept, chosen, True, axis=1)
        kept[:, self.prompt - self.window:] = True
        return kept

    def visible(self, layer: int, rows: np.ndarray, full: FullPass, q, K) -> np.ndarray:
        if rows[0] != self.prompt:
            raise ValueError(f"SnapKV's rows start at the end of its prompt {self.prompt}, not {rows[0]}")
        T = len(K)
        seen = np.broadcast_to(np.arange(T)[None, :] <= rows[:, None], (K.shape[1], len(rows), T)).copy()
        seen[:, :, : self.prompt] &= self.kept_in_prompt(layer, full)[:, None]
        return seen


# ---------------------------------------------------------------------- the rows recomputed


def tail_logits(model, full: FullPass, start: int, stop: int, policies, scored_from: int | None = None):
    """The logits (R, stop - scored_from, V) at positions scored_from .. stop - 1 (default: start)
    of the R ``policies``, each recomputing rows start .. stop - 1 of ``full.ids`` through every
    layer, stacked as R times as many rows, and reading the full pass's keys and values below
    ``start`` (module doc).  Exact when no policy hides from a row below ``start`` anything
    the full cache shows it."""
    scored_from = start if scored_from is None else scored_from
    if not 0 < start <= scored_from < stop <= len(full.ids):
        raise ValueError(f"need 0 < start ({start}) <= scored_from ({scored_from}) < stop ({stop}) "
                         f"<= the text's {len(full.ids)} tokens")
    hiding = [p.name for p in policies if getattr(p, "hides_before", lambda start: False)(start)]
    if hiding:
        raise ValueError(f"{', '.join(hiding)} hide keys from queries before row {start}: start earlier")
    R, n, rows = len(policies), stop - start, np.arange(start, stop)
    cos, sin = model._rope(rows)
    x = np.concatenate([model._embed_rows(full.ids[start:stop])] * R)      # (R n, D)
    for layer, w in enumerate(model.layers):
        q, k, v = _project(model, w, x, np.concatenate([cos] * R), np.concatenate([sin] * R))
        o = np.empty_like(q)
        for i, policy in enumerate(policies):
            part = slice(i * n, (i + 1) * n)
            K = np.concatenate([full.keys[layer][:start], k[part]])
            V = np.concatenate([full.values[layer][:start], v[part]])
            o[part] = attention(q[part], K, V, policy.visible(layer, rows, full, q[part], K))
        x = _finish(model, w, x, o)
    keep = (np.arange(R)[:, None] * n + np.arange(scored_from - start, n)[None]).ravel()
    return model._head(x[keep]).reshape(R, stop - scored_from, -1)
