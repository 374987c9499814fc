"""Text in and out of a model: its BPE tokenizer and its chat template.

From a GGUF file (``Tokenizer.from_gguf``), the tokenizer is rebuilt from the metadata::

    tokenizer.ggml.model = "gpt2"      byte-level BPE, the only model read here
    tokenizer.ggml.pre                 how text is split before BPE ("gpt2", "smollm": GPT-2's split)
    tokenizer.ggml.tokens   (V,)       token i's spelling, in GPT-2's byte alphabet
    tokenizer.ggml.merges              "a b" pairs, best first
    tokenizer.ggml.token_type (V,)     3 = control (<|im_start|>: kept whole, special), 4 = user-defined
    tokenizer.ggml.{bos,eos,...}_token_id
    tokenizer.chat_template            a Jinja template that turns messages into one string

Byte-level BPE: the text is split into words by GPT-2's pattern (a space stays at the front of
the word after it), each word's UTF-8 bytes are spelled with one printable character per byte
(GPT-2's byte alphabet, ``byte_alphabet``), and the merges join neighbouring pieces, best first,
until no listed pair is left; each piece is then a token id.  Special tokens are matched whole
in the text before any of that.  The ``tokenizers`` package runs it (a ``models.BPE`` with a
``ByteLevel`` pre-tokenizer and decoder); this module only assembles it from the file.

A chat is rendered as transformers renders it: Jinja2's sandboxed environment with
``trim_blocks`` and ``lstrip_blocks``, ``raise_exception`` and a ``tojson`` filter, and the
template's variables ``messages``, ``add_generation_prompt``, ``bos_token``, ``eos_token``.
"""
from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

__all__ = ["Tokenizer", "TokenizerError", "TextStream", "byte_alphabet", "load_tokenizer"]

CONTROL, USER_DEFINED = 3, 4          # llama.cpp's token types that are matched whole
GPT2_SPLIT = ("gpt2", "smollm")       # tokenizer.ggml.pre values whose split is GPT-2's own


class TokenizerError(ValueError):
    """The tokenizer cannot be built or used as asked (what is wrong is in the message)."""


@lru_cache(maxsize=1)
def byte_alphabet() -> dict[int, str]:
    """GPT-2's spelling of each byte: printable Latin-1 bytes stand for themselves, and the 68
    others (controls, space, a few more) are given the characters from U+0100 on, in byte order,
    so that every token is a string of visible characters."""
    visible = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAC + 1), *range(0xAE, 0xFF + 1)]
    spelling = {b: chr(b) for b in visible}
    extra = 0
    for b in range(256):
        if b not in spelling:
            spelling[b] = chr(256 + extra)
            extra += 1
    return spelling


def _spelled(token: str, alphabet: frozenset) -> str:
    """A token in the byte alphabet: as it is when it already is, else its UTF-8 bytes spelled."""
    if set(token) <= alphabet:
        return token
    spelling = byte_alphabet()
    return "".join(spelling[b] for b in token.encode("utf-8"))


def _render_chat(template: str, messages, add_generation_prompt: bool, **variables) -> str:
    """``template`` rendered over ``messages`` in a sandbox (what a chat template may call)."""
    from jinja2 import TemplateError
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message):
        raise TemplateError(message)

    def tojson(value, indent=None):
        return json.dumps(value, indent=indent, ensure_ascii=False)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    try:
        return env.from_string(template).render(messages=messages,
                                                add_generation_prompt=add_generation_prompt, **variables)
    except TemplateError as err:
        raise TokenizerError(f"the chat template refused these messages: {err}") from None


def _check_messages(messages) -> list[dict]:
    """messages as a list of {"role", "content"} dicts, or a TokenizerError naming the bad one."""
    if isinstance(messages, (str, bytes)) or not hasattr(messages, "__iter__"):
        raise TokenizerError(f"messages must be a list of {{'role', 'content'}} dicts, got {messages!r:.80}")
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str) or not isinstance(m.get("content"), str):
            raise TokenizerError(f"message {i} must be a dict with string 'role' and 'content', got {m!r:.80}")
        out.append(dict(m))
    return out


