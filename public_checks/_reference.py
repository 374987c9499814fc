"""Causal attention row by row in plain numpy: the expected values of the attention exercises'
public checks (never the course's engine).

Row i is the softmax of token i's query against the keys of tokens 0..i, divided by sqrt(d)
(or not, with ``scale=False``, to recognise that mistake), times their values::

    Q (T, d), K (T, d), V (T, d_v)  ->  (T, d_v)
"""
import math

import numpy as np


def causal_rows(Q, K, V, scale=True):
    Q, K, V = (np.asarray(a, dtype=np.float64) for a in (Q, K, V))
    d = Q.shape[1]
    rows = []
    for i in range(Q.shape[0]):
        s = K[: i + 1] @ Q[i]                    # scores against tokens 0..i, (i + 1,)
        if scale:
            s = s / math.sqrt(d)
        w = np.exp(s - s.max())                  # stable: every exponent <= 0
        rows.append((w / w.sum()) @ V[: i + 1])
    return np.array(rows)
