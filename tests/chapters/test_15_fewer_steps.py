"""Chapter 15 (fewer steps), its exercise speculative_accept and the exercise's public checks.

The chapter's figures are read back from the notebook the book's build executed.  What it
derives is pinned by hand: the bytes of SmolLM2's weights from its configuration, the pool's
block counts of the rollback from the block size, the contiguous row's lengths, the acceptance
probability and the redrawn-from-p column of the sampling table, the formula's values, the
self-checks.  What it measures (times, speed-ups, acceptance on the real model) is held to bounds
and to the words that describe it, never to a value: the machine that builds the page is shared.
"""
import math

import nbformat
import pytest

from chapter_notebooks import ROOT, answer_cell, chapter_path, errors, executed, markdown, number
from public_checks import evaluate

CH15 = chapter_path("15_fewer_steps")
NAME = "speculative_accept"


@pytest.fixture(scope="module")
def ch15():
    return executed(CH15)


def test_the_chapter_ran_without_errors_or_warnings(ch15):
    nb, _ = ch15
    assert not errors(nb)
    noisy = [o.get("text", "")[:200] for c in nb.cells if c.cell_type == "code" for o in c.outputs
             if (o.get("output_type") == "stream" and o.get("name") == "stderr") or "Warning" in o.get("text", "")]
    assert not noisy, noisy


def test_the_weights_a_pass_reads_by_hand(ch15):
    _, g = ch15
    D, F, V, L, H, G, d = 576, 1536, 49152, 30, 9, 3, 64          # SmolLM2-135M's config.json
    layer = D * H * d + 2 * D * G * d + H * d * D + 3 * D * F + 2 * D
    params = V * D + L * layer + D                                  # embeddings tied to the output
    assert params == 134_515_008
    assert g["ch15_weight_mb"] == f"{4 * params / 1e6:,.0f}" == "538"


def test_the_pass_times_and_their_words_agree(ch15):
    _, g = ch15
    r16 = g["ch15_r16_exact"]
    assert r16 > 0 and g["ch15_r16"] == f"{r16:.1f}" and g["ch15_per16"] == f"{16 / r16:.1f}"
    assert number(g["ch15_t1_ms"]) > 0 and number(g["ch15_t16_ms"]) > 0 and number(g["ch15_r8"]) > 0
    assert g["ch15_r16_words"] == ("less than the 16 steps it replaces" if r16 < 16 else
                                   "no less than the 16 steps it replaces")
    assert number(g["ch15_load_passes"]) >= 0
    # the same passes with the output layer on the first row only, as for a draft rejected at once
    assert g["ch15_first8_exact"] > 0 and g["ch15_first8"] == f"{g['ch15_first8_exact']:.1f}"
    assert g["ch15_r8"] == f"{g['ch15_r8_exact']:.1f}"
    r16_r2 = g["ch15_r16_r2_exact"]
    assert g["ch15_r16_r2"] == f"{r16_r2:.1f}"
    assert g["ch15_r2_words"] == ("the pass stays close to the time of reading the weights once" if r16_r2 < 4
                                  else "the arithmetic starts to show")


def test_prompt_lookup_gives_greedys_tokens_and_its_counts_add_up(ch15):
    _, g = ch15
    assert g["ch15_races_same"] == [True, True, True, True] and g["ch15_all_same"] == "yes"
    assert g["ch15_same_words"] == "Every reply is greedy's, token for token"
    accepted, proposed = g["ch15_sum_accepted"], g["ch15_sum_proposed"]
    tokens, passes = g["ch15_sum_tokens"], g["ch15_sum_passes"]
    assert 0 <= accepted <= proposed and 1 <= tokens <= 32 and 1 <= passes <= tokens
    a = accepted / proposed
    assert g["ch15_sum_accept"] == f"{a:.0%}"
    assert g["ch15_sum_tpp"] == f"{(tokens - 1) / max(1, passes - 1):.1f}"
    formula = 11.0 if a == 1 else (1 - a ** 11) / (1 - a)           # 1 + a + ... + a^10
    assert g["ch15_sum_formula"] == f"{formula:.1f}"
    # the summary copies the passage: its drafts save passes, whatever the machine's speed
    assert passes < tokens and accepted > 0
    assert number(g["ch15_open_proposed"]) >= 0 and 0 <= number(g["ch15_open_accept"]) <= 100


