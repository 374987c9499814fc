# Attack: keep the right positions, but refuse bad arguments with a class of its own that is
# called ValueError (not Python's): a check that compares the exception's name would be fooled.
import numpy as np


class ValueError(Exception):  # noqa: A001 - the look-alike is the attack
    pass


def keep_positions(acc_scores, budget, n_sink, n_recent):
    if min(budget, n_sink, n_recent) < 0 or n_sink + n_recent > budget:
        raise ValueError("refused")
    scores = np.asarray(acc_scores, dtype=np.float64)
    t = len(scores)
    if t <= budget:
        return np.arange(t, dtype=np.int64)
    middle = np.arange(n_sink, t - n_recent)
    heavy = middle[np.argsort(-scores[middle], kind="stable")[: budget - n_sink - n_recent]]
    return np.sort(np.concatenate([np.arange(n_sink), heavy, np.arange(t - n_recent, t)])).astype(np.int64)
