"""Waiting to fill a batch (chapter 6): what a window bought in tokens per second, in words.

A window holds arriving requests so that more of them start together: each step then makes
more tokens (``fill`` = tokens per step with the window / without it).  Whether running time
made as many more tokens per second (``gain``) depends on how a step's time grows with its
batch: on a small model on a CPU it grows, so the gain is below the fill; where a step's time
is set by reading the weights (a 7B model on a GPU) it hardly grows, and the gain follows the fill.
"""
from __future__ import annotations


def window_gain_sentence(rate_without: float, rate_with: float, fill: float, window: int = 32) -> str:
    """"Measured on the machine that built this page, the tokens per second of running time at the
    higher rate went from A without waiting to B with a W-step window, G times as many, against F
    times as many tokens per step: ..." (``rate_*`` in tokens per second, ``fill`` the ratio of
    tokens per step)."""
    if not (rate_without > 0 and rate_with > 0 and fill > 0):
        raise ValueError(f"the rates and the fill must be positive, got {rate_without!r}, {rate_with!r}, {fill!r}")
    gain = rate_with / rate_without
    said = (f"Measured on the machine that built this page, the tokens per second of running time at the "
            f"higher rate went from {rate_without:.0f} without waiting to {rate_with:.0f} with a "
            f"{window}-step window, {gain:.2f} times as many, against {fill:.2f} times as many tokens per step: ")
    if gain < fill:
        return (said + "less than the fuller steps promise, because on this small model a step's time grows with "
                "its batch, while a 7B model's step on a GPU is set by reading its weights")
    return said + "the fuller steps cost hardly more time each"


class FirstTokenSteps:
    """Watches ``kvcache.serving.serve`` (its ``on_step``) and keeps the step at which each request
    made its first token: ``steps[request]``.  A request's wait for its first token is that step
    minus its arrival."""

    def __init__(self):
        self.steps: dict[int, int] = {}

    def __call__(self, stats, rows, tokens, cache) -> None:
        for request in rows:
            self.steps.setdefault(request, stats.step)
