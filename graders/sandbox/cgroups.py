"""A cgroup per run: every process of the sandbox shares one memory limit and one process count,
and whatever is left in it at the end is killed.

Where: nested in the grader's own cgroup, when the grader is root and the machine has a memory
controller (cgroup v1, or a v2 that delegates ``memory``); looked up once (``cgroup_base``).
RLIMIT_AS alone is per process (64 forked children would have 64 x 2 GiB), and RLIMIT_NPROC
counts a user's processes; the cgroup's limits hold whatever the submission forks, maps or
shares.  The tmpfs folders' pages are charged to it too, which is why the runner adds their
size to the memory limit.
"""
from __future__ import annotations

import os
import secrets
import signal
import threading
import time
from pathlib import Path

from .folders import STALE_AFTER

_CGROUP_PREFIX = "kvgrader-"
_cgroup_lock = threading.Lock()
_cgroup_probe: dict[str, object] = {}


def cgroup_base() -> dict | None:
    """Where the grader may make the sandboxes' cgroups (see ``_find_cgroup_base``), or None (not
    root, no memory controller, a cgroup v2 that does not delegate it).  Looked up once."""
    with _cgroup_lock:
        if "base" not in _cgroup_probe:
            _cgroup_probe["base"] = _find_cgroup_base()
        return _cgroup_probe["base"]


def _find_cgroup_base() -> dict | None:
    """{"memory": folder, "version": 1 or 2, "pids": folder or None}: the grader's own cgroups
    (memory, and the process-count controller when it is a separate v1 hierarchy)."""
    if os.geteuid() != 0:
        return None
    try:
        own, mounts = _own_cgroups(), _cgroup_mounts()
    except (OSError, ValueError):
        return None
    return _v1_base(own, mounts) or _v2_base(own, mounts)


def _own_cgroups() -> list[list[str]]:
    """The grader's cgroups, one ``[hierarchy id, controllers, path]`` a line of /proc/self/cgroup."""
    return [line.split(":", 2) for line in Path("/proc/self/cgroup").read_text().splitlines()]


def _cgroup_mounts() -> list[tuple[str, str, str, set[str]]]:
    """The cgroup file systems mounted here: (root inside the hierarchy, mount point, "cgroup" or
    "cgroup2", the mount's options, which name a v1 hierarchy's controllers)."""
    mounts = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields, _, tail = line.partition(" - ")
        fields, tail = fields.split(), tail.split()
        if len(fields) >= 5 and len(tail) >= 3 and tail[0] in ("cgroup", "cgroup2"):
            mounts.append((fields[3], fields[4], tail[0], set(tail[2].split(","))))
    return mounts


def _mounted_folder(mounts, fstype: str, cgpath: str, option: str | None = None) -> Path | None:
    """Where the cgroup ``cgpath`` is seen in the mounts of type ``fstype`` (with ``option``
    among a mount's options), or None where no mount shows it."""
    for root, point, kind, options in mounts:
        if kind == fstype and (option is None or option in options):
            rel = os.path.relpath(cgpath, root) if cgpath.startswith(root) else None
            if rel is not None and not rel.startswith(".."):
                return Path(point) / ("" if rel == "." else rel)
    return None


def _v1_folder(own, mounts, controller: str) -> Path | None:
    """The grader's cgroup in the v1 hierarchy of ``controller``, or None."""
    for entry in own:
        if len(entry) == 3 and controller in entry[1].split(","):
            return _mounted_folder(mounts, "cgroup", entry[2], controller)
    return None


def _v1_base(own, mounts) -> dict | None:
    """cgroup v1: the memory hierarchy's folder, with the process count's where it is usable."""
    memory = _v1_folder(own, mounts, "memory")
    if memory is None or not (memory / "memory.limit_in_bytes").exists() or not _usable(memory):
        return None
    pids = _v1_folder(own, mounts, "pids")
    return {"memory": memory, "version": 1, "pids": pids if pids is not None and _usable(pids) else None}


def _v2_base(own, mounts) -> dict | None:
    """cgroup v2 (unified): the grader's own folder, once it delegates memory (and, where it
    can, the process count) to the folders below it."""
    for entry in own:
        if len(entry) == 3 and entry[0] == "0" and entry[1] == "":
            base = _mounted_folder(mounts, "cgroup2", entry[2])
            if base is None:
                continue
            if not _delegate(base):
                return None
            return {"memory": base, "version": 2, "pids": None} if _usable(base) else None
    return None


