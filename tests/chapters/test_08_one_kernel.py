"""Chapter 8 (one kernel over a fixed buffer), its exercise blocked_decode and the exercise's
public checks.

The chapter is read as the book's build executed it (and executed here once more as if on a
one-core machine with little free memory); the numbers its text states through glue are read back
and pinned: the note's figures (a 32-token prompt, head size 8, a decode step at 33, a buffer of
4096 rows), the counts that follow from them, and agreement with plain attention to float64 rounding.
Measured times are checked for being positive and finite, and the words that describe them for
agreeing with the figures; no speed is asserted.
"""
import math
import os
import re

import nbformat
import numpy as np
import pytest

from chapter_notebooks import (ROOT, assert_glue_references_resolve, assert_says_how_much_faster,
                               chapter_path, errors, execute, executed, figures, glued, markdown)
from coursetools.answer_leaks import leaks_in_notebook
from public_checks import evaluate

CH8 = chapter_path("08_one_kernel")


# The note: a 32-token prompt and head size 8; blocks of 16 read the prefill in 2 blocks and the
# decode step at 33 in 3 (two full, one holding row 32); the buffer's other 4096 - 33 rows unread.
# Self-check 1: 1000 rows in blocks of 256 -> 4 blocks (the last holds rows 768-1023), 24 rows
# masked; self-check 2: the note's exit test (b * B > t) reads 5 blocks for t = 1024, B = 256,
# where 4 suffice.  The paged example: 13 positions in blocks of 4 -> 4 blocks, 3 masked.
EXACT = {"ch8_prefill_blocks": 2, "ch8_decode_blocks": 3, "ch8_unused_rows": "4,063",
         "ch8_q1_blocks": 4, "ch8_q1_masked": 24, "ch8_q1_last_lo": 768, "ch8_q1_last_hi": 1023,
         "ch8_q2_note": 5, "ch8_q2_right": 4,
         "ch8_paged_visited": 4, "ch8_paged_masked": 3, "ch8_long_positions": "65,536",
         "ch8_max_workers": 8, "ch8_min_blocks": 4, "ch8_repeats": 7}

ROUNDING = ["ch8_err_prefill", "ch8_err_decode", "ch8_err_both_nan", "ch8_err_novalue_old", "ch8_random_err",
            "ch8_err_chunks", "ch8_transposed_gap", "ch8_split_gap", "ch8_paged_err"]

MEASURED = ["ch8_long_speedup", "ch8_long_overhead", "ch8_short_speedup", "ch8_exit_short_ms",
            "ch8_full_short_ms", "ch8_exit_ratio", "ch8_exit_slope", "ch8_full_long_ratio"]


@pytest.fixture(scope="module")
def ch8():
    return executed(CH8)


def warnings_printed(nb):
    return [out["text"] for cell in nb.cells for out in cell.get("outputs", [])
            if out.get("name") == "stderr" and "Warning" in out.get("text", "")]


# ---------------------------------------------------------------- the chapter's figures


def test_the_notes_figures_and_what_follows_from_them(ch8):
    nb, g = ch8
    assert not errors(nb) and not warnings_printed(nb)
    for key, want in EXACT.items():
        assert g[key] == want, key


def test_every_variant_agrees_with_plain_attention_to_rounding(ch8):
    _, g = ch8
    for key in ROUNDING:
        assert 0 <= float(g[key]) < 1e-13, key
    assert float(g["ch8_err_noscore_old"].rstrip("%")) >= 1, "without the score mask the old rows should count"
    assert float(g["ch8_top_score"].replace(",", "")) > 1e4
    assert g["ch8_split_L"] == g["ch8_lse_direct"]     # the combine's L, against the scores' own


def assert_says_how_much_faster_or_noise(words, ratio):
    """A ratio of two times measured on a shared machine: within 15% of 1 (give or take the
    glue's two decimals) the page calls it noise and states the ratio; beyond, it says how much
    faster or slower, as every page does."""
    if 1 / 1.15 + 0.005 < ratio < 1.15 - 0.005:
        assert words == f"no faster or slower, within the noise (a ratio of {ratio:.2f}), than", (words, ratio)
    elif words.startswith("no faster or slower, within the noise"):
        assert 1 / 1.15 - 0.005 <= ratio <= 1.15 + 0.005, (words, ratio)
    else:
        assert_says_how_much_faster(words, ratio, shown_ratio_decimals=2)


