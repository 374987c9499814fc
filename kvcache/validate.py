"""The engine's argument checks, written once: what a caller hands in is checked at the boundary
(``Model.forward``/``prefill``/``decode``, ``generate.greedy``/``beam_search``,
``serving.serve``), and what passes is handed inward as checked arrays.

Every check raises ValueError naming the culprit (the argument, the prompt, the position) and
returns the value in the one form the engine computes with::

    whole(value, name, low)          an int >= low (bool refused: True is not a count)
    flag(value, name)                True or False, nothing else
    is_number(value)                 a real number that is not a bool
    token_ids(ids, vocab, what)      int64 (N,), every id in 0 .. vocab - 1
    eos_ids(eos, vocab, what)        int64 (k,): one id or a list of them, None -> (0,)
    step_counts(counts, batch)       int64 (batch,), every count >= 1
    index(idx, upper, what)          int64 (n,), every entry in 0 .. upper - 1
"""
from __future__ import annotations

import numbers

import numpy as np

__all__ = ["is_whole", "is_number", "whole", "flag", "token_ids", "eos_ids", "step_counts", "index"]


def is_whole(value) -> bool:
    """True for a Python or numpy integer that is not a bool (True and False are not counts)."""
    return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))


def is_number(value) -> bool:
    """True for a real number (int, float, numpy scalar) that is not a bool."""
    return isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_))


def whole(value, name: str, low: int) -> int:
    """``value`` as an int, or a ValueError: an integer >= ``low`` is required."""
    if not is_whole(value) or value < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    return int(value)


def flag(value, name: str) -> bool:
    """``value`` if it is True or False, else a ValueError (1 and "yes" are not switches)."""
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be True or False, got {value!r}")
    return value


def token_ids(ids, vocab_size: int, what: str = "token ids") -> np.ndarray:
    """``ids`` as a new int64 array (N,), or a ValueError naming the first id outside the
    vocabulary (0 .. vocab_size - 1) and its position."""
    arr = np.asarray(ids)
    if arr.ndim != 1 or (arr.size and not np.issubdtype(arr.dtype, np.integer)):
        raise ValueError(f"{what} must be a 1-d sequence of integers, got {ids!r:.80}")
    arr = arr.astype(np.int64)
    if arr.size and (arr.min() < 0 or arr.max() >= vocab_size):      # the common case: two reductions
        i = int(np.flatnonzero((arr < 0) | (arr >= vocab_size))[0])
        raise ValueError(f"{what}: token id {int(arr[i])} at position {i} is outside the vocabulary "
                         f"(0 .. {vocab_size - 1})")
    return arr


def eos_ids(eos, vocab_size: int, what: str = "eos_token_id") -> np.ndarray:
    """The EOS ids as int64 (k,): None gives none, one id gives one; an empty list is refused
    (None says "no EOS")."""
    if eos is None:
        return np.zeros(0, np.int64)
    try:
        ids = [eos] if is_whole(eos) else list(eos)
    except TypeError:
        raise ValueError(f"{what} must be a token id or a list of them, got {eos!r}") from None
    if not ids:
        raise ValueError(f"{what} is an empty list (use None for no EOS)")
    return token_ids(ids, vocab_size, what)


def step_counts(counts, batch: int) -> np.ndarray:
    """One count >= 1 per sequence, as int64 (batch,)."""
    arr = np.asarray(counts)
    if arr.shape != (batch,) or (arr.size and arr.dtype.kind not in "iu") or arr.min(initial=1) < 1:
        raise ValueError(f"a step needs one count >= 1 per sequence ({batch}), got {counts!r}")
    return arr.astype(np.int64)


def index(idx, upper: int, what: str) -> np.ndarray:
    """An int64 index array (n,) with every entry in [0, upper), or a ValueError naming ``what``."""
    arr = np.asarray(idx)
    if arr.ndim != 1 or (arr.size and not np.issubdtype(arr.dtype, np.integer)):
        raise ValueError(f"{what} must be a 1-d sequence of integers, got {idx!r}")
    arr = arr.astype(np.int64)
    bad = (arr < 0) | (arr >= upper)
    if bad.any():
        raise ValueError(f"{what} {arr[bad][0]} is out of range: the cache holds {upper} sequences")
    return arr
