"""Reading GGUF files, on tiny Llama models written here with the gguf package's own writer.

Each tensor type the reader accepts (F32, F16, BF16, Q8_0, Q4_0, Q4_1) is used somewhere in the
file, the query and key rows are stored in llama.cpp's rotary order, and what the engine reads is
compared with the values decoded here from the block layouts themselves (not with the reader's
own dequantizer), then the logits with those of the same weights given directly, and with
transformers' GGUF loader on the same file.
"""
from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
import torch

import gguf

from engine_helpers import random_state_dict
from kvcache.config import UnsupportedConfig
from kvcache.gguf_file import CHUNK_VALUES, GGUFError, is_gguf, open_gguf, read_model
from kvcache.model import Model

Q = gguf.GGMLQuantizationType
CONFIG = dict(vocab_size=96, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
              rms_norm_eps=1e-5, rope_theta=50000.0, tie_word_embeddings=False, eos_token_id=3,
              model_type="llama", architectures=["LlamaForCausalLM"])
HEAD = CONFIG["hidden_size"] // CONFIG["num_attention_heads"]

# the type of each of a layer's tensors, layer 1 shifted by three so that each type lands on
# projections of several shapes
CYCLE = [Q.Q8_0, Q.Q4_0, Q.Q4_1, Q.F16, Q.BF16, Q.F32, Q.Q8_0]
LAYER = ["attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"]
HF_LAYER = ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
            "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"]


BLOCK_BYTES = {Q.Q8_0: 34, Q.Q4_0: 18, Q.Q4_1: 20}      # bytes of a block of 32 numbers


def llama_cpp_rows(w: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's converter's order of a q/k projection: row j d/2 + i of each head (transformers'
    halves) goes to row 2i + j (neighbouring pairs)."""
    d = w.shape[0] // heads
    order = np.array([h * d + j * (d // 2) + i for h in range(heads) for i in range(d // 2) for j in range(2)])
    return w[order]


def decode_blocks(raw: np.ndarray, qtype, shape) -> np.ndarray:
    """The numbers a quantized tensor's bytes hold, from the block layouts (32 values a block)."""
    raw = np.ascontiguousarray(raw).view(np.uint8).reshape(-1)
    if qtype == Q.F32:
        return raw.view("<f4").reshape(shape)
    if qtype == Q.F16:
        return raw.view("<f2").astype(np.float32).reshape(shape)
    if qtype == Q.BF16:
        return (raw.view("<u2").astype(np.uint32) << 16).view(np.float32).reshape(shape)
    size = BLOCK_BYTES[qtype]
    blocks = raw.reshape(-1, size)
    scale = blocks[:, :2].copy().view("<f2").astype(np.float32)               # (n, 1)
    if qtype == Q.Q8_0:                                                        # d, 32 int8
        values = scale * blocks[:, 2:].copy().view(np.int8).astype(np.float32)
    else:                                                                      # d [, m], 16 bytes of nibbles
        packed = blocks[:, 2 if qtype == Q.Q4_0 else 4:]
        codes = np.concatenate([packed & 0x0F, packed >> 4], axis=1).astype(np.float32)  # low nibbles first
        if qtype == Q.Q4_0:
            values = scale * (codes - 8)
        else:
            values = scale * codes + blocks[:, 2:4].copy().view("<f2").astype(np.float32)
    return values.reshape(shape)


def encode(w: np.ndarray, qtype) -> np.ndarray:
    if qtype == Q.F32:
        return w.astype(np.float32)
    if qtype == Q.F16:
        return w.astype(np.float16)
    return gguf.quants.quantize(w.astype(np.float32), qtype)


def write_tiny_gguf(path, seed=0, arch="llama", extra_meta=(), extra_tensors=(), types=None, tied=False,
                    vocab_size=CONFIG["vocab_size"]):
    """A tiny random Llama as a GGUF file; returns the weights it holds, in transformers' order."""
    cfg = dict(CONFIG, tie_word_embeddings=tied, vocab_size=vocab_size)
    state = random_state_dict(cfg, seed=seed)
    w = gguf.GGUFWriter(str(path), arch)
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(cfg["num_attention_heads"])
    w.add_head_count_kv(cfg["num_key_value_heads"])
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_rope_freq_base(cfg["rope_theta"])
    w.add_rope_dimension_count(HEAD)
    w.add_vocab_size(cfg["vocab_size"])
    w.add_eos_token_id(cfg["eos_token_id"])
    for key, value in extra_meta:
        (w.add_string if isinstance(value, str) else w.add_float32)(key, value)
    held = {}

    def put(gguf_name, hf_name, qtype, heads=None):
        values = state[hf_name].astype(np.float32)
        stored = llama_cpp_rows(values, heads) if heads else values
        raw = encode(stored, qtype)
        if qtype in BLOCK_BYTES or qtype in (Q.F32, Q.F16, Q.BF16):         # rows are independent
            held[hf_name] = decode_blocks(encode(values, qtype), qtype, values.shape)
        if qtype in (Q.F32, Q.F16):
            w.add_tensor(gguf_name, raw)
        else:
            w.add_tensor(gguf_name, raw, raw_dtype=qtype)

    put("token_embd.weight", "model.embed_tokens.weight", Q.Q8_0)
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        put(f"blk.{i}.attn_norm.weight", p + "input_layernorm.weight", Q.F32)
        put(f"blk.{i}.ffn_norm.weight", p + "post_attention_layernorm.weight", Q.F32)
        for k, (name, hf) in enumerate(zip(LAYER, HF_LAYER)):
            qtype = (types or {}).get(name, CYCLE[(k + 3 * i) % len(CYCLE)])
            heads = {"attn_q": cfg["num_attention_heads"], "attn_k": cfg["num_key_value_heads"]}.get(name)
            put(f"blk.{i}.{name}.weight", p + hf + ".weight", qtype, heads)
    put("output_norm.weight", "model.norm.weight", Q.F32)
    if not tied:
        put("output.weight", "lm_head.weight", Q.BF16)
    for name, array in extra_tensors:
        w.add_tensor(name, array)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return held


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = tmp_path_factory.mktemp("gguf") / "tiny.gguf"
    return path, write_tiny_gguf(path)


def test_every_type_is_in_the_file(tiny):
    path, _ = tiny
    reader = gguf.GGUFReader(str(path))
    assert {t.tensor_type for t in reader.tensors} == {Q.F32, Q.F16, Q.BF16, Q.Q8_0, Q.Q4_0, Q.Q4_1}


def test_config_comes_from_the_llama_metadata(tiny):
    config, _ = read_model(tiny[0])
    for key in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                "num_key_value_heads", "max_position_embeddings", "eos_token_id"):
        assert config[key] == CONFIG[key], key
    assert config["rope_theta"] == pytest.approx(CONFIG["rope_theta"])
    assert config["rms_norm_eps"] == pytest.approx(CONFIG["rms_norm_eps"])
    assert config["tie_word_embeddings"] is False


