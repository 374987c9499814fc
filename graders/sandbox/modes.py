"""The isolation modes, one class each, behind one interface (``Isolation``): how a run's
command is built, what would hold, how the run is ended, what is cleaned after it, and what did
hold, read from the supervisor's reports.

- ``Bubblewrap``: ``bwrap`` makes the namespaces and the file system and installs the seccomp
  filter (``--seccomp FD``) before the supervisor starts;
- ``Namespaces`` (the fallback with util-linux): ``unshare`` makes the namespaces, the
  supervisor builds the file system in its mount namespace and installs the filter in the
  harness's process;
- ``Subreaper`` (the fallback without): no namespaces; the supervisor is a child subreaper and
  installs the filter, which here also denies ``socket()`` (no network namespace: the machine's
  network and its abstract socket names would be shared); the submission's user id is one of its
  own (the grader refuses otherwise, see ``runner.Sandbox``), so the grader can find and remove
  whatever it left in the machine's shared folders.
"""
from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path

from .commands import HARNESS, SUPERVISOR, WORKDIR, bwrap_prefix, supervisor_cmd, unshare_prefix
from .folders import work_folder
from .interpreter import environment
from .limits import Limits, Run
from .resident import view
from .sweep import sweep_files, sweep_processes

STOP_SECONDS = 4.0    # how long a supervisor asked to stop (SIGTERM) may take to kill and reap


@dataclass
class Launch:
    """One run's command and what to clean after it."""

    cmd: list[str]
    env: dict
    cwd: str | None = None
    lib_dirs: list[str] = field(default_factory=list)    # the supervisor's --lib
    token: str | None = None          # an environment mark to sweep by (no user id of its own)
    scratch: str | None = None        # a working folder on the machine's disk, removed after


class Isolation(ABC):
    """One way of isolating a run.  ``name`` is the results' ``isolation``; ``contained``: the
    submission is in PID, mount and network namespaces of its own."""

    name = "subprocess"
    contained = True
    no_sockets = False                # the seccomp filter denies socket() too
    sealed = False                    # and exec and PR_SET_DUMPABLE: the run keeps its OOM score (``seccomp``)

    def __init__(self, why: str):
        self.why = why
        # the folders of answers and references found closed to the submission's user (the
        # fallback without a file view checks them, ``exposure``); a file view hides them all
        self.guarded: list[str] = []

    def planned(self, own_user: bool, cgroup: bool) -> dict:
        """What would hold in a run (``held`` says what did)."""
        return {"supervisor": True, "pid_namespace": self.contained, "subreaper": not self.contained,
                "own_user": own_user, "seccomp": True, "cgroup": cgroup,
                "no_network": self.contained or self.no_sockets, "file_view": self.contained,
                "private_tmp": self.contained, "answers_closed": self.contained or bool(self.guarded)}

    @abstractmethod
    def launch(self, job_dir: Path, limits: Limits, uid: int | None, libs: list[Path], report_fd: int,
               channel_fd: int, seccomp_fd: int) -> Launch:
        """The command that runs the supervisor and the harness on ``job_dir`` as user ``uid``
        (None: the grader's), reporting on ``report_fd``, the harness writing to ``channel_fd``,
        under the seccomp filter read from ``seccomp_fd``."""

    def stop(self, proc: subprocess.Popen, launch: Launch, uid: int | None) -> int:
        """End the run: everything it started is gone afterwards.  Returns the top process's
        exit status.  PID 1 of a namespace takes the namespace with it; a run killed mid-way
        is also swept for its user's processes."""
        _killpg(proc)
        code = _reap(proc)
        if uid is not None and code < 0:
            sweep_processes(uid=uid)
        return code

    def clean(self, launch: Launch, uid: int | None, run: Run) -> None:
        """After the run: what it may have left on the machine."""

    def held(self, run: Run, uid: int | None, cgroup: bool) -> dict:
        """What held in ``run``, from the supervisor's reports (nothing the submission wrote)."""
        start, confined = run.supervisor, run.confined
        pid1 = start.get("pid1") is True
        uid_held = uid is not None and start.get("uid") == uid and confined.get("uid") == uid
        return {"supervisor": bool(start) and "error" not in start,
                "pid_namespace": pid1,
                "subreaper": start.get("subreaper") is True,
                "own_user": uid_held and confined.get("caps") == 0,
                "seccomp": confined.get("seccomp") == 2,
                "cgroup": cgroup,
                "no_network": pid1 or (self.no_sockets and confined.get("seccomp") == 2),
                "file_view": self._file_view(start),
                "private_tmp": self._file_view(start),
                "answers_closed": self._file_view(start) or (bool(self.guarded) and uid_held)}

    def _file_view(self, start: dict) -> bool:
        return bool(start.get("view"))


