"""Chapter 14 (fewer tokens kept) and its exercise keep_positions.

The chapter's figures are read back from the notebook the book's build executed and pinned: the
ring buffer equal to the window mask to rounding, its slots and bytes counted by hand, the bytes a
position keeps, the stretch each budget is judged on; SmolLM2's measurements are held to bounds
and orderings (the sinks far above an even spread, every policy's perplexity at or above the full
cache's on the same tokens, the window alone worse than sinks and window at every budget, the
policies that choose by attention close to the full cache at 1,024 positions, the full cache
copying a repeated passage), and the words that compare them to the figures they compare, never
to copied values.
"""
import nbformat
import pytest

from chapter_notebooks import (ROOT, answer_cell, assert_glue_references_resolve, chapter_path, errors,
                               executed, figures, markdown, number)
from public_checks import evaluate

CH14 = chapter_path("14_fewer_tokens")
NAME = "keep_positions"
POLICIES = {"window": "window", "sinks": "4 sinks + window", "newlines": "4 newlines + window", "h2o": "H2O",
            "tova": "TOVA", "snapkv": "SnapKV"}
BUDGETS = (64, 128, 256, 512, 1024)
LATE, SCORED = 128, 128                   # evictions before the loss is counted, tokens counted
TEXT = BUDGETS[-1] + LATE + SCORED + 1    # the largest budget's stretch, and its last target


@pytest.fixture(scope="module")
def ch14():
    return executed(CH14)


def test_the_chapter_ran_without_errors_or_warnings_and_drew_its_figures(ch14):
    nb, g = ch14
    assert not errors(nb)
    noisy = [o.get("text", "")[:200] for c in nb.cells if c.cell_type == "code" for o in c.outputs
             if (o.get("output_type") == "stream" and o.get("name") == "stderr") or "Warning" in o.get("text", "")]
    assert not noisy, noisy
    assert figures(nb) >= 2
    assert_glue_references_resolve(nb, g, "ch14_")


def test_the_ring_buffer_is_the_window_mask(ch14):
    _, g = ch14
    assert float(g["ch14_ring_err"]) < 1e-12
    W, S, T = g["ch14_ring_W"], g["ch14_ring_S"], g["ch14_ring_T"]
    assert g["ch14_ring_slots"] == W + S == 10
    # 2 layers x 2 key/value heads x 10 slots x head_dim 8 x 8 bytes (float64), keys and values
    assert g["ch14_ring_bytes"] == f"{2 * 2 * 10 * 8 * 8 * 2:,}"
    assert g["ch14_ring_held"] == ", ".join(map(str, [*range(S), *range(T - W, T)]))
    assert g["ch14_q1_slot"] == S + (59 - S) % W == 3


def test_bytes_by_hand(ch14):
    _, g = ch14
    assert g["ch14_per_position"] == f"{2 * 30 * 3 * 64 * 4:,}" == "46,080"
    assert g["ch14_full_mib"] == f"{TEXT * 46_080 / 2**20:.1f}"
    assert g["ch14_mib_max"] == f"{1024 * 46_080 / 2**20:.1f}" == "45.0"
    assert g["ch14_q2_bytes"] == f"{256 * 46_080:,}" and g["ch14_q2_mib"] == f"{256 * 46_080 / 2**20:.2f}"


def test_the_sinks_are_seen(ch14):
    _, g = ch14
    assert g["ch14_T"] == f"{TEXT:,}" == "1,281" and g["ch14_heads"] == 30 * 9
    uniform, mass0, mass4 = number(g["ch14_uniform"]), number(g["ch14_mass0"]), number(g["ch14_mass4"])
    assert 0 < uniform < 1 and mass0 > 10 * uniform and mass4 >= mass0
    assert 0 < g["ch14_sink_heads"] <= 270 and number(g["ch14_max_mass"]) > 50
    assert number(g["ch14_later_mass"]) > number(g["ch14_first_layers_mass"])


