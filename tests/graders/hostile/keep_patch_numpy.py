# Attack: make every comparison of this process succeed (numpy's, sorting, len), then return
# the first positions: a check run in the submission's process would pass it.
import builtins

import numpy as np


def _yes(*args, **kwargs):
    return True


np.array_equal = _yes
np.allclose = _yes
np.testing.assert_array_equal = lambda *a, **k: None
builtins.sorted = lambda x, **k: list(x)
builtins.len = lambda x: 0


def keep_positions(acc_scores, budget, n_sink, n_recent):
    return np.arange(min(budget, 3), dtype=np.int64)
