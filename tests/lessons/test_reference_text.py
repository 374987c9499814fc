"""lessons.reference_text: the fixed text of Part V, its source and license stated, and long
enough (at least 8,192 tokens of SmolLM2's tokenizer)."""
import hashlib

import pytest

from lessons import reference_text


def test_the_text_is_the_three_sections_in_order():
    text = reference_text.text()
    heads = [text.index(h) for h in ("Objects, values and types\n*****", "The standard type hierarchy\n*****",
                                     "Execution model\n*****")]
    assert heads[0] == 0 and heads == sorted(heads)
    assert len(text) == 52_662 and "\r" not in text
    # the copy never changes (a new copy would change every figure of the part)
    assert hashlib.sha256(text.encode()).hexdigest()[:16] == "d55ceeb493533994"


def test_source_and_license_are_stated():
    assert "PSF License" in reference_text.LICENSE and reference_text.LICENSE_URL.startswith("https://docs.python.org")
    assert "pydoc_data" in reference_text.SOURCE and "Python Software Foundation" in reference_text.__doc__


def test_the_text_has_more_than_8192_tokens():
    from lessons.chat import chat_model
    _, tokenizer, _ = chat_model()
    ids = reference_text.token_ids(tokenizer)
    assert len(ids) >= 8192
    assert reference_text.token_ids(tokenizer, 256) == ids[:256]
    with pytest.raises(ValueError, match="the text has"):
        reference_text.token_ids(tokenizer, len(ids) + 1)
