"""The weakest fallback's guard of the files a run keeps in memory.

Without namespaces and without a cgroup (root in a Docker container with the default
capabilities: Gradescope's), a run writes into the machine's shared folders (``/tmp``,
``/dev/shm``...).  Where those are memory-backed (tmpfs), a file's pages are memory that no
process's resident size counts and that outlives every process of the run: when the container's
memory runs out, the kernel kills processes, the run's first (``supervisor.first_to_go``), and
once they are all gone it would kill the grader, since killing frees nothing of a file.
``RLIMIT_FSIZE`` bounds one file, not how many; a private size-capped tmpfs, or a disk quota,
needs ``CAP_SYS_ADMIN``, which the container does not give.

So the grader watches: every ``POLL_SECONDS`` a thread adds up what the run's user id (a user
of the run's own, nobody else's) owns in those folders and in every memory-backed mount, at
least a page per entry (an empty file costs the kernel an inode), and when that passes the
run's ``budget`` (the room bubblewrap gives a run: a private ``/tmp`` and ``/dev/shm``), it kills
every process of that user and removes the files, before the memory can run out: a tmpfs is
written at a few GB/s, so a run gets at most a few tens of MB past the budget in one poll.
What a run holds only while a process of it lives (a file it unlinked but keeps open, pipes,
its processes' own memory) the kernel frees by killing the run's processes first.
"""
from __future__ import annotations

import os
import stat
import threading

from .sweep import SHARED_FOLDERS, sweep_files, sweep_processes

POLL_SECONDS = 0.02
ENTRY_BYTES = 4096                 # what an entry counts at least: a page (an inode, a name)
MEMORY_FILESYSTEMS = {"tmpfs", "ramfs", "shm", "hugetlbfs"}
MAX_DEPTH = 32


def budget(limits) -> int:
    """What a run may keep in files: the room of a private ``/tmp`` and ``/dev/shm``."""
    return 2 * int(limits.tmpfs_bytes)


def memory_mounts() -> list[str]:
    """The mount points of the machine's memory-backed file systems (``/proc/self/mountinfo``)."""
    found = []
    try:
        with open("/proc/self/mountinfo") as f:
            for line in f:
                fields, _, tail = line.partition(" - ")
                parts = fields.split()
                if len(parts) >= 5 and tail.split()[:1] and tail.split()[0] in MEMORY_FILESYSTEMS:
                    point = parts[4]
                    found.append(point.encode().decode("unicode_escape") if "\\" in point else point)
    except OSError:
        pass
    return found


def watched_folders(extra=()) -> list[str]:
    """The shared folders, the memory-backed mounts and ``extra``, each once."""
    folders: list[str] = []
    for folder in [*SHARED_FOLDERS, *memory_mounts(), *extra]:
        if folder and folder not in folders:
            folders.append(folder)
    return folders


def files_held(uid: int, folders, limit: int) -> int:
    """The bytes user ``uid`` keeps in ``folders`` (its entries, a page at least each, and all
    below a folder of its own), counted until ``limit`` is passed (then more than ``limit``)."""
    total = 0
    seen: set[tuple[int, int]] = set()
    for folder in folders:
        total = _count(folder, uid, False, total, limit, seen, 0)
        if total > limit:
            break
    return total


def _count(folder: str, uid: int, its_own: bool, total: int, limit: int, seen: set, depth: int) -> int:
    if depth > MAX_DEPTH or total > limit:
        return total
    try:
        with os.scandir(folder) as entries:
            for entry in entries:
                try:
                    info = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                mine = its_own or info.st_uid == uid
                if mine and (info.st_dev, info.st_ino) not in seen:    # a hard link counts once
                    seen.add((info.st_dev, info.st_ino))
                    total += max(info.st_blocks * 512, ENTRY_BYTES)
                if stat.S_ISDIR(info.st_mode) and (mine or info.st_mode & stat.S_IWOTH):
                    total = _count(entry.path, uid, mine, total, limit, seen, depth + 1)
                if total > limit:
                    return total
    except OSError:
        pass
    return total


class Guard:
    """A thread that watches what user ``uid`` keeps in files while a run lasts; past
    ``limit`` bytes it calls ``over()``, kills every process of the user and removes its files.
    ``tripped``: how much it found then (0: never)."""

    def __init__(self, uid: int, limit: int, over, extra=()):
        self.uid, self.limit, self.over = uid, limit, over
        self.folders = watched_folders(extra)
        self.tripped = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name=f"kvgrader-guard-{uid}", daemon=True)

    def __enter__(self) -> "Guard":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _watch(self) -> None:
        while not self._stop.wait(POLL_SECONDS):
            held = files_held(self.uid, self.folders, self.limit)
            if held > self.limit:
                self.tripped = held
                self.over()
                sweep_processes(uid=self.uid)
                sweep_files(self.uid, self.folders)
                return
