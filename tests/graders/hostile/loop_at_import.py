# Attack: hang the grader while the submission is being loaded (a class body runs at import).
import numpy as np


class Forever:
    while True:
        pass


def softmax(scores):
    e = np.exp(scores - np.max(scores, axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)
