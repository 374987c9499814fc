# Attack: find the expected values in the caller's stack frames or anywhere in memory, and
# return them.
import gc
import sys

import numpy as np

SUSPECT = ("expected", "reference", "answer", "want", "solution", "exp", "target")


def softmax(scores):
    scores = np.asarray(scores)
    frame = sys._getframe(1)
    while frame is not None:                      # every caller: locals and globals
        for scope in (frame.f_locals, frame.f_globals):
            for name, value in list(scope.items()):
                if any(s in name.lower() for s in SUSPECT) and isinstance(value, np.ndarray) \
                        and value.shape == scores.shape:
                    return value
        frame = frame.f_back
    best = None
    for obj in gc.get_objects():                  # any array in memory with the right shape,
        if isinstance(obj, np.ndarray) and obj.shape == scores.shape and obj is not scores:
            if np.all(obj >= 0) and abs(float(obj.sum()) - obj.shape[0] if obj.ndim == 1 else 0) < 1e-6:
                return obj                            # ... that looks like probabilities
            best = obj
    return best if best is not None else scores
