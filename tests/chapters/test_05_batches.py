"""Chapter 5 (batches), its exercise (batched_decode_step) and its public checks.

The numbers the chapter states through myst-nb glue are read back and pinned against values this
file computes on its own, from the published model sizes and the formulas (not from the engine's
functions).  What the chapter measures depends on the machine: those figures are checked for their
form only (positive, finite, the sentences that say what was measured), and the chapter is also
built as if on a slow machine with little free memory (a sitecustomize tells the kernel so).
"""
import json
import math
import os
import re

import nbformat
import numpy as np
import pytest

from chapter_notebooks import (ROOT, assert_glue_references_resolve, chapter_path, errors,
                               execute, executed, figures, glued, markdown, number, self_check_pairs)
from coursetools.answer_leaks import find_leaks
from public_checks import PublicCheckFailed, evaluate, run_checks

CH5 = chapter_path("05_batches")
MODEL = chapter_path("05_the_model")


def llama_parameters(V, D, F, L, H, G, d, tied):
    """transformers' LlamaForCausalLM, counted by hand: embeddings, per layer the q, k, v, o
    projections, the three feed-forward matrices and two norms, the final norm, the head."""
    per_layer = D * H * d + 2 * D * G * d + H * d * D + 3 * D * F + 2 * D
    return V * D + L * per_layer + D + (0 if tied else V * D)


# the chapter's model: V, D, F, L, H, G, d
OURS = dict(V=1024, D=128, F=352, L=4, H=4, G=2, d=32)

P_OURS = 2 * 128 * (4 * 32 + 2 * 2 * 32) + 2 * 4 * 32 * 128 + 2 * 128 * 2 * 352 + 2 * 352 * 128

EXACT_CH5 = {
    "ch5_smol_params": f"{llama_parameters(49152, 576, 1536, 30, 9, 3, 64, True):,}",
    "ch5_tiny_params": f"{llama_parameters(32000, 2048, 5632, 22, 32, 4, 64, False):,}",
    "ch5_our_params": f"{llama_parameters(1024, 128, 352, 4, 4, 2, 32, False):,}",
    "ch5_smol_bpt": f"{2 * 30 * 3 * 64 * 2:,}", "ch5_tiny_bpt": f"{2 * 22 * 4 * 64 * 2:,}",
    "ch5_tiny_bpt_mha": f"{2 * 22 * 32 * 64 * 2:,}", "ch5_tiny_r": "8", "ch5_smol_r": "3",
    "ch5_st_tensors": f"{2 + 4 * 9 + 1}",           # embeddings, head, 9 per layer, the final norm
    "ch5_batch": "8", "ch5_new": "48", "ch5_r": "2",
    # beam search over the batch of 8 prompts with K = 3: 24 rows, 3 x 1,024 scores, 6 candidates each
    "ch5_beam_k": "3", "ch5_beam_batch": "8", "ch5_beam_rows": "24", "ch5_beam_scores": "3,072",
    "ch5_beam_candidates": "6",
    # 32 conversations, log-uniform lengths from 32 to 2,048, SmolLM's 23,040 bytes per token
    "ch5_scale_reserved": "1.41 GiB", "ch5_scale_bpt": "23,040", "ch5_q1_bytes": "46,137,344", "ch5_q1_mib": "44 MiB",
    "ch5_q3_tokens": "270", "ch5_q3_share": "56%",
    # a 576 x 1,536 matrix: 27,648 blocks of 32 numbers, 20 bytes each in Q4_1, 4 bytes a number in float32
    "ch5_q6_numbers": "884,736", "ch5_q6_q41": "552,960", "ch5_q6_f32": "3,538,944", "ch5_q6_ratio": "6.4",
}


#: The figures the model's page glues (book/chapters/05_the_model.ipynb), the others this page's.
MODEL_KEYS = ['ch5_smol_params', 'ch5_tiny_params', 'ch5_our_params', 'ch5_smol_bpt', 'ch5_tiny_bpt', 'ch5_tiny_bpt_mha', 'ch5_tiny_r', 'ch5_smol_r', 'ch5_st_tensors', 'ch5_q1_bytes', 'ch5_q1_mib', 'ch5_q6_numbers', 'ch5_q6_q41', 'ch5_q6_f32', 'ch5_q6_ratio']


@pytest.fixture(scope="module")
def ch5():
    return executed(CH5)


