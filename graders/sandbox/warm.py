"""``Warm``: one bubblewrap sandbox that runs one submission's runs one after another, each from
a process that has already loaded numpy.

A fresh sandbox per run pays for a fresh interpreter and numpy's import every time (about
0.17 s of CPU of the 0.4 s an exercise's run takes here), and an exercise like ``mutants`` runs
dozens.  A warm sandbox pays once: its first process (``supervisor.serve``, PID 1 of the
sandbox bubblewrap made, the system and Python read-only, no network) loads numpy and then
forks each run into namespaces of its own (mount, PID, network, IPC, UTS), where the run's own
PID 1 shows it only its job folder and fresh ``/tmp``, ``/dev/shm``, ``/scratch`` and
``/proc``, and is its supervisor as in any sandbox: the harness's privileges dropped (a user id
of the run's own), the seccomp filter installed, everything killed and reaped at the end.
Nothing one run writes, starts, locks or names outlives it; the process the runs are forked
from never reads a job folder.

Only a root grader makes warm sandboxes (the runs' namespaces need a capability that only a
privileged bubblewrap keeps for the supervisor), and only while ``Sandbox.warm_runs`` is active
(a grading); ``Limits.warm`` False turns them off.  A run a warm sandbox cannot take (packages
from another folder, a sandbox that broke) runs in a fresh sandbox instead.
"""
from __future__ import annotations

import json
import os
import secrets
import select
import shutil
import socket
import subprocess
import time
from pathlib import Path

from . import supervisor as _supervisor
from .cgroups import Cgroup
from .commands import bwrap_prefix, supervisor_cmd
from .interpreter import site_dirs
from .folders import work_folder
from .limits import Limits, Run
from .sweep import sweep_processes, track, untrack
from .watch import drain, read_report, watch
from .transcript import Transcript

START_SECONDS = 10.0         # the longest a warm sandbox may take to start a run
STOP_SECONDS = 4.0           # ... or to end one it was asked to stop
OWN_BYTES = 128 << 20        # the warm sandbox's own processes, beside a run's memory limit
OWN_PROCESSES = 6            # bubblewrap, the first process, a run's two processes of its own


class NotWarm(Exception):
    """This run cannot be taken by this warm sandbox: run it in a fresh one."""


