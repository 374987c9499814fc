"""What a run may use, and what came of it: the limits of one graded submission (``Limits``) and
the record of one sandboxed run (``Run``), both plain data.

``Limits`` is set by the grader's flags; a time limit left as None takes the exercise's default,
else the grader's (``resolved``).  ``Run`` holds only what the grader observed from outside (the
transcript of the results channel, the capped output, exit statuses, the supervisor's reports):
nothing a submission writes is turned into a grade here.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .transcript import Transcript

TEST_SECONDS = 2.0            # a test's time limit, when neither the grader nor the exercise says
SUBMISSION_SECONDS = 30.0     # a submission's time budget, likewise

# What can hold in a run, in the order ``describe`` names them.
PROTECTIONS = ("supervisor", "pid_namespace", "subreaper", "own_user", "seccomp", "cgroup", "no_network",
               "file_view", "private_tmp", "answers_closed")


class SandboxUnavailable(RuntimeError):
    """No sandbox that meets the grader's rules can run here: ``isolation="bwrap"`` where
    bubblewrap cannot run, or a fallback that could only run the submission as root or as the
    grading user with the machine's files in view."""


@dataclass
class Limits:
    """Limits of one graded submission (the CLI's flags set them).

    ``test_seconds`` and ``submission_seconds`` left as None take the exercise's own defaults
    (``Exercise.test_seconds``...), else ``TEST_SECONDS`` and ``SUBMISSION_SECONDS``: a flag
    given to the grader always wins.  ``resolved`` gives the limits with numbers in them."""

    memory_bytes: int = 2 << 30          # RLIMIT_AS of every process of the submission
    test_seconds: float | None = None    # per test, unless a test says otherwise
    submission_seconds: float | None = None   # the whole submission, start-up included
    import_seconds: float = 10.0         # interpreter start-up and importing the submission
    output_bytes: int = 64 << 10         # stdout + stderr kept (the rest is drained and dropped)
    channel_bytes: int = 64 << 20        # results channel
    tmpfs_bytes: int = 64 << 20          # size of /tmp and /scratch, and the file size limit
    processes: int = 64                  # RLIMIT_NPROC, when the sandbox has a user id of its own
    open_files: int = 256
    max_restarts: int = 3                # relaunches after a test killed the process
    give_up_after: int = 3               # tests timed out before the rest are skipped (0: never)
    sandboxes: int | None = None         # isolated sandboxes at once (None: ``grading.runs_at_once``)
    warm: bool = True                    # a grading's runs forked from warm sandboxes, where they can be (``warm``)

    def as_dict(self) -> dict:
        return dict(self.__dict__)

    def resolved(self, test_seconds: float | None = None, submission_seconds: float | None = None) -> "Limits":
        """These limits, with an unset time limit taken from the arguments (an exercise's
        defaults), else from the grader's defaults."""
        return Limits(**{**self.as_dict(),
                         "test_seconds": _first(self.test_seconds, test_seconds, TEST_SECONDS),
                         "submission_seconds": _first(self.submission_seconds, submission_seconds,
                                                      SUBMISSION_SECONDS)})


def _first(*values):
    return next(float(v) for v in values if v is not None)


@dataclass
class Run:
    """What happened in one sandboxed run: only data, nothing the submission can turn into a grade."""

    transcript: Transcript = field(default_factory=Transcript)
    output: str = ""                     # stdout and stderr, capped
    output_dropped: int = 0              # bytes beyond the cap
    returncode: int | None = None        # the harness's: its exit code, 128 + a signal, or < 0
    killed: str | None = None            # import_timeout, test_timeout, submission_timeout, channel_overflow,
                                         # memory_files (the guard: files in memory, ``guard``)
    isolation: str = ""
    started: float = 0.0                 # time.perf_counter() when its top process was started
    elapsed: float = 0.0
    cgroup: bool = False                 # its processes shared one memory limit (a cgroup)
    oom_killed: int = 0                  # processes the kernel killed for going over it
    supervisor: dict = field(default_factory=dict)    # the supervisor's start report
    ended: dict = field(default_factory=dict)         # its exit report (empty: it was killed)
    held: dict = field(default_factory=dict)          # protection -> whether it held (PROTECTIONS)
    # what the harness's process said of itself once its privileges were dropped and its seccomp
    # filter installed, before anything of the submission ran: {"uid", "caps", "seccomp"}
    confined: dict = field(default_factory=dict)
    swept_files: int = 0                 # files it left in the machine's shared folders, removed
    warm: bool = False                   # forked in a warm sandbox (``warm``), not a sandbox of its own

    @property
    def running(self) -> str | None:
        """The test in progress when the process ended or was killed."""
        return self.transcript.running

    @property
    def phase(self) -> str:
        return self.transcript.phase

    @property
    def supervisor_lost(self) -> bool:
        """The supervisor died before it could report (the submission killed its parent), and
        not because the grader killed the run."""
        return bool(self.supervisor) and not self.ended and self.killed is None
