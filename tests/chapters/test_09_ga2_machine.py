"""Chapter 9 (the GA-2 machine), its exercise (requant) and its public checks.

The numbers the chapter states through glue are read back and pinned against the figures published
with the GA-2 design (transcribed here as constants, never produced by this project's code) and
against exact arithmetic.
"""
import inspect
import json
import math

import nbformat
import numpy as np
import pytest

from chapter_notebooks import (ROOT, assert_prints_no_machine_answer,
                               assert_shows_no_answer_and_links_its_exercises, assert_stored_bare_with_self_checks,
                               chapter_path, errors, executed, figures, glue_references)
from public_checks import PublicCheckFailed, evaluate, run_checks

CH9 = chapter_path("09_ga2_machine")
EXERCISES = {"requant": 9}


PUBLISHED_CH9 = {"ch9_wm": "16,646,144", "ch9_wm_plain": "16646144", "ch9_ws": "33", "ch9_sm_out": "[19054, 13940, 27724, 4818]",
                 "ch9_sm_sum_a": "65536"}


# and what exact arithmetic and the spec give for the rest of chapter 9
EXACT_CH9 = {
    "ch9_ext_words": "8,192", "ch9_spad_words": "4,096", "ch9_max_m": "4", "ch9_max_k": "64",
    "ch9_mantissa_bits": "24", "ch9_max_shift": "63",
    "ch9_first_c": "[58, -48, -83, 154]", "ch9_first_q": "[15, -12, -21, 39]", "ch9_first_total": "82",
    "ch9_first_instructions": "5", "ch9_wx": "0.0019378662109375", "ch9_wf": "0.9921875", "ch9_we": "-9",
    "ch9_w_exact": "exactly", "ch9_zero_from": "178", "ch9_zero_gap": "11.12",
    "ch9_mm1": "112", "ch9_mm4": "175", "ch9_mm_ratio": "1.56", "ch9_mm_per_row": "2.6",
    "ch9_util1": "3.6%", "ch9_util4": "9.1%", "ch9_refuse_index": "1", "ch9_refuse_field": "M",
    "ch9_refusals": "6",
}


@pytest.fixture(scope="module")
def ch9():
    return executed(CH9)


# ---------------------------------------------------------------- chapter 9


def test_ch9_published_and_exact_figures(ch9):
    nb, g = ch9
    assert not errors(nb)
    for key, want in {**PUBLISHED_CH9, **EXACT_CH9}.items():
        assert g[key] == want, key
    assert figures(nb) >= 4          # the machine, the staircase, the table of exp, the rows of the array
    assert g["ch9_first_halves"] == "14.5 became 15 and 38.5 became 39"


def test_ch9_requantizer_precision(ch9):
    """24 bits: the multiplier within 2^-24, no result changed; fewer bits change results, more of
    them the fewer bits there are."""
    _, g = ch9
    assert float(g["ch9_rel24"]) <= 2 ** -24
    changed = [int(g[k].replace(",", "")) for k in ("ch9_changed16", "ch9_changed12", "ch9_changed8")]
    assert 0 <= changed[0] < changed[1] < changed[2] <= 20_000
    assert g["ch9_n_requant"] == "20,000"


def test_ch9_softmax_accuracy(ch9):
    _, g = ch9
    assert 0 < float(g["ch9_sm_worst"]) < 5e-4 and 0 < float(g["ch9_sm_example"]) < 2e-5
    assert int(g["ch9_sm_sum_min"]) <= 65536 <= int(g["ch9_sm_sum_max"])
    assert int(g["ch9_sm_sum_max"]) - int(g["ch9_sm_sum_min"]) < 40


def test_ch9_shows_the_refusals_with_index_and_field(ch9):
    nb, _ = ch9
    shown = "\n".join("".join(out.get("data", {}).get("text/markdown", "")) for cell in nb.cells
                      for out in cell.get("outputs", []))
    assert "instruction 1 (MM): field 'M': must be in 1..4, got 5" in shown
    assert "missing: a program must end with HALT" in shown
    assert "field 'dst': must not be negative" in shown


# ---------------------------------------------------------------- both chapters


def test_the_chapter_shows_no_answer_but_links_its_exercise(ch9):
    assert_shows_no_answer_and_links_its_exercises(ch9[0], "ch9", EXERCISES)


def test_chapters_never_print_the_machines_answers(ch9):
    assert_prints_no_machine_answer(ch9[0])


def test_the_text_states_many_glued_figures():
    assert len(glue_references(nbformat.read(CH9, as_version=4))) > 20


def test_the_committed_chapter_has_no_outputs_and_self_checks():
    assert_stored_bare_with_self_checks(CH9)


