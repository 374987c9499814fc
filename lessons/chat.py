"""The real chat model of chapters 5 and 6: SmolLM2-135M-Instruct from the GGUF file the course
installs, read once per process, and what the chapters show of it.

    chat_model()              (Model, Tokenizer, GGUFReader) of the installed file, cached: reading
                              it dequantizes every weight to float32 (about 540 MB, ~10 s)
    file_summary(reader)      what the file says of the model and its tokenizer, as (key, value)
    tensor_types(reader)      its tensors by ggml type: count, numbers, bytes in the file
    chat_prompts(tok, ...)    questions as the chat template renders them, as token ids
    replies(tok, outputs, eos, limit)   each reply's text and why it stopped
    rows_alive(trace)         sequences in the batch at each decode step of a ``greedy`` trace
    chat_requests(...)        questions as ``kvcache.serving.Request``s that arrive at given steps

A reply's text leaves the special tokens out (its last token is the chat template's end of turn,
``<|im_end|>``, when it ended by itself).  Everything is greedy: the same text on every build.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

__all__ = ["MODEL_NAME", "chat_model", "file_summary", "tensor_types", "chat_prompts", "Reply", "replies",
           "rows_alive", "chat_requests"]

MODEL_NAME = "smollm2-135m-instruct"

# The keys of the file a reader is shown, in the order shown (lists are shown by their length).
SHOWN_KEYS = ("general.architecture", "general.name", "general.size_label", "general.license",
              "llama.block_count", "llama.embedding_length", "llama.feed_forward_length",
              "llama.attention.head_count", "llama.attention.head_count_kv", "llama.context_length",
              "llama.rope.freq_base", "llama.attention.layer_norm_rms_epsilon", "tokenizer.ggml.model",
              "tokenizer.ggml.tokens", "tokenizer.ggml.merges", "tokenizer.ggml.bos_token_id",
              "tokenizer.ggml.eos_token_id", "tokenizer.chat_template")


@lru_cache(maxsize=1)
def chat_model():
    """(Model, Tokenizer, GGUFReader) of SmolLM2-135M-Instruct: the file is opened once for the
    weights, the tokenizer and the chapter's look at its contents, and read once per process."""
    from kvcache.gguf_file import open_gguf
    from kvcache.model import Model
    from kvcache.models import model_path
    from kvcache.tokenizer import Tokenizer

    reader = open_gguf(model_path(MODEL_NAME))
    return Model.from_gguf(reader), Tokenizer.from_gguf(reader), reader     # streamed: one copy of the weights


def _shown(value) -> str:
    """A metadata value as a table shows it: a list by its length, a long string by its length,
    a float without trailing noise."""
    if isinstance(value, (list, tuple)):
        return f"a list of {len(value):,}"
    if isinstance(value, str) and len(value) > 40:
        return f"a text of {len(value):,} characters"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}" if value >= 10_000 else str(value)
    return str(value)


def file_summary(reader) -> list[tuple[str, str]]:
    """(key, value as shown) of the file's metadata that says what the model is (``SHOWN_KEYS``,
    those the file has)."""
    from kvcache.gguf_file import metadata

    meta = metadata(reader)
    return [(key, _shown(meta[key])) for key in SHOWN_KEYS if key in meta]


def tensor_types(reader) -> list[tuple[str, int, int, int]]:
    """(ggml type, tensors, numbers, bytes in the file) per type, the most bytes first."""
    totals: dict[str, list[int]] = {}
    for tensor in reader.tensors:
        entry = totals.setdefault(tensor.tensor_type.name, [0, 0, 0])
        entry[0] += 1
        entry[1] += int(tensor.n_elements)
        entry[2] += int(tensor.n_bytes)
    return sorted(((name, *values) for name, values in totals.items()), key=lambda row: -row[3])


def chat_prompts(tokenizer, questions, system: str | None = None) -> list[list[int]]:
    """Each question as one user turn of the chat template (after ``system``'s turn, or the
    template's own system prompt when None), ready for the reply, as token ids."""
    return [tokenizer.chat_ids(question, system=system) for question in questions]


@dataclass(frozen=True)
class Reply:
    """One reply of a batch: its text, its tokens and why it stopped."""

    text: str
    tokens: int
    ended: bool             # True: it emitted the end-of-turn token; False: it reached the limit

    @property
    def stopped_by(self) -> str:
        return "end of turn (EOS)" if self.ended else "length limit"


def replies(tokenizer, outputs, eos_token_id: int) -> list[Reply]:
    """The replies of a batch (``greedy``'s or ``serve``'s outputs): text without special tokens,
    token count, and whether each ended with the end-of-turn token ``eos_token_id``."""
    return [Reply(tokenizer.decode(out).strip(), len(out), bool(out) and out[-1] == eos_token_id)
            for out in outputs]


def rows_alive(trace) -> list[int]:
    """The sequences in the batch at each decode step of a ``greedy`` trace (its cache's rows)."""
    return [int(step["cache_batch"]) for step in trace]


def chat_requests(tokenizer, questions, arrivals, max_new_tokens: int, system: str | None = None):
    """The questions as serving requests: each a chat prompt (``chat_prompts``) that stops at
    the end-of-turn token or after ``max_new_tokens``, arriving at its step of ``arrivals``."""
    from kvcache.serving import Request

    if len(arrivals) != len(questions):
        raise ValueError(f"{len(arrivals)} arrival steps for {len(questions)} questions")
    eos = tokenizer.eos_token_id
    return [Request(ids, max_new_tokens, eos, arrival=int(a))
            for ids, a in zip(chat_prompts(tokenizer, questions, system), arrivals)]
