"""Chapters 3 and 4, the appendix, their exercises and public checks; the appendix's tiny model.

Each notebook is executed once (module-scoped fixtures, cwd = book/chapters); the numbers its
text states through myst-nb glue are read back and pinned against the seeds' figures, written
here as constants.  Measured values (Chapter 4's bandwidths) are checked for being positive and
finite only: no assertion on a speed.
"""
import math
import os
import re
from pathlib import Path

import nbformat
import numpy as np
import pytest

from chapter_notebooks import execute, glued, self_check_pairs
from public_checks import PublicCheckFailed, evaluate, run_checks

ROOT = Path(__file__).resolve().parents[2]
CHAPTERS = ROOT / "book" / "chapters"
CH3 = CHAPTERS / "03_cache_memory.ipynb"
CH4 = CHAPTERS / "04_memory_bound.ipynb"
APPX = CHAPTERS / "appendix_transformer.ipynb"
EXERCISES = {"kv_cache_bytes": 3, "max_batch": 3, "arithmetic_intensity": 4, "time_per_token": 4,
             "prefill_time": 4}
GLUE_ROLE = re.compile(r"\{glue:(?:text|md)?\}`([A-Za-z0-9_]+)(?::[^`]*)?`")

# ---------------------------------------------------------------- the seeds' figures
# seed 001: L=32, G=32, d=128, T=8192, 2 bytes -> 4,294,967,296 bytes, 4 GiB; G=8 -> 1 GiB
SEED_001 = {"ch3_example_bytes": "4,294,967,296", "ch3_example_gib": "4 GiB", "ch3_example_gqa_gib": "1 GiB"}
# seed 002, "How big is a cache?" and "Running example B"
SEED_002 = {"ch3_bpt_7b": "524,288", "ch3_bpt_7b_kib": "512 KiB", "ch3_7b_4096": "2 GiB",
            "ch3_7b_4096_int8": "1 GiB", "ch3_7b_32768": "16 GiB", "ch3_bpt_70b": "327,680",
            "ch3_70b_2048": "640 MiB", "ch3_70b_32768": "10 GiB", "ch3_bpt_1b": "65,536",
            # the memory-budget exercise: 16 GiB for caches, 2,048-token conversations
            "ch3_budget_7b_fp16": "16", "ch3_budget_7b_int8": "32", "ch3_budget_70b": "25",
            "ch3_budget_70b_each": "640 MiB"}
# seed 004: the A10 (24 GB, 7B in fp16 ~ 14 GB, ~10 GB left), "19,230 tokens", "a batch of 4"
SEED_004_CH3 = {"ch3_a10_weights_gb": "14", "ch3_a10_spare_gb": "10", "ch3_guide_tokens": "19,230",
                "ch3_batch_gb": "4"}
# and what the exact arithmetic gives instead
EXACT_CH3 = {"ch3_tokens_gb": "19,073", "ch3_tokens_gib": "20,480", "ch3_batch_gib": "5",
             "ch3_batch_gb_exact": "4.66", "ch3_int32_product": "0", "ch3_guide_reading_ratio": "19,230.77",
             "ch3_70b_mha_bpt": "2.5 MiB", "ch3_a10_batch_int8": "9", "ch3_a100_batch_fp16": "30",
             "ch3_calc_gqa_int8_batch": "37", "ch3_70b_weights_gb": "140", "ch3_t4_spare_gb": "2",
             "ch3_t4_batch": "0", "ch3_q2_bpt": "98,304", "ch3_gib_over_gb": "7.4%",
             "ch3_q2_total": "201,326,592 bytes (192 MiB)", "ch3_q3_total": "201,326,592 bytes (192 MiB)",
             "ch3_70b_sharing_ratio": "8", "ch3_1b_batch_min": "52", "ch3_1b_batch_max": "290",
             "ch3_calc_group": "4", "ch3_calc_cut": "8",
             # the calculator's unit switch on the example: 24 and 14 read as GiB leave 10 GiB, a batch of 5;
             # an A10's 24,000,000,000 bytes are 22.35 GiB
             "ch3_calc_gpu_field": "24", "ch3_calc_weights_field": "14", "ch3_calc_spare_gib": "10 GiB",
             "ch3_calc_batch_gib": "5", "ch3_a10_gb": "24", "ch3_calc_a10_gib": "22.35"}
