"""``Sandbox``: one graded run, from the command to the record, whatever the isolation.

``Sandbox(isolation)`` picks the mode (``modes``) once: bubblewrap where it runs ("auto"), else
the fallback, with namespaces where ``unshare`` gives them.  It also decides the submission's
user: when the grader is root, an unused user id of the run's own (``probes.unused_uid``), in
every mode; where none can be had (the fallback without namespaces, and an interpreter that no
other user can reach), or where the submission would run as the grading user with the machine's
files in view (a user other than root without namespaces), it refuses (``SandboxUnavailable``)
rather than run the submission as someone who owns something of the machine's.  The fallback
without namespaces also refuses where that user could read the course's answers or the grader's
references (``exposure``: checked for real, once per ``Sandbox``).

``Sandbox.run`` then: a seccomp program in an anonymous file, the mode's command, the harness's
options, a cgroup around it all where the machine allows; the watch loop (``watch``); the mode's
stop and clean; the supervisor's reports turned into ``Run.held``.
"""
from __future__ import annotations

import os
import subprocess
import threading
import time
from contextlib import contextmanager, nullcontext
from pathlib import Path

from . import exposure, probes, seccomp
from .cgroups import Cgroup, cgroup_base
from .commands import HARNESS, SUPERVISOR, bytecode
from .interpreter import site_dirs
from .describe import describe
from .guard import Guard, budget
from .limits import Limits, Run, SandboxUnavailable
from .modes import Bubblewrap, Isolation, Namespaces, Subreaper
from .sweep import track, untrack
from .warm import NotWarm, Warm
from .watch import drain, read_report, watch
from . import supervisor as _supervisor
from .transcript import Transcript


