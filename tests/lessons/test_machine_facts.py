"""lessons.machine_facts and chapter 4's measurement plan, on machines this test does not run on.

The machines are built as files (a fake /sys and /proc in a temporary folder) or as
``MachineFacts``: a cache Linux does not report, and last-level caches of 1 MiB, 32 MiB,
300 MiB and 1.5 GiB; 2 GiB and 200 GiB of free memory; 1 and 64 cores.  For every one of them
the plan must be valid and bounded, and the page's sentences must hold.  No speed is asserted:
the measurements are synthetic.
"""
from __future__ import annotations

import itertools

import pytest

from lessons import bandwidth as bw
from lessons.machine_facts import (CacheLevel, MachineFacts, blas_threads_sentence, caches_in_words,
                                   cgroup_cpu_limit, cgroup_memory,
                                   cpu_caches, cpu_model, describe_machine, facts_from_files,
                                   last_level_cache_bytes, mem_available_bytes, parse_cache_size, read_machine,
                                   usable_cpus)
from lessons.memory import GIB, KIB, MIB

LLCS = {"unknown": None, "1 MiB": MIB, "32 MiB": 32 * MIB, "300 MiB": 300 * MIB, "1.5 GiB": 1536 * MIB}
FREE = {"2 GiB": 2 * GIB, "200 GiB": 200 * GIB}
CORES = {"1 core": 1, "64 cores": 64}
MACHINES = [pytest.param(MachineFacts(llc_bytes=llc, mem_available_bytes=free, logical_cpus=cores, usable_cpus=cores),
                         id=f"{lname}-{fname}-{cname}")
            for (lname, llc), (fname, free), (cname, cores) in itertools.product(LLCS.items(), FREE.items(), CORES.items())]


# ---------------------------------------------------------------- a machine as files


def write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def fake_machine(root, *, caches=(), meminfo="", cpuinfo="", cgroup="", cgroup_files=None):
    """A /sys and /proc tree under ``root``: caches as (level, type, size) triples."""
    sys_root, proc_root = root / "sys", root / "proc"
    base = sys_root / "devices" / "system" / "cpu" / "cpu0" / "cache"
    for i, (level, kind, size) in enumerate(caches):
        write(base / f"index{i}" / "level", f"{level}\n")
        write(base / f"index{i}" / "type", f"{kind}\n")
        write(base / f"index{i}" / "size", f"{size}\n")
    if meminfo:
        write(proc_root / "meminfo", meminfo)
    if cpuinfo:
        write(proc_root / "cpuinfo", cpuinfo)
    write(proc_root / "self" / "cgroup", cgroup)
    for rel, text in (cgroup_files or {}).items():
        write(sys_root / "fs" / "cgroup" / rel, text)
    sys_root.mkdir(parents=True, exist_ok=True)
    return sys_root, proc_root


X86 = "processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Gold 6338\nflags\t: fpu\n\nprocessor\t: 1\nmodel name\t: Intel(R) Xeon(R) Gold 6338\n"
ARM = "processor\t: 0\nBogoMIPS\t: 50.00\nCPU implementer\t: 0x41\nCPU part\t: 0xd0c\n\nprocessor\t: 1\nBogoMIPS\t: 50.00\n"
MEMINFO = "MemTotal:       32000000 kB\nMemFree:         1000000 kB\nMemAvailable:   20000000 kB\n"


def test_no_sys_and_no_proc_is_an_unknown_machine(tmp_path):
    facts = facts_from_files(tmp_path / "nothing", tmp_path / "nothing")
    assert facts == MachineFacts()
    assert facts.free_memory_bytes is None
    plan = bw.plan_measurements(facts)
    assert plan.llc_bytes == bw.ASSUMED_LLC_BYTES and not plan.llc_known and plan.free_bytes is None
    assert "assumed" in dict(bw.describe_plan(plan))["last-level cache"]
    assert "unknown number" in describe_machine(facts)


