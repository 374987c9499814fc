"""Speculative sampling: the acceptance rule that keeps the model's distribution (chapter 15).

A draft proposes x ~ q; the model, in the same pass, gives p at that position.  Keep x with
probability min(1, p(x) / q(x)); otherwise draw from the leftover r = max(0, p - q), normalised.
The token that comes out is distributed as p exactly (Leviathan et al., arXiv 2211.17192; Chen
et al., arXiv 2302.01318):

    P(out = y) = q(y) min(1, p(y)/q(y))  +  P(reject) r(y) / sum(r)
               = min(q(y), p(y))         +  (1 - sum_x min(q(x), p(x))) max(0, p(y) - q(y)) / sum(r)
               = min(q(y), p(y))         +  max(0, p(y) - q(y))                 [sum(r) = 1 - sum min(p, q)]
               = p(y).

``speculative_accept`` applies the rule to a draft of k tokens with the randomness passed in
(the uniforms), so that it is a function of its inputs; ``first_token_frequencies`` draws many
drafts and uniforms and counts the first token that comes out, the experiment the chapter runs
to see the distribution come out as p.
"""
from __future__ import annotations

import numpy as np

__all__ = ["speculative_accept", "first_token_frequencies", "acceptance_probability"]


def speculative_accept(draft_tokens, q_probs, p_probs, uniforms) -> list[int]:
    """The accepted prefix of the draft and one token more (1 to k + 1 tokens).

    draft_tokens (k,), q_probs (k, V), p_probs (k + 1, V), uniforms (k + 1,).  For i < k,
    x_i is kept while uniforms[i] < p_i(x_i) / q_i(x_i); at the first rejection the next token is
    drawn from max(0, p_i - q_i) with uniforms[k]; after k acceptances, from p_k with uniforms[k].
    """
    k = len(draft_tokens)
    out: list[int] = []
    weights = p_probs[k]                                   # all accepted: one more from p_k
    for i in range(k):
        x = int(draft_tokens[i])
        if uniforms[i] >= p_probs[i, x] / q_probs[i, x]:
            weights = np.maximum(0.0, p_probs[i] - q_probs[i])    # the leftover of p over q
            break
        out.append(x)
    # inverse-CDF sampling of the (unnormalised) weights with uniforms[k]
    return out + [int(np.flatnonzero(np.cumsum(weights) > uniforms[k] * np.sum(weights))[0])]


def acceptance_probability(q: np.ndarray, p: np.ndarray) -> float:
    """The chance that a draft token x ~ q is kept: sum_x q(x) min(1, p(x)/q(x)) = sum_x min(q, p)."""
    return float(np.minimum(q, p).sum())


def first_token_frequencies(q: np.ndarray, p: np.ndarray, n: int, draw: int, accept=None) -> np.ndarray:
    """Draw ``n`` one-token drafts x ~ q and uniforms, apply the rule (``accept``, by default
    ``speculative_accept``), and return how often each token came out first: (V,) frequencies
    that tend to p as n grows.  ``draw`` numbers the random draws (the same draws every run)."""
    accept = accept or speculative_accept
    rng = np.random.default_rng(draw)
    drafts = rng.choice(len(q), size=n, p=q)
    uniforms = rng.random((n, 2))
    counts = np.zeros(len(q))
    for x, u in zip(drafts, uniforms):
        counts[accept(np.array([x]), q[None, :], np.vstack([p, p]), u)[0]] += 1
    return counts / n