def test_tensors_are_the_files_numbers_in_transformers_order(tiny):
    path, held = tiny
    _, state = read_model(path)
    assert sorted(state) == sorted(held)
    for name, expected in held.items():
        assert state[name].dtype == np.float32
        np.testing.assert_array_equal(state[name], expected, err_msg=name)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_logits_equal_those_of_the_same_weights_given_directly(tiny, dtype):
    path, held = tiny
    from_file = Model.load(path, dtype=dtype)
    config, _ = read_model(path)          # the file's eps is CONFIG's rounded to float32
    direct = Model.from_hf(held, config, dtype=dtype)
    ids = np.random.default_rng(1).integers(0, CONFIG["vocab_size"], 12)
    assert from_file.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(from_file.logits(ids), direct.logits(ids))
    # and the rotary order matters: reading the q/k rows as stored would give other logits
    scrambled = dict(held)
    for name in [n for n in held if n.endswith(("q_proj.weight", "k_proj.weight"))]:
        heads = CONFIG["num_attention_heads"] if "q_proj" in name else CONFIG["num_key_value_heads"]
        scrambled[name] = llama_cpp_rows(held[name], heads)
    assert not np.allclose(Model.from_hf(scrambled, config, dtype=dtype).logits(ids), direct.logits(ids))


def test_tied_embeddings_when_there_is_no_output_tensor(tmp_path):
    held = write_tiny_gguf(tmp_path / "tied.gguf", seed=2, tied=True)
    model = Model.load(tmp_path / "tied.gguf")
    assert model.config.tie_word_embeddings and model.lm_head is model.embed
    np.testing.assert_array_equal(model.embed, held["model.embed_tokens.weight"])