def test_the_toc_has_a_part_for_the_two_chapters():
    toc = (ROOT / "_toc.yml").read_text()
    part = toc.index("caption: The decode step on a chip")
    assert toc.index("book/chapters/04_memory_bound") < part < toc.index("book/chapters/09_ga2_machine") \
        < toc.index("book/chapters/10_decode_on_ga2") < toc.index("caption: Appendix")
    assert "exercises/requant" in toc and "exercises/attention_tail" in toc


# ---------------------------------------------------------------- exercise notebooks


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


def _requant_right(acc, m, s):
    from fractions import Fraction
    import math

    def one(a):
        x = Fraction(int(a) * m, 2 ** s)
        q = math.floor(abs(x) + Fraction(1, 2))
        return max(-127, min(127, q if x >= 0 else -q))
    if np.ndim(acc) == 0:
        return one(acc)
    return np.array([one(a) for a in np.ravel(acc)], dtype=np.int64).reshape(np.shape(acc))


def test_requant_public_checks():
    assert not _failures("requant", _requant_right)
    even = _failures("requant", lambda a, m, s: int(round(a * m / 2 ** s)) if np.ndim(a) == 0 else
                     np.clip(np.round(np.asarray(a, dtype=np.float64) * m / 2 ** s), -127, 127).astype(np.int64))
    assert even and any("rounded to even" in o.message for o in even)
    def clamp_at_128(a, m, s):
        return -128 if np.ndim(a) == 0 and a * m / 2 ** s <= -127.5 else _requant_right(a, m, s)
    low = _failures("requant", clamp_at_128)
    assert low and any("saturate at -128" in o.message for o in low)
    # the product held in int32 (wrapped modulo 2^32), then requantized right: the hint names the
    # overflow only for an answer that is exactly what that mistake gives
    wrapped = _failures("requant", lambda a, m, s: _requant_right(a, m, s) if np.ndim(a) == 0 else
                        _requant_right((np.asarray(a, dtype=np.int64) * m).astype(np.int32), 1, s))
    assert wrapped and any("an int32 product wraps around" in o.message for o in wrapped)
    floats = _failures("requant", lambda a, m, s: float(_requant_right(a, m, s)) if np.ndim(a) == 0 else
                       _requant_right(a, m, s))
    assert floats and any("Python int" in o.message for o in floats)
    with pytest.raises(PublicCheckFailed):
        run_checks("requant", lambda a, m, s: 0 if np.ndim(a) == 0 else np.zeros(np.shape(a), dtype=int))


def test_public_checks_of_ga2_compute_nothing():
    """The checks compare with stored values: no function of theirs returns the stored answers."""
    import inspect
    import public_checks.attention_tail as pa
    import public_checks.requant as pr
    data = json.loads((ROOT / "public_checks" / "data" / "requant.json").read_text())
    for module in (pr, pa):
        for fname, fn in inspect.getmembers(module, inspect.isfunction):
            if fn.__module__ != module.__name__:
                continue
            for case in ("weights", "ties", "saturation"):
                try:
                    got = [fn(*args) for args in data[case]["args"]]
                except Exception:  # noqa: BLE001 - a function of another shape
                    continue
                assert got != data[case]["expected"], f"{module.__name__}.{fname} computes requant"
    source = (ROOT / "public_checks" / "attention_tail.py").read_text()
    assert "ga2.attn" not in source and "ga2.quant" not in source


def test_public_check_data_agrees_with_the_machine():
    """Two implementations written apart: the data tool's references and ga2."""
    from ga2 import attn, cycles, quant
    from ga2.machine import Machine
    data = json.loads((ROOT / "public_checks" / "data" / "requant.json").read_text())
    for case in ("weights", "ties", "saturation"):
        assert [quant.requant(*a) for a in data[case]["args"]] == data[case]["expected"]
    arr = data["array"]
    assert quant.requant(np.array(arr["acc"], dtype=np.int32), arr["m"], arr["s"]).tolist() == arr["expected"]
    tail_data = json.loads((ROOT / "public_checks" / "data" / "attention_tail.json").read_text())
    for key, case in tail_data.items():
        if not isinstance(case, dict) or "head" not in case:
            continue
        L, P = case["L"], {k: tuple(v) for k, v in case["P"].items()}
        assert [{"op": i.op, **i.fields} for i in attn.head(L, "cached", P)] == case["head"], key
        ext = [0] * 8192
        for address, values in case["ext_before"].items():
            ext[int(address):int(address) + len(values)] = values
        machine = Machine(ext).run(attn.program(L, "cached", P))
        want = [0] * 8192
        for address, values in case["ext_after"].items():
            want[int(address):int(address) + len(values)] = values
        assert machine.ext.tolist() == want, key
        assert cycles.cycle_counts(attn.attention_tail(L, P)).total == case["tail_cycles"], key
