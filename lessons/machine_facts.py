"""What the machine running a chapter is: its caches, its free memory, its processors.

Everything is read from what Linux publishes (``/sys``, ``/proc``, the cgroup filesystem) and
nothing is assumed: every reader returns ``None`` for what it cannot find, so that a chapter can
say "unknown" (or choose a safe default and say so) instead of failing on a machine unlike the
one it was written on.  Each reader takes the text or the folder it reads, so tests can hand it
the files of machines they do not have.

How many threads numpy's BLAS uses, and asking it for fewer, is the engine's own business
(``kvcache.blas``); ``blas_threads_sentence`` here is what a page says about it.

This module does not import numpy, so a chapter's first cell may import it before numpy is loaded.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

from .memory import format_bytes

__all__ = [
    "CacheLevel", "MachineFacts",
    "parse_cache_size", "cpu_caches", "caches_in_words", "last_level_cache_bytes",
    "mem_available_bytes", "cgroup_memory", "cgroup_cpu_limit", "cpu_model", "usable_cpus",
    "facts_from_files", "read_machine", "describe_machine",
    "blas_threads_sentence",
]

# A cgroup "limit" this large is no limit (v1 writes 2**63 - 4096 for "unlimited").
UNLIMITED = 2**60


@dataclass(frozen=True)
class CacheLevel:
    level: int
    kind: str          # "Data", "Instruction" or "Unified"
    size_bytes: int


@dataclass(frozen=True)
class MachineFacts:
    """What a measurement needs to know about the machine; ``None`` where it is unknown.

    ``logical_cpus`` is what the kernel reports (``os.cpu_count()``); ``usable_cpus`` is how many
    of them this process may use (its CPU affinity, and a cgroup's CPU quota).
    """

    llc_bytes: int | None = None
    mem_available_bytes: int | None = None
    cgroup_limit_bytes: int | None = None
    cgroup_used_bytes: int | None = None
    logical_cpus: int | None = None
    usable_cpus: int | None = None
    cpu_model: str | None = None

    @property
    def free_memory_bytes(self) -> int | None:
        """The memory this process can still take: the smaller of the system's available
        memory and what its cgroup's limit leaves; ``None`` when neither is known."""
        candidates = []
        if self.mem_available_bytes is not None:
            candidates.append(self.mem_available_bytes)
        if self.cgroup_limit_bytes is not None:
            candidates.append(max(0, self.cgroup_limit_bytes - (self.cgroup_used_bytes or 0)))
        return min(candidates) if candidates else None


# ---------------------------------------------------------------- caches


def parse_cache_size(text: str) -> int:
    """A size as ``/sys`` writes it: "48K", "2048K", "32M", "1G" or plain bytes."""
    text = text.strip()
    units = {"K": 2**10, "M": 2**20, "G": 2**30}
    if text and text[-1].upper() in units:
        return int(text[:-1]) * units[text[-1].upper()]
    return int(text)


def cpu_caches(root: str | os.PathLike = "/sys/devices/system/cpu/cpu0/cache") -> list[CacheLevel]:
    """The CPU caches of core 0 as Linux reports them (empty list where it does not)."""
    root = Path(root)
    try:
        names = sorted(p.name for p in root.iterdir() if p.name.startswith("index"))
    except OSError:
        return []
    levels = []
    for name in names:
        try:
            level = int((root / name / "level").read_text())
            kind = (root / name / "type").read_text().strip()
            size = parse_cache_size((root / name / "size").read_text())
        except (OSError, ValueError):
            continue
        levels.append(CacheLevel(level, kind, size))
    return levels


def caches_in_words(caches: list[CacheLevel] | None = None) -> str:
    """The CPU's caches in one line ("L1 data 48.0 KiB, L1 instruction 32.0 KiB, ..."), sizes in
    binary units, or that Linux does not report them."""
    caches = cpu_caches() if caches is None else caches
    return ", ".join(f"L{c.level} {c.kind.lower()} {format_bytes(c.size_bytes)}" for c in caches) \
        or "Linux does not report them"


def last_level_cache_bytes(caches: list[CacheLevel] | None = None) -> int | None:
    """Size of the last-level (highest) data or unified cache, or None if unknown."""
    caches = cpu_caches() if caches is None else caches
    data = [c for c in caches if c.kind in ("Data", "Unified") and c.size_bytes > 0]
    if not data:
        return None
    top = max(c.level for c in data)
    return max(c.size_bytes for c in data if c.level == top)


# ---------------------------------------------------------------- memory


def mem_available_bytes(meminfo: str) -> int | None:
    """``MemAvailable`` of ``/proc/meminfo`` in bytes (kernels before 3.14 lack it: then
    MemFree + Buffers + Cached, the older estimate); None when the text says neither."""
    fields = {}
    for line in meminfo.splitlines():
        name, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            fields[name.strip()] = int(parts[0]) * (1024 if parts[1:2] == ["kB"] else 1)
    if "MemAvailable" in fields:
        return fields["MemAvailable"]
    if "MemFree" in fields:
        return fields["MemFree"] + fields.get("Buffers", 0) + fields.get("Cached", 0)
    return None


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    if text == "max":
        return None
    try:
        value = int(text.split()[0])
    except (ValueError, IndexError):
        return None
    return None if value < 0 or value >= UNLIMITED else value


def _cgroup_paths(proc_cgroup: str) -> dict[str, str]:
    """{controller: path} from ``/proc/self/cgroup``; the unified (v2) hierarchy is ``""``."""
    paths = {}
    for line in proc_cgroup.splitlines():
        parts = line.strip().split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        for name in (controllers.split(",") if controllers else [""]):
            paths[name] = path
    return paths


def _folders(base: Path, path: str) -> list[Path]:
    """The cgroup's folder and its ancestors under ``base``, innermost first.  Inside a container
    the path named by /proc/self/cgroup is often not below the mount (the container sees its own
    cgroup as the root): then the mount's root is the cgroup."""
    folder = base / path.lstrip("/")
    chain = []
    if folder.is_dir():
        while True:
            chain.append(folder)
            if folder == base or base not in folder.parents:
                break
            folder = folder.parent
    elif base.is_dir():
        chain.append(base)
    return chain


def cgroup_memory(proc_cgroup: str, cgroup_root: str | os.PathLike = "/sys/fs/cgroup") -> tuple[int | None, int | None]:
    """(limit, used) bytes of this process's memory cgroup, v2 or v1; (None, None) when there
    is no limit.  The tightest limit of the cgroup and its ancestors counts."""
    root = Path(cgroup_root)
    paths = _cgroup_paths(proc_cgroup)
    best: tuple[int, int | None] | None = None
    if "" in paths and (root / "cgroup.controllers").exists():            # v2
        for folder in _folders(root, paths[""]):
            limit = _read_int(folder / "memory.max")
            if limit is not None and (best is None or limit < best[0]):
                best = (limit, _read_int(folder / "memory.current"))
    if best is None and "memory" in paths:                                  # v1
        base = root / "memory"
        for folder in _folders(base, paths["memory"]):
            limit = _read_int(folder / "memory.limit_in_bytes")
            if limit is not None and (best is None or limit < best[0]):
                best = (limit, _read_int(folder / "memory.usage_in_bytes"))
    return best if best is not None else (None, None)


# ---------------------------------------------------------------- processors


# /proc/cpuinfo names the processor differently on each architecture.
_MODEL_FIELDS = ("model name",    # x86
                 "Model",         # arm64 boards (Raspberry Pi)
                 "Hardware",      # older arm
                 "cpu model",     # mips
                 "Processor",     # older arm
                 "uarch",         # riscv
                 "cpu")           # powerpc


def cpu_model(cpuinfo: str) -> str | None:
    """The processor's name from the text of ``/proc/cpuinfo``, or None when it names none."""
    fields: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        name, sep, value = line.partition(":")
        if sep and value.strip():
            fields.setdefault(name.strip(), value.strip())
    for name in _MODEL_FIELDS:
        if name in fields:
            return fields[name]
    return None


def cgroup_cpu_limit(proc_cgroup: str, cgroup_root: str | os.PathLike = "/sys/fs/cgroup") -> int | None:
    """CPUs' worth of time a cgroup CPU quota allows (rounded up), or None when there is none."""
    root = Path(cgroup_root)
    paths = _cgroup_paths(proc_cgroup)
    limits = []
    if "" in paths and (root / "cgroup.controllers").exists():
        for folder in _folders(root, paths[""]):
            try:
                quota, period = (folder / "cpu.max").read_text().split()[:2]
            except (OSError, ValueError):
                continue
            if quota != "max" and int(period) > 0:
                limits.append(math.ceil(int(quota) / int(period)))
    for controller in ("cpu", "cpu,cpuacct"):
        if controller in paths:
            for folder in _folders(root / controller, paths[controller]):
                quota, period = _read_int(folder / "cpu.cfs_quota_us"), _read_int(folder / "cpu.cfs_period_us")
                if quota and period:
                    limits.append(math.ceil(quota / period))
    return max(1, min(limits)) if limits else None


def usable_cpus(affinity: int | None, logical: int | None, quota: int | None) -> int | None:
    """How many CPUs this process can keep busy: its affinity (else the logical count), capped
    by a cgroup quota."""
    count = affinity if affinity else logical
    if count is None:
        return quota
    return min(count, quota) if quota else count


# ---------------------------------------------------------------- the whole machine


def _read_text(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def facts_from_files(sys_root: str | os.PathLike, proc_root: str | os.PathLike, *,
                     affinity: int | None = None, logical: int | None = None) -> MachineFacts:
    """The facts a machine's ``/sys`` and ``/proc`` folders give (those of a machine a test
    builds in a temporary folder, say), with the CPU counts the caller knows."""
    sys_root, proc_root = Path(sys_root), Path(proc_root)
    proc_cgroup = _read_text(proc_root / "self" / "cgroup")
    cgroup_root = sys_root / "fs" / "cgroup"
    limit, used = cgroup_memory(proc_cgroup, cgroup_root)
    cpuinfo = _read_text(proc_root / "cpuinfo")
    if logical is None:
        logical = sum(1 for line in cpuinfo.splitlines() if line.split(":")[0].strip() == "processor") or None
    return MachineFacts(
        llc_bytes=last_level_cache_bytes(cpu_caches(sys_root / "devices" / "system" / "cpu" / "cpu0" / "cache")),
        mem_available_bytes=mem_available_bytes(_read_text(proc_root / "meminfo")),
        cgroup_limit_bytes=limit,
        cgroup_used_bytes=used,
        logical_cpus=logical,
        usable_cpus=usable_cpus(affinity, logical, cgroup_cpu_limit(proc_cgroup, cgroup_root)),
        cpu_model=cpu_model(cpuinfo),
    )


def read_machine() -> MachineFacts:
    """The facts of the machine this runs on."""
    try:
        affinity = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):      # not on Linux
        affinity = None
    return facts_from_files("/sys", "/proc", affinity=affinity, logical=os.cpu_count())


def _cpus(n: int | None) -> str:
    if n is None:
        return "an unknown number of logical CPUs"
    return f"{n} logical CPU" + ("" if n == 1 else "s")


def describe_machine(facts: MachineFacts, extra: str = "") -> str:
    """One line for a page: "Intel(R) Xeon(R) Processor, 2 logical CPUs" (and what is usable of
    them when that is fewer), then ``extra`` (the numpy version, say)."""
    text = (facts.cpu_model or "a processor Linux does not name") + ", " + _cpus(facts.logical_cpus)
    if facts.usable_cpus is not None and facts.logical_cpus is not None and facts.usable_cpus < facts.logical_cpus:
        text += f" ({facts.usable_cpus} usable by this build)"
    return text + (f", {extra}" if extra else "")


# ---------------------------------------------------------------- what a page says about BLAS threads

def blas_threads_sentence(limited_in_time: bool, threads: int | None) -> str:
    """What a page says about the BLAS thread limit it asked for: whether it was asked in time
    (before numpy was imported) and how many threads the library reports."""
    if not limited_in_time:
        return ("but numpy was already loaded when that cell ran, so the limit may not hold"
                + (f" (the library reports {threads} threads)" if threads else "")
                + "; run the notebook again in a fresh kernel for one-core figures")
    if threads is None:
        return ("before numpy was loaded, as such a limit must be; this library does not report how many "
                "threads it uses")
    if threads == 1:
        return "before numpy was loaded, and it reports one thread: both versions run on one core"
    return (f"yet it reports {threads} threads, so the recomputation's matrix products may have used "
            "more than one core")
