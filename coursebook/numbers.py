"""Numbers for the text: relative differences, and the words that describe measured figures.

A measured figure can come out either way on another machine (a busy one, a slow one): the text
that states it takes its words from these functions instead of taking the outcome for granted.
"""
from __future__ import annotations


def rel_err(a, b) -> float:
    """Largest relative difference between matching rows of ``a`` and ``b``:
    max_i |a_i - b_i| / |b_i| (rows along the last axis)."""
    import numpy as np

    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(np.max(np.linalg.norm(a - b, axis=-1) / np.linalg.norm(b, axis=-1)))


def times_word(ratio: float, faster: str = "faster", slower: str = "slower") -> str:
    """How a time compares with another, ``ratio`` = the other time / this one:
    "12 times faster than", "1.5 times slower than", or "about as fast as" (within 5%)."""
    if not ratio > 0:
        raise ValueError(f"a time ratio must be positive, got {ratio!r}")
    if 1 / 1.05 <= ratio <= 1.05:
        return "about as fast as"
    word, x = (faster, ratio) if ratio > 1 else (slower, 1 / ratio)
    return f"{x:.0f} times {word} than" if x >= 10 else f"{x:.1f} times {word} than"


def relation_word(value: float, other: float, above: str = "above", below: str = "below",
                  equal: str = "equal to", tolerance: float = 0.05) -> str:
    """Where ``value`` sits against ``other``: "above", "below", or "equal to" (within 5%)."""
    if other and abs(value - other) <= tolerance * abs(other):
        return equal
    return above if value > other else below


def growth_word(exponent: float) -> str:
    """Words for a growth exponent x (a total growing like n**x)."""
    if exponent < 1.2:
        return "close to linear"
    if exponent < 1.8:
        return "between linear and quadratic"
    if exponent <= 2.2:
        return "close to quadratic"
    return "faster than quadratic"