# seed 004, chapter 4: ops:byte 208.3; attention 62 ops/byte; 46 / 23 / 6 ms per token;
# prefill 75 / 39 / 16 ms; totals 6.98 / 3.49 / 0.92 s
SEED_004_CH4 = {"ch4_opb_a10": "208.3", "ch4_ai_round": "62",
                "ch4_tpt_t4_guide": "46", "ch4_tpt_a10_guide": "23", "ch4_tpt_a100_guide": "6",
                "ch4_prefill_t4_guide": "75", "ch4_prefill_a10_guide": "39", "ch4_prefill_a100_guide": "16",
                "ch4_total_t4_guide": "6.98", "ch4_total_a10_guide": "3.49", "ch4_total_a100_guide": "0.92",
                "ch4_total_t4_guide_ms": "6,975", "ch4_total_a10_guide_ms": "3,489", "ch4_total_a100_guide_ms": "916"}
EXACT_CH4 = {"ch4_opb_t4": "216.7", "ch4_opb_a100": "153.0", "ch4_ai": "62.42",
             "ch4_ai_ops": "8,640,266,240", "ch4_ai_bytes": "138,412,032", "ch4_ai_decode": "1.01",
             "ch4_ai_weights_b1": "1", "ch4_a10_decode_gap": "207",
             "ch4_tpt_t4_exact": "46.67", "ch4_tpt_a10_exact": "23.33", "ch4_tpt_a100_exact": "6.87",
             "ch4_prefill_t4_exact": "75.38", "ch4_prefill_a10_exact": "39.20", "ch4_prefill_a100_exact": "15.71",
             "ch4_total_t4_exact": "7.08", "ch4_total_a10_exact": "3.54", "ch4_total_a100_exact": "1.05",
             "ch4_a100_gap_s": "0.13", "ch4_a100_lost_ms": "0.87", "ch4_a100_gap_pct": "12%",
             "ch4_prefill_steps_min": "1.6", "ch4_prefill_steps_max": "2.3", "ch4_decode_share_min": "98%",
             "ch4_a10_decode_tflops": "0.6", "ch4_a10_decode_share": "0.5%", "ch4_a10_ridge_batch": "208",
             "ch4_a100_ridge_batch": "153", "ch4_a10_max_batch": "4", "ch4_a100_max_batch": "30",
             "ch4_a10_b1_ms": "26.9", "ch4_a10_bmax_ms": "37.6", "ch4_a10_b1_tps": "37",
             "ch4_a10_bmax_tps": "106", "ch4_a10_cache_share": "38%", "ch4_q1_opb": "295.5", "ch4_q3_ms": "43.3",
             # the seed's "46.7 became 46" and "15.7 became 16", and its 7B model's "14 GB" of weights
             "ch4_tpt_t4_1dp": "46.7", "ch4_prefill_a100_1dp": "15.7", "ch4_7b_weights_gb": "14"}
MEASURED_CH4 = ["ch4_copy_gbs", "ch4_step_gbs", "ch4_ratio", "ch4_largest_ms", "ch4_cpu_7b_tpt"]
EXACT_APPX = {"appx_vocab_size": "10", "appx_d_model": "16", "appx_n_heads": "2", "appx_head_dim": "8",
              "appx_n_layers": "2", "appx_cache_values": "64", "appx_attend_calls": "4",
              "appx_pe_min": "-1.00", "appx_pe_max": "1.00", "appx_ln_std": "1.000",
              "appx_greedy_logprob": "-5.12", "appx_beam_logprob": "-2.90", "appx_top_word": "cache",
              "appx_top_prob": "0.28", "appx_greedy_text": "the cache cache keys token values token",
              "appx_beam_text": "the cache every every every every token"}


# ---------------------------------------------------------------- executing the notebooks




@pytest.fixture(scope="module")
def ch3():
    nb = execute(CH3)
    return nb, glued(nb)


@pytest.fixture(scope="module")
def ch4():
    nb = execute(CH4)
    return nb, glued(nb)


@pytest.fixture(scope="module")
def appx():
    nb = execute(APPX)
    return nb, glued(nb)