def test_transformers_reads_the_same_file_to_the_same_logits(tiny):
    from transformers import AutoModelForCausalLM

    path, _ = tiny
    hf = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32)
    ids = np.random.default_rng(3).integers(0, CONFIG["vocab_size"], 10)
    with torch.no_grad():
        ref = hf(torch.tensor([ids.tolist()])).logits[0].numpy()
    got = Model.load(path, dtype=np.float64).logits(ids)
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())


@pytest.mark.parametrize("kwargs, error, words", [
    (dict(types={"attn_v": Q.Q5_0}), GGUFError, r"blk\.0\.attn_v\.weight \(Q5_0\)"),
    (dict(arch="qwen2"), UnsupportedConfig, "GGUF architecture 'qwen2' is not supported"),
    (dict(extra_meta=[("llama.rope.scaling.type", "yarn")]), UnsupportedConfig,
     "llama.rope.scaling.type='yarn'"),
    (dict(extra_meta=[("llama.attention.sliding_window", 16.0)]), UnsupportedConfig,
     "llama.attention.sliding_window"),
    (dict(extra_tensors=[("rope_freqs.weight", np.ones(HEAD // 2, np.float32))]), GGUFError,
     "rope_freqs.weight have no place in a Llama model"),
])
def test_unsupported_files_are_refused_by_name(tmp_path, kwargs, error, words):
    path = tmp_path / "bad.gguf"
    write_tiny_gguf(path, **kwargs)
    with pytest.raises(error, match=words):
        Model.load(path)


def test_partial_rotary_dimension_is_refused(tmp_path):
    path = tmp_path / "half.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(CONFIG["num_hidden_layers"])
    w.add_context_length(CONFIG["max_position_embeddings"])
    w.add_embedding_length(CONFIG["hidden_size"])
    w.add_feed_forward_length(CONFIG["intermediate_size"])
    w.add_head_count(CONFIG["num_attention_heads"])
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(HEAD // 2)                # half of each head rotating
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(UnsupportedConfig, match="llama.rope.dimension_count=8 rotates part of each head of 16"):
        Model.load(path)


def test_files_that_are_not_gguf(tmp_path, tiny):
    text = tmp_path / "notes.gguf"
    text.write_text("hello")
    assert not is_gguf(text)
    with pytest.raises(GGUFError, match="is not a GGUF file"):
        open_gguf(text)
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(tiny[0].read_bytes()[:5000])
    with pytest.raises(GGUFError, match="cannot read .*cut.gguf"):
        Model.load(cut)


def _model_bytes(model) -> int:
    arrays = {id(a): a for a in [model.embed, model.norm, model.lm_head]}
    for w in model.layers:
        arrays.update({id(a): a for a in (w.attn_norm, w.wqkv, w.wo, w.mlp_norm, w.w_gate_up, w.w_down)})
    return sum(a.nbytes for a in arrays.values())


def _traced_peak(load) -> tuple[int, object]:
    """(peak bytes allocated while ``load()`` runs, beyond what was held before, its result)."""
    tracemalloc.start()
    try:
        start = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        result = load()
        peak = tracemalloc.get_traced_memory()[1] - start
    finally:
        tracemalloc.stop()
    return peak, result


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_loading_streams_each_tensor_into_the_model(tmp_path, dtype):
    """Loading holds the model's arrays and one chunk's temporaries (the dequantizer makes a few
    of a chunk's size: at most ``TEMPORARIES`` chunks are allowed), never a dequantized copy of the
    whole file nor of its largest tensor beside the model.  The embedding table and the output
    layer (16,384 x 64 each) are 16 chunks each, so a tensor read whole would break the bound;
    the control, ``read_model`` then ``from_hf``, does."""
    TEMPORARIES = 6
    path = tmp_path / "wide.gguf"
    held = write_tiny_gguf(path, seed=7, vocab_size=16384)
    largest = max(a.size for a in held.values()) * np.dtype(dtype).itemsize
    chunk = CHUNK_VALUES * 4                                    # bytes of one chunk dequantized to float32
    assert TEMPORARIES * chunk < largest
    peak, model = _traced_peak(lambda: Model.load(path, dtype=dtype))
    weights = _model_bytes(model)
    assert peak <= weights + TEMPORARIES * chunk, (peak - weights) / chunk
    np.testing.assert_array_equal(model.embed, held["model.embed_tokens.weight"].astype(dtype))
    config = read_model(path)[0]
    peak, _ = _traced_peak(lambda: Model.from_hf(read_model(path, dtype)[1], config, dtype, consume=True))
    assert peak >= weights + largest
