# Attack: codes that say they equal anything (an ndarray whose ==, != and - lie), a scale and an
# offset of zeros, so that a check comparing them the way the learner's own code would is fooled.
import numpy as np


class LiarCodes(np.ndarray):
    def __eq__(self, other):
        return np.ones(np.shape(self), dtype=bool)

    def __ne__(self, other):
        return np.zeros(np.shape(self), dtype=bool)

    def __sub__(self, other):
        return np.zeros(np.shape(self))

    def tolist(self):
        return "anything"


def quantize_kv(x, bits, axis):
    shape = (1, np.shape(x)[1]) if axis == 0 else (np.shape(x)[0], 1)
    return np.zeros(np.shape(x), np.uint8).view(LiarCodes), np.zeros(shape), np.zeros(shape)


def dequantize_kv(codes, scale, offset):
    return np.zeros(np.shape(codes)).view(LiarCodes)
