"""What padding costs a prefill (chapter 5): the padded batch against the packed one, in words.

A padded prefill computes ``token_ratio`` = (B x the longest prompt) / (the prompts' tokens)
times the tokens of a packed one.  Its measured time ratio (padded / packed) is compared with
that count: within 5% it is "as the token count predicts"; above it, attention's cost (the
square of a prompt's length, and every padded prompt is as long as the longest) is why; below
it, the packed prefill's per-prompt attention is a cost padding does not add to.
"""
from __future__ import annotations

from coursebook.numbers import times_word

#: How far the time ratio may stray from the token ratio and still be "as the count predicts".
AGREEMENT = 0.05


def padding_cost_sentence(padded_seconds: float, packed_seconds: float, token_ratio: float) -> str:
    """The sentence the chapter ends with "... it": the two times in ms, how much slower the padded
    prefill was (``times_word`` of packed / padded), and how that compares with ``token_ratio``."""
    if not (padded_seconds > 0 and packed_seconds > 0 and token_ratio > 0):
        raise ValueError("the times and the token ratio must be positive, got "
                         f"{padded_seconds!r}, {packed_seconds!r}, {token_ratio!r}")
    time_ratio = padded_seconds / packed_seconds
    said = (f"the padded prefill took {padded_seconds * 1e3:.0f} ms against {packed_seconds * 1e3:.0f} ms packed, "
            f"{times_word(time_ratio, faster='slower', slower='faster')} it")
    if abs(time_ratio / token_ratio - 1) <= AGREEMENT:
        return said + ", as the token count predicts"
    if time_ratio > token_ratio:
        return (said + ": more than the token count alone predicts, since attention grows with the square of a "
                "prompt's length, and the padded prompts are all the longest")
    return (said + ": less than the token count alone predicts, since the packed prefill runs each prompt's "
            "attention on its own, a cost padding does not add to")