class Tokenizer:
    """A ``tokenizers.Tokenizer`` with the model's special tokens and chat template."""

    def __init__(self, backend, chat_template: str | None = None, bos_token: str | None = None,
                 eos_token: str | None = None):
        self.backend = backend                    # tokenizers.Tokenizer
        self.chat_template = chat_template
        self.bos_token = bos_token
        self.eos_token = eos_token

    @property
    def eos_token_id(self) -> int | None:
        """The id of the end-of-turn token (the chat template's), or None."""
        return None if self.eos_token is None else self.backend.token_to_id(self.eos_token)

    @property
    def vocab_size(self) -> int:
        return self.backend.get_vocab_size(with_added_tokens=True)

    # ------------------------------------------------------------------ building

    @classmethod
    def from_gguf(cls, source) -> "Tokenizer":
        """The tokenizer of a GGUF file (a path, or a ``gguf.GGUFReader`` on it)."""
        from tokenizers import AddedToken, decoders, models, pre_tokenizers, processors
        from tokenizers import Tokenizer as Backend

        from .gguf_file import metadata

        meta = metadata(source)
        kind = meta.get("tokenizer.ggml.model")
        if kind != "gpt2":
            raise TokenizerError(f"tokenizer.ggml.model {kind!r} is not supported: this engine builds "
                                 "byte-level BPE tokenizers ('gpt2') only")
        split = meta.get("tokenizer.ggml.pre", "gpt2")
        if split not in GPT2_SPLIT:
            raise TokenizerError(f"tokenizer.ggml.pre {split!r} is not supported: this engine splits text "
                                 f"as GPT-2 does ({', '.join(map(repr, GPT2_SPLIT))})")
        for key in ("tokenizer.ggml.tokens", "tokenizer.ggml.merges"):
            if key not in meta:
                raise TokenizerError(f"the GGUF file has no {key}")
        alphabet = frozenset(byte_alphabet().values())
        tokens = [_spelled(t, alphabet) for t in meta["tokenizer.ggml.tokens"]]
        vocab = {t: i for i, t in enumerate(tokens)}
        if len(vocab) != len(tokens):
            raise TokenizerError("tokenizer.ggml.tokens spells two tokens the same way")
        merges = []
        for i, merge in enumerate(meta["tokenizer.ggml.merges"]):
            pair = merge.split(" ")
            if len(pair) != 2:
                raise TokenizerError(f"tokenizer.ggml.merges entry {i} ({merge!r}) is not two tokens")
            merges.append((pair[0], pair[1]))
        prefix = bool(meta.get("tokenizer.ggml.add_space_prefix", False))
        backend = Backend(models.BPE(vocab, merges, fuse_unk=False, byte_fallback=False))
        backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=prefix, use_regex=True)
        backend.decoder = decoders.ByteLevel()
        raw = list(meta["tokenizer.ggml.tokens"])
        kinds = list(meta.get("tokenizer.ggml.token_type", []))
        backend.add_special_tokens([AddedToken(raw[i], normalized=False, special=True)
                                    for i, k in enumerate(kinds) if k == CONTROL and set(raw[i]) <= alphabet])
        backend.add_tokens([AddedToken(raw[i], normalized=False, special=False)
                            for i, k in enumerate(kinds) if k == USER_DEFINED])

        def token(key):
            i = meta.get(f"tokenizer.ggml.{key}_token_id")
            return None if i is None or not 0 <= int(i) < len(raw) else raw[int(i)]

        bos, eos = token("bos"), token("eos")
        if meta.get("tokenizer.ggml.add_bos_token", False) and bos is not None:
            backend.post_processor = processors.TemplateProcessing(
                single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, vocab[bos])])
        return cls(backend, meta.get("tokenizer.chat_template"), bos, eos)

    @classmethod
    def from_folder(cls, folder) -> "Tokenizer":
        """The tokenizer.json of a folder, with tokenizer_config.json's chat template and special
        tokens when the folder has one."""
        from tokenizers import Tokenizer as Backend

        folder = Path(folder)
        backend = Backend.from_file(str(folder / "tokenizer.json"))
        config_path = folder / "tokenizer_config.json"
        config = json.loads(config_path.read_text(encoding="utf-8")) if config_path.is_file() else {}

        def text(value):
            return value.get("content") if isinstance(value, dict) else value

        template = config.get("chat_template")
        if template is None and (folder / "chat_template.jinja").is_file():
            template = (folder / "chat_template.jinja").read_text(encoding="utf-8")
        return cls(backend, template, text(config.get("bos_token")), text(config.get("eos_token")))

    # ------------------------------------------------------------------ using

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """The token ids of ``text`` (special tokens in it are matched whole)."""
        if not isinstance(text, str):
            raise TokenizerError(f"text to encode must be a string, got {type(text).__name__}")
        return self.backend.encode(text, add_special_tokens=add_special_tokens).ids

    def decode(self, ids, skip_special_tokens: bool = True) -> str:
        """The text of token ids (special tokens left out unless asked for)."""
        return self.backend.decode([int(i) for i in ids], skip_special_tokens=skip_special_tokens)

    def apply_chat_template(self, messages, add_generation_prompt: bool = True) -> str:
        """The chat ``messages`` ([{"role", "content"}, ...]) as the one string the model reads."""
        if self.chat_template is None:
            raise TokenizerError("this tokenizer has no chat template: give the prompt as plain text")
        return _render_chat(self.chat_template, _check_messages(messages), add_generation_prompt,
                            bos_token=self.bos_token or "", eos_token=self.eos_token or "")

    def chat_ids(self, prompt: str, system: str | None = None) -> list[int]:
        """The ids of one user turn (and a system turn when given), ready for the reply."""
        messages = ([{"role": "system", "content": system}] if system is not None else []) + \
            [{"role": "user", "content": prompt}]
        return self.encode(self.apply_chat_template(messages), add_special_tokens=False)

    def stream(self) -> "TextStream":
        """A decoder that turns ids arriving one by one into the text they add."""
        return TextStream(self)


class TextStream:
    """Incremental decoding: ``push(id)`` returns the new text once it is whole.

    A character of several UTF-8 bytes may span tokens; until its last byte arrives the text
    ends in U+FFFD, and nothing is returned for it yet."""

    def __init__(self, tokenizer: Tokenizer):
        self.tokenizer = tokenizer
        self.ids: list[int] = []
        self.shown = 0

    def push(self, token_id: int) -> str:
        self.ids.append(int(token_id))
        text = self.tokenizer.decode(self.ids)
        if text.endswith("\ufffd"):
            return ""
        new, self.shown = text[self.shown:], len(text)
        return new


def load_tokenizer(path) -> Tokenizer | None:
    """The tokenizer of a GGUF file or of a folder with tokenizer.json; None when there is none."""
    from .gguf_file import is_gguf

    path = Path(path)
    if is_gguf(path):
        return Tokenizer.from_gguf(path)
    if path.is_dir() and (path / "tokenizer.json").is_file():
        return Tokenizer.from_folder(path)
    return None
