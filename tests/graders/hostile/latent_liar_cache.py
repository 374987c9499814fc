# Attack: an output that says it equals anything, and a cache that claims to hold only "c" while
# it keeps the keys and values too (a dict whose keys() and == lie), so that a check reading
# either the way the learner's own code would is fooled.
import numpy as np


class LiarArray(np.ndarray):
    def __eq__(self, other):
        return np.ones(np.shape(self), dtype=bool)

    def __sub__(self, other):
        return np.zeros(np.shape(self))


class LiarCache(dict):
    def keys(self):
        return {"c": None}.keys()

    def __iter__(self):
        return iter(["c"])

    def __len__(self):
        return 1

    def __eq__(self, other):
        return True


def latent_attend_step(x_t, cache, p, n_heads):
    C = np.vstack([cache["c"], (np.asarray(x_t) @ p["Wdkv"])[None]])
    out = np.zeros(p["Wq"].shape[1]).view(LiarArray)
    return out, LiarCache(c=C, k=C @ p["Wuk"], v=C @ p["Wuv"])
