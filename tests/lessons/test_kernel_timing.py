"""lessons.kernel_timing: what chapter 8 measures of ``kvcache.kernel`` (split-K and the early
exit), planned for machines this test does not run on, and the benchmark that runs it.  No speed
is asserted: the measurements run on small plans and only their shape and agreement are checked.
"""
from __future__ import annotations

import math

import pytest

from lessons import kernel_timing as kt
from lessons.machine_facts import MachineFacts
from lessons.memory import GIB, MIB


# ---------------------------------------------------------------- the measurement plan, on other machines

MACHINES = {
    "this kind: 2 cores, 24 GiB": MachineFacts(usable_cpus=2, logical_cpus=2, mem_available_bytes=24 * GIB),
    "1 core, 2 GiB": MachineFacts(usable_cpus=1, logical_cpus=1, mem_available_bytes=2 * GIB),
    "64 cores, 200 GiB": MachineFacts(usable_cpus=64, logical_cpus=64, mem_available_bytes=200 * GIB),
    "cores and memory unknown": MachineFacts(),
    "4 cores, 100 MiB free": MachineFacts(usable_cpus=4, logical_cpus=8, mem_available_bytes=100 * MIB),
    "3 cores, cgroup of 300 MiB": MachineFacts(usable_cpus=3, logical_cpus=3, mem_available_bytes=50 * GIB,
                                               cgroup_limit_bytes=300 * MIB, cgroup_used_bytes=100 * MIB),
    "2 cores, 1 MiB free": MachineFacts(usable_cpus=2, mem_available_bytes=MIB),
}


@pytest.mark.parametrize("name", MACHINES)
def test_the_split_k_plan_is_valid_and_bounded_on_every_machine(name):
    facts = MACHINES[name]
    plan = kt.plan_split_k(facts)
    assert 1 <= plan.workers <= kt.MAX_WORKERS and plan.splits >= 2 and plan.splits >= plan.workers
    assert plan.workers == min(facts.usable_cpus or 1, kt.MAX_WORKERS)
    assert plan.parallel == (plan.workers > 1)
    assert plan.budget_bytes <= kt.MAX_BYTES
    names = [c.name for c in plan.contexts]
    assert names[:2] == ["short", "long"] and names in (["short", "long"], ["short", "long", "memory"])
    long = plan.context("long")
    assert kt.MIN_POSITIONS <= long.positions <= kt.LONG_POSITIONS and long.positions & (long.positions - 1) == 0
    assert long.cache_bytes <= plan.budget_bytes or long.positions == kt.MIN_POSITIONS
    for c in plan.contexts:
        assert c.positions % c.block == 0 and c.block <= kt.MAX_BLOCK
        assert c.positions // c.block >= plan.splits * kt.MIN_BLOCKS_PER_SPLIT or c.block == 16
        assert c.where == ("beyond the last-level cache" if c.cache_bytes > plan.llc_bytes
                           else "inside the last-level cache")
        assert c.source == ("main memory" if c.cache_bytes > plan.llc_bytes else "the cache")
    memory = plan.context("memory")
    if memory is not None:
        assert memory.cache_bytes >= kt.BEYOND_FACTOR * plan.llc_bytes > memory.cache_bytes // 2
        assert memory.cache_bytes <= plan.budget_bytes and not plan.beyond_note
    else:
        assert plan.beyond_note
    assert plan.peak_bytes <= max(plan.budget_bytes, kt.MIN_POSITIONS * kt.BYTES_PER_POSITION)
    rows = dict(kt.describe_split_plan(plan))
    assert rows["threads walking chunks"].startswith(str(plan.workers))
    assert ("take turns" in rows["threads walking chunks"]) == (not plan.parallel)
    assert ("unknown" in rows["usable cores"]) == (facts.usable_cpus is None)
    assert ("assumed" in rows["last-level cache"]) == (not facts.llc_bytes)
    assert (f"fewer than {kt.LONG_POSITIONS:,}" in rows["long context"]) == (long.positions < kt.LONG_POSITIONS)
    assert ("context read from main memory" in rows) == (memory is not None or bool(plan.beyond_note))


