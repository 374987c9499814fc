"""Chapter 13 (fewer bits), its exercise quantize_kv and the exercise's public checks.

The chapter's figures are read back from the notebook the book's build executed: the bytes per
token of every cache are worked out here by hand from SmolLM2's sizes (30 layers, 3 key/value
heads of 64, groups of 32 tokens, float32 scales and offsets), and so are the bytes the engine's
int4 cache keeps for 256 tokens; the measurements on the model are held to bounds and orders
(KL >= 0, top-1 a share, keys per channel better than per token, 2 bits per token the worst,
the window and the sink better than nothing, int4 better than int2), and every sentence chosen
from a measurement is checked against the numbers glued beside it, never copied.
"""
import nbformat
import numpy as np
import pytest

from chapter_notebooks import ROOT, answer_cell, chapter_path, errors, executed, markdown, number
from public_checks import evaluate

CH13 = chapter_path("13_fewer_bits")
NAME = "quantize_kv"
L, G, D, GROUP = 30, 3, 64, 32


def per_token_bytes(bits, keys_per):
    """Codes of keys and values, the values' scale and offset, the keys' per row or per channel
    shared by a group of 32 tokens: float32 each, every layer."""
    codes = 2 * G * D * bits / 8
    key_stats = 8 * G if keys_per == "token" else 8 * G * D / GROUP
    return int(L * (codes + 8 * G + key_stats))


BY_HAND = {"ch13_full_bpt": 2 * L * G * D * 4, "ch13_t8_bpt": per_token_bytes(8, "token"),
           "ch13_t4_bpt": per_token_bytes(4, "token"), "ch13_c3_bpt": per_token_bytes(3, "channel"),
           "ch13_t2_bpt": per_token_bytes(2, "token"), "ch13_c4_bpt": per_token_bytes(4, "channel"),
           "ch13_p3_bpt": per_token_bytes(3, "channel"), "ch13_c2_bpt": per_token_bytes(2, "channel"),
           "ch13_p2_bpt": per_token_bytes(2, "channel"), "ch13_p2bare_bpt": per_token_bytes(2, "channel")}


#: The grid's caches by their glued names: bits, keys per t(oken) or c(hannel), a(fter) or
#: b(efore) RoPE, w(indow and first token kept) or n(othing kept).
GRID = [f"{bits}{per}{rope}{kept}" for bits in (8, 4, 3, 2) for per in "tc" for rope in "ab" for kept in "wn"]
BY_HAND.update({f"ch13_{key}_bpt": per_token_bytes(int(key[0]), "token" if key[1] == "t" else "channel")
                for key in GRID})


@pytest.fixture(scope="module")
def ch13():
    return executed(CH13)


def test_the_chapter_ran_without_errors_or_warnings(ch13):
    nb, _ = ch13
    assert not errors(nb)
    noisy = [o.get("text", "")[:200] for c in nb.cells if c.cell_type == "code" for o in c.outputs
             if (o.get("output_type") == "stream" and o.get("name") == "stderr") or "Warning" in o.get("text", "")]
    assert not noisy, noisy


def test_bytes_per_token_by_hand(ch13):
    _, g = ch13
    assert BY_HAND["ch13_full_bpt"] == 46_080 and BY_HAND["ch13_c4_bpt"] == 7_920
    for key, value in BY_HAND.items():
        assert g[key] == f"{value:,}", key
    assert g["ch13_q1"] == f"{BY_HAND['ch13_c4_bpt']:,}"