def test_the_speed_words_follow_the_measured_ratios(ch15):
    _, g = ch15
    r = float(g["ch15_open_ratio"])
    if 1 / 1.15 <= r <= 1.15:
        words = f"no faster or slower, within the noise (a ratio of {r:.2f}), than"
    else:
        x = r if r > 1 else 1 / r
        words = f"{x:.1f} times {'faster' if r > 1 else 'slower'} than"
    assert g["ch15_open_words"] == f"prompt lookup ran {words} plain greedy"
    ratios = g["ch15_copy_ratios"]
    assert g["ch15_copy_low"] == f"{min(ratios):.2f}" and g["ch15_copy_high"] == f"{max(ratios):.2f}"
    assert all(x > 0 for x in ratios)


def test_the_engines_policy_checks_fewer_draft_tokens_on_the_story_and_its_words_follow(ch15):
    _, g = ch15
    assert g["ch15_pol_same"] is True                              # every policy: greedy's tokens
    # the story: single recurring tokens draft under transformers' policy, not under the engine's
    assert 0 <= g["ch15_pol_engine_proposed"] < g["ch15_pol_every_proposed"]
    assert 0 <= g["ch15_pol_engine_wasted"] <= g["ch15_pol_every_wasted"]
    engine, every = g["ch15_pol_engine_speedup_exact"], g["ch15_pol_every_speedup_exact"]
    assert engine > 0 and every > 0
    assert g["ch15_pol_engine_speedup"] == f"{engine:.2f}" and g["ch15_pol_every_speedup"] == f"{every:.2f}"
    assert g["ch15_pol_words"] == ("raises" if engine > every else "does not raise")
    assert number(g["ch15_pol_cost11"]) > 0 and number(g["ch15_pol_rejected11"]) > 0
    # the summary copies the passage: its drafts are kept under both policies, in fewer passes
    # than tokens
    assert g["ch15_pol_sum_engine_accepted"] > 0 and g["ch15_pol_sum_every_accepted"] > 0
    assert g["ch15_pol_sum_engine_passes"] < g["ch15_sum_tokens"]
    assert g["ch15_pol_sum_every_passes"] < g["ch15_sum_tokens"]


def test_the_rollback_counts_by_hand(ch15):
    _, g = ch15
    # contiguous: a prompt of 6, a pass over 1 + 3, the last token and 1 draft token kept
    assert g["ch15_contig"] == "6, 10 and 8"
    # paged, blocks of 4: the shared prompt of 6 takes ceil(6/4) = 2 blocks; the pass gives row 0 a
    # copy of the half-full shared block and row 1 a third block for positions 8, 9: 4 in use;
    # the rollback to 7 positions frees that third block: 3; the first block has 2 references
    assert g["ch15_paged_used"] == f"{math.ceil(6 / 4)}" == "2"
    assert g["ch15_paged_used_pass"] == "4" and g["ch15_paged_used_back"] == "3"
    assert g["ch15_paged_refcount"] == "2"
    assert g["ch15_paged_free_end"] == g["ch15_paged_blocks"] == "12"


def test_the_ragged_batch(ch15):
    _, g = ch15
    assert g["ch15_batch_same"] == "yes"
    lengths = [int(n) for n in g["ch15_batch_lengths"].split(", ")]
    assert len(lengths) == 3 and sum(lengths) == number(g["ch15_batch_tokens"])
    assert min(lengths) < max(lengths) == 20                      # one row ended at EOS mid-batch
    assert number(g["ch15_batch_passes"]) < 20 and number(g["ch15_batch_mixed"]) >= 1


def test_the_sampling_table_by_hand(ch15):
    _, g = ch15
    q = [0.40, 0.30, 0.15, 0.10, 0.05]
    p = [0.10, 0.35, 0.30, 0.05, 0.20]
    beta = sum(min(a, b) for a, b in zip(q, p))
    assert g["ch15_beta"] == f"{beta:.2f}" == "0.65"
    redrawn = [min(a, b) + (1 - beta) * b for a, b in zip(q, p)]
    assert g["ch15_wrong_gap"] == f"{max(abs(x - b) for x, b in zip(redrawn, p)):.3f}" == "0.080"
    assert g["ch15_se"] == f"{max(math.sqrt(b * (1 - b) / 20_000) for b in p):.4f}"
    # 20,000 draws: the rule's frequencies within a few standard errors of p
    assert number(g["ch15_freq_gap"]) < 5 * number(g["ch15_se"])