def test_the_plan_follows_the_machine():
    big = kt.plan_split_k(MACHINES["64 cores, 200 GiB"])
    assert big.workers == kt.MAX_WORKERS and big.context("long").positions == kt.LONG_POSITIONS
    # an unknown cache is taken as 32 MiB: the long context's 64 MiB is twice that, from main memory
    assert big.llc_bytes == 32 * MIB and not big.llc_known and big.context("memory") is None
    assert "already read from main memory" in big.beyond_note
    one = kt.plan_split_k(MACHINES["1 core, 2 GiB"])
    assert one.workers == 1 and one.splits == 2
    small = kt.plan_split_k(MACHINES["4 cores, 100 MiB free"])
    assert small.context("long").positions < kt.LONG_POSITIONS and "eighth of the 100 MiB" in small.budget_reason
    assert small.context("memory") is None and "would not fit" in small.beyond_note
    cgroup = kt.plan_split_k(MACHINES["3 cores, cgroup of 300 MiB"])
    assert cgroup.budget_bytes == 200 * MIB // 8
    assert "assumed free" in kt.plan_split_k(MACHINES["cores and memory unknown"]).budget_reason
    here = kt.plan_split_k(MachineFacts(usable_cpus=2, llc_bytes=480 * MIB, mem_available_bytes=24 * GIB))
    assert here.context("memory").positions == 2**20 and here.context("memory").cache_bytes == GIB
    tiny_cache = kt.plan_split_k(MachineFacts(usable_cpus=2, llc_bytes=8 * MIB, mem_available_bytes=24 * GIB))
    assert tiny_cache.context("memory") is None and "already read from main memory" in tiny_cache.beyond_note
    assert tiny_cache.context("long").where == "beyond the last-level cache"


def test_choose_splits():
    assert kt.choose_splits(1, 65536, 256, 2) == 2
    assert kt.choose_splits(32, 65536, 256, 108) == 4
    assert kt.choose_splits(2048, 65536, 256, 108) == 1           # the batch fills the GPU
    assert kt.choose_splits(32, 512, 256, 108) == 1               # two blocks: too short to cut
    assert kt.choose_splits(1, 65536, 256, 1) == 1                # one core
    assert kt.choose_splits(1, 4096, 256, 64) == 4                # 16 blocks, chunks of at least 4
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError):
            kt.choose_splits(bad, 100, 10, 2)


def result(plan, speedups):
    """A SplitKResult whose rows have the given one pass / split-K ratios (one pass: 1 s)."""
    rows = tuple(kt.SplitKRow(c, 1.0, 1.0 / s, 1.02, 1e-9) for c, s in zip(plan.contexts, speedups))
    return kt.SplitKResult(plan, rows)


def test_the_split_k_sentences_hold_whichever_way_the_measurement_went():
    two = kt.plan_split_k(MachineFacts(usable_cpus=2, llc_bytes=480 * MIB, mem_available_bytes=24 * GIB))
    one = kt.plan_split_k(MACHINES["1 core, 2 GiB"])
    found = kt.split_k_sentence(result(two, [0.4, 0.95, 1.5]))
    assert "short context (1,024 positions" in found and "it lost, a ratio of 0.40" in found
    assert "made little difference, a ratio of 0.95" in found and "main memory (1,048,576 positions" in found
    assert "it paid, a ratio of 1.50" in found
    assert "one core only" in kt.split_k_sentence(result(one, [1.0, 1.0]))
    assert kt.split_k_reading(result(two, [0.4, 0.95, 1.5])).startswith("Only the context read from main memory")
    assert kt.split_k_reading(result(two, [0.4, 1.5, 1.5])).startswith("Both long contexts gained")
    assert kt.split_k_reading(result(two, [0.4, 1.5, 1.0])).startswith("The long context gained but")
    assert kt.split_k_reading(result(two, [0.4, 1.0, 1.0])).startswith("Neither long context gained")
    small = kt.plan_split_k(MACHINES["4 cores, 100 MiB free"])
    assert "No context read from main memory was measured" in kt.split_k_reading(result(small, [1.0, 1.0]))
    assert kt.split_k_reading(result(small, [1.0, 2.0])).startswith("The long context gained")
    r = result(two, [0.5, 2.0, 1.0])
    assert r.row("long").speedup == 2.0 and math.isclose(r.row("long").overhead, 1.02) and r.row("nope") is None


def test_the_measurements_run_and_agree_on_a_small_plan():
    import dataclasses
    plan = kt.plan_split_k(MachineFacts(usable_cpus=2, llc_bytes=MIB, mem_available_bytes=24 * GIB))
    plan = dataclasses.replace(plan, repeats=1, contexts=(kt.Context("short", 256, 16, "inside the last-level cache"),
                                                          kt.Context("long", 4096, 256, "beyond the last-level cache")))
    found = kt.measure_split_k(plan)
    assert [r.context.name for r in found.rows] == ["short", "long"]
    for r in found.rows:
        assert r.max_difference < 1e-5
        assert all(x > 0 and math.isfinite(x) for x in (r.one_pass_s, r.split_s, r.split_serial_s))
    rows = kt.measure_early_exit(max_seq_len=1024, block=64, fractions=(1 / 64, 1 / 2, 1), repeats=1)
    assert [r.seq_len for r in rows] == [16, 512, 1024] and [r.visited for r in rows] == [1, 8, 16]
    assert all(r.visited_full == 16 and r.exit_s > 0 and r.full_s > 0 for r in rows)


