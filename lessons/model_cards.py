"""The cache of published models, from the configurations their model cards publish.

Every token leaves behind, in every layer, what the attention of later tokens will read:

    multi-head, grouped-query   a key and a value per key/value head:   2 G d_h numbers
    multi-head latent (MLA)     one latent c of d_c numbers and one
                                RoPE key of d_R shared by the heads:    d_c + d_R numbers

so one token costs L x (those numbers) x b bytes over the L layers, at b bytes a number (2 for
the bfloat16 or float16 caches these models are served with).

Grouped-query attention with G groups keeps 2 G d_h numbers; MLA's d_c + d_R equal that for

    G = (d_c + d_R) / (2 d_h)

groups: DeepSeek-V2's 512 + 64 over 2 x 128 is 2.25.  The numbers below are typed in from each
model's ``config.json`` on its Hugging Face model card (``url``): ``num_hidden_layers``,
``num_attention_heads``, ``num_key_value_heads``, the head size (``hidden_size`` /
``num_attention_heads`` where the file does not say ``head_dim``), and for DeepSeek
``kv_lora_rank`` (d_c), ``qk_rope_head_dim`` (d_R) and ``v_head_dim`` (d_h).
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

__all__ = ["CacheCard", "CARDS", "card", "equivalent_groups"]


@dataclass(frozen=True)
class CacheCard:
    """What decides a model's cache per token; ``latent`` is 0 for a model that caches keys and values."""

    name: str
    attention: str            # "multi-head", "grouped-query", "multi-head latent"
    layers: int
    heads: int
    kv_heads: int             # key/value heads (the query heads for multi-head and MLA)
    head_dim: int
    url: str
    latent: int = 0           # d_c
    rope_key: int = 0         # d_R

    def numbers_per_layer(self) -> int:
        """Numbers one token leaves in one layer: 2 G d_h, or d_c + d_R for latent attention."""
        if self.latent:
            return self.latent + self.rope_key
        return 2 * self.kv_heads * self.head_dim

    def bytes_per_token(self, bytes_per_number: int = 2) -> int:
        """Bytes one token leaves in the whole cache: L x numbers per layer x b."""
        return self.layers * self.numbers_per_layer() * bytes_per_number

    def multi_head_bytes_per_token(self, bytes_per_number: int = 2) -> int:
        """The same model's cache if every query head kept its own key and value: 2 L H d_h b."""
        return 2 * self.layers * self.heads * self.head_dim * bytes_per_number


CARDS = (
    CacheCard("Llama-2-7B", "multi-head", 32, 32, 32, 128,
              "https://huggingface.co/meta-llama/Llama-2-7b-hf/blob/main/config.json"),
    CacheCard("Llama-3-8B", "grouped-query", 32, 32, 8, 128,
              "https://huggingface.co/meta-llama/Meta-Llama-3-8B/blob/main/config.json"),
    CacheCard("Mistral-7B", "grouped-query", 32, 32, 8, 128,
              "https://huggingface.co/mistralai/Mistral-7B-v0.1/blob/main/config.json"),
    CacheCard("SmolLM2-135M", "grouped-query", 30, 9, 3, 64,
              "https://huggingface.co/HuggingFaceTB/SmolLM2-135M-Instruct/blob/main/config.json"),
    CacheCard("DeepSeek-V2", "multi-head latent", 60, 128, 128, 128,
              "https://huggingface.co/deepseek-ai/DeepSeek-V2/blob/main/config.json", latent=512, rope_key=64),
    CacheCard("DeepSeek-V3", "multi-head latent", 61, 128, 128, 128,
              "https://huggingface.co/deepseek-ai/DeepSeek-V3/blob/main/config.json", latent=512, rope_key=64),
)


def card(name: str) -> CacheCard:
    """The card of ``name`` (one of ``CARDS``)."""
    for c in CARDS:
        if c.name == name:
            return c
    raise KeyError(f"no model card named {name!r}; the cards: {', '.join(c.name for c in CARDS)}")


def equivalent_groups(c: CacheCard) -> Fraction:
    """The number of grouped-query groups G whose cache, 2 G d_h numbers a layer, equals this
    card's: (d_c + d_R) / (2 d_h) for latent attention, G itself otherwise."""
    return Fraction(c.numbers_per_layer(), 2 * c.head_dim)
