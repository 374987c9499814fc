"""Grading one submission, read top to bottom.

``grade_bytes`` tells the whole story of one submission:

1. **read** it once (``notebook.read``: a notebook's JSON decoded and its code parsed once) and
   choose the exercise (given, or from the notebook's metadata or the file name);
2. **extract** the answer's definitions (``Source.extract``), or say why it cannot be read;
3. **write the job**: the hidden tests' inputs only (``Job``: ``spec.json`` with the calls,
   ``inputs.npz`` with their arrays), never an expected value;
4. **run in the sandbox** (``sandbox.Sandbox``): the harness sends back what each call returned.
   A test that hangs or kills the process loses that test only: the process is relaunched for
   the tests after it (up to ``Limits.max_restarts`` times, within the submission's time budget);
5. **parse the untrusted channel once**: each run's ``Transcript`` (built as the lines arrive)
   becomes one ``Outcome`` per test: ``Returned`` data, or a ``Problem`` (a timeout, a crash, a
   test not run);
6. **judge** each outcome in the grader's own process with the test's ``check`` and the grader's
   own expected values: a ``Verdict`` (passed, message, trouble);
7. **write the result** (``results.make_result``), whatever happened: ``grader_error`` when the
   grader itself failed.

``check_file`` runs the public checks the same way (steps 1-5), with the public checks' package
in the sandbox instead of hidden tests.

What the story needs from elsewhere: the outcome types (``outcomes``: ``Returned``, ``Problem``,
``Verdict``, ``Trouble``), the words of the feedback (``feedback``: a process's death, an import
that failed, an exception, a size), and the result's form (``results``: ``make_result``, and
``grader_failed`` for step 7 when the grader itself failed).  The exercise is fixed by whoever
grades: without one, the notebook's metadata or the file name names it, and a submission whose
two say different things is refused (``UsageError``).

Exercises that need more plug in at the seams above without changing the story:

- a function that returns data the grader must run itself (a GA-2 program for the ``ga2``
  simulator) does so in step 6: its test's ``check`` receives the decoded data, validates it and
  runs it, in the grader's process, outside the sandbox;
- a function that receives a module (a program builder to judge) gets one: the test's argument
  is a ``registry.Module`` (a module body the grader compiled), which the harness makes into a
  module object with no source text, and the packages it imports are made importable in the
  sandbox in step 3 (``Exercise.libs``: a copy of ``ga2`` without the modules that would answer
  the question, materialized in the job folder);
- tests marked ``isolated`` run in step 4 in a sandbox each, and tests of a later ``phase`` run
  only when ``Exercise.proceed`` lets them (steps 4-6 repeat per phase);
- ``Exercise.report`` turns the verdicts into the result's entries in step 7 (one entry for many
  tests, partial credit), and ``Exercise.quiet`` keeps every word that comes from the sandbox
  (what the submission printed, its exceptions' messages) out of the result.
"""
from __future__ import annotations

import ast
import hashlib
import io
import json
import shutil
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from . import feedback, registry
from .checks import CallResult, Fail, describe
from .harness import decode, encode
from .notebook import Extracted, Refused, Source, Unreadable, infer_exercise, read, read_file
from .outcomes import Outcome, Problem, Returned, Trouble, Verdict
from .registry import Exercise, Lib, Module, Ref, Step, Test
from .results import grader_failed, make_result, test_entry
from .sandbox import Limits, Run, Sandbox, SandboxUnavailable, describe as describe_isolation, work_folder

__all__ = ["UsageError", "grade_bytes", "grade_file", "check_file", "job_files", "Job", "Trouble",
           "Returned", "Problem", "Verdict", "judge"]

GRADER_VERSION = "2"

# The feedback's words live in ``feedback``; the running steps (4-5) call these two by these names.
_death, _import_problem = feedback.death, feedback.import_problem


class UsageError(ValueError):
    """The grader was asked something it cannot do (unknown exercise, no such file...)."""


# ---------------------------------------------------------------------------------- outcomes


