"""What the grader says about what came back: the words of the feedback, in one place.

The grading story (``grading``) decides what happened to a test (it returned, it raised, its
process died, it timed out) and asks this module how to say it to the learner:

- ``death(run, seconds, limits)``: the test that was running when the process ended or was
  killed (a time limit, the memory limit, the channel flooded, a signal, an exit status);
- ``import_problem(message, run, extracted, limits)``: the submission could not even be loaded;
- ``error_text(error, extracted, ...)`` / ``raised(...)``: an exception in the submission, as
  the harness described it (untrusted data: its type and message capped, where it was raised in
  the learner's cells and lines), with the common cases said plainly (not implemented yet, out of
  memory, sys.exit);
- ``error_kind(text)``: only the type of an exception, and only one of Python's own, for an
  exercise whose feedback keeps every word of the submission out (``quiet``);
- ``exit_text(code)`` and ``size(n)``: an exit status or a signal, a number of bytes.

Nothing here decides a score; every function returns words (or a ``Problem`` with its words and
its trouble).
"""
from __future__ import annotations

import signal

from .notebook import Extracted
from .outcomes import Problem, Trouble
from .sandbox import Limits, Run

__all__ = ["death", "import_problem", "memory_files_text", "exit_text", "error_text", "error_kind", "raised", "size"]


def death(run: Run, seconds: float, limits: Limits) -> Problem:
    """What to say about the test that was running when the process ended or was killed."""
    if run.killed == "test_timeout":
        return Problem(f"took longer than {seconds:g} s (the time limit of this test); is there an infinite "
                       "loop?", Trouble.TIMEOUT)
    if run.killed == "submission_timeout":
        return Problem(f"the submission used up its time budget ({limits.submission_seconds:g} s) during this "
                       "test", Trouble.TIMEOUT)
    if run.killed == "channel_overflow":
        return Problem("the submission flooded the grader's results channel during this test", Trouble.CRASHED)
    if run.killed == "memory_files":
        return Problem(memory_files_text(limits) + " during this test", Trouble.CRASHED)
    if run.oom_killed:
        return Problem(f"ran out of memory during this test: its processes went over the limit of "
                       f"{size(limits.memory_bytes)} together, and the kernel stopped them", Trouble.CRASHED)
    if run.supervisor_lost:
        return Problem("the submission's process ended during this test: the process that runs it (its "
                       "parent) was killed, so it was stopped too", Trouble.CRASHED)
    return Problem(f"the submission's process ended during this test ({exit_text(run.returncode)})",
                   Trouble.CRASHED)


def memory_files_text(limits: Limits) -> str:
    """Why a run was stopped by the grader's guard of memory-backed files (``sandbox.guard``)."""
    from .sandbox.guard import budget
    return (f"the submission kept more than {size(budget(limits))} in files in the machine's memory-backed "
            "folders (/tmp, /dev/shm), which hold them in memory, so the grader stopped it")


def import_problem(message: dict | None, run: Run, extracted: Extracted, limits: Limits,
                   quiet: bool = False) -> Problem:
    """Why the submission could not be loaded: the harness's import message (None when the
    process ended or was killed before it sent one)."""
    if message is None:
        if run.killed == "import_timeout":
            return Problem(f"loading the submission took longer than {limits.import_seconds:g} s "
                           "(an infinite loop at import?)", Trouble.TIMEOUT)
        if run.killed == "submission_timeout":
            return Problem(f"the submission used up its time budget ({limits.submission_seconds:g} s)",
                           Trouble.TIMEOUT)
        if run.killed == "memory_files":
            return Problem(memory_files_text(limits) + " while loading", Trouble.CRASHED)
        return Problem(f"the submission's process ended while loading ({exit_text(run.returncode)})",
                       Trouble.CRASHED)
    if message.get("timeout"):
        return Problem(f"loading the submission took longer than {limits.import_seconds:g} s "
                       "(an infinite loop at import?)", Trouble.TIMEOUT)
    return Problem(f"loading the submission failed: "
                   f"{error_text(message.get('error'), extracted, limits.memory_bytes, quiet)}", Trouble.CRASHED)


def exit_text(code) -> str:
    """An exit status in words: a signal by its name and what usually sends it."""
    if code is None:
        return "no exit status"
    if 128 < code < 128 + 65:           # the supervisor reports a signal's death as 128 + signal
        code = 128 - code
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        extra = {"SIGKILL": "; killed: out of memory, or the submission killed itself",
                 "SIGXCPU": "; the CPU time limit", "SIGSEGV": "; a crash in native code",
                 "SIGXFSZ": "; the file size limit"}.get(name, "")
        return f"killed by {name}{extra}"
    return f"exit status {code}: it called os._exit() or exited before returning" if code == 0 \
        else f"exit status {code}"


_BUILTIN_ERRORS = frozenset(name for name, value in vars(__import__("builtins")).items()
                            if isinstance(value, type) and issubclass(value, BaseException))


def error_kind(text) -> str:
    """Only the exception's type of a "Type: message" text (for a ``quiet`` exercise), and only
    when it is one of Python's own (a class of the submission's could be named anything)."""
    kind = str(text).split(":", 1)[0].strip()
    return kind if kind in _BUILTIN_ERRORS else "an exception of its own"


def error_text(error, extracted: Extracted, memory_bytes: int = 2 << 30, quiet: bool = False) -> str:
    """What an exception in the submission (as the harness described it: untrusted) means.  With
    ``quiet``, only its type and where it was raised: none of its text."""
    if not isinstance(error, dict):
        return "an error"
    kind = str(error.get("type", "Exception"))[:80]
    text = "" if quiet else str(error.get("message", ""))[:300]
    if quiet and kind == "InputError":
        return "the grader could not pass this test's input on"
    if quiet:
        kind = error_kind(kind)
    where = extracted.locate(error.get("line")) if isinstance(error.get("line"), int) else None
    func = "" if quiet else str(error.get("function") or "")[:100]
    loc = ""
    if where:
        loc = f" ({where}" + (f", in {func}" if func and func != "<module>" else "") + ")"
    if kind == "SystemExit":
        return (f"called sys.exit({text}){loc}: a graded function must return its answer, and "
                "exiting does not count as passing")
    if kind == "NotImplementedError":
        return (f"is not implemented yet: it raises NotImplementedError{f' at {where}' if where else ''}; "
                "write your answer in the starter cell")
    if kind == "MemoryError":
        return f"ran out of memory{loc} (the limit is {size(memory_bytes)} per submission)"
    if kind == "InputError":
        return text
    return f"{kind}: {text}{loc}" if text else f"{kind}{loc}"


def raised(error, extracted: Extracted, memory_bytes: int, quiet: bool = False) -> str:
    """What a call of the learner's function that raised ``error`` did, after its name."""
    text = error_text(error, extracted, memory_bytes, quiet)
    if text.startswith(("called sys.exit", "ran out of memory", "is not implemented yet")):
        return text
    if isinstance(error, dict) and error.get("type") == "NameError" and "is not a function" in str(error.get("message")):
        return "is not a function in the submission"
    return f"raised {text}"


def size(n: int) -> str:
    """A number of bytes as the limits are said ("2 GiB")."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n} bytes"
