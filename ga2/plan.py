"""The memory plan of the attention programs: where every tensor lives, in words.

One head, model width DM = head width D = 16, up to MAX_TOKENS = 32 tokens.  The
program builder (``ga2.attn``) writes its instructions against these addresses, and
the stage-wise check (``ga2.checks``) reads the scratchpad at them: the plan is the
one thing those two share (where to look, not how the values were computed).

EXT (external memory)::

    X        0      L x DM     int8 hidden states, one row per token
    Wq       512    DM x D     int8 weights (Wq, Wk, Wv contiguous: one LD brings all three)
    Wk       768    DM x D
    Wv       1024   DM x D
    KC       2048   L x D      the key cache: row t is token t's int8 key
    VC       2560   L x D      the value cache
    OUT      3072   D          the int8 output of the step

SPAD (scratchpad)::

    X 0, Wq 512, Wk 768, Wv 1024      copies of the EXT tensors
    ACC 1280 (32 x 16 int32)          projections of all tokens (recompute)
    KC 1792, VC 2304 (32 x 16 each)   the caches, with the new row appended
    Q 2816 / Q8 2832                  the new query: int32 / int8
    S 2848 / S8 2880                  scores: int32 / Q4.4
    P 2912                            softmax probabilities, Q0.16
    W 2944                            attention weights, int8 (127 = 1.0)
    O 2976 / O8 2992                  output: int32 / int8
    KN 3008, VN 3024                  the new token's key and value, int32
"""
from __future__ import annotations

__all__ = [
    "DM", "D", "MAX_TOKENS",
    "EX_X", "EX_WQ", "EX_WK", "EX_WV", "EX_KC", "EX_VC", "EX_OUT",
    "SP_X", "SP_WQ", "SP_WK", "SP_WV", "SP_ACC", "SP_KC", "SP_VC", "SP_Q", "SP_Q8", "SP_S", "SP_S8",
    "SP_P", "SP_W", "SP_O", "SP_O8", "SP_KN", "SP_VN",
    "EXT_PLAN", "SPAD_PLAN",
]

DM = 16          # model width: the size of a hidden state
D = 16           # head width: the size of q, k, v
MAX_TOKENS = 32  # the scratchpad holds the caches of this many tokens

EX_X, EX_WQ, EX_WK, EX_WV = 0, 512, 768, 1024
EX_KC, EX_VC, EX_OUT = 2048, 2560, 3072

SP_X, SP_WQ, SP_WK, SP_WV = 0, 512, 768, 1024
SP_ACC, SP_KC, SP_VC = 1280, 1792, 2304
SP_Q, SP_Q8, SP_S, SP_S8, SP_P, SP_W = 2816, 2832, 2848, 2880, 2912, 2944
SP_O, SP_O8, SP_KN, SP_VN = 2976, 2992, 3008, 3024

#: (name, address, words reserved, what it holds), for figures and for checking the plan.
EXT_PLAN = (
    ("X", EX_X, MAX_TOKENS * DM, "hidden states, int8"),
    ("Wq", EX_WQ, DM * D, "query weights, int8"),
    ("Wk", EX_WK, DM * D, "key weights, int8"),
    ("Wv", EX_WV, DM * D, "value weights, int8"),
    ("KC", EX_KC, MAX_TOKENS * D, "key cache, int8"),
    ("VC", EX_VC, MAX_TOKENS * D, "value cache, int8"),
    ("OUT", EX_OUT, D, "output, int8"),
)
SPAD_PLAN = (
    ("X", SP_X, MAX_TOKENS * DM, "hidden states, int8"),
    ("Wq", SP_WQ, DM * D, "query weights, int8"),
    ("Wk", SP_WK, DM * D, "key weights, int8"),
    ("Wv", SP_WV, DM * D, "value weights, int8"),
    ("ACC", SP_ACC, MAX_TOKENS * D, "K or V of every token, int32 (recompute)"),
    ("KC", SP_KC, MAX_TOKENS * D, "key cache, int8"),
    ("VC", SP_VC, MAX_TOKENS * D, "value cache, int8"),
    ("Q", SP_Q, D, "query, int32"),
    ("Q8", SP_Q8, D, "query, int8"),
    ("S", SP_S, MAX_TOKENS, "scores, int32"),
    ("S8", SP_S8, MAX_TOKENS, "scores, Q4.4"),
    ("P", SP_P, MAX_TOKENS, "probabilities, Q0.16"),
    ("W", SP_W, MAX_TOKENS, "attention weights, int8"),
    ("O", SP_O, D, "output, int32"),
    ("O8", SP_O8, D, "output, int8"),
    ("KN", SP_KN, D, "new key, int32"),
    ("VN", SP_VN, D, "new value, int32"),
)