@dataclass
class Session:
    """Everything the sandbox runs of one submission gave: an outcome per test that ran."""

    outcomes: dict[str, Outcome] = field(default_factory=dict)
    runs: list[Run] = field(default_factory=list)
    import_problem: Problem | None = None        # the submission could not even be loaded
    stopped: Problem | None = None               # why the tests not run yet never will be


# ----------------------------------------------------------------------------------- the job


@dataclass(frozen=True)
class Job:
    """What the sandbox gets: the extracted source, the spec (limits and calls), the inputs'
    arrays, and the course packages to make importable (read-only) next to it: ``libs`` as they
    are (folders), ``copies`` as copies made in the job folder (``registry.Lib``: a package
    without the modules it hides)."""

    source: str
    spec: bytes
    inputs: bytes = b""
    libs: tuple[Path, ...] = ()
    copies: tuple[Lib, ...] = ()

    def write(self, folder: Path) -> tuple[Path, ...]:
        """Write the job into ``folder``; returns every package folder to make importable."""
        (folder / "submission.py").write_text(self.source, encoding="utf-8")
        (folder / "spec.json").write_bytes(self.spec)
        if self.inputs:
            (folder / "inputs.npz").write_bytes(self.inputs)
        copied = tuple(copy_package(lib, folder / "lib") for lib in self.copies)
        folder.chmod(0o755)                 # the sandbox's own user reads it
        for path in folder.rglob("*"):
            path.chmod(0o755 if path.is_dir() else 0o644)
        return tuple(self.libs) + copied


def copy_package(lib: Lib, into: Path) -> Path:
    """A copy of the course package ``lib.name`` in ``into``, without the modules ``lib.hide``
    names (``.py`` files only: no compiled files, no data).  When something is hidden, the copy's
    ``__init__`` imports just the modules the package's own ``__init__`` imports and the copy
    still has (``from . import a, b``); the copy is named like the package, so it imports as it."""
    source = registry.package_dir(lib.name)
    target = into / lib.name
    hidden = set(lib.hide)
    for path in sorted(source.rglob("*.py")):
        rel = path.relative_to(source)
        if "__pycache__" in rel.parts or rel.parts[0].removesuffix(".py") in hidden:
            continue
        (target / rel).parent.mkdir(parents=True, exist_ok=True)
        (target / rel).write_bytes(path.read_bytes())
    if hidden:
        (target / "__init__.py").write_text(_reduced_init(source / "__init__.py", lib), encoding="utf-8")
    return target


