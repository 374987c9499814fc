"""python -m kvcache generate: ids or text in, tokens, speed and cache bytes out."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from engine_helpers import random_state_dict
from kvcache.__main__ import main
from kvcache.generate import beam_search, greedy
from kvcache.model import Model

ROOT = Path(__file__).resolve().parents[2]
WORDS = ["<eos>", "the", "cache", "keeps", "keys", "and", "values", "for", "every", "token", "<unk>"]
CONFIG = dict(vocab_size=len(WORDS), hidden_size=16, intermediate_size=32, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64, eos_token_id=0,
              model_type="llama", architectures=["LlamaForCausalLM"])


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """A checkpoint folder with a word-level tokenizer.json, written without transformers."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    path = tmp_path_factory.mktemp("ckpt")
    (path / "config.json").write_text(json.dumps(CONFIG))
    save_file({k: v.astype(np.float32) for k, v in random_state_dict(CONFIG, seed=5).items()},
              str(path / "model.safetensors"))
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.add_special_tokens(["<eos>"])                    # decoding leaves it out, as real tokenizers do
    tok.save(str(path / "tokenizer.json"))
    return path


def run(capsys, *argv):
    code = main(["generate", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_random_model_with_ids_prints_tokens_speed_and_bytes(capsys):
    code, out, err = run(capsys, "--random", "--vocab-size", "50", "--hidden-size", "32", "--layers", "2",
                         "--heads", "4", "--kv-heads", "2", "--intermediate-size", "40",
                         "--prompt-ids", "1", "2", "3", "--prompt-ids", "4", "--max-new-tokens", "5")
    assert code == 0, err
    model = Model.random(dict(vocab_size=50, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                              num_key_value_heads=2, intermediate_size=40, max_position_embeddings=4096))
    expected = greedy(model, [[1, 2, 3], [4]], 5)
    assert f"prompt 0: 5 new tokens: {' '.join(map(str, expected[0]))}" in out
    assert f"prompt 1: 5 new tokens: {' '.join(map(str, expected[1]))}" in out
    assert "tokens/s" in out
    # 2 sequences, L_max = 3 + 5, 2 layers, 2 kv heads of 8, keys and values, float32
    assert f"cache: {2 * 8 * 2 * 2 * 8 * 2 * 4:,} bytes allocated" in out


def test_folder_with_tokenizer_takes_and_gives_text(capsys, folder):
    code, out, err = run(capsys, "--model", str(folder), "--prompt", "the cache keeps", "--beams", "3",
                         "--max-new-tokens", "6", "--json")
    assert code == 0, err
    result = json.loads(out)
    model = Model.load(folder)
    expected = beam_search(model, [1, 2, 3], 3, 6, eos_token_id=0)      # EOS from config.json
    assert result["outputs"] == [expected]
    assert result["texts"] == [" ".join(WORDS[t] for t in expected if t != 0)]
    assert result["eos_token_id"] == 0 and result["beams"] == 3
    assert result["cache_bytes"] > 0 and result["prompt_tokens"] == 3


def test_cache_dtype_and_errors(capsys, folder):
    code, out, _ = run(capsys, "--model", str(folder), "--prompt-ids", "1", "2", "--cache-dtype", "int8",
                       "--eos", "none", "--max-new-tokens", "4")
    assert code == 0 and "(contiguous, int8)" in out and "4 new tokens" in out
    code, _, err = run(capsys, "--model", str(folder), "--prompt-ids", "1", "11")
    assert code == 1 and "token id 11 at position 1 is outside the vocabulary" in err
    code, _, err = run(capsys, "--random", "--prompt", "hello")
    assert code == 1 and "--prompt needs a tokenizer.json" in err
    code, _, err = run(capsys, "--model", str(folder), "--prompt-ids", "1", "--beams", "0")
    assert code == 1 and "num_beams must be an integer >= 1" in err
    code, _, err = run(capsys, "--model", str(folder / "missing"), "--prompt-ids", "1")
    assert code == 1 and "is not a folder" in err


def test_python_dash_m_kvcache():
    done = subprocess.run([sys.executable, "-m", "kvcache", "generate", "--random", "--vocab-size", "40",
                           "--layers", "1", "--hidden-size", "16", "--intermediate-size", "16", "--heads", "2",
                           "--kv-heads", "1", "--prompt-ids", "5", "6", "--max-new-tokens", "3"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "prompt 0: 3 new tokens:" in done.stdout and "cache:" in done.stdout


def test_a_single_text_prompt_is_shown_token_by_token(folder, capsys):
    from kvcache.__main__ import _parser, generate_command

    pieces = []
    args = _parser().parse_args(["generate", "--model", str(folder), "--prompt", "the cache keeps",
                                 "--max-new-tokens", "6", "--eos", "none"])
    result = generate_command(args, show=pieces.append)
    expected = greedy(Model.load(folder), [[1, 2, 3]], 6)[0]
    assert result["outputs"] == [expected] and result["streamed"]
    assert len(pieces) == 6 and "".join(pieces) == result["texts"][0]
    # several prompts, beams, or --json: printed at the end instead
    code, out, err = run(capsys, "--model", str(folder), "--prompt", "the cache", "--prompt", "keys",
                         "--max-new-tokens", "3")
    assert code == 0, err
    assert out.startswith("prompt 0: 3 new tokens:") and "  text: " in out
