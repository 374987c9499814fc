"""Running a submission in a throw-away sandbox, and watching it from outside.

Whatever the isolation, the grader is never the submission's parent: it starts the supervisor
(``supervisor.py``, here), which forks the harness, which loads the submission.  The
supervisor holds every process the submission starts below itself and kills them all when the
harness ends; the grader writes a result whatever happens to the processes below it.

One module per concern:

| module | what it holds |
|---|---|
| ``supervisor`` | the process inside every sandbox, between the grader and the harness (standard library only) |
| ``limits`` | ``Limits`` (what a run may use), ``Run`` (what came of it), ``SandboxUnavailable`` |
| ``probes`` | what the machine gives: bubblewrap, ``unshare``, a user id nobody has, an interpreter others can run |
| ``commands`` | the command lines: bubblewrap's, ``unshare``'s, the supervisor's; the clean environment |
| ``modes`` | the isolation modes as classes with one interface: ``Bubblewrap``, ``Namespaces``, ``Subreaper`` |
| ``seccomp`` | the seccomp filter, a BPF program built here, installed in every mode |
| ``cgroups`` | one cgroup per run: a memory limit and a process count for all its processes |
| ``sweep`` | the last sweep: processes, files left in shared folders, every sandbox on Ctrl-C |
| ``folders`` | work folders named after the grader, and those a killed grader left behind |
| ``watch`` | the watch loop: time limits, capped output and channel, the supervisor's reports |
| ``describe`` | ``isolation_detail``: in words, what held |
| ``runner`` | ``Sandbox``: picks the mode and the user once, and runs a job |

What each mode gives, and what is refused, is in ``graders/README.md`` ("The sandbox").
"""
from __future__ import annotations

from .commands import HARNESS, SUPERVISOR
from .interpreter import site_dirs
from .describe import describe
from .folders import work_folder
from .limits import PROTECTIONS, SUBMISSION_SECONDS, TEST_SECONDS, Limits, Run, SandboxUnavailable
from .modes import STOP_SECONDS
from .probes import bwrap_status, namespaces_status
from .runner import Sandbox
from .sweep import kill_all
from .watch import GRACE

__all__ = ["Limits", "Run", "Sandbox", "SandboxUnavailable", "HARNESS", "SUPERVISOR", "PROTECTIONS",
           "TEST_SECONDS", "SUBMISSION_SECONDS", "GRACE", "STOP_SECONDS", "bwrap_status",
           "namespaces_status", "kill_all", "describe", "work_folder", "site_dirs"]
