"""Gluing a chapter's figures for its text, many at once.

``glue_all`` glues numbers and short strings; the text shows each with ``{glue:text}`name```
(in bold, the way the site marks a computed figure).  ``glue_prose`` glues whole sentences that
depend on a measurement ("the step read 14.1 GB/s..."); the text shows them with
``{glue:md}`name```, as ordinary prose.
"""
from __future__ import annotations


def _check(name) -> None:
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"a glue name must be an identifier-like string, got {name!r}")


def glue_all(values: dict | None = None, /, **more) -> None:
    """``glue(name, value, display=False)`` for each item: ``{glue:text}`name``` in the text (and
    ``{glue:text}`name:.2f``` for a number)."""
    from myst_nb import glue

    for name, value in {**(values or {}), **more}.items():
        _check(name)
        glue(name, value, display=False)


def glue_prose(values: dict | None = None, /, **more) -> None:
    """Glue sentences as Markdown, for ``{glue:md}`name``` in the text."""
    from IPython.display import Markdown
    from myst_nb import glue

    for name, text in {**(values or {}), **more}.items():
        _check(name)
        if not isinstance(text, str) or not text.strip():
            raise ValueError(f"{name}: prose must be a non-empty string, got {text!r}")
        glue(name, Markdown(text), display=False)