def test_interleaved_best_samples_every_function():
    calls = {"a": 0, "b": 0}

    def a():
        calls["a"] += 1

    def b():
        calls["b"] += 1
    best = kt.interleaved_best({"a": a, "b": b}, repeats=3, min_sample=1e-4)
    assert set(best) == {"a", "b"} and all(v > 0 for v in best.values())
    assert calls["a"] >= 5 and calls["b"] >= 5


def test_the_benchmark_runs_its_three_parts_on_small_buffers(monkeypatch, capsys):
    import lessons.machine_facts
    from bench import bench_kernel
    monkeypatch.setattr(bench_kernel, "BUFFER", 2048)
    monkeypatch.setattr(bench_kernel, "LONG", 16384)
    import dataclasses
    monkeypatch.setattr(lessons.machine_facts, "read_machine", lambda: MachineFacts(usable_cpus=2, llc_bytes=2 * MIB))
    small = kt.Context("memory", 4096, 256, "beyond the last-level cache")     # 4 MiB: small for a test
    real_plan = kt.plan_split_k
    monkeypatch.setattr(kt, "plan_split_k", lambda facts: dataclasses.replace(real_plan(facts), contexts=(small,)))
    bench_kernel.early_exit()
    bench_kernel.blockwise_vs_one_shot()
    bench_kernel.split_k()
    out = capsys.readouterr().out
    assert "1/64" in out and "blockwise / one-shot" in out and "2 chunks, 2 threads" in out
    assert "16,384 positions (K and V 16 MiB)" in out and "4,096 positions (K and V 4 MiB)" in out
    gaps = [float(part.split()[0]) for part in out.split("largest difference between split-K and one pass: ")[1:]]
    assert len(gaps) == 2 and max(gaps) < 1e-5


def test_the_reading_says_where_the_long_context_was_read_from():
    # a long context inside the last-level cache: the words name the cache, not only memory
    inside = kt.plan_split_k(MachineFacts(usable_cpus=2, llc_bytes=480 * MIB, mem_available_bytes=24 * GIB))
    assert inside.context("long").where.startswith("inside")
    words = kt.split_k_reading(result(inside, [0.59, 0.88, 1.05]))
    assert words == ("Neither long context gained: two threads read neither the last-level cache nor main "
                     "memory faster than one did, or the other cores were busy with other work.")
    assert "as fast as this machine's memory allowed" not in words
    # a long context itself beyond the last-level cache, beside the memory one: main memory alone
    import dataclasses
    long_beyond = dataclasses.replace(inside.context("long"), where="beyond the last-level cache")
    beyond = dataclasses.replace(inside, contexts=tuple(long_beyond if c.name == "long" else c
                                                        for c in inside.contexts))
    assert kt.split_k_reading(result(beyond, [0.59, 0.88, 1.05])) == (
        "Neither long context gained: two threads read main memory no faster than one did, or the other "
        "cores were busy with other work.")


def serial_row(plan, serial_seconds):
    """The long context's row with one pass 1 s and the chunks in turn ``serial_seconds``."""
    return kt.SplitKRow(plan.context("long"), 1.0, 1.0, serial_seconds, 1e-9)


def test_the_cost_of_splitting_is_named_only_when_it_was_measured():
    plan = kt.plan_split_k(MachineFacts(usable_cpus=2, llc_bytes=480 * MIB, mem_available_bytes=24 * GIB))
    # 3.15 ms in turn against 3.30 ms in one pass: faster, inside the noise, no price measured
    assert kt.splitting_cost_sentence(serial_row(plan, 3.15 / 3.30)) == (
        "cost 0.95 times one pass, a difference inside the noise: no price of splitting was measured")
    assert kt.splitting_cost_sentence(serial_row(plan, 1.40)) == (
        "cost 1.40 times one pass: the price of splitting itself")
    assert kt.splitting_cost_sentence(serial_row(plan, 0.70)) == (
        "took 0.70 times one pass, less than one pass: no price of splitting was measured")
