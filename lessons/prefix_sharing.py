"""Prefix sharing on real chat requests (chapter 6): the prefix every prompt shares, and the
requests that found more of theirs cached than that, in words."""
from __future__ import annotations

from coursebook.numbers import and_join


def common_prefix_length(prompts) -> int:
    """How many tokens every prompt begins with (the system turn and the chat template's header
    when every request has the same)."""
    prompts = [list(p) for p in prompts]
    if not prompts:
        raise ValueError("no prompts")
    n = 0
    while all(len(p) > n and p[n] == prompts[0][n] for p in prompts):
        n += 1
    return n


def requests_finding_more(cached_per_request, common: int, block: int) -> list[int]:
    """The requests whose cached tokens exceed the common prefix's whole blocks."""
    return [i for i, found in enumerate(cached_per_request) if found > (common // block) * block]


def finding_more_sentence(extra) -> str:
    """Which requests found more than the shared prefix cached, and why: a question that begins as
    an earlier one does (prefix sharing matches tokens, not system prompts)."""
    extra = list(extra)
    if not extra:
        return "No request found more than that"
    many = len(extra) > 1
    return (f"Request{'s' if many else ''} {and_join(extra)} found more than that: "
            f"{'their questions begin' if many else 'its question begins'} as an earlier one does, "
            "so the prompts agree for a further whole block. Prefix sharing knows nothing of system "
            "prompts, only of tokens")