def test_a_machine_read_from_its_files(tmp_path):
    sys_root, proc_root = fake_machine(
        tmp_path, caches=[(1, "Data", "48K"), (1, "Instruction", "32K"), (2, "Unified", "2048K"), (3, "Unified", "300M")],
        meminfo=MEMINFO, cpuinfo=X86, cgroup="0::/\n")
    facts = facts_from_files(sys_root, proc_root, affinity=2, logical=64)
    assert facts.llc_bytes == 300 * MIB
    assert facts.mem_available_bytes == 20_000_000 * 1024 == facts.free_memory_bytes
    assert facts.cpu_model == "Intel(R) Xeon(R) Gold 6338"
    assert (facts.logical_cpus, facts.usable_cpus) == (64, 2)
    assert describe_machine(facts, "numpy 2") == "Intel(R) Xeon(R) Gold 6338, 64 logical CPUs (2 usable by this build), numpy 2"
    # without the counts from the OS, the processors listed in /proc/cpuinfo
    assert facts_from_files(sys_root, proc_root).logical_cpus == 2


def test_parse_size_and_cpu_caches():
    assert parse_cache_size("32768K") == 32 * 2**20
    assert parse_cache_size("1M") == 2**20
    assert parse_cache_size("512") == 512
    for c in cpu_caches():
        assert c.level >= 1 and c.size_bytes > 0
    assert cpu_caches("/nonexistent") == []