def _delegate(base: Path) -> bool:
    """Turn on the memory controller (required) and the process count (optional) for the
    cgroups below ``base``; False when memory cannot be."""
    control = base / "cgroup.subtree_control"
    try:
        if "memory" not in control.read_text().split():
            control.write_text("+memory")
        if "pids" not in control.read_text().split():
            try:
                control.write_text("+pids")
            except OSError:
                pass
    except OSError:
        return False
    return True


def _usable(base: Path) -> bool:
    """Whether a cgroup can be made in ``base`` (tried once); the ones a grader that was killed left
    behind (its process id is in their name) are emptied and removed on the way."""
    try:
        for old in base.glob(_CGROUP_PREFIX + "*"):
            try:
                owner = int(old.name[len(_CGROUP_PREFIX):].split("-")[0])
                if time.time() - old.stat().st_mtime < STALE_AFTER:
                    continue
                os.kill(owner, 0)
                continue                                # its grader is still running
            except ProcessLookupError:
                Cgroup([old]).remove()
            except (ValueError, OSError):
                continue
        probe = base / f"{_CGROUP_PREFIX}{os.getpid()}-probe{secrets.token_hex(4)}"
        probe.mkdir()
        probe.rmdir()
        return True
    except OSError:
        return False


class Cgroup:
    """The cgroup(s) of one run: every process of the sandbox in it, sharing one memory limit
    (which a fork, shared memory or a memfd cannot get around, unlike the per-process RLIMIT_AS)
    and one process count (which, unlike RLIMIT_NPROC, holds when the sandbox has no user id of
    its own), and a sure list of them to kill at the end.  ``paths[0]`` has the memory
    controller; with cgroup v1 a second folder may have the process count."""

    def __init__(self, paths: list[Path], version: int = 1):
        self.paths, self.version = paths, version
        self.procs = [p / "cgroup.procs" for p in paths]

    @classmethod
    def create(cls, memory_bytes: int, processes: int) -> "Cgroup | None":
        base = cgroup_base()
        if base is None:
            return None
        name = f"{_CGROUP_PREFIX}{os.getpid()}-{secrets.token_hex(6)}"
        paths = [base["memory"] / name] + ([base["pids"] / name] if base["pids"] is not None else [])
        group = cls([], base["version"])
        try:
            for path in paths:
                path.mkdir()
                group.paths.append(path)
                group.procs.append(path / "cgroup.procs")
            memory = paths[0]
            if group.version == 1:
                (memory / "memory.limit_in_bytes").write_text(str(memory_bytes))
                optional = [(memory / "memory.memsw.limit_in_bytes", str(memory_bytes))]
            else:
                (memory / "memory.max").write_text(str(memory_bytes))
                optional = [(memory / "memory.swap.max", "0")]
            optional += [(paths[-1] / "pids.max", str(processes))]
            for path, value in optional:    # no swap to spill into; a process count, where they exist
                try:
                    path.write_text(value)
                except OSError:
                    pass
        except OSError:
            group.remove()
            return None
        return group

    def wrap(self, cmd: list[str]) -> list[str]:
        """``cmd`` started from inside the cgroup(s): a shell joins them, then becomes ``cmd``."""
        joins = "; ".join(f'echo $$ > "${k}" 2>/dev/null' for k in range(len(self.procs)))
        shifts = "; shift" * (len(self.procs) - 1)
        return ["/bin/sh", "-c", f'{joins}{shifts}; exec "$@"', *map(str, self.procs), *cmd]

    def pids(self) -> list[int]:
        found = set()
        for procs in self.procs:
            try:
                found.update(int(p) for p in procs.read_text().split())
            except (OSError, ValueError):
                pass
        return sorted(found)

    def oom_kills(self) -> int:
        if not self.paths:
            return 0
        name = "memory.oom_control" if self.version == 1 else "memory.events"
        try:
            for line in (self.paths[0] / name).read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
        except (OSError, ValueError):
            pass
        return 0

    def kill(self) -> None:
        """SIGKILL every process still in the cgroup, until none is left (up to 2 s)."""
        for _ in range(200):
            pids = self.pids()
            if not pids:
                return
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            time.sleep(0.01)

    def remove(self) -> None:
        for path in self.paths:
            for _ in range(50):
                try:
                    path.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    self.kill()
                    time.sleep(0.02)
