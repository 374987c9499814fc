"""Chapter 5's first page, the engine's model (book/chapters/05_the_model.ipynb): the Llama
architecture in numpy, the cached model against recomputation, a safetensors checkpoint, the GGUF
file with its tokenizer and chat template.

Its exact figures (the published models' parameters and cache sizes, its self-check answers) are
pinned with the batches page's in tests/chapters/test_05_batches.py, against arithmetic done by
hand there; this file checks what the page shows of the real file and the model.
"""
import re

import nbformat
import pytest

from chapter_notebooks import (assert_glue_references_resolve, chapter_path, errors, executed, number,
                               self_check_pairs)
from coursetools.answer_leaks import find_leaks
from test_05_batches import SMOLLM_SYSTEM, llama_parameters, stream_text

MODEL = chapter_path("05_the_model")


@pytest.fixture(scope="module")
def ch5():
    return executed(MODEL)


def test_the_model_page_runs_and_glues_what_it_says(ch5):
    nb, g = ch5
    assert not errors(nb)
    assert_glue_references_resolve(nb, g, "ch5_")


def test_ch5_rotary_positions_depend_on_the_distance_only(ch5):
    _, g = ch5
    assert g["ch5_rope_near"] == g["ch5_rope_far"]
    assert float(g["ch5_rope_gap"]) < 1e-10


def test_ch5_the_cached_model_equals_the_reference_and_the_loaded_one(ch5):
    nb, g = ch5
    assert float(g["ch5_cached_gap"]) < 1e-5
    text = "\n".join(o.get("text", "") for c in nb.cells for o in c.get("outputs", []) if o.get("output_type") == "stream")
    assert "the loaded model gives the same logits: True" in text
    assert "refused: state dict does not fit the config:\n  model.layers.2.mlp.up_proj.weight has shape (352, 64)" in text
    assert "prompt 0: 8 new tokens:" in text and "bytes allocated" in text      # the command line ran
    assert number(g["ch5_st_header"]) > 0


def test_ch5_the_gguf_file_as_its_reader_sees_it(ch5):
    """The file read here with the gguf package alone: tensors by type, with ggml's block sizes
    (Q4_1: 2 float16 + 32 nibbles = 20 bytes per 32 numbers; Q8_0: 2 + 32 = 34), its tokenizer's
    special ids, and the float32 model the engine holds (4 bytes per parameter counted by hand)."""
    import gguf
    from kvcache.models import model_path
    _, g = ch5
    path = model_path("smollm2-135m-instruct")
    reader = gguf.GGUFReader(str(path))
    types = [t.tensor_type.name for t in reader.tensors]
    assert g["ch5_gguf_tensors"] == f"{len(types)}" and g["ch5_gguf_q41_tensors"] == f"{types.count('Q4_1')}"
    assert g["ch5_gguf_q41_bits"] == f"{8 * 20 / 32:.2f}" and g["ch5_gguf_q80_bits"] == f"{8 * 34 / 32:.2f}"
    size = path.stat().st_size
    assert g["ch5_gguf_size"] == f"{size / 2**20:.2f} MiB"
    params = llama_parameters(49152, 576, 1536, 30, 9, 3, 64, True)
    assert g["ch5_gguf_params"] == f"{params:,}" and g["ch5_gguf_held"] == f"{4 * params / 2**20:.2f} MiB"
    assert g["ch5_gguf_growth"] == f"{4 * params / size:.1f}" and g["ch5_gguf_dtype"] == "float32"
    assert g["ch5_gguf_context"] == "8,192" and g["ch5_gguf_theta"] == "100,000"
    field = reader.fields["tokenizer.ggml.eos_token_id"]
    eos = int(field.parts[field.data[0]][0])
    tokens = reader.fields["tokenizer.ggml.tokens"]
    spelled = [bytes(tokens.parts[i]).decode() for i in tokens.data]
    assert spelled[eos] == "<|im_end|>" and g["ch5_eos_id"] == f"{eos}" == g["ch5_im_end"]
    assert g["ch5_im_start"] == f"{spelled.index('<|im_start|>')}"
    template = reader.fields["tokenizer.chat_template"]
    assert g["ch5_template_chars"] == f"{len(bytes(template.parts[template.data[0]]).decode()):,}"


def test_ch5_the_chat_template_renders_the_turns_of_the_model_card(ch5):
    nb, g = ch5
    rendered = (f"<|im_start|>system\n{SMOLLM_SYSTEM}<|im_end|>\n<|im_start|>user\n"
                "What is the capital of France?<|im_end|>\n<|im_start|>assistant\n")
    assert rendered in stream_text(nb)
    assert g["ch5_default_system"] == SMOLLM_SYSTEM
    assert g["ch5_special_count"] == f"{rendered.count('<|im_')}"
    assert int(g["ch5_chat_tokens"]) > g["ch5_default_system"].count(" ") + 6


def test_the_comparison_with_transformers_is_told_in_words():
    """A reader of the site cannot open the course's test files: the page says what they check
    (transformers' LlamaForCausalLM, float64, the tolerance), and names a file only as a place in
    the course's repository, in the same paragraph."""
    md = "\n".join(c.source for c in nbformat.read(MODEL, as_version=4).cells if c.cell_type == "markdown")
    paragraphs = [p for p in re.split(r"\n\s*\n", md) if "tests/" in p]
    assert paragraphs
    for paragraph in paragraphs:
        assert "the course's repository" in paragraph, paragraph[:80]
        assert "see `tests/" not in paragraph
    told = md[:md.index(paragraphs[-1]) + len(paragraphs[-1])]
    for words in ("`LlamaForCausalLM`", "float64", "$10^{-5}$", "float32 even in a float64 model"):
        assert words in told, words


def test_the_model_page_opens_the_chapter_and_hands_over_to_the_batches():
    nb = nbformat.read(MODEL, as_version=4)
    md = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    assert md.lstrip().startswith("# ") and md.count("\n# ") == 0
    assert "(05_batches.ipynb)" in md and "## A batch" not in md
    pairs = self_check_pairs(nb)
    assert len(pairs) == 4 and all(answered for _, answered in pairs), pairs
    assert md.index("## Summary") < md.index("## Self-check questions") < md.index("## Sources and further reading")
    for cell in nb.cells:
        assert not re.search(r"\bseeds?\b", cell.source, flags=re.IGNORECASE), cell.source[:60]
    first = next(c for c in nb.cells if c.cell_type == "code")
    assert first.source.index("limit_blas_threads(1)") < first.source.index("import numpy")
    toc = (MODEL.parents[2] / "_toc.yml").read_text()
    assert toc.index("book/chapters/04_fewer_bytes") < toc.index("book/chapters/05_the_model") \
        < toc.index("book/chapters/05_batches")
    batches = "\n".join(c.source for c in nbformat.read(chapter_path("05_batches"), as_version=4).cells
                         if c.cell_type == "markdown")
    assert "## The model: a Llama decoder" not in batches and "(05_the_model.ipynb)" in batches


def test_the_model_page_shows_no_answer(ch5, tmp_path):
    nb, _ = ch5
    path = tmp_path / "model.ipynb"
    nbformat.write(nb, path)
    assert not find_leaks(path)


def test_the_model_page_s_grouped_heads_question(ch5):
    """SmolLM-135M with G = H = 9 key/value heads: 2 x 30 x 9 x 64 x 2 bytes a token."""
    _, g = ch5
    assert g["ch5_qm_mha"] == f"{2 * 30 * 9 * 64 * 2:,}" == "69,120"