def test_the_caches_in_words():
    caches = [CacheLevel(1, "Data", 48 * KIB), CacheLevel(1, "Instruction", 32 * KIB),
              CacheLevel(2, "Unified", 2 * MIB), CacheLevel(3, "Unified", 105 * MIB // 2)]
    assert caches_in_words(caches) == ("L1 data 48 KiB, L1 instruction 32 KiB, L2 unified 2 MiB, "
                                       "L3 unified 52.5 MiB")
    assert caches_in_words([]) == "Linux does not report them"
    assert caches_in_words() == caches_in_words(cpu_caches())


def test_last_level_cache_is_positive_or_unknown():
    llc = last_level_cache_bytes()
    assert llc is None or llc > 0


def test_cache_sizes_and_the_last_level():
    assert parse_cache_size("32768K") == 32 * MIB and parse_cache_size("1M") == MIB
    assert parse_cache_size("1G") == GIB and parse_cache_size("512") == 512
    assert cpu_caches("/nonexistent") == []
    from lessons.machine_facts import CacheLevel
    levels = [CacheLevel(1, "Data", 48 * KIB), CacheLevel(2, "Unified", 2 * MIB), CacheLevel(3, "Instruction", 99 * MIB)]
    assert last_level_cache_bytes(levels) == 2 * MIB          # an instruction cache is not the data's
    assert last_level_cache_bytes([]) is None
    assert last_level_cache_bytes([CacheLevel(1, "Instruction", 32 * KIB)]) is None
    for c in cpu_caches():                                      # this machine, whatever it is
        assert c.level >= 1 and c.size_bytes > 0


def test_meminfo_with_and_without_memavailable():
    assert mem_available_bytes(MEMINFO) == 20_000_000 * 1024
    old_kernel = "MemTotal: 100 kB\nMemFree: 10 kB\nBuffers: 5 kB\nCached: 20 kB\n"
    assert mem_available_bytes(old_kernel) == 35 * 1024
    assert mem_available_bytes("") is None and mem_available_bytes("garbage\n:::\n") is None


def test_a_cgroup_v2_limit_caps_the_free_memory(tmp_path):
    sys_root, proc_root = fake_machine(
        tmp_path, meminfo=MEMINFO, cgroup="0::/job/build\n",
        cgroup_files={"cgroup.controllers": "cpu memory\n", "job/memory.max": "4294967296\n",
                      "job/build/memory.max": "max\n", "job/build/memory.current": "1073741824\n",
                      "job/memory.current": "1073741824\n", "job/build/cpu.max": "150000 100000\n"})
    facts = facts_from_files(sys_root, proc_root, affinity=8, logical=8)
    assert (facts.cgroup_limit_bytes, facts.cgroup_used_bytes) == (4 * GIB, GIB)
    assert facts.free_memory_bytes == 3 * GIB                  # the parent's limit, less what is used
    assert facts.usable_cpus == 2                              # 1.5 CPUs of quota, rounded up
    plan = bw.plan_measurements(facts)
    assert plan.budget_bytes == 3 * GIB // 4 and "quarter" in plan.budget_reason


def test_a_cgroup_v1_limit_and_a_container_that_sees_its_cgroup_as_the_root(tmp_path):
    sys_root, proc_root = fake_machine(
        tmp_path, meminfo=MEMINFO, cgroup="4:memory:/docker/abc\n3:cpu,cpuacct:/docker/abc\n",
        cgroup_files={"memory/memory.limit_in_bytes": "2147483648\n", "memory/memory.usage_in_bytes": "536870912\n",
                      "cpu,cpuacct/cpu.cfs_quota_us": "-1\n", "cpu,cpuacct/cpu.cfs_period_us": "100000\n"})
    facts = facts_from_files(sys_root, proc_root, affinity=4, logical=4)
    assert facts.free_memory_bytes == 2 * GIB - 512 * MIB
    assert facts.usable_cpus == 4                              # quota -1: no limit
    unlimited = {"memory/memory.limit_in_bytes": "9223372036854771712\n"}
    sys_root2, proc_root2 = fake_machine(tmp_path / "b", meminfo=MEMINFO, cgroup="4:memory:/\n", cgroup_files=unlimited)
    assert facts_from_files(sys_root2, proc_root2).cgroup_limit_bytes is None
    assert cgroup_memory("", tmp_path / "none") == (None, None)
    assert cgroup_cpu_limit("", tmp_path / "none") is None


@pytest.mark.parametrize("text, model", [
    (X86, "Intel(R) Xeon(R) Gold 6338"),
    (ARM, None),                                                 # arm64 servers name no model
    ("processor : 0\nHardware : BCM2835\nModel : Raspberry Pi 4 Model B Rev 1.4\n", "Raspberry Pi 4 Model B Rev 1.4"),
    ("processor\t: 0\nhart\t: 0\nisa\t: rv64imafdc\nuarch\t: sifive,u74-mc\n", "sifive,u74-mc"),
    ("", None),
])
def test_cpu_model_on_other_architectures(text, model):
    assert cpu_model(text) == model
    line = describe_machine(MachineFacts(cpu_model=cpu_model(text), logical_cpus=4, usable_cpus=4))
    assert line.startswith(model or "a processor Linux does not name") and line.endswith("4 logical CPUs")


@pytest.mark.parametrize("cores", [1, 64])
def test_core_counts_in_the_description(cores):
    one = describe_machine(MachineFacts(cpu_model="X", logical_cpus=cores, usable_cpus=cores))
    assert one == f"X, {cores} logical CPU" + ("" if cores == 1 else "s")
    assert describe_machine(MachineFacts(cpu_model="X", logical_cpus=cores, usable_cpus=None)) == one
    assert usable_cpus(None, cores, None) == cores and usable_cpus(2, cores, None) == 2
    assert usable_cpus(cores, cores, 1) == 1 and usable_cpus(None, None, None) is None


def test_this_machine_reads_without_error():
    facts = read_machine()
    assert facts.llc_bytes is None or facts.llc_bytes > 0
    assert facts.free_memory_bytes is None or facts.free_memory_bytes > 0
    assert facts.usable_cpus is None or facts.usable_cpus >= 1
    assert bw.plan_measurements(facts).cache_sizes


# ---------------------------------------------------------------- what a page says about BLAS threads


@pytest.mark.parametrize("in_time, threads, words", [
    (True, 1, "one core"), (True, None, "does not report"), (True, 8, "8 threads"),
    (False, 4, "fresh kernel"), (False, None, "fresh kernel")])
def test_the_sentence_about_blas_threads(in_time, threads, words):
    assert words in blas_threads_sentence(in_time, threads)


# ---------------------------------------------------------------- chapter 4's plan on every machine


@pytest.mark.parametrize("facts", MACHINES)
def test_the_plan_is_valid_and_bounded(facts):
    plan = bw.plan_measurements(facts)
    sizes = plan.cache_sizes
    assert list(sizes) == sorted(set(sizes)) and len(sizes) >= 6
    assert all(s & (s - 1) == 0 for s in sizes), "sizes are powers of two: round labels"
    assert len(plan.repeats) == len(sizes) and all(r >= 3 for r in plan.repeats)
    # memory: never more than a quarter of what is free, never more than the cap
    assert plan.peak_bytes <= plan.budget_bytes <= bw.MAX_BYTES
    assert plan.budget_bytes <= facts.free_memory_bytes // bw.MEMORY_SHARE
    assert plan.copy_bytes <= plan.largest // 2
    # time: the work is bounded whatever the cache (a 1.5 GiB cache must not mean 24 GiB of arrays)
    assert plan.bytes_touched <= 64 * GIB
    # the range starts inside the cache, so the page can show the cache's own speed
    assert sizes[0] <= plan.inside_bytes
    assert plan.beyond_bytes == bw.BEYOND_FACTOR * plan.llc_bytes
    expected = ("beyond" if plan.largest >= plan.beyond_bytes else
                "short" if plan.largest > plan.llc_bytes else "inside")
    assert plan.status == expected


def status_of(llc, free):
    return bw.plan_measurements(MachineFacts(llc_bytes=llc, mem_available_bytes=free)).status


def test_which_machines_can_measure_main_memory():
    assert status_of(None, 2 * GIB) == "beyond" and status_of(32 * MIB, 2 * GIB) == "beyond"
    assert status_of(MIB, 2 * GIB) == "beyond"
    assert status_of(300 * MIB, 200 * GIB) == "beyond"          # 4 GiB of arrays, 13 times the cache
    assert status_of(300 * MIB, 2 * GIB) == "short"            # 512 MiB: beyond the cache, not 4 times
    assert status_of(1536 * MIB, 200 * GIB) == "short"         # the cap, 4 GiB, is less than 6 GiB
    assert status_of(1536 * MIB, 2 * GIB) == "inside"
    tiny = bw.plan_measurements(MachineFacts(llc_bytes=32 * MIB, mem_available_bytes=64 * MIB))
    assert tiny.peak_bytes <= 16 * MIB and tiny.status == "inside"
    assert bw.plan_measurements(MachineFacts(llc_bytes=32 * MIB)).budget_bytes == bw.ASSUMED_FREE_BYTES // 4


def test_the_plan_of_the_common_case_is_the_chapter_of_old():
    """A 32 MiB cache and plenty of memory: 1 MiB to 512 MiB, doubling, a 256 MiB copy."""
    plan = bw.plan_measurements(MachineFacts(llc_bytes=32 * MIB, mem_available_bytes=24 * GIB))
    assert plan.cache_sizes == tuple(2**k * MIB for k in range(10))
    assert plan.copy_bytes == 256 * MIB and plan.beyond_bytes == 128 * MIB


def synthetic(plan, cache_gbs=40.0, memory_gbs=10.0, jitter=1.0):
    """Measurements of a machine that reads its cache at ``cache_gbs`` and memory at
    ``memory_gbs``; ``jitter`` slows the largest step (a busy machine)."""
    steps = []
    for size in plan.cache_sizes:
        rate = (cache_gbs if size <= plan.llc_bytes else memory_gbs) * 1e9
        seconds = size / rate * (jitter if size == plan.largest else 1.0)
        steps.append(bw.StepMeasurement(size // 1024, 128, 4, seconds))
    copy = bw.CopyMeasurement(plan.copy_bytes, (2 * plan.copy_bytes / (2 * memory_gbs * 1e9),) * 5)
    return steps, copy


@pytest.mark.parametrize("facts", MACHINES)
def test_the_page_sentences_hold_on_every_machine(facts):
    plan = bw.plan_measurements(facts)
    steps, copy = synthetic(plan)
    found = bw.summarize(plan, steps, copy)
    assert found.status == plan.status
    assert found.step_bandwidth > 0 and found.ratio > 0 and found.largest_bytes == plan.largest
    sentence = bw.plan_sentence(plan)
    if plan.status == "beyond":
        assert "read from main memory" in sentence and "cannot" not in found.result
        assert found.step_bandwidth == pytest.approx(10e9) and found.ratio == pytest.approx(0.5)
    else:
        assert "would need" in sentence and "cannot be exceeded" in found.result
        assert "overstate" in found.result
    if not plan.llc_known:
        assert "assumed" in found.result or "assumed" in found.measured
    assert found.inside_bandwidth is not None and "were read at" in found.inside_sentence
    if found.growth is not None:
        assert "about as much as the bytes" in found.growth_sentence


def test_a_busy_machine_and_a_short_list_are_said_so():
    plan = bw.plan_measurements(MachineFacts(llc_bytes=32 * MIB, mem_available_bytes=24 * GIB))
    steps, copy = synthetic(plan, jitter=3.0)
    assert "more than the bytes" in bw.summarize(plan, steps, copy).growth_sentence
    steps, copy = synthetic(plan, jitter=0.3)
    assert "less than the bytes" in bw.summarize(plan, steps, copy).growth_sentence
    one = bw.summarize(plan, steps[-1:], copy)
    assert one.growth is None and "only one cache size" in one.growth_sentence
    assert one.inside_bandwidth is None and "none shows" in one.inside_sentence
    with pytest.raises(ValueError):
        bw.summarize(plan, [], copy)


def test_measure_runs_a_small_plan():
    plan = bw.MeasurementPlan(llc_bytes=MIB, llc_known=True, free_bytes=GIB, budget_bytes=8 * MIB, budget_reason="test",
                              copy_bytes=2 * MIB, cache_sizes=(256 * KIB, MIB, 4 * MIB), repeats=(3, 3, 3),
                              beyond_bytes=4 * MIB, inside_bytes=256 * KIB)
    steps, copy = bw.measure(plan, min_seconds=0.001, copy_repeats=2)
    assert [s.cache_bytes for s in steps] == list(plan.cache_sizes)
    assert copy.nbytes == 2 * MIB and len(copy.seconds) == 2
    assert all(s.seconds > 0 for s in steps) and copy.bandwidth > 0
    found = bw.summarize(plan, steps, copy)
    assert found.status == "beyond" and found.largest_bytes == 4 * MIB


# ---------------------------------------------------------------- the benchmarks


@pytest.mark.parametrize("cores, workers", [(1, 1), (2, 2), (64, 2), (None, 1)])
def test_the_ga2_benchmark_takes_its_workers_from_the_machine(cores, workers):
    from bench.bench_ga2 import workers_for
    assert workers_for(cores) == workers


def test_a_copy_s_best_bandwidth_is_its_fastest_repeat():
    """Five copies of 1 MB (2 MB moved) in 2, 1, 4, 2 and 2 ms: median 2 ms (1 GB/s), fastest
    1 ms (2 GB/s); a floor is computed from the fastest."""
    copy = bw.CopyMeasurement(10**6, (0.002, 0.001, 0.004, 0.002, 0.002))
    assert copy.bandwidth == pytest.approx(1e9) and copy.best_bandwidth == pytest.approx(2e9)
