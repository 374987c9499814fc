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
    return f"{x:,.0f} times {word} than" if x >= 10 else f"{x:.1f} times {word} than"


def relation_word(value: float, other: float, above: str = "above", below: str = "below",
                  equal: str = "equal to", tolerance: float = 0.05) -> str:
    """Where ``value`` sits against ``other``: "above", "below", or "equal to" (within 5%)."""
    if other and abs(value - other) <= tolerance * abs(other):
        return equal
    return above if value > other else below


def and_join(items) -> str:
    """Items listed for a sentence: "5", "5 and 9", "1, 2, 3 and 5" (each item as ``str``)."""
    items = [str(item) for item in items]
    if not items:
        raise ValueError("nothing to list")
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def against_prediction(measured, predicted, at, unit: str = "tokens", tolerance: float = 0.25,
                       subject: str = "The measurement", target: str = "the prediction") -> str:
    """Where measured values sit against predicted ones, measured at the places ``at``, in a
    clause that holds whichever way each comes out ("above", "below" or "close to", within
    ``tolerance``, by ``relation_word``)::

        The measurement is below the prediction at both 16 and 2,048 tokens
        The measurement is below the prediction at 16 tokens and above it at 2,048
        The measurement is close to the prediction at 16 tokens, below it at 512 and above it at 2,048
    """
    measured, predicted, at = list(measured), list(predicted), list(at)
    if not measured or not len(measured) == len(predicted) == len(at):
        raise ValueError(f"one prediction and one place for every measurement: got {len(measured)} "
                         f"measurements, {len(predicted)} predictions, {len(at)} places")
    places = [f"{x:,}" if isinstance(x, int) or hasattr(x, "__index__") else str(x) for x in at]
    words = [relation_word(m, p, equal="close to", tolerance=tolerance) for m, p in zip(measured, predicted)]
    if len(set(words)) == 1:
        where = (places[0] if len(places) == 1 else
                 f"both {places[0]} and {places[1]}" if len(places) == 2 else f"each of {and_join(places)}")
        return f"{subject} is {words[0]} {target} at {where} {unit}".rstrip()
    parts = [f"{words[0]} {target} at {places[0]} {unit}".rstrip()]
    parts += [f"{w} it at {x}" for w, x in zip(words[1:], places[1:])]
    return f"{subject} is {and_join(parts)}"


def growth_word(exponent: float) -> str:
    """Words for a growth exponent x (a total growing like n**x)."""
    if exponent < 1.2:
        return "close to linear"
    if exponent < 1.8:
        return "between linear and quadratic"
    if exponent <= 2.2:
        return "close to quadratic"
    return "faster than quadratic"