class Warm:
    """One warm sandbox for runs with ``limits`` (memory, files, processes) and the packages
    ``fixed_libs`` (folders outside any job folder), used by one thread at a time."""

    def __init__(self, isolation, limits: Limits, fixed_libs: tuple[Path, ...], seccomp_program: bytes):
        self.isolation = isolation
        self.limits = limits
        self.fixed_libs = tuple(sorted(Path(lib) for lib in fixed_libs))
        self.jobs = Path(work_folder("grader-warm-"))
        os.chmod(self.jobs, 0o755)
        self.control, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        program_r, program_w = os.pipe()
        self.group = Cgroup.create(limits.memory_bytes + 3 * limits.tmpfs_bytes + OWN_BYTES,
                                   limits.processes + 8 + OWN_PROCESSES)
        self.broken = False
        self.proc = None
        try:
            os.write(program_w, seccomp_program)     # a filter is a few kilobytes: the pipe holds it
            os.close(program_w)
            program_w = -1
            cmd = (bwrap_prefix(0, limits.tmpfs_bytes, None, self.fixed_libs, None, warm_jobs=self.jobs)
                   + supervisor_cmd("/sandbox/supervisor.py", uid=None, report_fd=None, close=(),
                                    seccomp_fd=program_r)
                   + ["--serve", str(theirs.fileno()), "--preload-site", os.pathsep.join(site_dirs()),
                      "--tmp-bytes", str(limits.tmpfs_bytes), "--", "/sandbox/harness.py"])
            if self.group is not None:
                cmd = self.group.wrap(cmd)
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                         stderr=subprocess.DEVNULL, pass_fds=(theirs.fileno(), program_r),
                                         start_new_session=True, env={})
            track(self.proc)
        except BaseException:
            self.close()
            raise
        finally:
            theirs.close()
            os.close(program_r)
            if program_w >= 0:
                os.close(program_w)

    @property
    def usable(self) -> bool:
        return not self.broken and self.proc is not None and self.proc.poll() is None

    def run(self, job_dir: Path, limits: Limits, test_seconds: dict[str, float], uid: int, tests,
            harness_options, libs=()) -> Run:
        """One run of the harness on ``job_dir`` (moved into this sandbox's folder of jobs and
        removed after), as user ``uid``, for the ``tests`` (``Transcript``), with the options
        ``harness_options(channel_fd, lib_dirs)`` gives, like ``Sandbox.run``.  Raises NotWarm,
        having run nothing, when this sandbox cannot take it."""
        libs = [Path(lib) for lib in libs]
        copies = self._copied_libs(job_dir, libs)
        name = secrets.token_hex(8)
        folder = self.jobs / name
        os.rename(job_dir, folder)
        run = Run(transcript=Transcript(tests=frozenset(tests)), isolation=self.isolation.name, warm=True)
        pipes = _Pipes()
        oom_before = self.group.oom_kills() if self.group is not None else 0
        proc = None
        try:
            request = {"t": "run", "job": name, "libs": [lib.name for lib in copies], "uid": uid,
                       "argv": ["/sandbox/in"] + harness_options(_supervisor.RUN_FDS[1], ["/sandbox/lib"] if libs else [])}
            start = time.monotonic()
            run.started = time.perf_counter()
            self._start(request, pipes)
            proc = _WarmRun(self, pipes.take_output())
            self._watch(proc, pipes, run, limits, test_seconds, start, uid)
            self._account(run, uid, start, oom_before)
            return run
        finally:
            pipes.close()
            if proc is not None:
                proc.stdout.close()
            shutil.rmtree(folder, ignore_errors=True)

    def _copied_libs(self, job_dir: Path, libs: list[Path]) -> list[Path]:
        """The packages copied into the job's folder; raises NotWarm when the others are not the
        ones this sandbox was made with, or it cannot take a run any more."""
        copies = [lib for lib in libs if lib.parent == job_dir / "lib"]
        if tuple(sorted(lib for lib in libs if lib not in copies)) != self.fixed_libs or not self.usable:
            raise NotWarm()
        return copies

    def _start(self, request: dict, pipes: "_Pipes") -> None:
        """Hand the run and the sandbox's ends of its pipes to the sandbox, and wait until it says
        the run started; a sandbox that does not is broken, and the run goes elsewhere (NotWarm)."""
        try:
            socket.send_fds(self.control, [json.dumps(request).encode()], pipes.theirs)
        except OSError:
            self._break()
            raise NotWarm()
        pipes.sent()
        answer = self._receive(START_SECONDS)
        if not answer or answer.get("t") != "started" or answer.get("ok") is not True:
            self._break()
            raise NotWarm()

    def _watch(self, proc: "_WarmRun", pipes: "_Pipes", run: Run, limits: Limits,
               test_seconds: dict[str, float], start: float, uid: int) -> None:
        """Watch the run to its end (``watch``), stop it, and read its supervisor's report."""
        report = bytearray()
        try:
            watch(proc, pipes.channel, pipes.report, report, run, limits, test_seconds, start)
        finally:
            top = self._stop(proc)
            if uid is not None and run.killed:
                sweep_processes(uid=uid)
        drain(pipes.report, report)
        read_report(bytes(report), run, top)

    def _account(self, run: Run, uid: int, start: float, oom_before: int) -> None:
        """What held, how long it took, how many processes ran out of memory; a sandbox where the
        run left a process behind is not used again."""
        run.cgroup = self.group is not None
        run.held = self.isolation.held(run, uid, run.cgroup)
        run.elapsed = time.monotonic() - start
        if self.group is not None:
            run.oom_killed = self.group.oom_kills() - oom_before
            if len(self.group.pids()) > 2:      # only bubblewrap and the first process stay
                self._break()

    def _receive(self, timeout: float) -> dict | None:
        """The sandbox's next answer, or None (none within ``timeout``, or the sandbox is gone)."""
        ready, _, _ = select.select([self.control], [], [], max(0.0, timeout))
        if not ready:
            return None
        try:
            data = self.control.recv(1 << 16)
        except OSError:
            return None
        try:
            answer = json.loads(data) if data else None
        except ValueError:
            answer = None
        return answer if isinstance(answer, dict) else None

    def _stop(self, proc: "_WarmRun") -> int:
        """End the run if it has not ended: everything it started is gone afterwards (its PID 1
        is killed, and the kernel kills the rest of its PID namespace).  Its exit status: the
        harness's as its supervisor gave it, or -9 when it was killed."""
        if proc.poll() is None:
            try:
                self.control.send(b'{"t": "stop"}')
            except OSError:
                pass
            try:
                proc.wait(STOP_SECONDS)
            except subprocess.TimeoutExpired:
                self._break()
            return -9
        return proc.returncode

    def _break(self) -> None:
        """This sandbox is not used again: it and everything in it are killed."""
        self.broken = True
        self.close()

    def close(self) -> None:
        """End the sandbox: asked (its first process exits when its socket closes), then killed."""
        self.control.close()
        if self.proc is not None:
            try:
                self.proc.wait(timeout=0 if self.broken else 2)
            except subprocess.TimeoutExpired:
                pass
            try:
                os.killpg(self.proc.pid, 9)
            except (ProcessLookupError, PermissionError):
                pass
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
            untrack(self.proc)
            self.proc = None
        if self.group is not None:
            self.group.kill()
            self.group.remove()
            self.group = None
        shutil.rmtree(self.jobs, ignore_errors=True)