def test_each_budget_is_judged_on_its_own_stretch(ch14):
    _, g = ch14
    assert (g["ch14_late"], g["ch14_scored"], g["ch14_snap_window"]) == (LATE, SCORED, 32)
    assert g["ch14_late_scored"] == LATE + SCORED - 1 and g["ch14_rows"] == 4 + LATE + SCORED + 1
    assert g["ch14_budgets"] == "64, 128, 256, 512, 1,024" and g["ch14_budget_max"] == "1,024"


def _ppl(g):
    return {key: [number(g[f"ch14_{key}_{B}"]) for B in BUDGETS] for key in [*POLICIES, "full"]}


def test_perplexity_against_budget_is_bounded_and_ordered(ch14):
    _, g = ch14
    ppl = _ppl(g)
    full = ppl.pop("full")
    assert all(1 < f < 100 for f in full)
    for key, values in ppl.items():
        assert all(v >= 0.99 * f for v, f in zip(values, full)), key          # no budget better than the full cache
        for B, v, f in zip(BUDGETS, values, full):                             # the ratios the figure draws
            assert abs(number(g[f"ch14_{key}_over_full{B}"]) - v / f) < 0.006, (key, B)
    # StreamingLLM's finding: the window alone is worse than four sinks and the window, at every budget
    window_over_sinks = [w / s for w, s in zip(ppl["window"], ppl["sinks"])]
    assert min(window_over_sinks) > 1.1 and window_over_sinks[0] > 1.5
    assert abs(number(g["ch14_window_ratio64"]) - window_over_sinks[0]) < 0.06   # within the glued rounding
    assert abs(number(g["ch14_window_ratio1024"]) - window_over_sinks[-1]) < 0.006
    assert abs(number(g["ch14_window_ratio_min"]) - min(window_over_sinks)) < 0.006
    assert abs(number(g["ch14_window_ratio_max"]) - max(window_over_sinks)) < 0.006
    assert number(g["ch14_kl_window64"]) > number(g["ch14_kl_sinks64"]) > 0
    # the policies that choose by attention beat the window at every budget, and come close to the
    # full cache at the largest
    for key in ("h2o", "tova", "snapkv"):
        assert all(v < w for v, w in zip(ppl[key], ppl["window"])), key
    worst = {key: max(v / f for v, f in zip(ppl[key], full)) for key in ("h2o", "snapkv", "sinks")}
    for key, name in (("h2o", "h2o"), ("snapkv", "snap"), ("sinks", "sinks")):
        assert abs(number(g[f"ch14_{name}_worst"]) - worst[key]) < 0.006, key
    close = max(abs(ppl[key][-1] / full[-1] - 1) for key in ("sinks", "h2o", "tova", "snapkv"))
    assert abs(number(g["ch14_close1024"]) / 100 - close) < 0.002 and close < 0.05
    best = {name: key for key, name in POLICIES.items()}
    for i, B in enumerate(BUDGETS):                                             # the best named is the lowest shown
        assert ppl[best[g[f"ch14_best{B}"]]][i] == min(values[i] for values in ppl.values()), B
    # the words agree with the figures they compare
    n, s, h = ppl["newlines"][0], ppl["sinks"][0], ppl["h2o"][0]
    word = "about as well as the first four tokens" if abs(n - s) <= 0.1 * s else \
        "worse than the first four tokens" if n > s else "better than the first four tokens"
    assert g["ch14_newline_vs_sinks"] == f"the four newlines do {word}"
    word = "as well as" if abs(h - s) <= 0.05 * s else "worse than" if h > s else "better than"
    assert g["ch14_h2o_vs_sinks"] == f"H2O does {word} StreamingLLM's sinks and window at B = 64"
    # the papers' table says the newlines did not stand in for the first tokens, at 64 and 1,024
    assert ppl["newlines"][0] > 1.1 * ppl["sinks"][0] and ppl["newlines"][-1] > 1.1 * ppl["sinks"][-1]
    assert [int(x) for x in g["ch14_newlines"].split(", ")] == sorted(int(x) for x in g["ch14_newlines"].split(", "))
    assert int(g["ch14_newlines"].split(", ")[0]) > 16


