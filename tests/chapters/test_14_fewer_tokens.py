"""Chapter 14 (fewer tokens kept) and its exercise keep_positions.

The chapter's figures are read back from the notebook the book's build executed and pinned: the
ring buffer equal to the window mask to rounding, its slots and bytes counted by hand, the bytes a
position keeps; SmolLM2's measurements are held to bounds and orderings (the sinks far above an
even spread, every policy's perplexity above the full cache's and falling as its budget grows, the
window alone worse than sinks and window, the full cache copying a repeated passage), and the
words that compare them to the figures they compare, never to copied values.
"""
import nbformat
import pytest

from chapter_notebooks import (ROOT, answer_cell, assert_glue_references_resolve, chapter_path, errors,
                               executed, figures, markdown, number)
from public_checks import evaluate, run_checks

CH14 = chapter_path("14_fewer_tokens")
NAME = "keep_positions"
POLICIES = {"window": "window", "sinks": "4 sinks + window", "newlines": "4 newlines + window", "h2o": "H2O",
            "tova": "TOVA"}
BUDGETS = (64, 128, 256)


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
    assert g["ch14_full_mib"] == f"{512 * 46_080 / 2**20:.1f}"
    assert g["ch14_q2_bytes"] == f"{256 * 46_080:,}" and g["ch14_q2_mib"] == f"{256 * 46_080 / 2**20:.2f}"


def test_the_sinks_are_seen(ch14):
    _, g = ch14
    assert g["ch14_T"] == 512 and g["ch14_heads"] == 30 * 9
    uniform, mass0, mass4 = number(g["ch14_uniform"]), number(g["ch14_mass0"]), number(g["ch14_mass4"])
    assert 0 < uniform < 1 and mass0 > 10 * uniform and mass4 >= mass0
    assert 0 < g["ch14_sink_heads"] <= 270 and number(g["ch14_max_mass"]) > 50
    assert number(g["ch14_later_mass"]) > number(g["ch14_first_layers_mass"])


def test_perplexity_against_budget_is_bounded_and_ordered(ch14):
    _, g = ch14
    full = number(g["ch14_full_ppl"])
    assert 1 < full < 100
    ppl = {key: [number(g[f"ch14_{key}_{B}"]) for B in BUDGETS] for key in POLICIES}
    for key, values in ppl.items():
        assert all(v >= 0.99 * full for v in values), key          # no budget judged better than the full cache
        assert values[0] >= values[1] >= values[2], key            # more positions kept, less surprise
    # StreamingLLM's finding: the window alone is worse than four sinks and the window, same budget
    assert ppl["window"][0] > 1.5 * ppl["sinks"][0]
    # (the ratio of the unrounded perplexities: within the rounding of the glued ones)
    assert abs(number(g["ch14_window_ratio64"]) - ppl["window"][0] / ppl["sinks"][0]) < 0.06
    assert number(g["ch14_kl_window64"]) > number(g["ch14_kl_sinks64"]) > 0
    best = {name: key for key, name in POLICIES.items()}
    for B, i in ((64, 0), (256, 2)):                               # the best named is the lowest shown
        assert ppl[best[g[f"ch14_best{B}"]]][i] == min(values[i] for values in ppl.values())
    # the words agree with the figures they compare
    n, s, h = ppl["newlines"][0], ppl["sinks"][0], ppl["h2o"][0]
    word = "about as well as the first four tokens" if abs(n - s) <= 0.1 * s else \
        "worse than the first four tokens" if n > s else "better than the first four tokens"
    assert g["ch14_newline_vs_sinks"] == f"the four newlines do {word}"
    word = "as well as" if abs(h - s) <= 0.05 * s else "worse than" if h > s else "better than"
    assert g["ch14_h2o_vs_sinks"] == f"H2O does {word} StreamingLLM's sinks and window at B = 64"
    assert [int(x) for x in g["ch14_newlines"].split(", ")] == sorted(int(x) for x in g["ch14_newlines"].split(", "))
    assert int(g["ch14_newlines"].split(", ")[0]) > 16


def test_what_eviction_loses(ch14):
    _, g = ch14
    assert (g["ch14_probe_passage"], g["ch14_probe_gap"], g["ch14_probe_B"]) == (64, 192, 128)
    assert g["ch14_probe_gap"] > g["ch14_probe_B"]                # the first copy is out of the budget
    first, full = number(g["ch14_first_loss"]), number(g["ch14_copy_full"])
    assert full < first / 2                                        # the full cache copies
    for key in ("window", "sinks", "h2o", "tova"):
        assert number(g[f"ch14_copy_{key}"]) > full, key           # every policy forgets something
    assert g["ch14_copy_best"] in POLICIES.values()
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


@pytest.mark.parametrize("folder", ["exercises", "solutions"])
def test_exercise_notebook_form(folder):
    nb = nbformat.read(ROOT / folder / f"{NAME}.ipynb", as_version=4)
    assert nb.metadata["kvcourse"] == {"exercise": NAME, "chapter": 14}
    assert nb.cells[0].source.startswith(f"# Exercise: {NAME}")
    assert f"python -m graders grade exercises/{NAME}.ipynb" in nb.cells[0].source
    cell = answer_cell(nb)
    assert cell is nb.cells[1] and f"def {NAME}(acc_scores, budget, n_sink, n_recent):" in cell.source
    assert ("raise NotImplementedError" in cell.source) == (folder == "exercises")
    assert nb.cells[-1].source == f'from public_checks import run_checks\n\nrun_checks("{NAME}", {NAME})'
    code = "\n".join(line.split("#", 1)[0] for line in nb.cells[3].source.splitlines())
    assert f"{NAME}(" not in code


def _function_from(folder):
    ns = {}
    exec(answer_cell(nbformat.read(ROOT / folder / f"{NAME}.ipynb", as_version=4)).source, ns)
    return ns[NAME]


def test_the_solution_passes_and_the_starter_is_reported_not_implemented(capsys):
    assert run_checks(NAME, _function_from("solutions"))
    assert not run_checks(NAME, _function_from("exercises"))
    assert "not implemented yet" in capsys.readouterr().out


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
