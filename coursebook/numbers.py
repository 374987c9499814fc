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


NOISE = 0.15
"""How far from 1 a ratio of two times measured on a shared machine must be before the text calls
it a difference: two samples of the same step, taken minutes apart while other work runs, differ
by about this much, so a ratio of 0.95 or 1.1 says nothing about which is faster."""


def within_noise(ratio: float, noise: float = NOISE) -> bool:
    """Whether ``ratio`` (one time over another) lies within ``noise`` of 1, either way:
    1 / (1 + noise) <= ratio <= 1 + noise."""
    if not ratio > 0:
        raise ValueError(f"a time ratio must be positive, got {ratio!r}")
    return 1 / (1 + noise) <= ratio <= 1 + noise


def noise_times_word(ratio: float, noise: float = NOISE) -> str:
    """``times_word`` for a ratio measured on a shared machine (``ratio`` = the other time / this
    one): "1.9 times faster than", "1.5 times slower than", or, within ``noise`` of 1, "no faster
    or slower, within the noise (a ratio of 0.95), than": a difference inside the noise is called
    noise, not a speed."""
    if within_noise(ratio, noise):
        return f"no faster or slower, within the noise (a ratio of {ratio:.2f}), than"
    return times_word(ratio)


def change_words(before: float, after: float, noise: float = NOISE) -> str:
    """How a measured time moved from ``before`` to ``after``: "fell by 29%", "rose by 40%", or
    "hardly moved (3% lower)" when after / before lies within ``noise`` of 1."""
    if not (before > 0 and after > 0):
        raise ValueError(f"times must be positive, got {before!r} and {after!r}")
    change = after / before - 1
    if within_noise(after / before, noise):
        return f"hardly moved ({abs(change):.0%} {'lower' if change < 0 else 'higher'})"
    return f"fell by {-change:.0%}" if change < 0 else f"rose by {change:.0%}"


def against_its_prediction(measured: float, predicted: float, noise: float = NOISE) -> str:
    """One time against its prediction: "on time (3% over its prediction)" within ``noise``,
    else "1.6 times its prediction" or "0.6 times its prediction"."""
    if not (measured > 0 and predicted > 0):
        raise ValueError(f"times must be positive, got {measured!r} and {predicted!r}")
    ratio = measured / predicted
    if within_noise(ratio, noise):
        return f"on time ({abs(ratio - 1):.0%} {'over' if ratio >= 1 else 'under'} its prediction)"
    return f"{ratio:.1f} times its prediction"


def where_the_gap_is(parts: dict, noise: float = NOISE) -> str:
    """Which of the times behind a ratio depart from their predictions, in a clause that holds
    whichever way they came out.  ``parts`` is ``{name: (measured, predicted)}`` in the order the
    sentence names them::

        the gap is in the cached step
        the gap is in both the recomputation and the cached step
        neither departs from its prediction beyond the noise: the gap is noise
    """
    if not parts:
        raise ValueError("no times to compare")
    off = [name for name, (m, p) in parts.items() if not within_noise(m / p, noise)]
    if not off:
        return "neither departs from its prediction beyond the noise: the gap is noise"
    if len(off) == len(parts) and len(parts) > 1:
        return f"the gap is in both {and_join(off)}"
    return f"the gap is in {and_join(off)}"


def quotient_gap(numerator: tuple, denominator: tuple, noise: float = NOISE,
                 what: str = "the measured speedup", against: str = "the predicted one") -> str:
    """Where a measured quotient of two times departs from its prediction.  ``numerator`` and
    ``denominator`` are ``(name, measured, predicted)``; the quotient's departure is
    (m_num / p_num) / (m_den / p_den), so two steps off by the same factor cancel::

        the measured speedup is the predicted one, within the noise
        the measured speedup is 0.62 times the predicted one: the gap is in the cached step
        the measured speedup is 0.80 times the predicted one, though neither step alone departs from
        its prediction beyond the noise
    """
    (n_name, n_m, n_p), (d_name, d_m, d_p) = numerator, denominator
    if not all(x > 0 for x in (n_m, n_p, d_m, d_p)):
        raise ValueError("times must be positive")
    q = (n_m / n_p) / (d_m / d_p)
    if within_noise(q, noise):
        return f"{what} is {against}, within the noise"
    off = {n_name: (n_m, n_p), d_name: (d_m, d_p)}
    gap = where_the_gap_is(off, noise)
    if gap.startswith("neither"):
        return (f"{what} is {q:.2f} times {against}, though neither step alone departs from its prediction "
                "beyond the noise")
    return f"{what} is {q:.2f} times {against}: {gap}"