def test_the_self_checks_by_hand(ch15):
    _, g = ch15
    assert g["ch15_q1_tokens"] == f"{(1 - 0.8 ** 5) / 0.2:.2f}" == "3.36"
    assert g["ch15_q1_limit"] == "5" and g["ch15_q3_beta"] == "0.6"


def test_the_page_states_its_time_sources_and_text(ch15):
    nb, g = ch15
    assert 0 < number(g["ch15_seconds"]) < 3600
    text = markdown(nb)
    for needed in ("arXiv\n2211.17192", "arXiv 2302.01318", "prompt_lookup_num_tokens", "(1 - a^{k+1}) / (1 - a)",
                   "{glue:text}`ch15_load_start`", "PagedKVCache.check", "`min_ngram=2`", "prompt_lookup_min"):
        assert needed in text, needed


def test_the_chapter_shows_no_answer_but_links_its_exercise(ch15):
    from coursetools.answer_leaks import describe, leaks_in_notebook
    nb, _ = ch15
    leaks = leaks_in_notebook(nb, "ch15")
    assert not leaks, describe(leaks)
    text = markdown(nbformat.read(CH15, as_version=4))
    assert f"[{NAME} exercise](../../exercises/{NAME}.ipynb)" in text and f"[{NAME}](../../exercises/{NAME}.ipynb)" in text
    assert "Self-check questions" in text and "dropdown" in text


def test_the_chapter_is_in_the_part_after_chapter_12():
    toc = (ROOT / "_toc.yml").read_text()
    assert toc.index("book/chapters/12_fewer_heads") < toc.index("book/chapters/15_fewer_steps") \
        < toc.index("caption: Appendix")
    assert "exercises/speculative_accept" in toc
    for page in ("intro.md", "making_the_cache_smaller.md"):
        text = (ROOT / "book" / page).read_text()
        assert "15. [Fewer steps](chapters/15_fewer_steps.ipynb)" in text, page


# ---------------------------------------------------------------- the exercise notebooks


@pytest.mark.parametrize("folder", ["exercises", "solutions"])
def test_the_exercise_links_this_chapter_and_its_example_draws_nothing(folder):
    """The rest of the notebook's form is held for every exercise by
    tests/exercises/test_starters_and_solutions.py."""
    nb = nbformat.read(ROOT / folder / f"{NAME}.ipynb", as_version=4)
    assert "(../book/chapters/15_fewer_steps.ipynb)" in nb.cells[0].source
    code = "\n".join(line.split("#", 1)[0] for line in nb.cells[3].source.splitlines())
    assert "cumsum" not in code                    # the worked example states values, draws nothing


def _function_from(folder):
    ns = {}
    exec(answer_cell(nbformat.read(ROOT / folder / f"{NAME}.ipynb", as_version=4)).source, ns)
    return ns[NAME]


def test_the_public_checks_name_a_replacement_drawn_from_p_and_a_missing_last_token():
    import numpy as np
    right = _function_from("solutions")

    def from_p(draft_tokens, q_probs, p_probs, uniforms):          # a rejection redrawn from p itself
        k, out = len(draft_tokens), []
        for i in range(k):
            x = int(draft_tokens[i])
            if uniforms[i] < p_probs[i, x] / q_probs[i, x]:
                out.append(x)
                continue
            return out + [int(np.flatnonzero(np.cumsum(p_probs[i]) > uniforms[k])[0])]
        return out + [int(np.flatnonzero(np.cumsum(p_probs[k]) > uniforms[k])[0])]

    def no_last_token(draft_tokens, q_probs, p_probs, uniforms):
        out = right(draft_tokens, q_probs, p_probs, uniforms)
        return out[:-1] if len(out) == len(draft_tokens) + 1 else out

    failed = {o.description: o.message for o in evaluate(NAME, from_p) if o.status == "failed"}
    assert any("drawn from p_probs[i] itself" in m for m in failed.values()), failed
    failed = {o.description: o.message for o in evaluate(NAME, no_last_token) if o.status == "failed"}
    assert "no draft (k = 0)" in failed and any("p_probs[k]" in m for m in failed.values()), failed
