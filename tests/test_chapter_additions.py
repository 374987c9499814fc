"""The sections the chapters gained from the source documents: the cache's interface (chapter 5),
the GA-2 head's memory and its softmax unit's typical error (chapter 10), the mutation bound
(chapter 11), the inference guide's notes (chapters 3, 4, 7), and the appendix's attention notes.

Each notebook is executed once (module-scoped fixtures, cwd = book/chapters); the numbers its new
text states through myst-nb glue are read back and pinned against the source documents' figures,
written here as constants, or against arithmetic this file does on its own.  Measured values
(the batching wait's times) are checked for their form and their direction only, never a speed.
"""
import math
import re
from pathlib import Path

import pytest

from chapter_notebooks import execute, glued

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = ROOT / "book" / "chapters"
GLUE_ROLE = re.compile(r"\{glue:(?:text|md)?\}`([A-Za-z0-9_]+)(?::[^`]*)?`")


def markdown(nb):
    return "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")


def roles_resolve(nb, g, prefix):
    """Every glue role of the notebook's text that starts with ``prefix`` names a glued value."""
    names = {m.group(1) for m in GLUE_ROLE.finditer(markdown(nb)) if m.group(1).startswith(prefix)}
    assert names, f"no {prefix}* glue in the text"
    assert names <= set(g), f"unglued: {sorted(names - set(g))}"
    return names


# ---------------------------------------------------------------- chapter 5: the cache's interface

@pytest.fixture(scope="module")
def ch5():
    nb = execute(CHAPTERS / "05_batches.ipynb")
    return nb, glued(nb)


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
    roles_resolve(nb, g, "ch5_api_")
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


# ---------------------------------------------------------------- chapter 10: GA-2's head

# the GA-2 chapter: "2 (K and V) x 16 (head width) x 1 byte (int8) = 32 bytes per token; a
# 32-token context holds 1024 bytes"; its self-check: 12 layers, 12 heads of width 64, int8,
# 4,096 tokens
GA2_HEAD = {"ch10_head_bpt": "32", "ch10_head_full": "1,024"}
SMALL_MODEL_BYTES = 2 * 12 * 12 * 64 * 4096 * 1
# its softmax unit "is accurate to 0.00002"; chapter 9's worst over 3,200 vectors is 0.000168
PUBLISHED_SOFTMAX = 0.00002
COURSE_WORST_SOFTMAX = "0.000168"


@pytest.fixture(scope="module")
def ch10():
    nb = execute(CHAPTERS / "10_decode_on_ga2.ipynb")
    return nb, glued(nb)


def test_ch10_head_and_small_model_cache(ch10):
    nb, g = ch10
    assert {k: g[k] for k in GA2_HEAD} == GA2_HEAD
    assert g["ch10_small_model_bytes"] == f"{SMALL_MODEL_BYTES:,}" == "75,497,472"
    assert g["ch10_small_model_mib"] == "72 MiB"


def test_ch10_softmax_typical_against_worst(ch10):
    nb, g = ch10
    roles_resolve(nb, g, "ch10_sm_")
    assert g["ch10_sm_worst"] == COURSE_WORST_SOFTMAX
    # the published figure is the median, to its one significant digit
    assert round(float(g["ch10_sm_median"]), 5) == PUBLISHED_SOFTMAX
    ratio = float(g["ch10_sm_worst_over_median"])
    assert ratio == pytest.approx(float(COURSE_WORST_SOFTMAX) / float(g["ch10_sm_median"]), abs=0.06)
    assert ratio > 5