def test_the_measurements_are_stated_and_their_words_agree(ch8):
    """The split-K plan as the page states it (one thread per usable core, at most 8, and at least
    2 chunks; a short context of 1,024 positions, a long one, and one read from main memory when it
    fit), and the words of each measured ratio (one pass's time over the split's) against the ratio."""
    nb, g = ch8
    for key in MEASURED:
        value = float(str(g[key]).replace(",", ""))
        assert math.isfinite(value) and value > 0, key
    workers = g["ch8_workers"]
    assert 1 <= workers <= 8 and g["ch8_splits"] == max(2, workers)
    memory_measured = g["ch8_memory_speedup"] != "not measured"
    assert g["ch8_contexts"] == (3 if memory_measured else 2)
    found = g["ch8_split_found"]
    if workers == 1:
        assert "one core only" in found
    else:
        assert "over the short context (1,024 positions" in found
        assert f"over the long context ({g['ch8_positions']} positions" in found
        assert ("context read from main memory" in found) == memory_measured
    assert_says_how_much_faster_or_noise(g["ch8_split_word"].strip(), float(g["ch8_long_speedup"]))
    if memory_measured:
        memory = float(g["ch8_memory_speedup"])
        assert math.isfinite(memory) and memory > 0
        said = re.search(r"it was (.+?) one pass", g["ch8_split_summary"])
        assert said, g["ch8_split_summary"]
        assert_says_how_much_faster_or_noise(said[1], memory)
    assert g["ch8_split_reading"].endswith(".")
    assert float(g["ch8_split_diff"]) < 1e-4                       # float32
    assert g["ch8_blas_held"].startswith(("before numpy was loaded", "but it reports"))
    assert figures(nb) >= 5    # the buffer, blocks against seq_len, split-K, the early exit, the pool


