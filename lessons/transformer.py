"""A tiny decoder-only transformer around the decode step (the appendix).

Small enough to read in one sitting and to run in milliseconds; untrained (random weights with a
fixed seed), so the words it picks mean nothing.  What it shows is where each piece sits:

    token ids -> embedding rows + positional encodings
    n_layers times:
        x = x + W_O [head_1(LN(x)) ... head_H(LN(x))]     multi-head attention, residual
        x = x + FFN(LN(x))                                  feed-forward, residual
    LN -> final linear layer (logits, one per word) -> softmax (probabilities)

Each head is ``lessons.attention``: ``prefill_with_cache`` for a whole prompt and ``attend_step``
(Chapter 2's decode step, with its KV cache) for one new token.  The normalisation comes before
each sub-layer ("pre-norm", as in most decoder-only models); the original Transformer put it
after the residual.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .attention import attend_step, prefill_with_cache, softmax

__all__ = ["TinyConfig", "VOCAB", "positional_encoding", "layer_norm", "init_model", "forward",
           "decode_step", "prefill", "greedy", "beam_search", "sequence_logprob", "softmax"]

VOCAB = ("<eos>", "the", "cache", "keeps", "keys", "and", "values", "for", "every", "token")


@dataclass(frozen=True)
class TinyConfig:
    """Sizes of the tiny model: D = d_model, H = n_heads heads of width d = head_dim (H d = D here),
    a feed-forward hidden layer of d_ff, positional encodings for max_len positions."""

    vocab_size: int = len(VOCAB)
    d_model: int = 16
    n_heads: int = 2
    head_dim: int = 8
    n_layers: int = 2
    d_ff: int = 32
    max_len: int = 64


def positional_encoding(n_positions: int, d_model: int) -> np.ndarray:
    """Sinusoidal positional encodings, (n_positions, d_model).

    PE[pos, 2i] = sin(pos / 10000^(2i / d_model)),  PE[pos, 2i + 1] = cos(same angle):
    each pair of columns turns at its own rate, fast in the first columns, slow in the last.
    """
    pos = np.arange(n_positions)[:, None]
    rate = 1.0 / 10000 ** (np.arange(0, d_model, 2) / d_model)
    pe = np.zeros((n_positions, d_model))
    pe[:, 0::2] = np.sin(pos * rate)
    pe[:, 1::2] = np.cos(pos * rate)
    return pe


def layer_norm(x: np.ndarray, gain: np.ndarray, bias: np.ndarray, eps: float = 1e-5) -> np.ndarray:
    """Normalise each row to mean 0 and variance 1, then scale by ``gain`` and shift by ``bias``."""
    mu = x.mean(axis=-1, keepdims=True)
    var = x.var(axis=-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * gain + bias


def init_model(cfg: TinyConfig = TinyConfig(), seed: int = 0) -> dict:
    """Random weights: N(0, 1/fan_in) matrices, layer-norm gains of 1, zero biases.

    The output layer's weights are 3 times larger than that, which spreads out the untrained
    model's next-word probabilities (logits of spread about 3 rather than 1).
    """
    rng = np.random.default_rng(seed)
    D, d, H, F = cfg.d_model, cfg.head_dim, cfg.n_heads, cfg.d_ff

    def mat(rows, cols, scale=1.0):
        return rng.normal(0.0, scale / math.sqrt(rows), size=(rows, cols))

    layers = []
    for _ in range(cfg.n_layers):
        layers.append({
            "heads": [{"Wq": mat(D, d), "Wk": mat(D, d), "Wv": mat(D, d)} for _ in range(H)],
            "Wo": mat(H * d, D),
            "ln1": (np.ones(D), np.zeros(D)), "ln2": (np.ones(D), np.zeros(D)),
            "W1": mat(D, F), "b1": np.zeros(F), "W2": mat(F, D), "b2": np.zeros(D),
        })
    return {"cfg": cfg, "embed": rng.normal(0.0, 1.0, size=(cfg.vocab_size, D)),
            "pe": positional_encoding(cfg.max_len, D), "layers": layers,
            "ln_f": (np.ones(D), np.zeros(D)), "W_out": mat(D, cfg.vocab_size, scale=3.0)}


def _ffn(x: np.ndarray, layer: dict) -> np.ndarray:
    """The feed-forward block, token by token: ReLU(x W1 + b1) W2 + b2, (..., D) -> (..., D)."""
    return np.maximum(x @ layer["W1"] + layer["b1"], 0.0) @ layer["W2"] + layer["b2"]


def prefill(tokens, model: dict) -> tuple[np.ndarray, list]:
    """Run a whole prompt at once, with the causal mask.

    Returns the logits of every position (T, vocab) and the KV caches it leaves behind:
    ``caches[layer][head] = {"k": (T, d), "v": (T, d)}``.
    """
    tokens = list(tokens)
    x = model["embed"][tokens] + model["pe"][: len(tokens)]
    caches = []
    for layer in model["layers"]:
        h = layer_norm(x, *layer["ln1"])
        outs, layer_caches = [], []
        for p in layer["heads"]:
            out, cache = prefill_with_cache(h, p)     # (T, d) and {"k": (T, d), "v": (T, d)}
            outs.append(out)
            layer_caches.append(cache)
        x = x + np.concatenate(outs, axis=-1) @ layer["Wo"]
        x = x + _ffn(layer_norm(x, *layer["ln2"]), layer)
        caches.append(layer_caches)
    logits = layer_norm(x, *model["ln_f"]) @ model["W_out"]
    return logits, caches


def forward(tokens, model: dict) -> np.ndarray:
    """Logits of every position of ``tokens`` (T, vocab): the whole sequence, no cache."""
    return prefill(tokens, model)[0]


def decode_step(token: int, position: int, caches: list, model: dict) -> tuple[np.ndarray, list]:
    """One new token through the whole model, using and extending the caches.

    In every layer, every head runs Chapter 2's ``attend_step`` on the new token's normalised
    hidden state.  Returns the logits (vocab,) and new caches; the input caches are unchanged.
    """
    x = model["embed"][token] + model["pe"][position]
    new_caches = []
    for layer, layer_caches in zip(model["layers"], caches):
        h = layer_norm(x, *layer["ln1"])
        outs, updated = [], []
        for p, cache in zip(layer["heads"], layer_caches):
            out, cache = attend_step(h, cache, p)
            outs.append(out)
            updated.append(cache)
        x = x + np.concatenate(outs) @ layer["Wo"]
        x = x + _ffn(layer_norm(x, *layer["ln2"]), layer)
        new_caches.append(updated)
    return layer_norm(x, *model["ln_f"]) @ model["W_out"], new_caches


def greedy(prompt, n_new: int, model: dict, eos: int = 0) -> list[int]:
    """Greedy decoding: prefill the prompt, then take the most likely word, ``n_new`` times or to <eos>."""
    logits, caches = prefill(prompt, model)
    out = list(prompt)
    nxt = int(np.argmax(logits[-1]))
    for _ in range(n_new):
        out.append(nxt)
        if nxt == eos:
            break
        logits_t, caches = decode_step(nxt, len(out) - 1, caches, model)
        nxt = int(np.argmax(logits_t))
    return out


def sequence_logprob(tokens, n_prompt: int, model: dict) -> float:
    """Sum of the log-probabilities of the generated tokens (those after the prompt)."""
    logp = np.log(softmax(forward(tokens, model)))
    return float(sum(logp[i - 1, tokens[i]] for i in range(n_prompt, len(tokens))))


def beam_search(prompt, n_new: int, model: dict, beam_width: int = 2, eos: int = 0) -> list[tuple[list[int], float]]:
    """Beam search: keep the ``beam_width`` best partial sequences by total log-probability.

    Each beam carries its own caches: ``decode_step`` returns new caches and leaves its input
    alone, so two beams that share a prefix can both extend it (a serving engine instead reorders
    one batched cache by beam index every step).  Returns the finished and unfinished beams, best
    first.
    """
    logits, caches = prefill(prompt, model)
    beams = [(list(prompt), 0.0, np.log(softmax(logits[-1])), caches)]
    finished = []
    for _ in range(n_new):
        candidates = []
        for seq, score, logp, cch in beams:
            for w in np.argsort(logp)[::-1][:beam_width]:
                candidates.append((seq + [int(w)], score + float(logp[w]), cch))
        candidates.sort(key=lambda c: -c[1])
        beams = []
        for seq, score, cch in candidates:
            if seq[-1] == eos:
                finished.append((seq, score))
            else:
                logits_t, new_cch = decode_step(seq[-1], len(seq) - 1, cch, model)
                beams.append((seq, score, np.log(softmax(logits_t)), new_cch))
            if len(beams) == beam_width:
                break
        if not beams:
            break
    finished += [(seq, score) for seq, score, _, _ in beams]
    return sorted(finished, key=lambda f: -f[1])
