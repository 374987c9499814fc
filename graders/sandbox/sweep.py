"""Making sure nothing of a run is left: its processes (``sweep_processes``, the fallback
without namespaces, where no PID namespace ends them all), the files its user left in the
machine's shared writable folders (``sweep_files``), and every sandbox still running when the
grader itself is interrupted (``kill_all``)."""
from __future__ import annotations

import os
import shutil
import signal
import stat
import threading
import time

# The folders any user may write to on a usual Linux machine: where a sandbox without a mount
# namespace of its own could leave a file for the next one.
SHARED_FOLDERS = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock", "/var/lock", "/dev/mqueue")

_live: set = set()                 # the sandboxes running now (to kill them on Ctrl-C)
_live_lock = threading.Lock()


def track(proc) -> None:
    with _live_lock:
        _live.add(proc)


def untrack(proc) -> None:
    with _live_lock:
        _live.discard(proc)


def kill_all() -> None:
    """Kill every sandbox this process started that is still running."""
    with _live_lock:
        procs = list(_live)
    for proc in procs:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def sweep_processes(uid: int | None = None, token: str | None = None, session: int | None = None) -> None:
    """Kill every process of user ``uid`` (the sandbox's own user: nobody else has it), or whose
    environment carries ``token``, or that is still in ``session``."""
    needle = f"KVGRADER_RUN={token}".encode() if token else None
    me = os.getpid()
    for _ in range(5):
        found = False
        try:
            entries = list(os.scandir("/proc"))
        except OSError:                 # no /proc (not Linux): the process-group kill is all there is
            return
        for entry in entries:
            if not entry.name.isdigit() or int(entry.name) == me:
                continue
            pid = int(entry.name)
            if _is_of_run(pid, uid, needle, session):
                found = True
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        if not found:
            return
        time.sleep(0.01)


def _is_of_run(pid: int, uid: int | None, needle: bytes | None, session: int | None) -> bool:
    try:
        if uid is not None:
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith("Uid:"):
                        if int(line.split()[1]) == uid:
                            return True
                        break
        if session is not None:
            with open(f"/proc/{pid}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
            if int(fields[3]) == session:          # the session id
                return True
        if needle is not None:
            with open(f"/proc/{pid}/environ", "rb") as f:
                return needle in f.read().split(b"\0")
    except (OSError, ValueError, IndexError):
        pass
    return False


def sweep_files(uid: int, folders=SHARED_FOLDERS) -> int:
    """Remove everything user ``uid`` (the sandbox's own: nothing of the machine's is its) owns
    in the shared writable ``folders``, at any depth, without following links.  Returns how many
    entries were removed."""
    removed = 0
    for folder in folders:
        removed += _sweep_folder(folder, uid, depth=0)
    return removed


def _sweep_folder(folder: str, uid: int, depth: int) -> int:
    if depth > 32:
        return 0
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return 0
    removed = 0
    for entry in entries:
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if info.st_uid == uid:
            if stat.S_ISDIR(info.st_mode):
                shutil.rmtree(entry.path, ignore_errors=True)
            else:
                try:
                    os.unlink(entry.path)
                except OSError:
                    continue
            removed += 1
        elif stat.S_ISDIR(info.st_mode) and info.st_mode & stat.S_IWOTH:
            removed += _sweep_folder(entry.path, uid, depth + 1)   # a writable folder inside
    return removed