def test_the_chapter_builds_on_a_one_core_machine_with_little_memory(tmp_path):
    """A machine with one usable core and 200 MiB free: split-K's chunks take turns, the long
    context is shortened to fit, and the page says so and goes on."""
    (tmp_path / "sitecustomize.py").write_text(
        "import lessons.machine_facts as machine\n"
        "machine.read_machine = lambda: machine.MachineFacts(llc_bytes=8 * 2**20, mem_available_bytes=200 * 2**20,\n"
        "                                                    logical_cpus=1, usable_cpus=1, cpu_model='test')\n")
    nb = execute(CH8, {"PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])})
    g = glued(nb)
    assert not errors(nb)
    assert g["ch8_workers"] == 1 and g["ch8_splits"] == 2 and "one core only" in g["ch8_split_found"]
    assert int(g["ch8_positions"].replace(",", "")) < 65536 and g["ch8_memory_speedup"] == "not measured"
    assert g["ch8_contexts"] == 2 and g["ch8_split_summary"].startswith("over the long context")
    assert g["ch8_machine"].startswith("test, 1 logical CPU")
    plan_table = "".join(o.get("data", {}).get("text/plain", "") for c in nb.cells for o in c.get("outputs", []))
    assert "the chunks take turns" in plan_table and "an eighth of the 200 MiB" in plan_table
    assert "already read from main memory" in plan_table          # an 8 MiB cache: 16 MiB are beyond it
    assert figures(nb) >= 5


def test_the_split_k_example_says_the_splits_its_table_shows(ch8):
    nb, g = ch8
    cell = next(c for c in nb.cells if c.cell_type == "code" and "split_ranges(1000, 64, S)" in c.source)
    shown = "".join(out["data"]["text/markdown"] for out in cell.outputs if "text/markdown" in out.get("data", {}))
    rows = [line.strip("|").split("|") for line in shown.splitlines()
            if line.startswith("|") and not set(line) <= set("|-: ")]
    assert rows[0][0].strip() == "splits"
    splits = [int(r[0]) for r in rows[1:]]
    assert len(splits) >= 2
    want = ", ".join(map(str, splits[:-1])) + " and " + str(splits[-1])
    assert g["ch8_split_counts"] == want
    assert g["ch8_split_blocks"] == math.ceil(1000 / 64) == 16
    text = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    assert "split {glue:text}`ch8_split_counts` ways" in text and "1 to 8 ways" not in text


def test_the_committed_chapter_has_no_outputs_and_no_seed():
    nb = nbformat.read(CH8, as_version=4)
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code")
    for cell in nb.cells:
        assert not re.search(r"\bseeds?\b", cell.source, flags=re.IGNORECASE), cell.source[:80]


def test_the_chapter_shows_no_answer_and_links_the_exercise(ch8):
    from coursetools.answer_leaks import describe, leaks_in_notebook
    nb, _ = ch8
    leaks = leaks_in_notebook(nb, "ch8")
    assert not leaks, describe(leaks)
    source = "\n".join(c.source for c in nb.cells)
    assert "show_source(blocked_decode" not in source and "getsource" not in source
    text = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    assert "[blocked_decode exercise](../../exercises/blocked_decode.ipynb)" in text
    assert "](../../exercises/blocked_decode.ipynb)" in text.split("## Exercises")[1]
    assert "Self-check questions" in text and text.count(":class: dropdown") >= 6
    for name in ("FlashAttention", "Flash-Decoding", "vLLM"):
        assert name in text, name


def test_the_chapter_is_in_the_table_of_contents_after_chapter_4():
    toc = (ROOT / "_toc.yml").read_text()
    assert toc.index("04_memory_bound") < toc.index("08_one_kernel") < toc.index("appendix_transformer")
    assert "exercises/blocked_decode" in toc


# ---------------------------------------------------------------- the exercise notebooks


def test_the_worked_example_runs_and_says_what_to_expect():
    from kvcache.kernel import blocked_decode
    nb = nbformat.read(ROOT / "exercises" / "blocked_decode.ipynb", as_version=4)
    ns = {}
    exec(nb.cells[3].source, ns)
    out, visited = blocked_decode(ns["q"], ns["K_buf"], ns["V_buf"], ns["seq_len"], ns["block"])
    w = ns["w"]
    assert np.allclose(out, w @ ns["V_buf"][:5] / w.sum()) and visited == 3
    assert math.isclose(ns["l"], float(np.exp(ns["s"][:4] - ns["s"][:4].max()).sum()))


# ---------------------------------------------------------------- the public checks


def _failures(fn):
    return [o for o in evaluate("blocked_decode", fn) if o.status == "failed"]


def _right(q, K_buf, V_buf, seq_len, block):
    s = K_buf[:seq_len] @ q / np.sqrt(q.shape[0])
    w = np.exp(s - s.max())
    return w @ V_buf[:seq_len] / w.sum(), -(-seq_len // block)


def test_the_public_checks_pass_right_answers_and_name_common_mistakes():
    from kvcache.kernel import blocked_decode
    assert not _failures(blocked_decode) and not _failures(_right)
    floor = _failures(lambda *a: (_right(*a)[0], a[3] // a[4]))
    assert floor and any("round seq_len / block up" in o.message for o in floor)
    whole = _failures(lambda q, K, V, t, b: (_right(q, K, V, K.shape[0], b)[0], _right(q, K, V, t, b)[1]))
    assert whole and any("every row of the buffer" in o.message or "NaN" in o.message for o in whole)
    buffer_blocks = _failures(lambda q, K, V, t, b: (_right(q, K, V, t, b)[0], -(-K.shape[0] // b)))
    assert buffer_blocks and any("whole buffer" in o.message for o in buffer_blocks)

    def no_value_mask(q, K, V, t, b):
        s = K @ q / np.sqrt(q.shape[0])
        s = np.where(np.arange(len(s)) < t, s, -np.inf)
        w = np.exp(s - s.max())
        return w @ V / w.sum(), -(-t // b)
    nan = _failures(no_value_mask)
    assert nan and any("0 x NaN is NaN" in o.message for o in nan)
    unscaled = _failures(lambda q, K, V, t, b: _right(q * np.sqrt(q.shape[0]), K, V, t, b))
    assert unscaled and any("sqrt(d)" in o.message for o in unscaled)


def test_the_stored_public_check_data_agrees_with_the_kernel():
    """public_checks/data/blocked_decode.json, written from references of tools/public_check_data.py,
    against kvcache.kernel (two implementations that share no code)."""
    from kvcache.kernel import blocked_decode
    from public_checks.blocked_decode import DATA, _buffers
    for key in ("note", "one_row", "nan_tail", "garbage"):
        case = DATA[key]
        out, visited = blocked_decode(*_buffers(case), case["seq_len"], case["block"])
        assert np.allclose(out, case["expected"], rtol=1e-12, atol=1e-13) and visited == case["visited"], key
    assert not np.allclose(DATA["garbage"]["mistakes"]["no_length_mask"], DATA["garbage"]["expected"])
    for case in DATA["counts"]:
        assert case["visited"] == math.ceil(case["seq_len"] / case["block"])


def test_ch8_nrepeats_early_exit(ch8):
    nb, g = ch8
    assert_glue_references_resolve(nb, g, "ch8_rep_")
    # 1,025 rows in blocks of 256, 4 passes of 64: 5 blocks; the last holds 1 row, so 1 pass of it
    # runs (63 of its rows masked) instead of 4 (255 masked)
    assert (g["ch8_rep_whole"], g["ch8_rep_early"]) == (str(5 * 4), str(4 * 4 + 1))
    assert (g["ch8_rep_masked"], g["ch8_rep_masked_whole"]) == ("63", "255")
    assert g["ch8_rep_saved"] == f"{1 - 17 / 20:.0%}" == "15%"
    assert "`nRepeats` passes" in markdown(nb)


# ---------------------------------------------------------------- an expert's reading


def test_the_summary_states_the_bodys_measurement_and_noise_is_noise(ch8):
    """The summary's split-K words come from the same ratios as the body's table, and a ratio
    within 15% of 1 is called noise there (85.0 against 89.4 ms is not "1.1 times slower")."""
    from coursebook import change_words, noise_times_word, within_noise
    _, g = ch8
    long_speedup = float(g["ch8_long_speedup"])
    assert g["ch8_split_word"] == noise_times_word(long_speedup) or abs(long_speedup - 1.15) < 0.01 \
        or abs(long_speedup - 1 / 1.15) < 0.01
    if g["ch8_memory_speedup"] != "not measured":
        memory = float(g["ch8_memory_speedup"])
        if within_noise(memory) and abs(memory - 1.15) > 0.01 and abs(memory - 1 / 1.15) > 0.01:
            assert "within the noise" in g["ch8_split_summary"]
            assert "times slower" not in g["ch8_split_summary"] and "times faster" not in g["ch8_split_summary"]
    overhead = float(g["ch8_long_overhead"])
    cost = g["ch8_split_cost"]
    if overhead > 1.16:
        assert cost.endswith("the price of splitting itself")
    elif overhead < 1.14:
        assert cost.endswith("no price of splitting was measured")
    short_ms, full_long_ratio = float(g["ch8_full_short_ms"]), float(g["ch8_full_long_ratio"])
    assert g["ch8_full_change"].startswith(("fell by", "rose by", "hardly moved"))
    assert g["ch8_full_blocks"] == "64"            # 16,384 rows in blocks of 256
    md = "\n".join(c.source for c in nbformat.read(CH8, as_version=4).cells if c.cell_type == "markdown")
    assert "hardly moved" not in md and "the price of\nsplitting itself, small" not in md


def test_the_note_is_cited_and_the_engines_are_described_as_they_are():
    nb = nbformat.read(CH8, as_version=4)
    md = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    flat = " ".join(md.split())
    assert "a short note by an engineer" not in flat
    assert "*manupak*" in flat and "https://github.com/ROCm/rocMLIR/pull/1696" in flat
    assert "vLLM's current engine, V1" in flat and "FlashInfer" in flat
    assert "## Why a runtime length matters on a GPU: CUDA graphs" in md
    assert "### A block with every score masked" in md
    sources = md[md.index("## Sources and further reading"):]
    assert sources.count("](https://") >= 6


def test_the_fully_masked_block_is_nan_unguarded_and_zero_guarded(ch8):
    nb, _ = ch8
    cell = next(c for c in nb.cells if "unguarded" in c.source)
    text = "".join(o.get("text", "") for o in cell.outputs)
    assert "exp(M - M') unguarded: nan" in text
    assert "guarded:   0.0" in text and "of a masked score: 0.0" in text
    printed = "".join(o.get("text", "") for c in nb.cells if "transposed against plain" in c.source
                      for o in c.outputs)
    assert "e-16" not in printed or len(printed.split(":")[1].strip()) <= 8     # 2.2e-16, not 2.220446049250313e-16