def figures(nb):
    return sum("image/png" in out.get("data", {}) for cell in nb.cells for out in cell.get("outputs", []))


def errors(nb):
    return [out for cell in nb.cells for out in cell.get("outputs", []) if out.get("output_type") == "error"]


def referenced_keys(path):
    nb = nbformat.read(path, as_version=4)
    return {k for c in nb.cells if c.cell_type == "markdown" for k in GLUE_ROLE.findall(c.source)}


# ---------------------------------------------------------------- chapter 3


def test_ch3_seed_figures(ch3):
    _, g = ch3
    for key, want in {**SEED_001, **SEED_002, **SEED_004_CH3}.items():
        assert g[key] == want, key


def test_ch3_exact_figures(ch3):
    _, g = ch3
    for key, want in EXACT_CH3.items():
        assert g[key] == want, key


def test_ch3_explains_19230(ch3):
    _, g = ch3
    assert g["ch3_guide_reading"] == "10 GB divided by 0.00052 GB"
    assert g["ch3_tokens_gb"] != g["ch3_guide_tokens"] != g["ch3_tokens_gib"]


def test_ch3_shows_the_widget_and_its_static_figure(ch3):
    nb, _ = ch3
    assert not errors(nb)
    outs = [o for c in nb.cells for o in c.get("outputs", [])]
    assert any("application/vnd.jupyter.widget-view+json" in o.get("data", {}) for o in outs)
    assert figures(nb) >= 3          # cache vs tokens, batch vs length, the presets figure
    assert nb.metadata.get("widgets"), "the executed notebook should carry the widget state"


def test_ch3_unit_switch_moves_the_batch_as_the_two_readings_do(ch3):
    """Pressing GiB on the calculator's example gives the batch of the 10 GiB reading, and the
    page saves the widget back on its example (GB, the 7B-class model on an A10)."""
    nb, g = ch3
    assert (g["ch3_batch_gb"], g["ch3_calc_batch_gib"]) == ("4", "5") and g["ch3_calc_batch_gib"] == g["ch3_batch_gib"]
    printed = [o["text"] for c in nb.cells if c.get("id") == "cell-42-unit-code" for o in c.outputs]
    assert printed == ["24.0 14.0 GiB    presets: custom custom\n10 GiB left: 5 sequences of 4,096 tokens\n"]
    state = nb.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
    saved = [e["state"] for e in state.values() if e["model_name"] == "AnyModel"]
    assert [(s["unit"], s["model_preset"], s["gpu_preset"], s["gpu_memory"], s["weights"]) for s in saved] == \
        [("GB", "7B", "A10", 24.0, 14.0)]


@pytest.mark.parametrize("fixture", ["ch3", "ch4", "appx"])
def test_chapter_outputs_carry_no_stderr_and_no_warning(fixture, request):
    """A warning printed while a chapter runs would appear on its page (with the build's paths)."""
    nb, _ = request.getfixturevalue(fixture)
    noisy = [(c.get("id"), o.get("text", "")[:200]) for c in nb.cells if c.cell_type == "code" for o in c.outputs
             if (o.get("output_type") == "stream" and o.get("name") == "stderr")
             or "Warning" in o.get("text", "") or "Warning" in o.get("data", {}).get("text/plain", "")]
    assert not noisy, noisy


@pytest.mark.parametrize("fixture", ["ch3", "ch4", "appx"])
def test_chapters_show_no_answer_but_link_the_exercise(fixture, request):
    """No graded function's source in an executed chapter (cells or outputs); each graded function
    the chapter teaches is named beside a link to its exercise."""
    from coursetools.answer_leaks import describe, leaks_in_notebook
    nb, _ = request.getfixturevalue(fixture)
    leaks = leaks_in_notebook(nb, fixture)
    assert not leaks, describe(leaks)
    text = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    for name, chapter in EXERCISES.items():
        if f"ch{chapter}" == fixture:
            assert f"[{name} exercise](../../exercises/{name}.ipynb)" in text or \
                f"[{name}](../../exercises/{name}.ipynb)" in text, name


# ---------------------------------------------------------------- chapter 4


def test_ch4_seed_figures(ch4):
    _, g = ch4
    for key, want in SEED_004_CH4.items():
        assert g[key] == want, key