class Bubblewrap(Isolation):
    name = "bwrap"

    def launch(self, job_dir, limits, uid, libs, report_fd, channel_fd, seccomp_fd) -> Launch:
        cmd = (bwrap_prefix(uid, limits.tmpfs_bytes, job_dir, libs, seccomp_fd)
               + supervisor_cmd("/sandbox/supervisor.py", uid=uid, report_fd=report_fd, close=[channel_fd])
               + ["--", "/sandbox/harness.py", "/sandbox/in"])
        return Launch(cmd, env={}, lib_dirs=["/sandbox/lib"] if libs else [])

    def _file_view(self, start: dict) -> bool:
        return start.get("pid1") is True        # bwrap made the view before the supervisor ran



class Namespaces(Isolation):
    def launch(self, job_dir, limits, uid, libs, report_fd, channel_fd, seccomp_fd) -> Launch:
        # A package from elsewhere is copied into the job folder: the machine's folders are
        # shown only as the read-only copy holds them (``resident``), with no place to bind it.
        libs = [lib if Path(job_dir) in lib.parents
                else Path(shutil.copytree(lib, Path(job_dir) / "lib" / lib.name, dirs_exist_ok=True)) for lib in libs]
        keep = [str(job_dir)] + [str(lib) for lib in libs]
        cmd = (unshare_prefix()
               + supervisor_cmd(str(SUPERVISOR), keep=keep, view=view(), tmp_bytes=limits.tmpfs_bytes, uid=uid,
                                report_fd=report_fd, close=[channel_fd], seccomp_fd=seccomp_fd)
               + ["--", str(HARNESS), str(job_dir)])
        return Launch(cmd, env=environment(WORKDIR), cwd="/", lib_dirs=sorted({str(lib.parent) for lib in libs}))


class Subreaper(Isolation):
    contained = False
    no_sockets = True
    sealed = True

    def launch(self, job_dir, limits, uid, libs, report_fd, channel_fd, seccomp_fd) -> Launch:
        scratch = work_folder("grader-scratch-")
        # Each package on a shelf of its own (a link to it), so that what lies next to it (the
        # rest of the course, graders/) cannot be imported by name.
        lib_dirs = [os.path.join(scratch, ".lib")] if libs else []
        for lib in libs:
            os.makedirs(lib_dirs[0], 0o755, exist_ok=True)
            os.symlink(lib, os.path.join(lib_dirs[0], lib.name))
        if uid is not None:
            os.chown(scratch, uid, uid)
        token = secrets.token_hex(8)
        cmd = (supervisor_cmd(str(SUPERVISOR), subreaper=True, uid=uid, report_fd=report_fd,
                              close=[channel_fd], seccomp_fd=seccomp_fd)
               + ["--", str(HARNESS), str(job_dir)])
        return Launch(cmd, env={**environment(scratch), "KVGRADER_RUN": token}, cwd=scratch,
                      lib_dirs=lib_dirs, token=token, scratch=scratch)

    def stop(self, proc, launch, uid) -> int:
        if proc.poll() is None:
            # The supervisor (the top process here) kills and reaps everything below it when
            # asked, new sessions included, which killing the process group cannot reach.
            try:
                os.kill(proc.pid, signal.SIGTERM)
                proc.wait(timeout=STOP_SECONDS)
            except (OSError, subprocess.TimeoutExpired):
                pass
        _killpg(proc)
        sweep_processes(uid=uid, token=launch.token, session=proc.pid)
        return _reap(proc)

    def clean(self, launch, uid, run) -> None:
        if launch.scratch:
            shutil.rmtree(launch.scratch, ignore_errors=True)
        if uid is not None:         # its own user: whatever that user owns is the run's
            run.swept_files = sweep_files(uid)


def _killpg(proc) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _reap(proc) -> int:
    """Wait for the top process (it was killed), close its output; its exit status."""
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass
    if proc.returncode is None:
        proc.returncode = -9
    proc.stdout.close()
    return proc.returncode
