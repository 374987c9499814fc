"""What this machine gives the grader, asked once per process: whether bubblewrap can start a
sandbox (with the seccomp filter), whether ``unshare`` can give the fallback namespaces of its
own, whether another user could run this interpreter, and a user id nobody has.

Each probe runs the real thing (a sandbox that runs ``true``, or the supervisor's ``--probe``,
which starts a fresh interpreter as the submission's user under the filter) rather than
guessing from versions or configuration files.
"""
from __future__ import annotations

import os
import secrets
import stat
import subprocess
import sys
import threading
from pathlib import Path

from . import seccomp
from .commands import SUPERVISOR, bwrap_prefix, supervisor_cmd, unshare_prefix, which
from .interpreter import environment, site_dirs
from .resident import view

_probe_lock = threading.Lock()
_probe: dict[str, tuple[bool, str]] = {}

FIRST_UID = 100_000                 # above every uid a distribution hands out to people and services
UID_RANGE = 1_000_000_000


def bwrap_status() -> tuple[bool, str]:
    """(usable, why): whether bubblewrap is installed and can start a sandbox here, seccomp
    filter included."""
    with _probe_lock:
        if "bwrap" not in _probe:
            path = which("bwrap")
            if not path:
                _probe["bwrap"] = (False, "bubblewrap (bwrap) is not installed")
            else:
                uid = unused_uid() if os.geteuid() == 0 else None
                fd = seccomp.program_fd()
                try:
                    cmd = bwrap_prefix(uid=uid, tmpfs_bytes=1 << 20, job_dir=None, libs=(),
                                       seccomp_fd=fd) + ["/usr/bin/true"]
                    ok, why = _try(cmd, fds=(fd,))
                except OSError as err:          # the copy of what a run sees could not be made
                    ok, why = False, str(err)
                finally:
                    os.close(fd)
                _probe["bwrap"] = (ok, f"bubblewrap at {path}" if ok else why)
        return _probe["bwrap"]


def namespaces_status() -> tuple[bool, str]:
    """(usable, why): whether the fallback can have namespaces of its own here (``unshare`` and
    ``setpriv`` from util-linux; for a user other than root, unprivileged user namespaces), and
    its supervisor can build the submission's file system, drop its privileges and install the
    seccomp filter in them."""
    with _probe_lock:
        if "namespaces" not in _probe:
            missing = [tool for tool in ("unshare", "setpriv") if not which(tool)]
            if missing:
                _probe["namespaces"] = (False, f"{' and '.join(missing)} (util-linux) not installed")
            else:
                uid = unused_uid() if os.geteuid() == 0 else None
                fd = seccomp.program_fd()
                try:
                    cmd = unshare_prefix() + supervisor_cmd(str(SUPERVISOR), uid=uid, report_fd=None, close=(),
                                                            keep=[], view=view(), tmp_bytes=1 << 20, probe=True,
                                                            seccomp_fd=fd)
                    ok, why = _try(cmd, cwd="/", fds=(fd,))
                except OSError as err:
                    ok, why = False, str(err)
                finally:
                    os.close(fd)
                _probe["namespaces"] = (ok, "unshare" if ok else f"unshare could not start a sandbox here ({why})")
        return _probe["namespaces"]


def _try(cmd: list[str], cwd: str | None = None, fds=()) -> tuple[bool, str]:
    try:
        proc = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, timeout=30, cwd=cwd,
                              env=environment("/"), pass_fds=fds)
    except (OSError, subprocess.TimeoutExpired) as err:
        return False, str(err)
    if proc.returncode == 0:
        return True, ""
    return False, (proc.stderr.decode(errors="replace").strip()[:300] or f"exit status {proc.returncode}")


def world_usable() -> str | None:
    """None when any user can run the interpreter and read the packages (every folder on the way
    searchable by others, the files readable by others); else the first path that stops them.
    The supervisor and the harness are not among them: the grader's user loads both before the
    submission's user is taken, so ``graders/`` can be closed to other users
    (``exposure``)."""
    paths = [os.path.realpath(sys.executable)] + site_dirs()
    for path in paths:
        p = Path(path)
        for folder in [p] + list(p.parents):
            try:
                mode = folder.stat().st_mode
            except OSError:
                return str(folder)
            if stat.S_ISDIR(mode) and not mode & stat.S_IXOTH:
                return f"{folder} (mode {stat.S_IMODE(mode):04o})"
            if stat.S_ISREG(mode) and not mode & stat.S_IROTH:
                return f"{folder} (mode {stat.S_IMODE(mode):04o})"
    return None


_known_uids: list[set] = []


def _account_uids() -> set[int]:
    """The user ids of the machine's accounts (``/etc/passwd``), read once."""
    if not _known_uids:
        uids = set()
        try:
            with open("/etc/passwd", errors="replace") as f:
                for line in f:
                    fields = line.split(":")
                    if len(fields) > 2 and fields[2].isdigit():
                        uids.add(int(fields[2]))
        except OSError:
            pass
        _known_uids.append(uids)
    return _known_uids[0]


def uid_in_use(uid: int) -> bool:
    """Whether ``uid`` belongs to an account or to a running process (the owner of its /proc
    folder is its effective user)."""
    if uid in _account_uids():
        return True
    try:
        entries = os.scandir("/proc")
    except OSError:
        return False
    with entries:
        for entry in entries:
            if entry.name.isdigit():
                try:
                    if entry.stat(follow_symlinks=False).st_uid == uid:
                        return True
                except OSError:
                    continue
    return False


def unused_uid() -> int:
    """A user id of the sandbox's own: random among a billion, no account's and no running
    process's (so it owns nothing of the machine's and can signal nothing outside its run)."""
    while True:
        uid = FIRST_UID + secrets.randbelow(UID_RANGE)
        if not uid_in_use(uid):
            _log_user(uid)
            return uid


#: A file (the grader's own, closed to other users) where each sandbox's user id is added before
#: it is used, so that whoever started the grader can end whatever of theirs is left should the
#: grader itself be killed (``autograder.finish``).
USERS_LOG = "KVGRADER_USERS_LOG"


def _log_user(uid: int) -> None:
    path = os.environ.get(USERS_LOG)
    if path:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            try:
                os.write(fd, f"{uid}\n".encode())
            finally:
                os.close(fd)
        except OSError:
            pass
