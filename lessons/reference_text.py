"""The fixed English text Part V ("Making the cache smaller") measures every smaller cache on.

Three sections of the Python Language Reference, in this order, as Python 3.11.7 ships them in
its standard library (``pydoc_data.topics``, the text ``help()`` shows): "Objects, values and
types" and "The standard type hierarchy" (chapter 3, Data model) and "Execution model" (chapter
4), joined by two blank lines.  It is English prose about a subject the model has read about,
with a little code: 52,662 characters, more than 8,192 tokens of SmolLM2's tokenizer.

The copy in ``lessons/data/python_reference.txt`` is the text itself, so that every build on
every Python reads the same words (the topics change from one Python release to the next).
Python's documentation is distributed under the PSF License Version 2 (its code examples also
under the Zero-Clause BSD license), which allows copying and redistribution with the notice:
"Copyright © 2001-2023 Python Software Foundation; All Rights Reserved".
"""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

__all__ = ["PATH", "SOURCE", "SOURCE_URL", "LICENSE", "LICENSE_URL", "text", "token_ids"]

PATH = Path(__file__).resolve().parent / "data" / "python_reference.txt"
SOURCE = ("the Python Language Reference (3.11): \"Objects, values and types\", \"The standard type "
          "hierarchy\" and \"Execution model\", as Python 3.11.7 ships them in pydoc_data")
SOURCE_URL = "https://docs.python.org/3.11/reference/datamodel.html"
LICENSE = "the PSF License Version 2 (© 2001-2023 Python Software Foundation)"
LICENSE_URL = "https://docs.python.org/3/license.html"


@lru_cache(maxsize=1)
def text() -> str:
    """The whole text, as stored."""
    return PATH.read_text(encoding="utf-8")


def token_ids(tokenizer, n_tokens: int | None = None) -> list[int]:
    """The text's token ids as ``tokenizer.encode`` gives them, its first ``n_tokens`` when given; a
    ValueError when the text has fewer."""
    ids = list(tokenizer.encode(text()))
    if n_tokens is None:
        return ids
    if not 1 <= n_tokens <= len(ids):
        raise ValueError(f"the text has {len(ids):,} tokens; {n_tokens:,} were asked for")
    return ids[:n_tokens]
