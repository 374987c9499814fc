"""Chapter 10 (the decode step as GA-2 programs), its exercise (attention_tail) and its public checks.

The numbers the chapter states through glue are read back and pinned against the figures published
with the GA-2 design (the source document's tables, transcribed here as constants, never produced
by this project's code) and against exact arithmetic.  The chapter is also executed on a machine
without a Verilog simulator: it must build and say so.
"""
import math
import os
import sys

import nbformat
import pytest

from chapter_notebooks import (ROOT, answer_cell, assert_glue_references_resolve, assert_prints_no_machine_answer,
                               assert_shows_no_answer_and_links_its_exercises, assert_stored_bare_with_self_checks,
                               chapter_path, errors, execute, executed, glue_references, glued, text_outputs)
from public_checks import evaluate

sys.path.insert(0, str(ROOT / "tests" / "ga2"))
import published_figures  # noqa: E402  (the published figures, transcribed once)

CH10 = chapter_path("10_decode_on_ga2")
EXERCISES = {"attention_tail": 10}


# ---------------------------------------------------------------- the published figures
# The figures published with the GA-2 design: its listing of the cached program for L = 3 and
# its cycle table, as tests/ga2 transcribed them.
PUBLISHED_LISTING_L3 = published_figures.PUBLISHED_LISTING_L3

PUBLISHED_CYCLES = published_figures.PUBLISHED_CYCLE_TABLE

PUBLISHED_CH10 = {
    "ch10_len_cached": "32", "ch10_len_recompute": "28", "ch10_append_k": "19", "ch10_append_dst": "2080",
    "ch10_weights_m": "16646144", "ch10_weights_s": "33",
    "ch10_ratio_2": "1.05", "ch10_ratio_32": "3.04", "ch10_c32": "5,251", "ch10_r32": "15,989",
    "ch10_slope_c": "89", "ch10_slope_r": "455", "ch10_ratio_1": "0.98", "ch10_c1": "2,500", "ch10_r1": "2,460",
    "ch10_share_mm": "58.5%", "ch10_share_ld": "34.7%", "ch10_n_mm": "24", "ch10_n_ld": "4",
    "ch10_ld_cycles": "1,820", "ch10_n_fixed": "12",
    "ch10_gen_c": "124,346", "ch10_gen_r": "295,184", "ch10_gen_ratio": "2.37",
    "ch10_per_token_c": "89", "ch10_per_token_r": "436",
    # running example A: 0.297 against 0.291, the scores x 16, the unit's output, int8 weights, 0.006
    "ch10_a_w0_real": "0.297", "ch10_a_w0_chip": "0.291", "ch10_a_s8": "[11, 6, 17, -11]",
    "ch10_a_p16": "[19054, 13940, 27724, 4818]", "ch10_a_w8": "[37, 27, 54, 9]", "ch10_a_gap": "0.006",
    "ch10_a_out_real": "(1.0700, 1.3343)", "ch10_a_out_chip": "(1.0709, 1.3465)",
    # the circuit: ten programs, 53,292 cycles in total
    "ch10_model_total": "53,292",
}


# the accuracy study, mean % of the cumulative stages (L = 16) and of the pipeline by length
PUBLISHED_STAGE_MEANS = {"ch10_pub_inputs": "1.69", "ch10_pub_final": "3.47"}

EXACT_CH10 = {
    "ch10_max_tokens": "32", "ch10_head_last": "20", "ch10_tail_first": "21", "ch10_tail_last": "30",
    "ch10_halt_index": "31", "ch10_append_v": "20", "ch10_a_gap_key": "0", "ch10_a_w0_rounded": "0.2907",
    "ch10_a_s0": "0.7071", "ch10_a_s0_16": "0.6875", "ch10_loop_same": "agree", "ch10_loop_exact": "equal",
    "ch10_ratio_64": "3.77", "ch10_ratio_peak": "3.79", "ch10_ratio_peak_L": "61", "ch10_reaches_5": "beyond 64",
    "ch10_grow_c64": "89", "ch10_grow_r64": "455", "ch10_ratio_limit": "5.1", "ch10_fixed_cycles": "1,344",
    "ch10_all_m1": "all", "ch10_c32_step": "5,251", "ch10_r32_step": "15,989", "ch10_st_softmax": "0.00",
    "ch10_st_largest": "int8 inputs and weights", "ch10_reproduced_stages": "reproduces",
    "ch10_reproduced_lengths": "also", "ch10_verilog_modules": "12",
}