def test_ch4_exact_figures(ch4):
    _, g = ch4
    for key, want in EXACT_CH4.items():
        assert g[key] == want, key


def test_ch4_measurements_are_positive_and_finite(ch4):
    nb, g = ch4
    for key in MEASURED_CH4:
        value = float(str(g[key]).replace(",", ""))
        assert math.isfinite(value) and value > 0, key
    assert g["ch4_ratio_relation"] in ("less than", "at least")
    assert (float(g["ch4_ratio"]) < 1) == (g["ch4_ratio_relation"] == "less than")
    # what was measured is what this machine's plan says (the plan's own tests cover other machines)
    from lessons.bandwidth import plan_measurements
    from lessons.machine_facts import read_machine
    from lessons.memory import format_bytes
    plan = plan_measurements(read_machine())
    assert g["ch4_llc"] == format_bytes(plan.llc_bytes) and g["ch4_status"] in ("beyond", "short", "inside")
    assert g["ch4_first_cache"] == format_bytes(min(plan.cache_sizes)) == "1 MiB"
    assert g["ch4_largest_cache"] == g["ch4_last_cache"] and g["ch4_largest_cache"].endswith("iB")
    assert (g["ch4_status"] == "beyond") == ("read from main memory" in g["ch4_plan"])
    assert ("cannot be exceeded" in g["ch4_result"]) == (g["ch4_status"] != "beyond")
    assert g["ch4_growth"].startswith("From ") or g["ch4_growth"].startswith("Only one")
    growth = re.search(r"(\d+(?:\.\d+)?) times the bytes, the step's time grew (\d+\.\d) times: (\w+ \w+)",
                       g["ch4_growth"])
    if growth:
        ratio, grew, verdict = float(growth[1]), float(growth[2]), growth[3]
        assert verdict == ("more than" if grew > 1.25 * ratio else "less than" if grew < 0.8 * ratio else "about as")
    assert not errors(nb)
    assert figures(nb) >= 3          # roofline, batching, the measurement


def test_appendix_leaves_room_for_the_last_words_labels():
    nb = nbformat.read(APPX, as_version=4)
    code = next(c.source for c in nb.cells if c.cell_type == "code" and "beam search wins the sequence" in c.source)
    assert "ax.set_xlim(0.7, n_new + 0.6)" in code     # the labels sit right of their points


def test_ch4_words_around_its_figures(ch4):
    """The roofline's figure at batch 1 is a speed (TFLOP/s), its share of the A10's 125; the step it
    measures computes what Chapter 1's `attend` does (attend is taught there, not in Chapter 2); the
    measurement's figure names the last-level cache in a legend under the plots, off the data."""
    nb, g = ch4
    md = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    assert "{glue:text}`ch4_a10_decode_tflops` TFLOP/s of its 125" in md
    assert g["ch4_a10_decode_tflops"] == f"{600e9 / 1e12:.1f}"          # 600 GB/s at 1 operation per byte
    assert "Chapter 1's `attend`" in md and "Chapter 2's attend" not in md
    streams = "".join(o.get("text", "") for c in nb.cells for o in c.get("outputs", []))
    assert "same as Chapter 1's attend: True" in streams
    code = next(c.source for c in nb.cells if c.cell_type == "code" and "axvline(plan.llc_bytes" in c.source)
    assert "ax.text(" not in code and 'loc="outside lower center"' in code
    assert 'label=f"last-level cache, {format_bytes(plan.llc_bytes)}"' in code