class _Pipes:
    """The three pipes of one run (the supervisor's report, the results channel, the output):
    the sandbox's ends are sent to it and closed here at once, the grader's when the run is over."""

    def __init__(self):
        (self.report, report_w), (self.channel, channel_w), (self.output, output_w) = (os.pipe() for _ in range(3))
        self.theirs = [report_w, channel_w, output_w]

    def sent(self) -> None:
        for fd in self.theirs:
            os.close(fd)
        self.theirs = []

    def take_output(self) -> int:
        """The output's end, now the run's to close."""
        fd, self.output = self.output, -1
        return fd

    def close(self) -> None:
        for fd in self.theirs + [self.report, self.channel, self.output]:
            if fd >= 0:
                os.close(fd)


class _WarmRun:
    """What the watch loop needs of a run's top process, for a run in a warm sandbox: the run has
    ended when the sandbox says so (``exit_fd`` becomes readable then)."""

    def __init__(self, warm: Warm, output_fd: int):
        self.warm = warm
        self.stdout = open(output_fd, "rb", buffering=0)
        self.exit_fd = warm.control.fileno()
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self._read(0.0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.returncode is None:
            left = 3600.0 if deadline is None else deadline - time.monotonic()
            if left <= 0:
                raise subprocess.TimeoutExpired("warm run", timeout)
            self._read(left)
        return self.returncode

    def _read(self, timeout: float) -> None:
        ready, _, _ = select.select([self.warm.control], [], [], timeout)
        if not ready:
            return
        try:
            data = self.warm.control.recv(1 << 16)
        except OSError:
            data = b""
        if not data:                                 # the sandbox itself is gone
            self.returncode = -9
            self.warm.broken = True
            return
        try:
            answer = json.loads(data)
        except ValueError:
            return
        if isinstance(answer, dict) and answer.get("t") == "ended":
            # the harness's status is in the run's report (``read_report``); this stands for a
            # run that ended without one
            self.returncode = _supervisor.NOT_STARTED