class Sandbox:
    """Runs the supervisor and the harness on a job folder, in bubblewrap when it can ("auto"),
    or as asked ("bwrap" fails when bubblewrap cannot run; "subprocess" is the fallback on
    purpose).  ``namespaces``, ``own_user`` and ``cgroup`` set to False turn the fallback's
    protections off, to take the paths of machines the tests do not run on; a user of the
    submission's own cannot be turned off for a root grader (it would run as root)."""

    def __init__(self, isolation: str = "auto", *, namespaces: bool | None = None,
                 own_user: bool | None = None, cgroup: bool | None = None):
        if isolation not in ("auto", "bwrap", "subprocess"):
            raise ValueError("isolation must be auto, bwrap or subprocess")
        ok, why = probes.bwrap_status() if isolation != "subprocess" else (False, "the fallback was asked for")
        if isolation == "bwrap" and not ok:
            raise SandboxUnavailable(f"bubblewrap cannot be used: {why}")
        self.mode = "bwrap" if ok else "subprocess"
        self.why = why
        self.root = os.geteuid() == 0
        self.namespaces = False
        if self.mode == "subprocess" and namespaces is not False:
            self.namespaces, ns_why = probes.namespaces_status()
            if not self.namespaces:
                self.why = f"{why}; {ns_why}"
        self.isolation: Isolation = (Bubblewrap(self.why) if ok else Namespaces(self.why) if self.namespaces
                                     else Subreaper(self.why))
        self.own_user = self._own_user(own_user)
        if not self.isolation.contained and self.own_user:
            self.isolation.guarded = self._answers_closed()
        self.use_cgroup = cgroup is not False
        self._warm_sandboxes: dict | None = None
        for program in (SUPERVISOR, HARNESS):   # compiled once, not by every sandbox
            bytecode(program)

    def _own_user(self, asked: bool | None) -> bool:
        """Whether runs get a user id of their own; refuses where the submission would run as
        root, or as the grading user with the machine's files in view."""
        contained = self.isolation.contained
        if self.root:
            if asked is False:
                raise SandboxUnavailable("the sandbox refuses to run a submission as root: a root grader "
                                         "always gives it a user id of its own")
            blocked = None if contained else probes.world_usable()
            if blocked is not None:
                raise SandboxUnavailable(
                    f"the subprocess fallback cannot grade here: {self.why}, and no user other than root "
                    f"can run this Python ({blocked} is closed to other users), so the submission would "
                    "run as root. Install bubblewrap (make system-deps) or util-linux, or put the "
                    "interpreter and its packages where every user can read them")
            return True
        if not contained:
            raise SandboxUnavailable(
                f"the subprocess fallback cannot grade here: {self.why}, and a grader that is not root "
                f"cannot give the submission a user id of its own: it would run as this user "
                f"(uid {os.geteuid()}), who owns files of this machine, with the machine's files in view. "
                "Install bubblewrap (make system-deps), or util-linux where user namespaces are allowed")
        return False

    def _answers_closed(self) -> list[str]:
        """The folders of answers and references (``exposure.guarded_folders``) checked closed to
        the submission's user, once per sandbox: a child as a fresh unused user id tries to open
        each.  Refuses, naming the folder and the remedy, when any is readable."""
        folders = exposure.guarded_folders()
        try:
            found = exposure.readable_to(probes.unused_uid(), folders)
        except (OSError, subprocess.SubprocessError) as err:
            raise SandboxUnavailable(f"the subprocess fallback cannot grade here: {self.why}, and whether the "
                                     f"submission's user could read the answers could not be checked ({err})")
        for folder, hit in found.items():
            if hit is not None:
                raise SandboxUnavailable(
                    f"the subprocess fallback cannot grade here: {self.why}, so the submission sees the "
                    f"machine's files as any other user does, and another user can read {folder} "
                    f"({hit} opened), which holds answers or the grader's references. Close it to other "
                    f"users (chmod o-rwx {folder}), or install bubblewrap (make system-deps) or util-linux, "
                    "whose sandboxes hide the checkout")
        return list(found)

    def planned(self) -> dict:
        """What would hold in a run here (``Run.held`` says what did)."""
        return self.isolation.planned(self.own_user, self.use_cgroup and cgroup_base() is not None)

    @property
    def description(self) -> str:
        return describe(self.mode, self.why, self.planned())

    def run(self, job_dir: Path, limits: Limits, test_seconds: dict[str, float], *,
            only: list[str] | None = None, public: str | None = None, functions=(), libs=()) -> Run:
        """Run the harness on ``job_dir`` (the tests ``only``, or all of ``test_seconds``; or the
        public checks of ``public`` on the submission's ``functions``), with the course packages
        ``libs`` importable."""
        limits = limits.resolved()
        uid = probes.unused_uid() if self.own_user else None
        tests = only if only is not None else test_seconds
        warm = self._warm(limits, libs, job_dir) if public is None else None
        if warm is not None:
            try:
                run = warm.run(job_dir, limits, test_seconds, uid, tests,
                               lambda fd, lib_dirs: self._harness_options(limits, uid, fd, lib_dirs, only, None, ()),
                               libs=libs)
            except NotWarm:
                pass                                # a fresh sandbox for this one
            else:
                self._check_started(run)
                return run
        run = Run(transcript=Transcript(tests=frozenset(tests)), isolation=self.mode)
        channel_r, channel_w = os.pipe()
        report_r, report_w = os.pipe()
        filter_fd = seccomp.program_fd(self.isolation.no_sockets, self.isolation.sealed)
        group = launch = None
        try:
            launch = self.isolation.launch(job_dir, limits, uid, [Path(lib) for lib in libs], report_w,
                                           channel_w, filter_fd)
            cmd = launch.cmd + self._harness_options(limits, uid, channel_w, launch.lib_dirs, only, public,
                                                     functions)
            # All its processes share one memory limit, where the machine lets the grader make a
            # cgroup; the pages of its three tmpfs folders are charged to it too, hence their room.
            if self.use_cgroup:
                group = Cgroup.create(limits.memory_bytes + 3 * limits.tmpfs_bytes, limits.processes + 8)
            if group is not None:
                cmd = group.wrap(cmd)
                run.cgroup = True
            start = time.monotonic()
            run.started = time.perf_counter()
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, pass_fds=(channel_w, report_w, filter_fd),
                                    start_new_session=True, env=launch.env, cwd=launch.cwd)
            for fd in (channel_w, report_w, filter_fd):
                os.close(fd)
            channel_w = report_w = filter_fd = -1
            track(proc)
            report = bytearray()
            try:
                with self._guard(run, uid, limits, launch):
                    watch(proc, channel_r, report_r, report, run, limits, test_seconds, start)
            finally:
                top = self.isolation.stop(proc, launch, uid)
                untrack(proc)
            drain(report_r, report)
            read_report(bytes(report), run, top)
            run.held = self.isolation.held(run, uid, run.cgroup)
            run.elapsed = time.monotonic() - start
            self._check_started(run)
            return run
        finally:
            if group is not None:            # whatever is left in it dies, then it goes
                group.kill()
                run.oom_killed = group.oom_kills()
                group.remove()
            for fd in (channel_w, report_w, channel_r, report_r, filter_fd):
                if fd >= 0:
                    os.close(fd)
            if launch is not None:
                self.isolation.clean(launch, uid, run)

    def _guard(self, run: Run, uid: int | None, limits: Limits, launch):
        """Where nothing else bounds what a run keeps in memory-backed files (the fallback
        without namespaces: no private /tmp, and maybe no cgroup), the grader's guard (``guard``)."""
        if self.isolation.contained or uid is None:
            return nullcontext()

        def over() -> None:
            run.killed = "memory_files"
        return Guard(uid, budget(limits), over, extra=[launch.scratch] if launch.scratch else ())

    @property
    def warm_possible(self) -> bool:
        """Whether runs here can be forked from warm sandboxes (``warm``): bubblewrap run by root,
        with a user id of each run's own."""
        return self.mode == "bwrap" and self.root and self.own_user

    @contextmanager
    def warm_runs(self, limits: Limits):
        """Within it, each thread's runs (of one submission) are forked from a warm sandbox of
        that thread's own, where they can be (``warm_possible``, ``limits.warm``); all of them
        are closed at the end."""
        if not (self.warm_possible and limits.warm) or self._warm_sandboxes is not None:
            yield
            return
        self._warm_sandboxes = {}
        try:
            yield
        finally:
            sandboxes, self._warm_sandboxes = self._warm_sandboxes, None
            for warm in sandboxes.values():
                warm.close()

    def _warm(self, limits: Limits, libs, job_dir: Path) -> Warm | None:
        """This thread's warm sandbox for a run with ``limits`` and ``libs``, started if need be,
        or None (no warm runs now)."""
        sandboxes = self._warm_sandboxes
        if sandboxes is None:
            return None
        fixed = tuple(Path(lib) for lib in libs if Path(lib).parent != Path(job_dir) / "lib")
        key = threading.get_ident()
        warm = sandboxes.get(key)
        if warm is not None and (not warm.usable or warm.fixed_libs != tuple(sorted(fixed))):
            warm.close()
            warm = None
        if warm is None:
            program = seccomp.program(self.isolation.no_sockets)
            warm = sandboxes[key] = Warm(self.isolation, limits, fixed, program)
        return warm

    @staticmethod
    def _harness_options(limits, uid, channel_fd, lib_dirs, only, public, functions) -> list[str]:
        """The options after the harness's job folder (``harness.main``)."""
        cmd = ["--channel-fd", str(channel_fd), "--site", os.pathsep.join(site_dirs())]
        if uid is not None:     # RLIMIT_NPROC counts a user's processes: only with a user of its own
            cmd += ["--nproc", str(limits.processes)]
        if lib_dirs:
            cmd += ["--lib", os.pathsep.join(lib_dirs)]
        if only:
            cmd += ["--only", ",".join(only)]
        if public:
            cmd += ["--public", public]
            if functions:
                cmd += ["--functions", ",".join(functions)]
        return cmd

    @staticmethod
    def _check_started(run: Run) -> None:
        """The sandbox itself failed, before anything of the submission ran: the grader's problem."""
        if "error" in run.supervisor:
            raise RuntimeError(f"the sandbox could not start: {str(run.supervisor['error'])[:300]}")
        if run.returncode == _supervisor.NOT_STARTED and not run.transcript.hello and not run.killed:
            raise RuntimeError(f"the sandbox could not start the harness: {run.output[-300:].strip()}")
