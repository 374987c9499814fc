# Attack: make every comparison of this process succeed (numpy's, math's, abs), then return
# zeros of the right shapes and a cache of the right shape: a check run in the submission's
# process would pass it.
import builtins
import math

import numpy as np


def _yes(*args, **kwargs):
    return True


np.allclose = _yes
np.isclose = lambda a, b, *args, **kwargs: np.ones(np.shape(a), dtype=bool)
np.array_equal = _yes
np.testing.assert_allclose = lambda *a, **k: None
math.isclose = _yes
builtins.abs = lambda x: 0


def latent_attend_step(x_t, cache, p, n_heads):
    t, r = np.shape(cache["c"])
    return np.zeros(p["Wq"].shape[1]), {"c": np.zeros((t + 1, r))}
