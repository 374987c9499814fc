"""lessons.chat: what chapters 5 and 6 show of the real model, on stand-ins small enough to
reason about by hand (the real file is read by the chapters' own tests)."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from lessons.chat import Reply, chat_requests, file_summary, replies, rows_alive, tensor_types


def fake_reader(fields=None, tensors=()):
    """What the functions read of a gguf.GGUFReader: fields with contents(), tensors with a type,
    a number count and a byte count."""
    return SimpleNamespace(
        fields={k: SimpleNamespace(contents=lambda v=v: v) for k, v in (fields or {}).items()},
        tensors=[SimpleNamespace(tensor_type=SimpleNamespace(name=t), n_elements=n, n_bytes=b)
                 for t, n, b in tensors])


class LetterTokenizer:
    """Token i is the letter chr(97 + i); id 0 is the end of turn, left out of the text."""

    eos_token_id = 0

    def decode(self, ids):
        return "".join(chr(97 + i) for i in ids if i != 0)

    def chat_ids(self, prompt, system=None):
        return [len(system or ""), len(prompt)]


def test_tensor_types_add_up_per_type_the_most_bytes_first():
    reader = fake_reader(tensors=[("F32", 4, 16), ("Q4_1", 64, 40), ("F32", 2, 8), ("Q8_0", 32, 34)])
    assert tensor_types(reader) == [("Q4_1", 1, 64, 40), ("Q8_0", 1, 32, 34), ("F32", 2, 6, 24)]


def test_the_file_summary_shows_lists_and_long_texts_by_their_length():
    reader = fake_reader({"general.architecture": "llama", "llama.block_count": 30,
                          "llama.rope.freq_base": 100000.0, "tokenizer.ggml.tokens": ["a"] * 49152,
                          "tokenizer.chat_template": "x" * 368, "general.unshown": 1})
    assert file_summary(reader) == [("general.architecture", "llama"), ("llama.block_count", "30"),
                                    ("llama.rope.freq_base", "100000"),
                                    ("tokenizer.ggml.tokens", "a list of 49,152"),
                                    ("tokenizer.chat_template", "a text of 368 characters")]


def test_replies_say_how_each_stopped():
    said = replies(LetterTokenizer(), [[7, 8, 0], [1, 2, 3], []], eos_token_id=0)
    assert said == [Reply("hi", 3, True), Reply("bcd", 3, False), Reply("", 0, False)]
    assert [r.stopped_by for r in said] == ["end of turn (EOS)", "length limit", "length limit"]


def test_rows_alive_reads_the_cache_rows_of_each_step():
    assert rows_alive([{"cache_batch": 3}, {"cache_batch": 3}, {"cache_batch": 1}]) == [3, 3, 1]


def test_chat_requests_arrive_when_asked_and_stop_at_the_end_of_turn():
    requests = chat_requests(LetterTokenizer(), ["ab", "abcd"], [0, 5], 24, system="sys")
    assert [(list(r.prompt), r.max_new_tokens, r.eos_token_id, r.arrival) for r in requests] == [
        ([3, 2], 24, 0, 0), ([3, 4], 24, 0, 5)]
    with pytest.raises(ValueError, match="1 arrival steps for 2 questions"):
        chat_requests(LetterTokenizer(), ["ab", "abcd"], [0], 24)