def test_the_engine_keeps_what_the_formula_says(ch13):
    _, g = ch13
    T = g["ch13_tokens"]
    assert T == 256
    per_head = (T * D // 2 + (T // GROUP) * D * 8) + (T * D // 2 + T * 8)     # keys, values: no window left
    assert g["ch13_int4_bytes"] == f"{L * G * per_head:,}" == "2,027,520"
    assert g["ch13_f32_bytes"] == f"{2 * L * G * D * 4 * T:,}"
    assert g["ch13_int4_ratio"] == f"{2 * L * G * D * 4 * T / (L * G * per_head):.1f}"


def shares(g, *keys):
    return [number(g[k].rstrip("%")) / 100 for k in keys]


def test_the_measurements_are_bounded_and_ordered(ch13):
    _, g = ch13
    names = ("t8", "t4", "t2", "c4", "c3", "p3", "c2", "p2", "p2bare")
    kl = {n: float(g[f"ch13_{n}_kl"]) for n in names}
    top1 = dict(zip(names, shares(g, *(f"ch13_{n}_top1" for n in names))))
    ppl = {n: float(g[f"ch13_{n}_ppl"]) for n in names}
    assert g["ch13_full_kl"] == "0.0000" and g["ch13_full_top1"] == "100.0%"
    assert all(v >= 0 for v in kl.values()) and all(0 <= v <= 1 for v in top1.values())
    assert kl["c4"] < kl["t4"] and kl["c2"] < kl["t2"]             # per channel beats per token
    assert max(kl, key=kl.get) == "t2" and ppl["t2"] > ppl["c2"]   # 2 bits per token: the worst
    assert kl["p2"] < kl["p2bare"] and top1["p2"] > top1["p2bare"]  # the window and the sink help
    assert kl["c4"] < kl["p3"] < kl["p2"] and kl["c4"] < kl["c3"] < kl["c2"]   # fewer bits, more loss
    assert kl["t8"] < kl["t4"] < kl["t2"]
    assert float(g["ch13_int4_kl"]) < float(g["ch13_int2_kl"])
    # the quantizers' errors: per channel below per token at both widths
    assert float(g["ch13_err4_channel"]) < float(g["ch13_err4_token"])
    assert float(g["ch13_err2_channel"]) < float(g["ch13_err2_token"])


def test_every_sentence_chosen_from_a_measurement_agrees_with_its_numbers(ch13):
    _, g = ch13
    full = float(g["ch13_full_ppl"])
    ppl = {n: float(g[f"ch13_{n}_ppl"]) for n in GRID}
    within = [n for n in GRID if ppl[n] - full <= 0.1 + 0.005]            # (the reference glued to 2 decimals)
    if within:
        best = min(within, key=lambda n: (number(g[f"ch13_{n}_bpt"]), float(g[f"ch13_{n}_kl"])))
        assert f"at {g[f'ch13_{best}_bpt']} bytes a token" in g["ch13_first_within"]
        assert f"(perplexity {ppl[best]:.2f})" in g["ch13_first_within"]
        cheaper = [n for n in GRID if number(g[f"ch13_{n}_bpt"]) < number(g[f"ch13_{best}_bpt"])]
        assert all(ppl[n] - full > 0.1 - 0.005 for n in cheaper)          # nothing smaller comes as close
    else:
        assert g["ch13_first_within"].startswith("None of these caches")
    word = "below" if float(g["ch13_c4_kl"]) < float(g["ch13_t4_kl"]) else "above"
    assert word in g["ch13_channel_vs_token"]
    assert g["ch13_c3_kl"] in g["ch13_pre3_word"]
    assert g["ch13_p2bare_kl"] in g["ch13_window_word"] and g["ch13_p2_kl"] in g["ch13_window_word"]
    loss = float(g["ch13_loss3"])
    assert loss == pytest.approx(float(g["ch13_p3_ppl"]) - full, abs=0.011)
    assert g["ch13_kvquant_word"].startswith("above" if abs(loss) > 0.1 else ("below" if abs(loss) < 0.1 else "equal"))
    assert ("difference" in g["ch13_engine_vs_grid"]) == (float(g["ch13_int4_kl"]) > float(g["ch13_c4_kl"]))
    turn = float(g["ch13_turn"])
    assert ("less than a radian" in g["ch13_rope_here"]) == (turn < 1)
    assert abs(turn - float(g["ch13_omega"]) * (g["ch13_tokens"] - 1)) <= 0.005 + 0.02 * turn
    # SmolLM2's rope_theta is 100,000: the pair of channel i (i < 32) turns by 100000^(-2i/64) a token
    assert g["ch13_omega"] == f"{100_000 ** (-2 * (g['ch13_top_channel'] % (D // 2)) / D):.2g}"


def test_the_grid_is_every_choice_crossed_bounded_and_ordered(ch13):
    _, g = ch13
    assert g["ch13_grid_size"] == 32 and g["ch13_grid_keys"].split() == GRID
    kl = {n: float(g[f"ch13_{n}_kl"]) for n in GRID}
    top1 = {n: float(g[f"ch13_{n}_top1"]) for n in GRID}
    ppl = {n: float(g[f"ch13_{n}_ppl"]) for n in GRID}
    assert all(v >= 0 for v in kl.values()) and all(0 <= v <= 1 for v in top1.values())
    assert all(v > 1 for v in ppl.values())
    for family in {n[1:] for n in GRID}:                       # fewer bits, more loss, in every family
        assert kl[f"8{family}"] < kl[f"4{family}"] < kl[f"3{family}"] < kl[f"2{family}"], family
        assert top1[f"4{family}"] > top1[f"2{family}"], family
    for bits in "432":                                          # per channel and the window help at every width
        for rope in "ab":
            for kept in "wn":
                assert kl[f"{bits}c{rope}{kept}"] < kl[f"{bits}t{rope}{kept}"]
            for per in "tc":
                assert kl[f"{bits}{per}{rope}w"] < kl[f"{bits}{per}{rope}n"]
    assert max(kl, key=kl.get).startswith("2t") and max(ppl, key=ppl.get).startswith("2t")


def test_the_grid_counts_and_bests_are_its_numbers(ch13):
    _, g = ch13
    kl = {n: float(g[f"ch13_{n}_kl"]) for n in GRID}

    def wins(position, side):
        """Pairs differing only at ``position`` of the name, won (lower KL) by the letter ``side``."""
        pairs = {}
        for n in GRID:
            pairs.setdefault(n[:position] + n[position + 1:], {})[n[position] == side] = kl[n]
        return sum(p[True] < p[False] for p in pairs.values())

    assert g["ch13_channel_wins"] == wins(1, "c") and g["ch13_pre_wins"] == wins(2, "b")
    assert g["ch13_kept_wins"] == wins(3, "w")
    assert all(0 <= g[k] <= 16 for k in ("ch13_channel_wins", "ch13_pre_wins", "ch13_kept_wins"))
    full = float(g["ch13_full_ppl"])
    for bits in "432":
        best = min((n for n in GRID if n[0] == bits), key=kl.get)
        assert g[f"ch13_best{bits}_kl"] == f"{kl[best]:.4f}"
        assert abs(number(g[f"ch13_best{bits}_top1"].rstrip("%")) / 100 - float(g[f"ch13_{best}_top1"])) <= 0.0006
        assert float(g[f"ch13_best{bits}_loss"]) == pytest.approx(float(g[f"ch13_{best}_ppl"]) - full, abs=0.011)
        name = g[f"ch13_best{bits}_name"]
        assert name.startswith(f"{bits} bits, keys per {'token' if best[1] == 't' else 'channel'}")
        assert ("pre-RoPE" in name) == (best[2] == "b") and ("window + sink" in name) == (best[3] == "w")
    best3 = min((n for n in GRID if n[0] == "3"), key=kl.get)
    if best3 == "3cbw":                                         # KVQuant's choices are the grid's best at 3 bits
        assert g["ch13_best3_word"].startswith("No other 3-bit cache")
    else:
        loss = float(g["ch13_best3_loss"])
        assert g["ch13_best3_name"] in g["ch13_best3_word"] and g["ch13_best3_loss"] in g["ch13_best3_word"]
        assert g["ch13_best3_word"].endswith(("above 0.1" if loss > 0.105 else "below 0.1" if loss < 0.095 else "0.1"))
    kivi = float(g["ch13_kivi_loss"])
    assert kivi == pytest.approx(float(g["ch13_2caw_ppl"]) - full, abs=0.011)
    assert g["ch13_kivi_word"].startswith("close to" if abs(kivi) <= 0.1 else "far from")


def test_the_decode_step_timed_on_the_page(ch13):
    _, g = ch13
    T = number(g["ch13_step_positions"])
    assert T in (4096, 2048, 1024, 512, 256) and g["ch13_step_layers"] == L
    f32 = 2 * L * G * D * 4 * T
    per_head = 2 * T * D // 2 + (T // GROUP) * D * 8 + T * 8      # codes, keys' and values' scales and offsets
    int4 = L * G * per_head
    assert g["ch13_step_f32_mb"] == f"{f32 / 1e6:.1f}" and g["ch13_step_int4_mb"] == f"{int4 / 1e6:.1f}"
    assert g["ch13_step_moved_mb"] == f"{(int4 + 2 * f32) / 1e6:.1f}"
    f32_ms, int4_ms, unpack_ms = (float(g[k]) for k in ("ch13_step_f32_ms", "ch13_step_int4_ms", "ch13_unpack_ms"))
    assert f32_ms > 0 and int4_ms > 0 and unpack_ms > 0
    assert float(g["ch13_step_ratio"]) == pytest.approx(int4_ms / f32_ms, rel=0.05, abs=0.05)
    assert float(g["ch13_unpack_vs_f32"]) == pytest.approx(unpack_ms / f32_ms, rel=0.05, abs=0.05)
    assert float(g["ch13_f32_gbs"]) == pytest.approx(f32 / (f32_ms / 1e3) / 1e9, rel=0.05, abs=0.05)
    assert float(g["ch13_step_load"]) >= 0
    if int4_ms > f32_ms * 1.01:
        assert g["ch13_step_word"].startswith("the int4 step took") and "bought no time" in g["ch13_step_word"]
    elif int4_ms < f32_ms * 0.99:
        assert "paid for the unpacking" in g["ch13_step_word"]
    if abs(unpack_ms - f32_ms) > 0.01 * f32_ms:
        assert g["ch13_unpack_word"] == ("longer than" if unpack_ms > f32_ms else "less time than")


def test_the_outliers_are_where_the_text_says(ch13):
    _, g = ch13
    assert 0 <= g["ch13_layer"] < L and 0 <= g["ch13_top_head"] < G and 0 <= g["ch13_top_channel"] < D
    assert g["ch13_pair_channel"] == (g["ch13_top_channel"] + D // 2) % D
    assert float(g["ch13_row_ratio"]) >= float(g["ch13_row_ratio_median"]) > 1    # the layer shown is the most uneven
    assert float(g["ch13_top_over_median"]) > 1 and float(g["ch13_max_ratio"]) >= float(g["ch13_top_over_median"])
    assert 0 <= g["ch13_layers_with_outliers"] <= L and 0 <= g["ch13_most_outliers"] <= G * D
    assert (g["ch13_layers_with_outliers"] == 0) == (g["ch13_most_outliers"] == 0)


def test_the_self_checks_by_hand(ch13):
    _, g = ch13
    assert g["ch13_q2_levels"] == 7                            # (6 - (-1)) / 7 = 1: half a step is 0.5


def test_the_page_states_its_time_sources_and_tokens(ch13):
    nb, g = ch13
    assert 0 < number(g["ch13_seconds"]) < 3600
    text = markdown(nb)
    for needed in ("https://arxiv.org/abs/2402.02750", "https://arxiv.org/abs/2401.18079", "first 256 tokens",
                   "That is 32 caches", "{glue:text}`ch13_tokens` tokens", "three rounds"):
        assert needed in text, needed


def test_the_chapter_shows_no_answer_but_links_its_exercise(ch13):
    from coursetools.answer_leaks import describe, leaks_in_notebook
    nb, _ = ch13
    leaks = leaks_in_notebook(nb, "ch13")
    assert not leaks, describe(leaks)
    text = markdown(nbformat.read(CH13, as_version=4))
    assert f"[{NAME} exercise](../../exercises/{NAME}.ipynb)" in text and f"[{NAME}](../../exercises/{NAME}.ipynb)" in text
    assert "Self-check questions" in text and "dropdown" in text


def test_the_chapter_is_in_the_part():
    toc = (ROOT / "_toc.yml").read_text()
    assert toc.index("book/chapters/12_fewer_heads") < toc.index("book/chapters/13_fewer_bits") < toc.index("caption: Appendix")
    assert "exercises/quantize_kv" in toc
    part_page = (ROOT / "book" / "making_the_cache_smaller.md").read_text()
    assert "(chapters/13_fewer_bits.ipynb)" in part_page and "(../exercises/quantize_kv.ipynb)" in part_page


# ---------------------------------------------------------------- the exercise notebooks


@pytest.mark.parametrize("folder", ["exercises", "solutions"])
def test_exercise_notebook_form(folder):
    nb = nbformat.read(ROOT / folder / f"{NAME}.ipynb", as_version=4)
    assert nb.metadata["kvcourse"] == {"exercise": NAME, "chapter": 13}
    assert nb.cells[0].source.startswith(f"# Exercise: {NAME}")
    assert f"python -m graders grade exercises/{NAME}.ipynb" in nb.cells[0].source
    cell = answer_cell(nb)
    assert cell is nb.cells[1]
    assert "def quantize_kv(x, bits, axis):" in cell.source and "def dequantize_kv(codes, scale, offset):" in cell.source
    assert (cell.source.count("raise NotImplementedError") == 2) == (folder == "exercises")
    assert nb.cells[-1].source == 'from public_checks import run_checks\n\nrun_checks("quantize_kv", quantize_kv, dequantize_kv)'
    code = "\n".join(line.split("#", 1)[0] for line in nb.cells[3].source.splitlines())
    assert "quantize_kv(" not in code and "np.round" not in code     # the worked example states values


def _functions_from(folder):
    ns = {}
    exec(answer_cell(nbformat.read(ROOT / folder / f"{NAME}.ipynb", as_version=4)).source, ns)
    return ns["quantize_kv"], ns["dequantize_kv"]


def test_the_public_checks_name_rounding_down_and_the_other_axis():
    quantize, dequantize = _functions_from("solutions")

    def floor(x, bits, axis):
        codes, scale, offset = quantize(x, bits, axis)
        step = np.where(scale > 0, scale, 1.0)
        return np.clip(np.floor((x - offset) / step), 0, 2 ** bits - 1).astype(np.uint8), scale, offset

    failed = {o.description: o.message for o in evaluate(NAME, floor, dequantize) if o.status == "failed"}
    assert any("rounded down" in m for m in failed.values()), failed

    def swapped(x, bits, axis):
        codes, _, _ = quantize(x, bits, 1 - axis)
        _, scale, offset = quantize(x, bits, axis)
        return codes, scale, offset

    failed = {o.description: o.message for o in evaluate(NAME, swapped, dequantize) if o.status == "failed"}
    assert any("other axis" in m for m in failed.values()), failed
