"""ga2.attn: the published chapter's cycle figures, the L = 3 listing, and the decode loops."""
import math

import numpy as np
import pytest

from ga2 import attn
from ga2.isa import ProgramError, cycle_counts, parse_listing
from ga2.machine import Machine
from ga2.plan import EXT_PLAN, SPAD_PLAN
from published_figures import (PUBLISHED_BREAKDOWN_L32, PUBLISHED_BREAKDOWN_PERCENT, PUBLISHED_BREAKDOWN_TOTAL, PUBLISHED_CYCLE_TABLE,
                              PUBLISHED_EXAMPLE_B, PUBLISHED_GROWTH_PER_TOKEN, PUBLISHED_INSTRUCTIONS_L3, PUBLISHED_LISTING_L3,
                              PUBLISHED_SPEEDUP, PUBLISHED_TOTAL_CACHED_32, PUBLISHED_TOTAL_RATIO_32, PUBLISHED_TOTAL_RECOMPUTE_32,
                              PUBLISHED_WEIGHTS_RQ)


# ---------------------------------------------------------------- cycles
def test_cycle_table_matches_the_seed_row_by_row():
    rows = attn.cycle_table((2, 4, 8, 16, 32))
    assert {(r.L, r.variant): (r.counts.instructions, r.counts.total, r.counts.matrix, r.counts.dma,
                               r.counts.vector) for r in rows} == PUBLISHED_CYCLE_TABLE
    totals = {(r.L, r.variant): r.counts.total for r in rows}
    for L, speedup in PUBLISHED_SPEEDUP.items():
        assert round(totals[(L, "recompute")] / totals[(L, "cached")], 2) == speedup


@pytest.mark.parametrize("L", [2, 4, 8, 16, 32])
def test_the_machine_counters_read_the_seed_table(L):
    """The seed read its table from the circuit at the last step of a decode loop (example seed 1)."""
    last = attn.sequence(attn.make_example(L, 1))[-1]
    for variant in attn.VARIANTS:
        c = last[variant].counters
        assert (c.instructions, c.total, c.matrix, c.dma, c.vector) == PUBLISHED_CYCLE_TABLE[(L, variant)]
    assert last.cached.output == last.recompute.output


def test_running_example_b_every_row_and_the_totals():
    cost = attn.generation_cost(32)
    cached, recompute = cost["cached"], cost["recompute"]
    for t, (c, r, ratio) in PUBLISHED_EXAMPLE_B.items():
        assert (cached[t - 1], recompute[t - 1]) == (c, r), t
        assert round(r / c, 2) == ratio
    assert sum(cached) == PUBLISHED_TOTAL_CACHED_32 == 124_346
    assert sum(recompute) == PUBLISHED_TOTAL_RECOMPUTE_32 == 295_184
    assert round(sum(recompute) / sum(cached), 2) == PUBLISHED_TOTAL_RATIO_32
    assert round((cached[-1] - cached[0]) / 31) == PUBLISHED_GROWTH_PER_TOKEN["cached"]
    assert round((recompute[-1] - recompute[0]) / 31) == PUBLISHED_GROWTH_PER_TOKEN["recompute"]


def test_where_the_cycles_go_at_32():
    prog = attn.program(32, "cached", attn.default_params())
    rows = attn.cycle_breakdown(prog)
    assert [op for op, _, _ in rows] == list(PUBLISHED_BREAKDOWN_L32)          # most cycles first
    assert {op: (n, c) for op, n, c in rows} == PUBLISHED_BREAKDOWN_L32
    total = sum(c for _, _, c in rows)
    assert total == PUBLISHED_BREAKDOWN_TOTAL == 5249
    assert cycle_counts(prog).total == total + 2                           # HALT's issue cycles
    assert {op: round(100 * c / total, 1) for op, _, c in rows} == PUBLISHED_BREAKDOWN_PERCENT


# ---------------------------------------------------------------- the listing
def test_instruction_counts_at_3():
    P = attn.rq_params(attn.make_example(3, 1))
    assert {v: len(attn.program(3, v, P)) for v in attn.VARIANTS} == PUBLISHED_INSTRUCTIONS_L3
    assert attn.program(3, "cached", P)[-1].op == "HALT"


def test_listing_at_3_field_for_field():
    """Every field of the published chapter's listing, except the data-dependent requantizer multipliers."""
    published = parse_listing(PUBLISHED_LISTING_L3)
    ours = attn.program(3, "cached", attn.rq_params(attn.make_example(3, 1)))
    assert len(ours) == len(published) == 32
    for index, (a, b) in enumerate(zip(ours, published)):
        assert a.op == b.op, index
        fa, fb = a.fields, b.fields
        if a.op == "RQ":
            for name in ("m", "s"):
                fa.pop(name), fb.pop(name)
        assert fa == fb, index


def test_listing_at_3_exactly_with_the_published_generator():
    """Drawn with the published chapter's generator, the example is the chapter's: the multipliers match too."""
    P = attn.rq_params(attn.make_example(3, 1, generator="python"))
    assert attn.program(3, "cached", P) == parse_listing(PUBLISHED_LISTING_L3)
    assert P["weights"] == PUBLISHED_WEIGHTS_RQ


# ---------------------------------------------------------------- the memory plan and the builder
@pytest.mark.parametrize("plan, size", [(EXT_PLAN, 8192), (SPAD_PLAN, 4096)])
def test_memory_plan_regions_are_disjoint_and_inside(plan, size):
    spans = sorted((addr, addr + words, name) for name, addr, words, _ in plan)
    for (a0, a1, n1), (b0, b1, n2) in zip(spans, spans[1:]):
        assert a1 <= b0, (n1, n2)
    assert spans[-1][1] <= size