@pytest.fixture(scope="module")
def ch10():
    return executed(CH10)


# ---------------------------------------------------------------- chapter 10


def test_ch10_published_figures(ch10):
    nb, g = ch10
    assert not errors(nb)
    for key, want in {**PUBLISHED_CH10, **PUBLISHED_STAGE_MEANS}.items():
        assert g[key] == want, key
    listing = "\n".join(line.strip() for line in text_outputs(nb).splitlines())
    assert PUBLISHED_LISTING_L3 in listing + "\n"


def test_ch10_exact_figures(ch10):
    _, g = ch10
    for key, want in EXACT_CH10.items():
        assert g[key] == want, key
    # past 64 the straight lines of +455 and +89 per token cross the ratio 5 near 1,060 tokens
    assert g["ch10_reach5_L"] == "1,060"
    # recompute from L = 4 to 5, by the spec's table: X +16, eight new 1-row tiles 8 x 112, the K and V
    # requantizers +32, a second score tile 58, RQ, SM, RQ +5, four weighted-sum products +24: 1,031;
    # from 5 to 6 the eight tiles gain a row (8 x 21) and the score tile a position (18): 263
    assert g["ch10_jump_5"] == "1,031" and g["ch10_step_6"] == "263"


def test_ch10_change_the_query_exercise(ch10):
    """The exercise's answer against arithmetic done here: q = (0, 1) against the keys (1, 0),
    (0, 1), (1, 1), (-1, 0); the spec's softmax unit by its formula; row 1 of the prefill matrix
    is the softmax of its two scores."""
    import math
    _, g = ch10
    r = 1 / math.sqrt(2)
    assert g["ch10_x_scores"] == f"(0.0000, {r:.4f}, {r:.4f}, 0.0000)"
    assert g["ch10_x_top"] == "1 and 2"
    e = [math.exp(s) for s in (0, r, r, 0)]
    weights = [x / sum(e) for x in e]
    assert g["ch10_x_weights"] == "(" + ", ".join(f"{w:.4f}" for w in weights) + ")"
    s8 = [round(16 * s) for s in (0, r, r, 0)]                          # 11.31 -> 11, no halves here
    assert g["ch10_x_s8"] == str(s8) == "[0, 11, 11, 0]"
    table = [math.floor(65536 * math.exp(-(max(s8) - x) / 16)) for x in s8]
    p16 = [(t * 65536 + sum(table) // 2) // sum(table) for t in table]
    assert g["ch10_x_p16"] == str(p16)
    assert g["ch10_x_chip"] == "(" + ", ".join(f"{p / 65536:.4f}" for p in p16) + ")"
    assert g["ch10_x_last_row"] == "equal"
    row1 = [1 / (1 + math.exp(r)), math.exp(r) / (1 + math.exp(r))]
    assert g["ch10_x_row1"] == f"({row1[0]:.4f}, {row1[1]:.4f})" == "(0.3302, 0.6698)"
    assert g["ch10_x_half"] == "(0.5000, 0.5000)"
    V = [(1.0, 0.0), (0.0, 2.0), (2.0, 2.0), (-1.0, 1.0)]
    out = [sum(w * v[i] for w, v in zip(weights, V)) for i in (0, 1)]
    assert g["ch10_x_out"] == f"({out[0]:.4f}, {out[1]:.4f})"
    # row 1's output is the published 0.3302 / 1.3395 of the running example
    assert g["ch10_x_row1_out"] == "(0.3302, 1.3395)"


def test_ch10_names_each_per_token_growth_by_its_span(ch10):
    """Two growths of a step per extra token: +455 (recompute) and +89 (cached) from 16 to 32 tokens,
    and +436 and +89 on average over a 32-token generation (from the first token to the 32nd, whose
    31 steps hold seven of the recompute step's jumps).  The text says which is which, everywhere."""
    nb, g = ch10
    recompute = [2460]             # at L = 1; then +263 within a block of four rows, +1,031 at L = 5, 9, ...
    for L in range(2, 33):
        recompute.append(recompute[-1] + (1031 if L % 4 == 1 else 263))
    assert g["ch10_r1"] == "2,460" and g["ch10_r32_step"] == f"{recompute[-1]:,}"
    assert g["ch10_per_token_r"] == f"{(recompute[31] - recompute[0]) / 31:.0f}" == "436"
    assert g["ch10_slope_r"] == f"{(recompute[31] - recompute[15]) / 16:.0f}" == "455"
    assert g["ch10_per_token_c"] == g["ch10_slope_c"] == "89"
    md = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    summary = md[md.index("## Summary"):md.index("## Self-check questions")]
    bullet = next(b for b in summary.split("\n- ") if "ch10_per_token_r" in b)
    assert "on average over the 32-token generation" in bullet
    assert "{glue:text}`ch10_slope_r` against {glue:text}`ch10_slope_c` from 16 to 32 tokens" in bullet
    body = md[:md.index("## Summary")]
    assert "From 16 to 32 tokens the recompute step grows by about\n{glue:text}`ch10_slope_r`" in body
    assert "On average over the\ngeneration, from the first token to the 32nd" in body


def test_ch10_pipeline_legend_is_off_the_data():
    nb = nbformat.read(CH10, as_version=4)
    code = next(c.source for c in nb.cells if c.cell_type == "code" and 'title="The GA-2 pipeline"' in c.source)
    assert 'ax2.legend(loc="upper center", bbox_to_anchor=(0.5, -0.22)' in code    # under the axis


def test_ch10_counts_cache_rows_from_0_as_it_counts_tokens(ch10):
    nb, g = ch10
    md = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    answer = md[md.index("5. In the listing for $L = 3$"):md.index("6. Why does the ratio")]
    assert "third row" not in answer and "row 4" not in answer
    assert "row 2 of\nthe key cache, token 2's" in answer and "land in row 3, token 3's place" in answer
    # the key of token 2 (the third) goes to EXT word 2048 + 2 rows of 16
    assert g["ch10_append_dst"] == f"{2048 + 2 * 16}"


def test_ch10_cycle_table_is_the_published_one(ch10):
    nb, _ = ch10
    shown = "\n".join("".join(out.get("data", {}).get("text/markdown", "")) for cell in nb.cells
                      for out in cell.get("outputs", []))
    for (L, variant), (n, total, matrix, dma, vector) in PUBLISHED_CYCLES.items():
        row = f"| {L} | {variant} | {n} | {total:,} | {matrix:,} | {dma:,} | {vector:,} |"
        assert row in shown, row


def test_ch10_accuracy_study_beside_the_published_figures(ch10):
    """The study on this course's random data is close to the published one (different draws), and
    with the published draws it reproduces the published tables exactly (the page says so)."""
    _, g = ch10
    assert abs(float(g["ch10_st_inputs"]) - 1.69) < 0.45 and abs(float(g["ch10_st_final"]) - 3.47) < 0.45
    assert 0.5 < float(g["ch10_len_1"]) < 1.5 and 3.5 < float(g["ch10_len_32"]) < 6.0
    assert float(g["ch10_len_worst"]) < 12
    assert float(g["ch10_st_scores"]) > 0 and float(g["ch10_st_weights"]) > 0


def test_ch10_runs_the_circuit_and_finds_its_counters_equal(ch10):
    nb, g = ch10
    import ga2.rtl
    if "icarus" not in ga2.rtl.available():
        pytest.fail("iverilog is not installed: run make system-deps (the chapter would only show the model)")
    assert "10 programs" in g["ch10_circuit"] and "53,292 cycles in total" in g["ch10_circuit"]
    assert "For every one of them its five counters equal the model's" in g["ch10_circuit"]
    shown = "\n".join("".join(out.get("data", {}).get("text/markdown", "")) for cell in nb.cells
                      for out in cell.get("outputs", []))
    assert shown.count("| yes |") == 10 and "| NO |" not in shown


def test_ch10_builds_without_a_verilog_simulator(tmp_path):
    """On a machine with neither Icarus nor Verilator the page builds, shows the model's counters
    and says why the circuit did not run (the kernel is told so by a sitecustomize)."""
    (tmp_path / "sitecustomize.py").write_text(
        "import ga2.rtl\n"
        "from ga2.rtl import simulators\n"
        "for cls in simulators.SIMULATORS.values():\n"
        "    cls.is_available = classmethod(lambda cls: False)\n")
    nb = execute(CH10, {"PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])})
    g = glued(nb)
    assert not errors(nb)
    assert g["ch10_circuit"].startswith("No Icarus Verilog was installed on the machine that built this page")
    assert "53,292 cycles in total" in g["ch10_circuit"] and "make system-deps" in g["ch10_circuit"]
    assert g["ch10_gen_c"] == "124,346"


def test_ch10_saves_the_cycles_widget_for_the_site(ch10):
    """The widget's data is the cycle model's, split where the scratchpad plan ends: by unit up to
    32 tokens, in the "past 32" parts after; the page saves its state (the site draws it)."""
    nb, _ = ch10
    views = [o for c in nb.cells for o in c.get("outputs", []) if "application/vnd.jupyter.widget-view+json"
             in o.get("data", {})]
    assert len(views) == 1 and "SeriesExplorer(value=32, choice='all')" in views[0]["data"]["text/plain"]
    state = nb.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
    data = next(m["state"]["data"] for m in state.values()
                if m["state"].get("_anywidget_id", "").endswith("SeriesExplorer"))
    assert data["x"] == list(range(1, 65)) and data["ratio"] == ["recompute", "cached"]
    units = ["matrix", "DMA", "vector"]
    assert data["parts"] == units + ["issue"] + [f"{u} past 32" for u in units]
    for variant, values in data["values"].items():
        totals = [sum(values[p][k] for p in data["parts"]) for k in range(64)]
        within = [sum(values[u][k] for u in units) for k in range(64)]
        past = [sum(values[f"{u} past 32"][k] for u in units) for k in range(64)]
        assert within[32:] == [0] * 32 and past[:32] == [0] * 32 and min(past[32:]) > 0
        assert all(v > 0 for v in values["issue"])
        assert sum(totals[:32]) == {"cached": 124_346, "recompute": 295_184}[variant]
        for L in (2, 4, 8, 16, 32):
            assert totals[L - 1] == PUBLISHED_CYCLES[(L, variant)][1]


# ---------------------------------------------------------------- chapter 10: GA-2's head

# the GA-2 chapter: "2 (K and V) x 16 (head width) x 1 byte (int8) = 32 bytes per token; a
# 32-token context holds 1024 bytes"; its self-check: 12 layers, 12 heads of width 64, int8,
# 4,096 tokens
GA2_HEAD = {"ch10_head_bpt": "32", "ch10_head_full": "1,024"}


SMALL_MODEL_BYTES = 2 * 12 * 12 * 64 * 4096 * 1


# its softmax unit "is accurate to 0.00002"; chapter 9's worst over 3,200 vectors is 0.000168
PUBLISHED_SOFTMAX = 0.00002

COURSE_WORST_SOFTMAX = "0.000168"


def test_ch10_head_and_small_model_cache(ch10):
    nb, g = ch10
    assert {k: g[k] for k in GA2_HEAD} == GA2_HEAD
    assert g["ch10_small_model_bytes"] == f"{SMALL_MODEL_BYTES:,}" == "75,497,472"
    assert g["ch10_small_model_mib"] == "72 MiB"


def test_ch10_softmax_typical_against_worst(ch10):
    nb, g = ch10
    assert_glue_references_resolve(nb, g, "ch10_sm_")
    assert g["ch10_sm_worst"] == COURSE_WORST_SOFTMAX
    # the published figure is the median, to its one significant digit
    assert round(float(g["ch10_sm_median"]), 5) == PUBLISHED_SOFTMAX
    ratio = float(g["ch10_sm_worst_over_median"])
    assert ratio == pytest.approx(float(COURSE_WORST_SOFTMAX) / float(g["ch10_sm_median"]), abs=0.06)
    assert ratio > 5


# ---------------------------------------------------------------- both chapters


def test_the_chapter_shows_no_answer_but_links_its_exercise(ch10):
    assert_shows_no_answer_and_links_its_exercises(ch10[0], "ch10", EXERCISES)


def test_chapters_never_print_the_machines_answers(ch10):
    assert_prints_no_machine_answer(ch10[0])


def test_the_text_states_many_glued_figures():
    assert len(glue_references(nbformat.read(CH10, as_version=4))) > 20


def test_the_committed_chapter_has_no_outputs_and_self_checks():
    assert_stored_bare_with_self_checks(CH10)


# ---------------------------------------------------------------- exercise notebooks


def _function_from(path, name):
    ns = {}
    exec(answer_cell(nbformat.read(path, as_version=4)).source, ns)
    return ns[name]


@pytest.mark.parametrize("name", sorted(EXERCISES))
def test_exercises_install_requant_from_its_notebook(name):
    """The attention_tail notebook installs the learner's requant from requant.ipynb before it runs
    anything on the machine; the statement of both says how to plug an answer in."""
    nb = nbformat.read(ROOT / "exercises" / f"{name}.ipynb", as_version=4)
    assert "ga2.install" in nb.cells[0].source
    if name == "attention_tail":
        first_ga2 = next(c for c in nb.cells[2:] if c.cell_type == "code" and "ga2" in c.source)
        assert 'ga2.install_from("requant.ipynb")' in first_ga2.source


# ---------------------------------------------------------------- public checks: right and wrong answers


def _failures(name, fn):
    return [o for o in evaluate(name, fn) if o.status == "failed"]


def _solution_tail():
    return _function_from(ROOT / "solutions" / "attention_tail.ipynb", "attention_tail")


def test_attention_tail_public_checks():
    right = _solution_tail()
    assert not _failures("attention_tail", right)

    def edited(change):
        return lambda L, P: change(L, P, right(L, P))

    tb0 = _failures("attention_tail", edited(lambda L, P, t: [{**i, "tb": 0} if i["op"] == "MM" else i for i in t]))
    assert tb0 and any("the output in EXT" in o.message for o in tb0)
    halted = _failures("attention_tail", edited(lambda L, P, t: t + [{"op": "HALT"}]))
    assert halted and all("leave it out" in o.message for o in halted)
    from ga2.isa import build
    instrs = _failures("attention_tail", edited(lambda L, P, t: [build(**i) for i in t]))
    assert instrs and all("return plain dicts" in o.message for o in instrs)
    too_long = edited(lambda L, P, t: [{**i, "len": 5000} if i["op"] == "SM" else i for i in t])
    broken = _failures("attention_tail", too_long)
    where = [next(k for k, i in enumerate(right(L, {"scores": (1, 1), "weights": (1, 1), "out": (1, 1)}))
                  if i["op"] == "SM") for L in (3, 1, 6, 8)]
    assert [o.message.split(":")[1].strip() for o in broken] == [f"instruction {k} of your tail (SM)" for k in where]
    assert all("field 'src'" in o.message for o in broken)
    twice = edited(lambda L, P, t: [j for i in t for j in ([i, i] if i["op"] == "SM" else [i])])  # right, slower
    slow = _failures("attention_tail", twice)
    # at L = 8 the course's tail is 2 score tiles (2 x 112), RQ, SM (73), RQ (12 each), 4 products (4 x 64),
    # RQ and ST (20 each): 617 cycles; a second SM adds 73
    assert len(slow) == 1 and "your tail takes 690 cycles, the course's 617" in slow[0].message


def test_attention_tail_public_checks_say_when_the_machine_has_no_requantizer(monkeypatch):
    import ga2
    monkeypatch.setattr(ga2, "missing", lambda: ["requant"])
    outcomes = _failures("attention_tail", _solution_tail())
    assert len(outcomes) == 4 and all("no requantizer yet" in o.message for o in outcomes)
    starter = _function_from(ROOT / "exercises" / "attention_tail.ipynb", "attention_tail")
    assert {o.status for o in evaluate("attention_tail", starter)} == {"not implemented"}


# ---------------------------------------------------------------- an expert's reading


def test_ch10_the_loads_that_grow_are_the_cache_s(ch10):
    """At L = 32 the cached step's four loads are the token's row (16 words), the three weight
    matrices (768), and 31 rows of K and of V (496 each); an LD costs len + 9 waits and 2 issue
    cycles (ga2/SPEC.md).  Only the two cache loads grow with L; the summary's "reloading the
    cache" is their share, not every load's."""
    nb, g = ch10
    cache = 2 * (31 * 16 + 9 + 2)
    other = (16 + 11) + (3 * 256 + 11)
    assert (g["ch10_n_cache_ld"], g["ch10_cache_ld_cycles"], g["ch10_other_ld_cycles"]) == \
        ("2", f"{cache:,}", f"{other:,}") == ("2", "1,014", "806")
    assert cache + other == 1820                                   # the published LD cycles
    step = 1820 / 0.347                                            # the step's cycles, from the LD share
    assert abs(float(g["ch10_cache_ld_share"].rstrip("%")) - 100 * cache / step) < 0.1
    md = " ".join("\n".join(c.source for c in nb.cells if c.cell_type == "markdown").split())
    assert "loads ({glue:text}`ch10_ld_cycles` cycles) grow with $L$" not in md
    assert "reloading the cache {glue:text}`ch10_cache_ld_share`" in md


def test_ch10_both_generations_bend_up_and_the_cache_divides_the_growth(ch10):
    """Each step is a fixed part plus a part linear in the context, so both sums are quadratic in n;
    from the published per-step costs: 2,500 and 2,460 cycles at t = 1, 124,346 and 295,184 over
    32 tokens, growth 89 and 436 cycles a token on average."""
    nb, g = ch10
    assert g["ch10_gen_growing_c"] == f"{1 - 32 * 2500 / 124346:.0%}" == "36%"
    assert g["ch10_gen_growing_r"] == f"{1 - 32 * 2460 / 295184:.0%}" == "73%"
    assert g["ch10_gen_growth_ratio"] == f"{(15989 - 2460) / (5251 - 2500):.1f}" == "4.9"
    md = " ".join("\n".join(c.source for c in nb.cells if c.cell_type == "markdown").split())
    assert "the cached one stays close to a straight line" not in md
    assert "both curves bend up like $n^2$" in md


def test_ch10_the_small_model_is_compared_per_token_and_per_sequence(ch10):
    """12 layers x 12 heads x 64 wide, int8: 2 x 12 x 12 x 64 = 18,432 bytes a token, 576 times
    this head's 32; 75,497,472 bytes at 4,096 tokens, 73,728 times the plan's 1,024.  (The page said
    "more than two million": a sequence's bytes over one token's of this head.)"""
    nb, g = ch10
    assert g["ch10_small_model_bpt"] == f"{2 * 12 * 12 * 64:,}" == "18,432"
    assert g["ch10_small_model_per_head"] == f"{18432 // 32:,}" == "576"
    assert g["ch10_small_model_per_plan"] == f"{75497472 // 1024:,}" == "73,728"
    md = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    assert "more than two million" not in md


def test_ch10_the_error_by_length_is_said_as_measured(ch10):
    nb, g = ch10
    assert g["ch10_len_growth"] == f"{float(g['ch10_len_32']) / float(g['ch10_len_1']):.1f}" or \
        abs(float(g["ch10_len_growth"]) - float(g["ch10_len_32"]) / float(g["ch10_len_1"])) < 0.06
    assert float(g["ch10_len_growth"]) > 2                 # not "a little": 0.96% to 4.80% here
    md = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    assert "grows a little" not in md