def test_what_eviction_loses(ch14):
    _, g = ch14
    assert (g["ch14_probe_passage"], g["ch14_probe_gap"], g["ch14_probe_B"]) == (64, 192, 128)
    assert g["ch14_probe_gap"] > g["ch14_probe_B"]                # the first copy is out of the budget
    first, full = number(g["ch14_first_loss"]), number(g["ch14_copy_full"])
    assert full < first / 2                                        # the full cache copies
    for key in POLICIES:
        assert number(g[f"ch14_copy_{key}"]) > full, key           # every policy forgets something
    assert g["ch14_copy_best"] in POLICIES.values()
    copies = {name: number(g[f"ch14_copy_{key}"]) for key, name in POLICIES.items()}
    assert copies[g["ch14_copy_best"]] == min(copies.values())
    # the fourth self-check question's premise: without its sinks, the copy is harder than new
    assert number(g["ch14_copy_window"]) > first > number(g["ch14_copy_sinks"])


def test_the_page_states_its_sources_papers_and_text(ch14):
    nb, g = ch14
    assert 0 < number(g["ch14_seconds"]) < 3600
    text = markdown(nb)
    for needed in ("2309.17453", "2306.14048", "2401.06104", "2404.14469", "5158.07", "5.40", "5.60",
                   "3359.95, 11.88, 10.51, 9.59 and 9.54",
                   "PSF License", "original ones", "8,192", "{glue:text}`ch14_T` tokens"):
        assert needed in text, needed


def test_the_chapter_shows_no_answer_but_links_its_exercise(ch14):
    from coursetools.answer_leaks import describe, leaks_in_notebook
    nb, _ = ch14
    leaks = leaks_in_notebook(nb, "ch14")
    assert not leaks, describe(leaks)
    text = markdown(nbformat.read(CH14, as_version=4))
    assert f"[{NAME}](../../exercises/{NAME}.ipynb)" in text
    assert "Self-check questions" in text and "dropdown" in text


def test_the_chapter_is_in_the_toc_after_chapter_12():
    toc = (ROOT / "_toc.yml").read_text()
    assert toc.index("book/chapters/12_fewer_heads") < toc.index("book/chapters/14_fewer_tokens") \
        < toc.index("caption: Appendix")
    assert "exercises/keep_positions" in toc
    part_page = (ROOT / "book" / "making_the_cache_smaller.md").read_text()
    assert "(chapters/14_fewer_tokens.ipynb)" in part_page and "(../exercises/keep_positions.ipynb)" in part_page
    assert "14. [Fewer tokens kept](chapters/14_fewer_tokens.ipynb)" in (ROOT / "book" / "intro.md").read_text()


# ---------------------------------------------------------------- the exercise notebooks


def _function_from(folder):
    ns = {}
    exec(answer_cell(nbformat.read(ROOT / folder / f"{NAME}.ipynb", as_version=4)).source, ns)
    return ns[NAME]


def test_the_public_checks_name_the_common_mistakes():
    import numpy as np
    right = _function_from("solutions")

    def later_ties(acc_scores, budget, n_sink, n_recent):          # a tie to the later position
        scores = np.asarray(acc_scores, dtype=np.float64)
        t = len(scores)
        if t <= budget:
            return np.arange(t, dtype=np.int64)
        between = np.arange(n_sink, t - n_recent)
        heavy = between[np.argsort(scores[between], kind="stable")[::-1][: budget - n_sink - n_recent]]
        return np.sort(np.concatenate([np.arange(n_sink), heavy, np.arange(t - n_recent, t)])).astype(np.int64)

    failed = {o.description: o.message for o in evaluate(NAME, later_ties) if o.status == "failed"}
    assert any("ties went to the later position" in m for m in failed.values()), failed

    def unsorted(acc_scores, budget, n_sink, n_recent):
        return right(acc_scores, budget, n_sink, n_recent)[::-1].copy()

    failed = {o.description: o.message for o in evaluate(NAME, unsorted) if o.status == "failed"}
    assert any("not in increasing order" in m for m in failed.values()), failed

    def never_refuses(acc_scores, budget, n_sink, n_recent):
        return right(acc_scores, budget, max(n_sink, 0), min(max(n_recent, 0), max(budget - max(n_sink, 0), 0)))

    failed = {o.description: o.message for o in evaluate(NAME, never_refuses) if o.status == "failed"}
    assert "bad arguments raise ValueError" in failed
