"""The small worked examples of chapters 1 and 2, as data.

Vectors of width 2, so every number can be checked on paper.

``three_tokens()``  one head with Wq = Wk = I and Wv = diag(1, 2); the tokens (1, 0), (0, 1),
                    (1, 1) arrive one after the other (the decode-step exercise's example).
``four_tokens()``   the query, keys and values of four tokens; the newest query is (1, 0.5)
                    (the running example of the prefill and its last row).
"""
from __future__ import annotations

import numpy as np

__all__ = ["three_tokens", "four_tokens"]


def three_tokens():
    """X (3, 2) and the head p = {"Wq", "Wk", "Wv"}, each (2, 2)."""
    X = np.array([[1.0, 0.0],
                  [0.0, 1.0],
                  [1.0, 1.0]])
    p = {"Wq": np.eye(2),
         "Wk": np.eye(2),
         "Wv": np.diag([1.0, 2.0])}               # doubles the second number
    return X, p


def four_tokens():
    """Q, K, V, each (4, 2): one row per token; Q[-1] = (1, 0.5) is the newest query."""
    Q = np.array([[1.0, 0.0],
                  [0.0, 1.0],
                  [1.0, 1.0],
                  [1.0, 0.5]])
    K = np.array([[1.0, 0.0],
                  [0.0, 1.0],
                  [1.0, 1.0],
                  [-1.0, 0.0]])
    V = np.array([[1.0, 0.0],
                  [0.0, 2.0],
                  [2.0, 2.0],
                  [-1.0, 1.0]])
    return Q, K, V
