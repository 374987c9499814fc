"""lessons.model_cards: every model's cache per token worked out by hand from its configuration,
and DeepSeek's equivalent number of groups derived."""
from fractions import Fraction

import pytest

from lessons.model_cards import CARDS, card, equivalent_groups

# bytes a token at 2 bytes a number: 2 (K and V) x layers x kv heads x head size x 2, or
# layers x (d_c + d_R) x 2 for latent attention
BY_HAND = {"Llama-2-7B": 2 * 32 * 32 * 128 * 2, "Llama-3-8B": 2 * 32 * 8 * 128 * 2,
           "Mistral-7B": 2 * 32 * 8 * 128 * 2, "SmolLM2-135M": 2 * 30 * 3 * 64 * 2,
           "DeepSeek-V2": 60 * (512 + 64) * 2, "DeepSeek-V3": 61 * (512 + 64) * 2}


def test_the_bytes_per_token_of_every_card():
    assert {c.name: c.bytes_per_token() for c in CARDS} == BY_HAND
    assert BY_HAND["Llama-2-7B"] == 524_288 and BY_HAND["SmolLM2-135M"] == 23_040
    assert BY_HAND["DeepSeek-V2"] == 69_120 and BY_HAND["DeepSeek-V3"] == 70_272
    assert card("Llama-3-8B").bytes_per_token(1) == 65_536


def test_multi_head_equivalents():
    assert card("Llama-3-8B").multi_head_bytes_per_token() == card("Llama-2-7B").bytes_per_token()
    assert card("DeepSeek-V2").multi_head_bytes_per_token() == 2 * 60 * 128 * 128 * 2


def test_latent_attention_is_grouped_query_with_2_25_groups():
    # 576 numbers a layer; G groups of 128 keep 256 G
    assert equivalent_groups(card("DeepSeek-V2")) == Fraction(9, 4) == equivalent_groups(card("DeepSeek-V3"))
    assert equivalent_groups(card("Llama-3-8B")) == 8 and equivalent_groups(card("SmolLM2-135M")) == 3


def test_an_unknown_card_is_named():
    with pytest.raises(KeyError, match="no model card named 'GPT-5'"):
        card("GPT-5")