@pytest.fixture(scope="module")
def model_page():
    return executed(MODEL)


# ---------------------------------------------------------------- chapter 5


def test_ch5_figures_of_the_published_models_and_the_formulas(ch5, model_page):
    """Each exact figure on the page that glues it: the model's page or this one."""
    nb, g = ch5
    assert not errors(nb) and not errors(model_page[0])
    both = {**model_page[1], **g}
    for key, want in EXACT_CH5.items():
        assert both[key] == want, key
    assert both["ch5_smol_params"] == "134,515,008" and both["ch5_tiny_params"] == "1,100,048,384"
    assert set(MODEL_KEYS) <= set(model_page[1]) and not set(MODEL_KEYS) & set(g)


def test_ch5_nan_beyond_a_length_is_shown_reaching_the_output(ch5):
    nb, _ = ch5
    text = stream_text(nb)
    assert "same NaN, unchanged: True" in text and "reaches the output of sequence: [0]" in text






def test_ch5_batch_shapes_padding_and_preallocation(ch5):
    _, g = ch5
    longest, new = int(g["ch5_longest"]), int(g["ch5_new"])
    lengths = np.linspace(longest // 8, longest, 8).round().astype(int)      # the plan's spread
    assert int(g["ch5_lmax"]) == longest + new and int(g["ch5_shortest"]) == lengths.min()
    assert g["ch5_N"] == f"{lengths.sum():,}"
    assert g["ch5_tokens_padded"] == f"{8 * longest:,}"
    assert g["ch5_pad_ratio"] == f"{8 * longest / lengths.sum():.2f}"
    assert g["ch5_pad_agree"] in ("exactly",) or g["ch5_pad_agree"].startswith("to ")
    assert number(g["ch5_pad_time_ratio"]) > 0 and "ms packed" in g["ch5_pad_time_words"]
    rng = np.random.default_rng(11)
    conversations = np.exp(rng.uniform(np.log(32), np.log(2048), 32)).astype(int)
    assert g["ch5_scale_waste"] == f"{1 - conversations.sum() / (32 * 2048):.0%}"
    assert g["ch5_scale_median"] == f"{int(np.median(conversations)):,}"


# the real model's batch of chapter 5: the questions, the limit, the chat template's form
QUESTIONS = [
    "What is the capital of France?",
    "What does a cache do in a computer? Answer in one sentence.",
    "Say hello.",
    "Name three colours.",
    "Write a haiku about the sea.",
    "Here is a short text: 'When a language model writes a reply, it produces one token at "
    "a time, and every new token looks back at all the tokens before it.' Summarise it in "
    "one sentence.",
]

MAX_NEW = 32

SMOLLM_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"   # its model card's


def smollm_flops(n, L=30, H=9, G=3, d=64, D=576, F=1536, V=49152):
    """One decode step of SmolLM2-135M for a token at position n (n cached positions): twice the
    matrices' parameters per layer, attention's 4 H d n, the head's 2 D V; by hand."""
    matrices = D * H * d + 2 * D * G * d + H * d * D + 3 * D * F
    return L * (2 * matrices + 4 * H * d * n) + 2 * D * V


def stream_text(nb):
    return "\n".join(o.get("text", "") for c in nb.cells for o in c.get("outputs", []) if o.get("output_type") == "stream")


def plain_outputs(nb):
    return [o["data"]["text/plain"] for c in nb.cells for o in c.get("outputs", [])
            if "text/plain" in o.get("data", {})]


@pytest.fixture(scope="module")
def alone(smollm2_engine):
    """Each question of the chapter's batch generated on its own (a batch of one: no padding, no
    row ever leaving), with the model and tokenizer read from the file here (``smollm2_engine``)."""
    from kvcache.blas import limit_blas_threads
    limit_blas_threads(1)
    from kvcache.generate import greedy
    model, tokenizer = smollm2_engine
    eos = tokenizer.eos_token_id
    prompts = [tokenizer.encode(f"<|im_start|>system\n{SMOLLM_SYSTEM}<|im_end|>\n<|im_start|>user\n{q}"
                                f"<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False)
               for q in QUESTIONS]
    outputs = [greedy(model, [p], MAX_NEW, eos_token_id=eos)[0] for p in prompts]
    return prompts, outputs, [tokenizer.decode(o).strip() for o in outputs], eos






def test_ch5_eos_mid_batch_gives_each_question_its_own_reply(ch5, alone):
    """The batch (padded, rows leaving at EOS) against each question run alone: the same text,
    the same lengths; the rows alive, the steps and the FLOPs follow from those lengths."""
    nb, g = ch5
    prompts, outputs, texts, eos = alone
    lengths = [len(o) for o in outputs]
    shown = [t for t in plain_outputs(nb) if t.startswith("0. " + QUESTIONS[0])]
    assert len(shown) == 1
    flat = " ".join(shown[0].split())
    for q, text in zip(QUESTIONS, texts):
        assert " ".join(text.split()) in flat, text
    ended = [o[-1] == eos for o in outputs]
    assert 0 < sum(ended) < len(QUESTIONS)            # some end mid-batch, some reach the limit
    assert g["ch5_eos_finished"] == f"{sum(ended)}" and g["ch5_eos_batch"] == f"{len(QUESTIONS)}"
    ends = sorted(n for n, e in zip(lengths, ended) if e)
    assert g["ch5_eos_steps_list"] == (", ".join(map(str, ends[:-1])) + f" and {ends[-1]}" if len(ends) > 1
                                       else f"{ends[0]}")
    assert all(n == MAX_NEW for n, e in zip(lengths, ended) if not e)
    assert g["ch5_generated"] == f"{sum(lengths):,}" and g["ch5_generated_free"] == f"{len(QUESTIONS) * MAX_NEW:,}"
    assert g["ch5_steps"] == f"{max(lengths)}" and g["ch5_eos_max_new"] == f"{MAX_NEW}"
    assert g["ch5_eos_last_live"] == f"{sum(n == max(lengths) for n in lengths)}"
    T = [len(p) for p in prompts]
    assert g["ch5_eos_shortest"] == f"{min(T)}" and g["ch5_eos_longest"] == f"{max(T)}"
    assert g["ch5_eos_pad_tokens"] == f"{len(T) * max(T) - sum(T):,}"
    free = sum(smollm_flops(t + k) for t in T for k in range(1, MAX_NEW))
    used = sum(smollm_flops(t + k) for t, n in zip(T, lengths) for k in range(1, n))
    assert g["ch5_eos_flops_share"] == f"{used / free:.0%}"
    share = smollm_flops(T[0] + 1) / sum(smollm_flops(t + 1) for t in T)
    assert g["ch5_flop_one_share"] == f"{share:.0%}"
    # the preallocated cache of the run: 6 rows of (longest prompt + 32) positions, 30 layers of
    # 3 key/value heads of 64 float32, keys and values
    alloc = len(T) * (max(T) + MAX_NEW) * 2 * 30 * 3 * 64 * 4
    assert g["ch5_alloc"] == f"{alloc / 2**20:.2f} MiB".replace(".00 MiB", " MiB")
    assert g["ch5_written_share"] == f"{sum(t + n for t, n in zip(T, lengths)) / (len(T) * (max(T) + MAX_NEW)):.0%}"
    assert 0 < number(g["ch5_used_end"]) <= number(g["ch5_used_peak"]) <= 100
    table = [t for t in plain_outputs(nb) if t.startswith("sequence  prompt tokens  reply tokens")]
    assert len(table) == 1
    rows = [line.split(None, 3) for line in table[0].splitlines()[2:]]
    assert [(int(r[1]), int(r[2]), r[3]) for r in rows] == [
        (t, n, "end of turn (EOS)" if e else "length limit") for t, n, e in zip(T, lengths, ended)]


def test_ch5_the_measured_steps_are_reported_in_words_that_follow_them(ch5):
    _, g = ch5
    assert number(g["ch5_step_full_ms"]) > 0 and number(g["ch5_step_one_ms"]) > 0
    assert "of the FLOPs" in g["ch5_step_words"] and g["ch5_step_words"].startswith("A step of 6 sequences")
    assert g["ch5_chat_weights"] == executed(MODEL)[1]["ch5_gguf_held"]
    assert number(g["ch5_select_copied"].split()[0]) > 0
    assert g["ch5_plan"].startswith("Prompts of up to") and "free" in g["ch5_plan"]



ONE_ROW = re.compile(
    r"From 6 sequences down to 2 the step's time (?:hardly moved \(\d+% (?:lower|higher)\)|fell by \d+%|rose by \d+%), "
    r"and from 2 to 1 it (?:hardly moved \(\d+% (?:lower|higher)\)|fell by (\d+)%|rose by \d+%)\. "
    r"The step's matrix products alone took ([\d.]+) ms with 2 rows and ([\d.]+) ms with 1, "
    r"(?:(?P<dear>[\d.]+) times what two one-row passes cost: the matrix-matrix routine's price"
    r"|as much as two one-row passes \(a ratio of (?P<same>[\d.]+)\): here the two routines cost the same per row"
    r"|(?P<cheap>[\d.]+) times less than two one-row passes: the matrix-matrix routine reads each weight once "
    r"for both rows)\. (?P<end>.*)")


def test_ch5_the_one_row_path_is_measured_and_its_words_follow_the_measurement(ch5):
    """The step's fall at one row is put to the matrix-vector path by a measurement the page shows:
    the step's products at 2 rows against twice their time at 1 (two one-row passes), in words
    chosen from that ratio with the course's noise of 15%, and the share of the step's fall."""
    nb, g = ch5
    m = ONE_ROW.fullmatch(g["ch5_one_row_words"])
    assert m, g["ch5_one_row_words"]
    two, one = float(m[2]), float(m[3])
    assert (two, one) == (number(g["ch5_products_two_ms"]), number(g["ch5_products_one_ms"]))
    q = two / (2 * one)
    if m["dear"]:
        assert q > 1.15 - 0.01 and abs(float(m["dear"]) - q) <= 0.05 + 0.01 * q
    elif m["same"]:
        assert 1 / 1.15 - 0.01 <= q <= 1.15 + 0.01 and abs(float(m["same"]) - q) <= 0.01
    else:
        assert q < 1 / 1.15 + 0.01 and abs(float(m["cheap"]) - 1 / q) <= 0.05 + 0.01 / q
    step_two, step_one = number(g["ch5_step_two_ms"]), number(g["ch5_step_one_ms"])
    if m["end"].startswith("Their fall"):
        fall = re.fullmatch(r"Their fall from 2 rows to 1, ([\d.]+) ms, is (\d+)% of the step's \(([\d.]+) ms\)\.", m["end"])
        assert fall, m["end"]
        assert abs(float(fall[1]) - (two - one)) <= 0.11 and abs(float(fall[3]) - (step_two - step_one)) <= 0.11
        assert abs(int(fall[2]) - 100 * float(fall[1]) / float(fall[3])) <= 1.5
        assert step_one < step_two / 1.15 + 0.01
    else:
        assert m["end"] in ("The step itself did not fall beyond the noise from 2 sequences to 1.",
                            "The products did not fall with the step: its fall from 2 sequences to 1 is elsewhere.")
    text = markdown(nb)
    assert "{glue:md}`ch5_one_row_words`" in text
    assert "matrix-vector" in text and "(gemv)" in text and "(gemm)" in text and "matmul.c.src" in text

def test_ch5_interface_table_names_every_method_and_error(ch5):
    nb, _ = ch5
    text = markdown(nb)
    section = text.split("## The cache's interface", 1)[1]
    for method in ("update(k, v, counts)", "attend(q, counts)", "reorder(beam_idx)", "select(rows)", "crop(n)"):
        assert f"| `{method}` |" in section, method
    for error in ("CacheFullError", "OutOfBlocks", "ValueError"):
        assert error in section
    # transformers' names, as its cache_utils.py spells them
    for name in ("Cache.update", "reorder_cache", "batch_repeat_interleave", "batch_select_indices",
                 "Cache.crop", "PagedAttentionCache"):
        assert name in section, name


def test_ch5_paged_append_takes_one_block(ch5):
    nb, g = ch5
    assert_glue_references_resolve(nb, g, "ch5_api_")
    # a pool of 3 blocks of 4 positions: a 4-token prompt fills ceil(4 / 4) = 1 block, the fifth
    # token needs ceil(5 / 4) = 2
    assert (g["ch5_api_blocks_prompt"], g["ch5_api_free_prompt"]) == (str(math.ceil(4 / 4)), str(3 - 1))
    assert (g["ch5_api_blocks_append"], g["ch5_api_free_append"]) == (str(math.ceil(5 / 4)), str(3 - 2))
    # crop(4) after a 5 + 1 and a 3 + 1 token row: both rows hold 4, and the refused step changed nothing
    assert g["ch5_api_crop_length"] == "4"


def test_ch5_interface_cell_shows_each_refusal(ch5):
    nb, _ = ch5
    cell = next(c for c in nb.cells if c.cell_type == "code" and "pool_cache = tiny.new_cache" in c.source)
    out = "".join(o.get("text", "") for o in cell.outputs)
    assert "prefill   logits (2, 64) lengths [5, 3]" in out
    assert "decode    logits (2, 64) lengths [6, 4]" in out
    assert "reorder   lengths [6, 6, 4]" in out and "select    lengths [6, 4]" in out
    assert out.count("refused:") == 4
    assert "lengths still [4, 4]" in out and "table still [0, 1]" in out


# ---------------------------------------------------------------- the page


def test_the_chapter_draws_its_figures(ch5):
    nb, _ = ch5
    assert figures(nb) >= 6


def test_chapter_structure():
    path, names = CH5, ["batched_decode_step"]
    nb = nbformat.read(path, as_version=4)
    assert nb.metadata["kernelspec"]["name"] == "python3"
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code")
    md = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    assert md.lstrip().startswith("# ") and md.count("\n# ") == 0
    pairs = self_check_pairs(nb)                # each answer a toggle right under its question
    assert len(pairs) >= 4 and all(answered for _, answered in pairs), pairs
    assert md.index("## Self-check questions") < md.index("## Exercises")
    for name in names:
        link = f"../../exercises/{name}.ipynb"
        assert f"]({link})" in md[md.index("## Exercises"):]
        assert (path.parent / link).resolve().exists()
    for cell in nb.cells:            # the site says no "seed", not even in code (a keyword argument)
        assert not re.search(r"\bseeds?\b", cell.source, flags=re.IGNORECASE), cell.source[:60]
    code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    first = next(c for c in nb.cells if c.cell_type == "code")
    assert "limit_blas_threads(1)" in first.source and first.source.index("limit_blas_threads(1)") < \
        first.source.index("import numpy")
    # the engine's counterparts of the exercises are called, never shown
    for hidden in ("decode_attention", "batched_decode_step", "_gather", "attend_new_tokens", "reorder"):
        assert not re.search(rf"show_source\([^)]*{hidden}", code), hidden
    assert "torch" not in code and "transformers import" not in code




def test_the_executed_chapter_shows_no_answer(ch5, tmp_path):
    nb, _ = ch5
    path = tmp_path / "ch5.ipynb"
    nbformat.write(nb, path)
    assert not find_leaks(path)
    outputs = "\n".join(o.get("text", "") for c in nb.cells for o in c.get("outputs", []))
    for body in ("def decode_attention", "def _gather", "def attend_new_tokens", "def batched_decode_step",
                 "def reorder_cache"):
        assert body not in outputs


SLOW_MACHINE = (
    "import lessons.machine_facts as machine\n"
    "import lessons.engine_timing as timing\n"
    "machine.read_machine = lambda: machine.MachineFacts(mem_available_bytes=256 * 2**20, logical_cpus=1,\n"
    "                                                    usable_cpus=1, cpu_model='test')\n"
    "timing.calibrate = lambda model, *a, **k: timing.Calibration(2e8, 5e-7, 5e-3)\n")


def test_the_chapter_builds_on_a_slow_machine_with_little_memory(tmp_path):
    (tmp_path / "sitecustomize.py").write_text(SLOW_MACHINE)
    env = {"PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
           "OPENBLAS_NUM_THREADS": "1"}
    nb = execute(CH5, env)
    g = glued(nb)
    assert not errors(nb)
    assert g["ch5_longest"] == "32" and "slow or busy" in g["ch5_plan"]
    assert "256 MiB free" in g["ch5_plan"]
    assert "numpy was already loaded" in g["ch5_blas"]     # the sitecustomize imported numpy first


# ---------------------------------------------------------------- exercise notebooks


def test_the_worked_examples_run_and_say_what_they_show():
    for name, words in (("batched_decode_step", "out[1, 3] = [0.7517 1.5035]"),):
        nb = execute(ROOT / "exercises" / f"{name}.ipynb")
        text = "".join(o.get("text", "") for o in nb.cells[3].outputs)
        assert words in text, text


# ---------------------------------------------------------------- public checks: right and wrong answers


def _failures(name, fn):
    return [o for o in evaluate(name, fn) if o.status == "failed"]


def _batched(q, K, V, lengths, kv_head=None, all_positions=False, scale=True, mask_only=False):
    """A correct answer, or one of the common mistakes, written for these tests."""
    B, H, d = q.shape
    G, L = K.shape[1], K.shape[2]
    out = np.zeros(q.shape, dtype=q.dtype)              # q's dtype, as the statement asks
    for b in range(B):
        n = L if all_positions or mask_only else int(lengths[b])
        for h in range(H):
            g = kv_head(h, H, G) if kv_head else h // (H // G)
            s = K[b, g, :n] @ q[b, h] / (math.sqrt(d) if scale else 1.0)
            if mask_only:
                s[int(lengths[b]):] = -np.inf
            w = np.exp(s - s.max())
            out[b, h] = (w / w.sum()) @ V[b, g, :n]
    return out


def test_batched_decode_step_checks():
    assert not _failures("batched_decode_step", _batched)
    tiled = _failures("batched_decode_step", lambda *a: _batched(*a, kv_head=lambda h, H, G: h % G))
    assert tiled and any("np.repeat, not np.tile" in o.message for o in tiled)
    ignored = _failures("batched_decode_step", lambda *a: _batched(*a, all_positions=True))
    assert ignored and any("stop at its own length" in o.message for o in ignored)
    unscaled = _failures("batched_decode_step", lambda *a: _batched(*a, scale=False))
    assert unscaled and any("sqrt(d)" in o.message for o in unscaled)
    with np.errstate(all="ignore"):
        masked = _failures("batched_decode_step", lambda *a: _batched(*a, mask_only=True))
    assert [o.description for o in masked] == ["NaN beyond the lengths changes nothing"]
    assert "0 times NaN" in masked[0].message

    def writes(q, K, V, lengths):
        K[:, :, 0] = 0.0
        return _batched(q, K, V, lengths)
    assert any("read-only" in o.message for o in _failures("batched_decode_step", writes))
    with pytest.raises(PublicCheckFailed):
        run_checks("batched_decode_step", lambda *a: _batched(*a, scale=False))


def test_public_check_data_agree_with_the_engine():
    from kvcache.gqa import decode_attention

    data = json.loads((ROOT / "public_checks" / "data" / "batched_decode_step.json").read_text())
    for key in ("by_hand", "grouped"):
        case = data[key]
        q, K, V = (np.array(case[n]) for n in ("q", "K", "V"))
        got = decode_attention(q, K, V, np.array(case["lengths"]))
        np.testing.assert_allclose(got, case["expected"], rtol=1e-12, atol=1e-13)
        for mistake in case["mistakes"].values():
            if not np.allclose(mistake, case["expected"]):
                break
        else:
            pytest.fail(f"{key}: no stored mistake differs from the answer")


# ---------------------------------------------------------------- an expert's reading


def test_ch5_the_beam_candidates_follow_the_eos_count(ch5):
    """One EOS id (the chat template's end of turn) and 3 beams: max(2, 1 + 1) * 3 = 6."""
    _, g = ch5
    assert (g["ch5_beam_n_eos"], g["ch5_beam_k"], g["ch5_beam_candidates"]) == ("1", "3", "6")
    md = "\n".join(c.source for c in nbformat.read(CH5, as_version=4).cells if c.cell_type == "markdown")
    flat = " ".join(md.split())
    assert "best $2K$" not in flat and "$2K$ candidates per prompt" not in flat
    assert "\\max(2, 1 + n_{\\mathrm{eos}})" in flat


def test_ch5_the_interface_is_a_narrow_table_and_crop_says_what_it_takes():
    md = "\n".join(c.source for c in nbformat.read(CH5, as_version=4).cells if c.cell_type == "markdown")
    assert "| method | takes | does |" in md
    assert "| method | in | out | what it guarantees | what it refuses |" not in md
    for line in md.splitlines():
        if line.startswith("| `") and "(" in line:
            assert line.count("|") <= 4, line           # three columns, none a paragraph long
            assert len(line) < 140, line
    flat = " ".join(md.split())
    assert "`Cache.crop(max_length)`" in flat and "a negative `max_length` removes that many tokens" in flat
    assert "generation_utils#transformers.DynamicCache" in flat
    assert "## Sources and further reading" in md
