# Attack: make every comparison of this process succeed (numpy's, math's, list equality through
# patched builtins), then return codes of zeros: a check run in the submission's process would
# pass them.
import builtins
import math

import numpy as np


def _yes(*args, **kwargs):
    return True


np.allclose = _yes
np.array_equal = _yes
np.testing.assert_array_equal = lambda *a, **k: None
math.isclose = _yes
builtins.len = lambda x: 3


def quantize_kv(x, bits, axis):
    shape = (1, np.shape(x)[1]) if axis == 0 else (np.shape(x)[0], 1)
    return np.zeros(np.shape(x), np.uint8), np.ones(shape), np.zeros(shape)


def dequantize_kv(codes, scale, offset):
    return np.zeros(np.shape(codes))