def test_rq_params_follow_the_scales():
    ex = attn.make_example(5, 3)
    s, P = ex["scales"], attn.rq_params(ex)
    value = lambda key: P[key][0] / 2 ** P[key][1]  # noqa: E731
    assert math.isclose(value("q"), s["x"] * s["wq"] / s["q"], rel_tol=2 ** -23)
    assert math.isclose(value("scores"), s["q"] * s["k"] / 4 * 16, rel_tol=2 ** -23)
    assert math.isclose(value("out"), s["v"] / (127 * s["o"]), rel_tol=2 ** -23)
    assert P["weights"] == PUBLISHED_WEIGHTS_RQ


def test_program_arguments_and_the_plan_limit():
    P = attn.default_params()
    with pytest.raises(ValueError):
        attn.program(0, "cached", P)
    with pytest.raises(ValueError):
        attn.program(3, "cached-ish", P)
    # past the plan's 32 tokens the builder refuses, unless the program is only to be priced
    with pytest.raises(ValueError, match="32 tokens"):
        attn.program(33, "cached", P)
    long = attn.program(64, "recompute", P, beyond_plan=True)
    assert cycle_counts(long).total > cycle_counts(attn.program(32, "recompute", P)).total
    assert len(attn.generation_cost(64)["cached"]) == 64
    # and a step whose MM would stream K = L = 65 > 64 values is refused by the machine
    with pytest.raises(ProgramError, match="'K'"):
        Machine().run(attn.program(65, "cached", P, beyond_plan=True))


def test_make_example_is_deterministic_and_calibrated():
    a, b, c = attn.make_example(4, 7), attn.make_example(4, 7), attn.make_example(4, 8)
    assert np.array_equal(a["X"], b["X"]) and not np.array_equal(a["X"], c["X"])
    assert a["X"].shape == (4, 16) and all(w.shape == (16, 16) for w in a["W"])
    assert math.isclose(a["scales"]["x"], np.abs(a["X"]).max() / 127)
    assert math.isclose(a["scales"]["q"], np.abs(a["X"][-1] @ a["W"][0]).max() / 127)
    assert np.allclose(a["out_float"], a["weights"] @ a["V"]) and math.isclose(a["weights"].sum(), 1)


# ---------------------------------------------------------------- decoding
def test_sequence_persists_the_cache_and_both_programs_agree():
    ex = attn.make_example(9, 2)
    steps = attn.sequence(ex)
    assert [s.t for s in steps] == list(range(1, 10))
    for before, after in zip(steps, steps[1:]):
        # the cached program of step t+1 starts from the EXT step t left: t rows in each cache
        kc = after.cached.ext_before[attn.EX_KC:attn.EX_KC + 16 * (after.t - 1)]
        assert np.array_equal(kc, steps[-1].spad[attn.SP_KC:attn.SP_KC + kc.size])
        assert not after.cached.ext_before[attn.EX_KC + 16 * (after.t - 1):attn.EX_KC + 16 * 32].any()
    for step in steps:
        assert step.cached.output == step.recompute.output == attn.int_reference(ex, step.t)
        assert step["cached"][2] == step.cached.output                   # the published chapter's access
        assert attn.stagewise_problems(ex, step) == []
        assert attn.stagewise_problems(ex, {"t": step.t, "spad": list(step.spad)}) == []   # a plain mapping


def test_a_program_run_unpacks_as_the_published_chapters_triple():
    """The published chapter reads a run as (program, ext before, int8 output): ``prog, ext, out8 = last[var]``."""
    last = attn.sequence(attn.make_example(4, 1))[-1]
    for variant in attn.VARIANTS:
        run = last[variant]
        prog, ext_before, out8 = run
        assert (prog, out8) == (run.program, run.output) and ext_before is run.ext_before
        assert len(run) == 3 and run[2] == out8
        # the counters ride along outside the tuple, as the machine read them
        assert run.counters == cycle_counts(prog)
        assert (run.counters.instructions, run.counters.total) == PUBLISHED_CYCLE_TABLE[(4, variant)][:2]
        copy = run._replace(output=[0] * 16)
        assert copy.output == [0] * 16 and copy.counters == run.counters
        assert attn.ProgramRun(*run).counters == run.counters     # left out: the cycle model's price


def test_stagewise_check_sees_a_value_off_by_two_levels():
    ex = attn.make_example(5, 1)
    step = attn.sequence(ex)[-1]
    for address, stage in [(attn.SP_Q8 + 3, "q"), (attn.SP_KC + 16 * 2 + 5, "k"), (attn.SP_S8 + 1, "scores"),
                           (attn.SP_W + 4, "weights"), (attn.SP_O8, "output")]:
        spad = step.spad.copy()
        spad[address] += 2
        problems = attn.stagewise_problems(ex, attn.DecodeStep(step.t, step.cached, step.recompute, spad))
        assert any(f"stage {stage}:" in p for p in problems), (stage, problems)


def test_check_pipeline_all_checks_pass_on_the_real_builder():
    worst, problems = attn.check_pipeline(exact=True, stagewise=True, bound=0.12)
    assert problems == []
    assert 0.01 < worst < 0.12


def test_rel_error():
    ex = attn.make_example(6, 4)
    exact = attn.rel_error(ex, ex["out_float"] / ex["scales"]["o"])
    assert exact < 1e-12
    assert attn.rel_error(ex, [0] * 16) == pytest.approx(1.0)