def _reduced_init(init: Path, lib: Lib) -> str:
    """The ``__init__`` of a copy of a package without ``lib.hide``."""
    kept = []
    for node in ast.walk(ast.parse(init.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level == 1 and not node.module:
            kept += [a.name for a in node.names if a.name not in lib.hide and a.name not in kept]
    lines = [f'"""{lib.name} as the grader\'s sandbox has it: without {", ".join(sorted(lib.hide))}."""']
    if kept:
        lines.append(f"from . import {', '.join(kept)}  # noqa: F401")
    return "\n".join(lines) + "\n"


def _spec(limits: Limits, cases: list[dict]) -> dict:
    """The harness's spec: its limits (one CPU budget: the whole submission and its import, and
    2 s to spare) and the cases."""
    return {"limits": {"memory_bytes": limits.memory_bytes,
                       "cpu_seconds": int(limits.submission_seconds + limits.import_seconds) + 2,
                       "file_bytes": limits.tmpfs_bytes, "open_files": limits.open_files},
            "import_timeout": limits.import_seconds,
            "submission_timeout": limits.submission_seconds,
            "give_up_after_timeouts": limits.give_up_after,
            "cases": cases}


_job_cache: dict[tuple, tuple[bytes, bytes]] = {}


def job_files(exercise: str, limits: Limits) -> tuple[bytes, bytes]:
    """(spec.json, inputs.npz) of an exercise's hidden tests: inputs only, never expected values."""
    key = (exercise, tuple(sorted(limits.as_dict().items())))
    if key in _job_cache:
        return _job_cache[key]
    arrays: dict[str, np.ndarray] = {}
    ids: dict[int, str] = {}

    def store(arr):
        k = ids.get(id(arr))
        if k is None:
            k = ids[id(arr)] = f"a{len(arrays)}"
            arrays[k] = arr
        return {"$nd": k}

    def encode_arg(arg):
        if isinstance(arg, Ref):
            return {"$ref": [arg.call, *arg.path]}
        if isinstance(arg, Module):
            return {"$module": {"name": arg.name, "package": arg.package,
                                "code": store(np.frombuffer(arg.code, dtype=np.uint8))}}
        if isinstance(arg, Step):                   # resolved against the steps of its call
            return {"$ref": [arg.index, *arg.path]}
        return encode(arg, store)

    def encode_call(c):
        call = {"fn": c.fn, "args": [encode_arg(a) for a in c.args], "capture_args": c.capture_args}
        if c.methods:
            call["methods"] = [{"name": name, "args": None if args is None else [encode_arg(a) for a in args]}
                               for name, args in c.methods]
        return call

    cases = [{"id": test.id, "timeout": _timeout(test, limits), "calls": [encode_call(c) for c in test.calls]}
             for test in registry.tests(exercise)]
    buf = io.BytesIO()
    if arrays:
        np.savez(buf, **arrays)
    files = (json.dumps(_spec(limits, cases)).encode(), buf.getvalue())
    _job_cache[key] = files
    return files


def _timeout(test: Test, limits: Limits) -> float:
    """A test's time limit: its own when it sets one, else the default of the limits."""
    return float(test.timeout if test.timeout is not None else limits.test_seconds)


# ----------------------------------------------------------------------------- the story


def grade_file(path, exercise: str | None = None, *, limits: Limits | None = None,
               isolation: str = "auto") -> dict:
    """Grade the submission file ``path`` (a regular file, never followed through a link)."""
    path = Path(path)
    if path.is_dir() and not path.is_symlink():
        raise UsageError(f"{path} is a folder; use 'batch' to grade a folder of submissions")
    return grade_bytes(read_submission(path), path.name, exercise, limits=limits, isolation=isolation,
                       label=str(path))


def read_submission(path) -> bytes:
    """The bytes of a submission file, at most one byte past what the grader reads (so that a huge
    file is refused with a message, not loaded), opened without following a symbolic link
    (``notebook.open_file``); a link, a folder, a FIFO or a device is a usage error that says so."""
    try:
        return read_file(path)
    except Refused as err:
        raise UsageError(str(err).replace(Path(path).name, str(path), 1)) from None


def grade_bytes(data: bytes, filename: str, exercise: str | None = None, *,
                limits: Limits | None = None, isolation: str = "auto", label: str | None = None) -> dict:
    """Grade the submission ``data`` (named ``filename``) and return its result dict."""
    limits = limits or Limits()
    clock = time.perf_counter()
    common = dict(submission=label or filename, sha256=hashlib.sha256(data).hexdigest())
    source = _read(data, filename)                      # 1. read (once)
    name, note = _resolve(source, filename, exercise)   #    and choose (a UsageError goes to the caller)
    common["exercise"] = name
    try:
        common["fingerprint"] = registry.fingerprint(name)
        ex = registry.get(name)
        limits = limits.resolved(ex.test_seconds, ex.submission_seconds)   # the exercise's defaults
        result = _grade(source, name, note, limits, isolation, clock, common)
        if note:
            result["exercise_inferred"] = note
        return result
    except SandboxUnavailable:          # no sandbox fit to grade in: the caller says so, exit non-zero
        raise
    except Exception as err:  # noqa: BLE001 - a result is always produced
        detail = "".join(traceback.format_exception_only(type(err), err)).strip()
        return grader_failed(name, detail, execution_time=time.perf_counter() - clock,
                             traceback=traceback.format_exc(), **common_of(common))


def common_of(common: dict) -> dict:
    """The submission's label and hash, as ``results.zero_result`` takes them."""
    return {"submission": common.get("submission", ""), "sha256": common.get("sha256", "")}


def _grade(source: Source | Unreadable, name: str, note: str | None, limits: Limits, isolation: str,
           clock: float, common: dict) -> dict:
    exercise, tests = registry.get(name), registry.tests(name)
    try:                                                 # 2. extract
        if isinstance(source, Unreadable):
            raise source
        extracted = source.extract(exercise.functions)
    except Unreadable as err:
        entries = [test_entry(i.name, i.points, False, f"not run: {err}", i.visibility)
                   for i in registry.items(name)]
        return make_result(tests=entries, status="unreadable", isolation="none",
                           execution_time=time.perf_counter() - clock,
                           output=f"The submission could not be read: {err}. Every test scores 0.", **common)
    notes = ([note] if note else []) + list(extracted.notes)
    missing = set(extracted.missing(exercise.functions))
    notes += [f"no function named '{fn}' was found: {extracted.suggestion(fn)}" for fn in sorted(missing)]
    runnable = [t for t in tests if not ({c.fn for c in t.calls} & missing)]

    sandbox, session, verdicts = None, Session(), {}
    if runnable:                                         # 3. write the job, 4-6. run, parse, judge
        sandbox = Sandbox(isolation)
        spec, inputs = job_files(name, limits)
        job = Job(extracted.source, spec, inputs, copies=exercise.libs)
        session = _run_phases(sandbox, job, exercise, runnable, limits, clock, extracted, verdicts)
    for test in tests:
        if test not in runnable:
            fns = sorted({c.fn for c in test.calls} & missing)
            verdicts[test.id] = Verdict(False, f"not run: no function named {', '.join(repr(f) for f in fns)}")
    if exercise.report is not None:                      # 7. the entries
        entries = exercise.report(tests, verdicts)
    else:
        entries = [test_entry(t.name, t.points, verdicts[t.id].passed, verdicts[t.id].message, t.visibility)
                   for t in tests]
    return _result(entries, verdicts, runnable, session, sandbox, notes, extracted, limits, clock, common,
                   exercise)


def _run_phases(sandbox: Sandbox, job: Job, exercise: Exercise, runnable: list[Test], limits: Limits,
                clock: float, extracted: Extracted, verdicts: dict) -> Session:
    """Steps 4-6, phase by phase: run a phase's tests in the sandbox, judge what came back; a
    phase after the first runs only when ``exercise.proceed`` says so, given the verdicts so far."""
    session = Session()
    phases = sorted({t.phase for t in runnable})
    folder = Path(work_folder("grader-job-"))
    try:
        libs = job.write(folder)
        for phase in phases:
            group = [t for t in runnable if t.phase == phase]
            why = session.stopped or session.import_problem
            skip = None
            if why is None and phase != phases[0] and exercise.proceed is not None:
                skip = exercise.proceed(phase, dict(verdicts))
            if why is None and skip is None:
                _run_tests(sandbox, folder, libs, group, limits, clock, extracted, session, exercise.quiet)
            for test in group:
                if skip is not None:
                    verdicts[test.id] = Verdict(False, f"not run: {skip}")
                    continue
                outcome = session.outcomes.get(test.id) or session.stopped or session.import_problem
                verdicts[test.id] = judge(test, outcome, extracted, _timeout(test, limits), limits.memory_bytes,
                                          quiet=exercise.quiet)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return session


def _result(entries, verdicts, runnable, session: Session, sandbox, notes, extracted, limits, clock,
            common, exercise: Exercise) -> dict:
    """7. The result: the summary, the notes, the isolation that held, what the submission printed
    (nothing of it for a ``quiet`` exercise)."""
    quiet = exercise.quiet
    troubles = {v.trouble for v in verdicts.values()}
    if not runnable:
        status = "missing"
    elif session.import_problem is not None:
        status = session.import_problem.trouble.value
        notes.insert(0, session.import_problem.text)
    else:
        status = next((t.value for t in (Trouble.TIMEOUT, Trouble.CRASHED) if t in troubles), "ok")
    runs = session.runs
    passed = sum(e["status"] == "passed" for e in entries)
    score, total = sum(e["score"] for e in entries), sum(e["max_score"] for e in entries)
    lines = [f"{passed} of {len(entries)} hidden tests passed: {score:g} / {total:g} points."]
    failures: dict[str, str] = {}
    for run in runs:
        failures.update(run.transcript.known_import_failures(extracted.imports))
    available = "numpy, Python's standard library" + "".join(
        f" and {lib.name}" + (f" (without {', '.join(lib.hide)})" if lib.hide else "") for lib in exercise.libs)
    notes += [f"'{stmt}' failed in the grader ({feedback.error_kind(why) if quiet else why}); only {available} "
              "are available" for stmt, why in list(failures.items())[:5]]
    lines += [f"Note: {n}" for n in notes]
    over = sum(r.transcript.dropped for r in runs)
    if over:
        lines.append(f"Note: {over} message{'s' if over != 1 else ''} on the grader's results channel went over "
                     "its budget and were dropped (what the harness sends is far under it: did the "
                     "submission write on the channel?)")
    oom = sum(r.oom_killed for r in runs)
    if oom:
        lines.append(f"Note: the kernel stopped {oom} of its processes for going over the memory "
                     f"limit ({feedback.size(limits.memory_bytes)} for all its processes together)")
    detail, held = "", {}
    if sandbox:
        held = {key: all(r.held.get(key) for r in runs) for key in runs[0].held} if runs else sandbox.planned()
        detail = describe_isolation(sandbox.mode, sandbox.why, held)
        lines.append(f"Isolation: {detail}.")
    printed = "".join(r.output for r in runs)
    dropped = sum(r.output_dropped for r in runs)
    if dropped:
        printed += f"\n[... {dropped} more bytes of output dropped]"
    if quiet and printed:
        printed = "(not kept: for this exercise, nothing the submission prints is part of the result)"
    return make_result(tests=entries, status=status, isolation=sandbox.mode if sandbox else "none",
                       execution_time=time.perf_counter() - clock, output="\n".join(lines),
                       submission_output=printed,
                       extra={"isolation_detail": detail, "isolation_held": held,
                              "grader_version": GRADER_VERSION,
                              "runs": [{"killed": r.killed, "returncode": r.returncode,
                                        "seconds": round(r.elapsed, 3), "cgroup": r.cgroup,
                                        "oom_killed": r.oom_killed, "supervisor_lost": r.supervisor_lost,
                                        "dropped_messages": r.transcript.dropped,
                                        "left_over": (r.ended.get("reaped") if type(r.ended.get("reaped")) is int
                                                      else None)} for r in runs]},
                       **common)


# ------------------------------------------------------------------------ 1. read and choose


def _read(data: bytes, filename: str) -> Source | Unreadable:
    """The submission read once, or why it cannot be (said in step 2, once the exercise is known)."""
    try:
        return read(data, filename)
    except Unreadable as err:
        return err


def resolve_exercise(data: bytes, filename: str, exercise: str | None) -> str:
    """The exercise to grade against: given, or from the notebook's metadata or the file name."""
    return _resolve(_read(data, filename), filename, exercise)[0]


def _resolve(source: Source | Unreadable, filename: str, exercise: str | None) -> tuple[str, str | None]:
    """(exercise, a note that says how it was chosen, or None when it was given).  Whoever grades
    fixes the exercise (``batch`` always does); without one, the notebook's metadata or the file
    name says, and when both name an exercise and they differ, the submission is refused: it
    never chooses what it is graded as."""
    known = registry.names()
    if exercise is not None:
        if exercise not in known:
            raise UsageError(f"no exercise named {exercise!r}; the grader knows: {', '.join(known)}")
        return exercise, None
    hint = source.exercise if isinstance(source, Source) else None
    by_meta = hint if hint in known else None
    by_name = infer_exercise(filename, None, known)
    if by_meta and by_name and by_meta != by_name:
        raise UsageError(f"{filename}: its notebook's metadata says it is the exercise '{by_meta}' but its "
                         f"file name says '{by_name}'; the grader does not let a submission choose its "
                         "exercise: pass --exercise NAME")
    name = by_meta or by_name
    if name is None:
        raise UsageError(f"cannot tell which exercise {filename} is for (no kvcourse metadata, and its "
                         f"name contains none of: {', '.join(known)}); pass --exercise NAME")
    how = "its notebook's metadata" if by_meta else "its file name"
    return name, f"graded as '{name}', the exercise {how} names (no exercise was given)"


# ------------------------------------------------------------------ 4-5. run, parse, outcomes


def _run_tests(sandbox: Sandbox, folder: Path, libs: tuple, runnable: list[Test], limits: Limits,
               clock: float, extracted: Extracted, session: Session, quiet: bool = False) -> None:
    """Run the runnable tests on the job in ``folder``, and turn each run's transcript into outcomes
    (in ``session``).  The tests that are not ``isolated`` share one sandbox, relaunched after a
    test that hung or killed the process; each isolated test gets a sandbox of its own.  When the
    submission cannot go on (its time budget is used up, it timed out too often, it flooded the
    channel, it cannot be loaded), ``session.stopped`` says why and no more tests run."""
    test_seconds = {t.id: _timeout(t, limits) for t in runnable}
    shared = [t.id for t in runnable if not t.isolated]
    batches = ([shared] if shared else []) + [[t.id] for t in runnable if t.isolated]
    for batch in batches:
        if session.stopped or session.import_problem:
            break
        _run_batch(sandbox, folder, libs, batch, test_seconds, limits, clock, extracted, session, quiet)
        timed_out = sum(o.timed_out for o in session.outcomes.values())
        if not session.stopped and limits.give_up_after and timed_out >= limits.give_up_after:
            session.stopped = Problem(f"not run: the submission timed out on {timed_out} tests, so the "
                                      "others were skipped", Trouble.TIMEOUT)
    stop = session.stopped or session.import_problem
    for tid in test_seconds:
        if stop is not None:
            session.outcomes.setdefault(tid, stop)


def _run_batch(sandbox: Sandbox, folder: Path, libs: tuple, batch: list[str], test_seconds: dict,
               limits: Limits, clock: float, extracted: Extracted, session: Session, quiet: bool = False) -> None:
    """The tests ``batch`` in one sandbox, relaunched (up to ``limits.max_restarts`` times) after a
    test that hung or killed the process, for the tests after it."""
    outcomes = session.outcomes
    remaining = list(batch)
    runs = 0

    def give_up(why: str, trouble: Trouble) -> None:
        session.stopped = Problem(f"not run: {why}", trouble)
        for tid in remaining:
            outcomes.setdefault(tid, session.stopped)

    while remaining:
        left = limits.submission_seconds - (time.perf_counter() - clock)
        if left <= 0.5:
            give_up(f"the submission used up its time budget ({limits.submission_seconds:g} s)", Trouble.TIMEOUT)
            break
        run = sandbox.run(folder, Limits(**{**limits.as_dict(), "submission_seconds": left}),
                          {tid: test_seconds[tid] for tid in batch}, only=remaining, libs=libs)
        session.runs.append(run)
        runs += 1
        transcript = run.transcript
        outcomes.update({tid: Returned(transcript.results[tid]) for tid in remaining
                         if tid in transcript.results})
        if not transcript.import_ok:
            session.import_problem = _import_problem(transcript.imported, run, extracted, limits, quiet)
            for tid in remaining:
                outcomes.setdefault(tid, session.import_problem)
            break
        if run.running and run.running not in outcomes:
            outcomes[run.running] = _death(run, test_seconds.get(run.running, 0), limits)
        remaining = [tid for tid in remaining if tid not in outcomes]
        if not remaining or transcript.phase == "done":
            gave_up = transcript.gave_up(len(batch))
            for tid in remaining:
                outcomes[tid] = (Problem(f"not run: the submission timed out on {gave_up} tests, so the "
                                         "others were skipped", Trouble.TIMEOUT) if gave_up else
                                 Problem("no result came back for this test", Trouble.CRASHED))
            if gave_up:
                session.stopped = Problem(f"not run: the submission timed out on {gave_up} tests, so the "
                                          "others were skipped", Trouble.TIMEOUT)
            break
        timed_out = sum(o.timed_out for o in outcomes.values())
        if limits.give_up_after and timed_out >= limits.give_up_after:
            give_up(f"the submission timed out on {timed_out} tests, so the others were skipped", Trouble.TIMEOUT)
            break
        if run.killed in _FATAL or runs > limits.max_restarts:
            give_up(*_fatal(run.killed, limits, runs))
            break
    # An isolated test whose run used up the budget or flooded the channel ends the submission too.
    if runs and not session.stopped and session.runs[-1].killed in _FATAL:
        session.stopped = Problem("not run: " + _fatal(session.runs[-1].killed, limits, runs)[0],
                                  _fatal(session.runs[-1].killed, limits, runs)[1])


_FATAL = ("submission_timeout", "channel_overflow")


def _fatal(killed: str | None, limits: Limits, runs: int) -> tuple[str, Trouble]:
    """Why a submission cannot go on after a run that was killed for ``killed`` (or that ended
    ``runs`` times), and the trouble it is."""
    if killed == "submission_timeout":
        return f"the submission used up its time budget ({limits.submission_seconds:g} s)", Trouble.TIMEOUT
    if killed == "channel_overflow":
        return "the submission flooded the grader's results channel", Trouble.CRASHED
    return f"the submission's process ended {runs} times", Trouble.CRASHED


# ----------------------------------------------------------------------------------- 6. judge


def judge(test: Test, outcome: Outcome | None, extracted: Extracted, seconds: float,
          memory_bytes: int = 2 << 30, quiet: bool = False) -> Verdict:
    """One test's verdict from what came back: the harness's data checked by the test's check
    (in this process, against the grader's own expected values), or the problem it had.  With
    ``quiet`` no word of the message comes from the sandbox (an exception's text, a type's name)."""
    if outcome is None:
        return Verdict(False, "no result came back for this test", Trouble.CRASHED)
    if isinstance(outcome, Problem):
        return Verdict(False, outcome.text, outcome.trouble)
    message = outcome.message
    calls = message.get("calls")
    if not isinstance(calls, list):
        return Verdict(False, "the result of this test could not be read", Trouble.CRASHED)
    n = len(test.calls)

    def prefix(k):
        return f"{test.step} {k + 1} of {n}: " if n > 1 else ""

    results = []
    for k, entry in enumerate(calls[:n]):
        if not isinstance(entry, dict):
            return Verdict(False, prefix(k) + "the result could not be read")
        fn = test.calls[k].fn
        if not entry.get("ok"):
            return Verdict(False, prefix(k) + f"{fn} {feedback.raised(entry.get('error'), extracted, memory_bytes, quiet)}",
                           raised=True)
        try:
            value = decode(entry.get("value"))
            after = decode(entry["args_after"]) if "args_after" in entry else None
            originals = decode(entry["originals_after"]) if "originals_after" in entry else None
        except Exception:  # noqa: BLE001 - malformed data is a wrong answer, not a grader crash
            return Verdict(False, prefix(k) + f"what {fn} returned could not be read as data")
        results.append(CallResult(value, list(after) if isinstance(after, (list, tuple)) else None,
                                  list(originals) if isinstance(originals, (list, tuple)) else None,
                                  _seconds(entry.get("seconds"))))
    if message.get("timeout"):
        return Verdict(False, prefix(len(results)) + f"took longer than {seconds:g} s (the time limit of this "
                                                     "test); is there an infinite loop?", Trouble.TIMEOUT)
    if message.get("error"):
        return Verdict(False, prefix(len(results)) + feedback.error_text(message.get("error"), extracted, memory_bytes,
                                                                 quiet))
    if len(results) < n:
        return Verdict(False, prefix(len(results)) + "no result came back", Trouble.CRASHED)
    try:
        value = test.check(results)
    except Fail as fail:
        return Verdict(False, str(fail))
    except Exception as err:  # noqa: BLE001 - an unexpected form of answer
        value = results[-1].value if results else None
        form = "" if quiet else f" ({describe(value)})"
        return Verdict(False, f"the answer has an unexpected form{form} and could not be checked "
                              f"[{type(err).__name__}]")
    return Verdict(True, value=value)


def _seconds(value) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0


# ------------------------------------------------------------------------------------- check


def check_file(path, exercise: str | None = None, *, limits: Limits | None = None,
               isolation: str = "auto") -> dict:
    """Run the public checks of the exercise on a submission, in the sandbox.  Returns
    ``{"exercise", "outcomes": [{"description", "status", "message"}], "problem", "isolation"}``."""
    import public_checks
    limits = limits or Limits()
    path = Path(path)
    data = read_submission(path)
    source = _read(data, path.name)
    name = _resolve(source, path.name, exercise)[0]
    checks_dir = Path(public_checks.__file__).resolve().parent
    if not (checks_dir / f"{name}.py").exists():
        return {"exercise": name, "outcomes": [], "isolation": "none",
                "problem": f"there are no public checks for {name} yet (public_checks/{name}.py)"}
    functions = registry.get(name).functions
    try:
        if isinstance(source, Unreadable):
            raise source
        extracted = source.extract(functions)
    except Unreadable as err:
        return {"exercise": name, "outcomes": [], "isolation": "none", "problem": str(err)}
    missing = extracted.missing(functions)
    if missing:                   # what stopped the function being read comes first, as grade says it
        why = [n for n in extracted.notes if n.startswith("syntax error")]
        return {"exercise": name, "outcomes": [], "isolation": "none",
                "problem": "; ".join(why + [f"no function named '{missing[0]}' was found: "
                                            f"{extracted.suggestion(missing[0])}"])}
    sandbox = Sandbox(isolation)
    exercise = registry.get(name)
    limits = limits.resolved(exercise.test_seconds, exercise.submission_seconds)
    # The public checks are public: the packages they need are there whole, as in the learner's copy.
    packages = tuple(registry.package_dir(lib.name) for lib in exercise.libs)
    job = Job(extracted.source, json.dumps(_spec(limits, [])).encode(), libs=(checks_dir,) + packages)
    folder = Path(work_folder("grader-check-"))
    try:
        libs = job.write(folder)
        run = sandbox.run(folder, limits, {}, public=name, functions=functions, libs=libs)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    out = {"exercise": name, "outcomes": [], "isolation": sandbox.mode, "problem": None,
           "printed": run.output}
    transcript = run.transcript
    public = transcript.public()
    if not transcript.import_ok:
        out["problem"] = feedback.import_problem(transcript.imported, run, extracted, limits).text
    elif public is None or public.get("timeout"):
        out["problem"] = (f"the public checks did not finish within {limits.submission_seconds:g} s"
                          if (public or {}).get("timeout") or run.killed
                          else f"the submission's process ended during the checks ({feedback.exit_text(run.returncode)})")
    elif public.get("error"):
        out["problem"] = "the public checks could not run: " + feedback.error_text(public["error"], extracted,
                                                                          limits.memory_bytes)
    else:
        for o in public.get("outcomes") or []:
            if isinstance(o, dict) and o.get("status") in ("passed", "failed", "not implemented"):
                out["outcomes"].append({"description": str(o.get("description", ""))[:300],
                                        "status": o["status"], "message": str(o.get("message", ""))[:600]})
    return out