def test_ch4_builds_on_a_machine_with_a_300_mib_cache_and_little_free_memory(tmp_path):
    """The machine of the bug report (a 300 MiB last-level cache) with 2 GiB free: the cache
    cannot be exceeded four times in a quarter of that memory, and the page says so and goes on.
    The kernel is told it runs on that machine by a sitecustomize that replaces read_machine."""
    (tmp_path / "sitecustomize.py").write_text(
        "import lessons.machine_facts as machine\n"
        "machine.read_machine = lambda: machine.MachineFacts(llc_bytes=300 * 2**20, mem_available_bytes=2 * 2**30,\n"
        "                                                    logical_cpus=64, usable_cpus=64, cpu_model='test')\n")
    nb = execute(CH4, {"PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])})
    g = glued(nb)
    assert not errors(nb)
    assert g["ch4_status"] == "short" and g["ch4_llc"] == "300 MiB" and g["ch4_last_cache"] == "512 MiB"
    assert "a fair measurement of main memory would need caches of 1.17 GiB and more" in g["ch4_plan"]
    assert "cannot be exceeded 4 times over" in g["ch4_result"] and "overstate" in g["ch4_result"]
    assert float(g["ch4_step_gbs"]) > 0 and float(g["ch4_ratio"]) > 0
    assert figures(nb) >= 3


# ---------------------------------------------------------------- appendix


def test_appendix_figures(appx):
    nb, g = appx
    assert not errors(nb)
    for key, want in EXACT_APPX.items():
        assert g[key] == want, key
    assert float(g["appx_perm_diff"]) < 1e-12
    assert float(g["appx_cache_max_diff"]) < 1e-12
    assert float(g["appx_beam_logprob"]) > float(g["appx_greedy_logprob"])
    assert figures(nb) >= 4


# ---------------------------------------------------------------- glue keys and links


@pytest.mark.parametrize("path,prefix,fixture", [(CH3, "ch3_", "ch3"), (CH4, "ch4_", "ch4"), (APPX, "appx_", "appx")])
def test_every_glue_reference_is_glued_and_prefixed(path, prefix, fixture, request):
    _, g = request.getfixturevalue(fixture)
    refs = referenced_keys(path)
    assert refs, "the chapter states numbers through glue"
    assert refs <= set(g), f"referenced but never glued: {sorted(refs - set(g))}"
    assert all(k.startswith(prefix) for k in g), [k for k in g if not k.startswith(prefix)]


@pytest.mark.parametrize("path", [CH3, CH4, APPX])
def test_committed_chapters_have_no_outputs(path):
    nb = nbformat.read(path, as_version=4)
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code")


@pytest.mark.parametrize("path,names", [(CH3, ["kv_cache_bytes", "max_batch"]),
                                        (CH4, ["arithmetic_intensity", "time_per_token", "prefill_time"])])
def test_chapters_link_their_exercises(path, names):
    nb = nbformat.read(path, as_version=4)
    text = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    assert "Self-check questions" in text and "dropdown" in text
    if path == CH4:                        # each answer a toggle right under its question
        pairs = self_check_pairs(nb)
        assert len(pairs) == 5 and all(answered for _, answered in pairs), pairs
    for name in names:
        link = f"../../exercises/{name}.ipynb"
        assert f"]({link})" in text
        assert (path.parent / link).resolve().exists()


# ---------------------------------------------------------------- exercise notebooks


def answer_cell(nb):
    tagged = [c for c in nb.cells if "answer" in c.metadata.get("tags", [])]
    assert len(tagged) == 1, "exactly one cell is tagged 'answer'"
    return tagged[0]


@pytest.mark.parametrize("name", sorted(EXERCISES))
@pytest.mark.parametrize("folder", ["exercises", "solutions"])
def test_exercise_notebook_form(name, folder):
    path = ROOT / folder / f"{name}.ipynb"
    nb = nbformat.read(path, as_version=4)
    assert nb.metadata["kvcourse"] == {"exercise": name, "chapter": EXERCISES[name]}
    assert nb.metadata["kernelspec"]["name"] == "python3"
    kinds = [c.cell_type for c in nb.cells]
    assert kinds[:2] == ["markdown", "code"]
    assert nb.cells[0].source.startswith(f"# Exercise: {name}")
    assert f"python -m graders grade exercises/{name}.ipynb" in nb.cells[0].source
    cell = answer_cell(nb)
    assert cell is nb.cells[1] and f"def {name}(" in cell.source
    assert ("raise NotImplementedError" in cell.source) == (folder == "exercises")
    if folder == "solutions":
        assert "kvcache" not in cell.source
    assert "## Public checks" in nb.cells[-2].source
    assert nb.cells[-1].source == f'from public_checks import run_checks\n\nrun_checks("{name}", {name})'
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code")
    # the worked example does not call the learner's function
    assert f"{name}(" not in nb.cells[3].source


def _function_from(path, name):
    ns = {}
    exec(answer_cell(nbformat.read(path, as_version=4)).source, ns)
    return ns[name]


@pytest.mark.parametrize("name", sorted(EXERCISES))
def test_solutions_pass_and_starters_are_reported_not_implemented(name, capsys):
    assert run_checks(name, _function_from(ROOT / "solutions" / f"{name}.ipynb", name))
    assert not run_checks(name, _function_from(ROOT / "exercises" / f"{name}.ipynb", name))
    assert "not implemented yet" in capsys.readouterr().out


# ---------------------------------------------------------------- public checks: right and wrong answers


def _failures(name, fn):
    return [o for o in evaluate(name, fn) if o.status == "failed"]


def kv_right(L, G, d, T, b):
    return 2 * L * G * d * T * b


def test_kv_cache_bytes_checks():
    assert not _failures("kv_cache_bytes", kv_right)
    # int32 arithmetic wraps around past 2**31 - 1
    wrapped = _failures("kv_cache_bytes", lambda *a: int(np.prod(np.array((2, *a)), dtype=np.int32)))
    assert wrapped and any("32-bit" in o.message for o in wrapped)
    # the factor 2 forgotten
    half = _failures("kv_cache_bytes", lambda L, G, d, T, b: L * G * d * T * b)
    assert half and any("key AND a value" in o.message for o in half)
    # a float result
    floaty = _failures("kv_cache_bytes", lambda *a: float(kv_right(*a)))
    assert floaty and any("Python int" in o.message for o in floaty)
    # numpy int64 is not a Python int
    assert _failures("kv_cache_bytes", lambda *a: np.int64(kv_right(*a)))
    with pytest.raises(PublicCheckFailed):
        run_checks("kv_cache_bytes", lambda L, G, d, T, b: L * G * d * T * b)


def mb_right(M, W, L, G, d, T, b):
    return 0 if W >= M else (M - W) // (2 * L * G * d * T * b)


def test_max_batch_checks():
    assert not _failures("max_batch", mb_right)
    # GB/GiB confusion: the spare memory converted with 2**30 and read back as 10**9
    gib_confused = _failures("max_batch", lambda M, W, L, G, d, T, b:
                             0 if W >= M else int((M - W) / 10**9 * 2**30) // (2 * L * G * d * T * b))
    assert gib_confused and any("10 GiB" in o.message for o in gib_confused)
    no_two = _failures("max_batch", lambda M, W, L, G, d, T, b: 0 if W >= M else (M - W) // (L * G * d * T * b))
    assert no_two and any("factor 2" in o.message for o in no_two)
    negative = _failures("max_batch", lambda M, W, L, G, d, T, b: (M - W) // (2 * L * G * d * T * b))
    assert negative and any("batch is 0" in o.message for o in negative)
    rounded = _failures("max_batch", lambda M, W, L, G, d, T, b:
                        0 if W >= M else round((M - W) / (2 * L * G * d * T * b)))
    assert rounded and any("round down" in o.message for o in rounded)
    floaty = _failures("max_batch", lambda *a: float(mb_right(*a)))
    assert floaty and any("Python int" in o.message for o in floaty)


def ai_right(n, d, b):
    return (4 * d + 3) * n / (4 * b * (n + d))


def test_arithmetic_intensity_checks():
    assert not _failures("arithmetic_intensity", ai_right)
    no_softmax = _failures("arithmetic_intensity", lambda n, d, b: 4 * d * n / (4 * b * (n + d)))
    assert no_softmax and any("softmax" in o.message for o in no_softmax)
    numbers = _failures("arithmetic_intensity", lambda n, d, b: ai_right(n, d, 1))
    assert numbers and any("bytes_per_value" in o.message for o in numbers)
    loads_only = _failures("arithmetic_intensity", lambda n, d, b: (4 * d + 3) * n * n / (b * (2 * n * n + 2 * n * d)))
    assert loads_only and any("loads AND the stores" in o.message for o in loads_only)


def test_time_per_token_checks():
    right = lambda P, b, bw: P * b / bw  # noqa: E731
    assert not _failures("time_per_token", right)
    ms = _failures("time_per_token", lambda P, b, bw: 1000 * P * b / bw)
    assert ms and any("milliseconds" in o.message for o in ms)
    rate = _failures("time_per_token", lambda P, b, bw: bw / (P * b))
    assert rate and any("tokens per second" in o.message for o in rate)
    no_bytes = _failures("time_per_token", lambda P, b, bw: P / bw)
    assert no_bytes and any("bytes_per_param" in o.message for o in no_bytes)


def test_prefill_time_checks():
    right = lambda n, P, F: n * 2 * P / F  # noqa: E731
    assert not _failures("prefill_time", right)
    half = _failures("prefill_time", lambda n, P, F: n * P / F)
    assert half and any("2 operations per parameter" in o.message for o in half)
    ms = _failures("prefill_time", lambda n, P, F: 1000 * n * 2 * P / F)
    assert ms and any("milliseconds" in o.message for o in ms)
    one = _failures("prefill_time", lambda n, P, F: 2 * P / F)
    assert one and any("multiply by n_tokens" in o.message for o in one)


def test_public_checks_compute_their_own_expectations():
    for name in EXERCISES:
        src = (ROOT / "public_checks" / f"{name}.py").read_text()
        assert "kvcache" not in src and "solutions" not in src
        assert 3 <= len(__import__(f"public_checks.{name}", fromlist=["CHECKS"]).CHECKS) <= 5


# ---------------------------------------------------------------- the appendix's tiny model


def test_tiny_model_cached_decoding_equals_recomputation():
    from lessons.transformer import decode_step, forward, init_model, prefill
    model = init_model(seed=3)
    tokens = [1, 2, 3, 4, 5, 6]
    _, caches = prefill(tokens[:2], model)
    for i in range(2, len(tokens)):
        logits, caches = decode_step(tokens[i], i, caches, model)
        np.testing.assert_allclose(logits, forward(tokens[: i + 1], model)[-1], atol=1e-12)
    assert caches[0][0]["k"].shape == (len(tokens), model["cfg"].head_dim)


def test_tiny_model_decoding():
    from lessons.transformer import beam_search, greedy, init_model, sequence_logprob
    model = init_model(seed=0)
    g = greedy([1, 2], 5, model)
    beams = beam_search([1, 2], 5, model, beam_width=2)
    assert len(g) == 7 and g[:2] == [1, 2]
    assert beams[0][1] >= sequence_logprob(g, 2, model) - 1e-12
    assert math.isclose(beams[0][1], sequence_logprob(beams[0][0], 2, model), rel_tol=1e-12)
    # width 1 is greedy
    assert beam_search([1, 2], 5, model, beam_width=1)[0][0] == g


def test_positional_encoding_and_layer_norm():
    from lessons.transformer import layer_norm, positional_encoding
    pe = positional_encoding(10, 8)
    assert pe.shape == (10, 8) and np.all(np.abs(pe) <= 1)
    np.testing.assert_allclose(pe[0], [0, 1] * 4)
    x = np.random.default_rng(0).normal(3, 2, size=(4, 16))
    y = layer_norm(x, np.ones(16), np.zeros(16))
    np.testing.assert_allclose(y.mean(axis=1), 0, atol=1e-12)
    np.testing.assert_allclose(y.std(axis=1), 1, atol=1e-4)


# ---------------------------------------------------------------- chapter 4: the real model, fewer bytes a value

# SmolLM2-135M-Instruct's sizes, from its model card: 30 layers, width 576, 9 query heads and 3
# key/value heads of 64, MLP 1,536, vocabulary 49,152, tied embeddings
SMOL = dict(L=30, D=576, H=9, G=3, d=64, F=1536, V=49152)


def smol_weight_bytes(size: int) -> int:
    """Bytes a batch-1 decode step reads of the weights: every layer's matrices and two norm
    gains, the final norm, the output layer (the embedding table, tied) and one embedding row."""
    s = SMOL
    layer = (s["H"] + 2 * s["G"]) * s["d"] * s["D"] + s["D"] * s["H"] * s["d"] + 3 * s["F"] * s["D"] + 2 * s["D"]
    return (s["L"] * layer + s["D"] + s["V"] * s["D"] + s["D"]) * size


def test_ch4_real_model_against_the_roofline(ch4):
    _, g = ch4
    T = int(g["ch4_real_context"])
    assert g["ch4_q_tokens"] == str(T) and 200 <= T <= 512                 # a few hundred tokens
    assert g["ch4_real_weight_mb"] == f"{smol_weight_bytes(4) / 1e6:.0f}"
    cache = 2 * SMOL["L"] * SMOL["G"] * T * SMOL["d"] * 4
    assert g["ch4_real_cache_mb"] == f"{cache / 1e6:.1f}"
    assert g["ch4_real_cache_share"] == f"{cache / (cache + smol_weight_bytes(4)):.1%}"
    for key in ("ch4_real_floor_ms", "ch4_real_step_ms", "ch4_real_gbs"):
        value = float(g[key])
        assert math.isfinite(value) and value > 0, key
    share = float(g["ch4_real_share"].rstrip("%")) / 100
    assert share == pytest.approx(float(g["ch4_real_floor_ms"]) / float(g["ch4_real_step_ms"]), abs=0.02)


def test_ch4_format_bits_and_bytes(ch4):
    _, g = ch4
    assert g["ch4_bf16_largest"] == "3.39e+38"                 # (2 - 2**-7) 2**127
    assert g["ch4_f16_largest"] == "65,504"                    # (2 - 2**-10) 2**15
    assert g["ch4_bf16_step"] == "0.0078" and g["ch4_f16_step"] == "0.00098" and g["ch4_f32_step"] == "1.19e-07"
    row = SMOL["d"]                                            # one head's key or value
    per_token = 2 * SMOL["L"] * SMOL["G"]                      # rows a token adds (K and V)
    assert g["ch4_bytes_c32"] == f"{per_token * row * 4:,}" == "46,080"
    assert g["ch4_bytes_c16"] == f"{per_token * row * 2:,}"
    assert g["ch4_bytes_c8"] == f"{per_token * (row + 4):,}"    # int8 values and a float32 scale
    assert g["ch4_bytes_w32"] == f"{smol_weight_bytes(4) / 1e6:.0f}"
    assert g["ch4_bytes_w16"] == f"{smol_weight_bytes(4) / 2e6:.0f}"


def test_ch4_real_activations_overflow_float16_only_in_the_norm(ch4):
    _, g = ch4
    residual = float(g["ch4_act_residual"].replace(",", ""))
    squares = float(g["ch4_act_squares"])
    assert 1_000 < residual < 65504                            # the page: "stored in float16 it fits"
    assert squares > 65504                                     # ... and its sum of squares does not
    assert g["ch4_act_over"] == f"{squares / 65504:,.0f}" or float(g["ch4_act_over"].replace(",", "")) > 1
    assert g["ch4_act_f16_nonzero"] == "0"
    assert 0 < float(g["ch4_act_bf16_err"]) < 0.5
    assert 1 <= int(g["ch4_act_layer"]) <= SMOL["L"] and g["ch4_width"] == str(SMOL["D"])


def test_ch4_formats_cost_little_and_in_order(ch4):
    _, g = ch4
    kl = {k: float(g[f"ch4_q_{k}_kl"]) for k in ("c_float16", "c_bfloat16", "c_int8")}
    # a float16 row rounds at 2**-11, a bfloat16 row at 2**-8, an int8 row at max|x| / 254
    assert 0 < kl["c_float16"] < kl["c_bfloat16"] < kl["c_int8"] < 0.01
    ppl = float(g["ch4_q_ppl"])
    assert 1 < ppl < SMOL["V"]
    for key in ("c_float16", "c_bfloat16", "c_int8", "w_bfloat16", "w_float16"):
        if g[f"ch4_q_{key}_kl"] == "unmeasured":
            continue
        assert float(g[f"ch4_q_{key}_kl"]) < 0.01, key
        assert float(g[f"ch4_q_{key}_top1"].rstrip("%")) >= 90, key
        assert float(g[f"ch4_q_{key}_ppl"]) == pytest.approx(ppl, rel=0.02), key
    if g["ch4_half_measured"] == "measured":
        assert g["ch4_half_speed"].startswith("bfloat16 weights and cache, with ")
        assert re.search(r"\d+(\.\d)? ms against \d+(\.\d)? ms: (about as fast as|[\d.,]+ times (faster|slower) than) "
                         r"float32$", g["ch4_half_speed"]), g["ch4_half_speed"]
