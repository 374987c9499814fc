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
import functools
import hashlib
import json
import os
import secrets
import shutil
import time
import traceback
from dataclasses import dataclass, field
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from contextlib import nullcontext
from pathlib import Path
from typing import Callable

from . import feedback, registry
from .checks import CallResult, Fail, Raised, describe
from .harness import decode
from .job import Case, Job, _spec, _timeout, job_files, run_files, test_cases
from .machine_parts import other_parts
from .notebook import Extracted, Refused, Source, Unreadable, infer_exercise, read, read_file
from .outcomes import Outcome, Problem, Returned, Trouble, Verdict
from .registry import Exercise, Lib, Test
from .results import grader_failed, make_result, one_line, test_entry
from .sandbox import Limits, Run, Sandbox, SandboxUnavailable, describe as describe_isolation, work_folder

__all__ = ["UsageError", "grade_bytes", "grade_file", "check_file", "job_files", "Job", "Trouble",
           "Returned", "Problem", "Verdict", "judge"]

GRADER_VERSION = "2"

class UsageError(ValueError):
    """The grader was asked something it cannot do (unknown exercise, no such file...)."""


# ---------------------------------------------------------------------------------- outcomes


Progress = Callable[[int, int], None]        # progress(tests done, tests to run)
Partial = Callable[[dict], None]             # partial({test id: Verdict} of the tests judged so far)

# A test whose answer went over what the grader reads of one test: a wrong answer (no correct one
# comes near the budget), not a crash of the submission.
TOO_LARGE = Problem("what it returned was larger than the grader reads for one test (no correct answer "
                    "is anywhere near that size)", None)


@dataclass
class Session:
    """Everything the sandbox runs of one submission gave: an outcome per test that ran."""

    outcomes: dict[str, Outcome] = field(default_factory=dict)
    runs: list[Run] = field(default_factory=list)
    import_problem: Problem | None = None        # the submission could not even be loaded
    stopped: Problem | None = None               # why the tests not run yet never will be


# ----------------------------------------------------------------------------- the story


def grade_file(path, exercise: str | None = None, *, limits: Limits | None = None,
               isolation: str = "auto", progress: Progress | None = None, partial: Partial | None = None) -> dict:
    """Grade the submission file ``path`` (a regular file, never followed through a link)."""
    path = Path(path)
    if path.is_dir() and not path.is_symlink():
        raise UsageError(f"{path} is a folder; use 'batch' to grade a folder of submissions")
    return grade_bytes(read_submission(path), path.name, exercise, limits=limits, isolation=isolation,
                       label=str(path), progress=progress, partial=partial)


def read_submission(path) -> bytes:
    """The bytes of a submission file, at most one byte past what the grader reads (so that a huge
    file is refused with a message, not loaded), opened without following a symbolic link
    (``notebook.open_file``); a link, a folder, a FIFO or a device is a usage error that says so."""
    try:
        return read_file(path)
    except Refused as err:
        raise UsageError(str(err).replace(Path(path).name, str(path), 1)) from None


def grade_bytes(data: bytes, filename: str, exercise: str | None = None, *,
                limits: Limits | None = None, isolation: str = "auto", label: str | None = None,
                progress: Progress | None = None, partial: Partial | None = None) -> dict:
    """Grade the submission ``data`` (named ``filename``) and return its result dict.
    ``progress(done, total)`` is called (in this thread) as the hidden tests come back, and
    ``partial(verdicts)`` with every test judged so far (``{test id: Verdict}``), so that a
    caller can keep them should it be killed before the end (``autograder``)."""
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
        result = _grade(source, name, note, limits, isolation, clock, common, progress, partial)
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
           clock: float, common: dict, progress: Progress | None = None, partial: Partial | None = None) -> dict:
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
        session = _run_phases(sandbox, job, exercise, runnable, limits, clock, extracted, verdicts, progress,
                              partial)
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
                clock: float, extracted: Extracted, verdicts: dict, progress: Progress | None = None,
                partial: Partial | None = None) -> Session:
    """Steps 4-6 for every runnable test, in an order drawn afresh for each grading (``_run_tests``),
    each test judged as soon as it has come back.  Phases decide what counts, not when a test
    runs (a fixed order would tell a submission which tests come first): a test of a phase after
    the first counts only when ``exercise.proceed`` allows it, asked with the verdicts of the
    earlier phases; once it gives a reason (on the verdicts so far), the phase's tests that have
    not run yet are not run, and its tests that ran are not counted."""
    session = Session()
    phases = sorted({t.phase for t in runnable})
    phase_of = {t.id: t.phase for t in runnable}
    skipped: dict[int, str] = {}

    def judged(tests: list[Test]) -> set[str]:
        """Judge what came back for ``tests``; returns the ids of the tests no longer to run."""
        for test in tests:
            outcome = session.outcomes.get(test.id) or session.stopped or session.import_problem
            verdicts[test.id] = judge(test, outcome, extracted, _timeout(test, limits), limits.memory_bytes,
                                      quiet=exercise.quiet)
        if exercise.proceed is not None:
            for phase in phases[1:]:
                if phase not in skipped:
                    earlier = {tid: v for tid, v in verdicts.items() if phase_of[tid] < phase}
                    why = exercise.proceed(phase, earlier)
                    if why is not None:
                        skipped[phase] = why
        if partial is not None:
            partial({tid: v for tid, v in verdicts.items() if phase_of.get(tid) is not None
                     and phase_of[tid] not in skipped})
        return {t.id for t in runnable if t.phase in skipped}

    _run_tests(sandbox, job, test_cases(exercise.name, limits), runnable, limits, clock, extracted, session,
               exercise.quiet, judged, progress)
    ours = course_imports(exercise.name)
    for run in session.runs:            # notes are for what the learner wrote, not the course's own cells
        run.transcript.import_failures = {k: v for k, v in run.transcript.import_failures.items() if k not in ours}
    for test in runnable:
        if test.phase in skipped:
            ran = test.id in session.outcomes and not isinstance(session.outcomes[test.id], Problem)
            verdicts[test.id] = Verdict(False, f"{'not counted' if ran else 'not run'}: {skipped[test.phase]}")
        elif test.id not in verdicts or test.id not in session.outcomes:
            outcome = session.outcomes.get(test.id) or session.stopped or session.import_problem
            verdicts[test.id] = judge(test, outcome, extracted, _timeout(test, limits), limits.memory_bytes,
                                      quiet=exercise.quiet)
    return session


def _result(entries, verdicts, runnable, session: Session, sandbox, notes, extracted, limits, clock,
            common, exercise: Exercise) -> dict:
    """7. The result: the summary, the notes, the isolation that held, what the submission printed
    (nothing of it for a ``quiet`` exercise)."""
    runs = session.runs
    status = _status(verdicts, runnable, session, notes)
    passed = sum(e["status"] == "passed" for e in entries)
    score, total = sum(e["score"] for e in entries), sum(e["max_score"] for e in entries)
    lines = [f"{passed} of {len(entries)} hidden tests passed: {score:g} / {total:g} points."]
    lines += [f"Note: {one_line(n)}"             # one line each, whatever words of the submission's it holds
              for n in notes + _import_notes(runs, extracted, exercise)]
    lines += _run_notes(runs, limits)
    detail, held = "", {}
    if sandbox:
        held = {key: all(r.held.get(key) for r in runs) for key in runs[0].held} if runs else sandbox.planned()
        detail = describe_isolation(sandbox.mode, sandbox.why, held)
        lines.append(f"Isolation: {detail}.")
    return make_result(tests=entries, status=status, isolation=sandbox.mode if sandbox else "none",
                       execution_time=time.perf_counter() - clock, output="\n".join(lines),
                       submission_output=_printed(runs, exercise.quiet),
                       extra={"isolation_detail": detail, "isolation_held": held,
                              "grader_version": GRADER_VERSION, "runs": [_run_record(r, clock) for r in runs]},
                       **common)


def _status(verdicts, runnable, session: Session, notes: list[str]) -> str:
    """The result's status: missing, the loading problem's (said first among the notes), timeout,
    crashed or ok."""
    if not runnable:
        return "missing"
    if session.import_problem is not None:
        notes.insert(0, session.import_problem.text)
        return session.import_problem.trouble.value
    troubles = {v.trouble for v in verdicts.values()}
    return next((t.value for t in (Trouble.TIMEOUT, Trouble.CRASHED) if t in troubles), "ok")


def _import_notes(runs, extracted: Extracted, exercise: Exercise) -> list[str]:
    """A note for each of the submission's imports (five at most) that failed in the grader."""
    failures: dict[str, str] = {}
    for run in runs:
        failures.update(run.transcript.known_import_failures(extracted.imports))
    available = "numpy, Python's standard library" + "".join(
        f" and {lib.name}" + (f" (without {', '.join(lib.hide)})" if lib.hide else "") for lib in exercise.libs)
    return [f"'{stmt}' failed in the grader ({feedback.error_kind(why) if exercise.quiet else why}); only "
            f"{available} are available" for stmt, why in list(failures.items())[:5]]


def _run_notes(runs, limits: Limits) -> list[str]:
    """Notes on messages dropped from the results channel and processes killed for memory."""
    lines = []
    over = sum(r.transcript.dropped for r in runs)
    if over:
        lines.append(f"Note: {over} message{'s' if over != 1 else ''} on the grader's results channel went over "
                     "its budget and were dropped (what the harness sends is far under it: did the "
                     "submission write on the channel?)")
    oom = sum(r.oom_killed for r in runs)
    if oom:
        lines.append(f"Note: the kernel stopped {oom} of its processes for going over the memory "
                     f"limit ({feedback.size(limits.memory_bytes)} for all its processes together)")
    return lines


def _printed(runs, quiet: bool) -> str:
    """What the submission printed (how much was dropped), or for a quiet exercise that it is not kept."""
    printed = "".join(r.output for r in runs)
    dropped = sum(r.output_dropped for r in runs)
    if dropped:
        printed += f"\n[... {dropped} more bytes of output dropped]"
    if quiet and printed:
        printed = "(not kept: for this exercise, nothing the submission prints is part of the result)"
    return printed


def _run_record(r: Run, clock: float) -> dict:
    """One sandbox run as the result's ``runs`` list records it."""
    return {"killed": r.killed, "returncode": r.returncode, "started": round(max(0.0, r.started - clock), 3),
            "seconds": round(r.elapsed, 3), "cgroup": r.cgroup, "oom_killed": r.oom_killed,
            "supervisor_lost": r.supervisor_lost, "dropped_messages": r.transcript.dropped, "warm": r.warm,
            "left_over": r.ended.get("reaped") if type(r.ended.get("reaped")) is int else None}


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


def course_imports(exercise: str) -> frozenset[str]:
    """The import statements of the exercise notebook's own cells (its worked example, its public
    checks: every code cell but the answer cell), as the notebook reader reports them: a failure
    of one of these in the sandbox is the course's, not the learner's."""
    return _course_imports(registry.package_dir("graders").parent / "exercises" / f"{exercise}.ipynb")


@functools.lru_cache(maxsize=32)
def _course_imports(path: Path) -> frozenset[str]:
    try:
        cells = json.loads(path.read_text(encoding="utf-8")).get("cells", [])
    except (OSError, ValueError):
        return frozenset()
    found = set()
    for cell in cells:
        if cell.get("cell_type") != "code" or "answer" in (cell.get("metadata", {}).get("tags") or []):
            continue
        source = "".join(cell["source"]) if isinstance(cell.get("source"), list) else str(cell.get("source", ""))
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue
        for node in tree.body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                segment = ast.get_source_segment(source, node) or ""
                found.add(" ".join(line.strip() for line in segment.splitlines())[:120])
    return frozenset(found)


_chance = secrets.SystemRandom()        # the order of a grading's tests: no submission can predict it


def runs_at_once(sandbox: Sandbox, limits: Limits) -> int:
    """How many of one submission's isolated sandboxes run at once: ``limits.sandboxes`` if set,
    else one per usable core, two at most.  Always one where the runs are not contained
    (the fallback without namespaces): two of them would share the machine's folders, and each
    run's sweep of its user's files and processes would reach into the other; and always one
    where runs have no user of their own (a grader that is not root): two runs as one user share
    that user's limits (pipe buffers, processes, watches), which one could fill for the other.  Sandboxes that
    run at once share nothing a submission can write or lock (namespaces, folders and a user of
    their own; the seccomp filter denies locks, watches and page-cache queries on the files they
    both read), only the machine's cores: each test's time limit is wall-clock, ten times or more
    what the course's answer needs, so a neighbour's work does not decide a verdict.  A batch
    grades several submissions at once and asks for one each (``batch.run_batch``)."""
    if not (sandbox.isolation.contained and sandbox.own_user):
        return 1
    if limits.sandboxes is not None:
        return max(1, int(limits.sandboxes))
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return max(1, min(2, cores))


@dataclass
class _Unit:
    """Tests that run in one sandbox: the shared ones (relaunched after a crash), or one isolated test."""

    tests: list[Test]


def _run_tests(sandbox: Sandbox, job: Job, cases: dict[str, Case], runnable: list[Test], limits: Limits,
               clock: float, extracted: Extracted, session: Session, quiet: bool = False,
               judged: Callable[[list[Test]], set[str]] | None = None, progress: Progress | None = None) -> None:
    """Run the runnable tests of ``job``, and turn each run's transcript into outcomes (in
    ``session``).  The tests that are not ``isolated`` share one sandbox, relaunched after a test
    that hung or killed the process; each isolated test gets a sandbox of its own, up to
    ``runs_at_once`` of them at once.  The order of the sandboxes, and of the tests in the
    shared one, is drawn from ``secrets`` for each grading, so that no submission can tell a test
    by its place.  After each sandbox, ``judged(tests)`` judges its tests and names the tests
    that no longer need to run.  When the submission cannot go on (its time budget is used up,
    it timed out too often, it flooded the channel, it cannot be loaded), ``session.stopped`` says
    why and no more tests run."""
    chance = _chance
    shared = [t for t in runnable if not t.isolated]
    chance.shuffle(shared)
    units = ([_Unit(shared)] if shared else []) + [_Unit([t]) for t in runnable if t.isolated]
    chance.shuffle(units)
    tally = _Tally(session, len(runnable), limits, judged, progress)
    pending = list(units)
    at_once = runs_at_once(sandbox, limits)
    # Several sandboxes are forked from warm ones (``sandbox.warm``), which load numpy once; one
    # starts fresh, as cheap without numpy.  The warm ones end before the threads that started
    # them (bubblewrap dies with its thread).
    warm = sandbox.warm_runs(limits) if len(units) > 1 else nullcontext()
    with ThreadPoolExecutor(max_workers=at_once) as pool, warm:
        running = {}
        while pending or running:
            while pending and len(running) < at_once and not tally.stopped():
                unit = pending.pop(0)
                if all(t.id in tally.dropped for t in unit.tests):
                    tally.count(unit)
                    continue
                running[pool.submit(_run_unit, sandbox, job, cases, unit, limits, clock, extracted, quiet)] = unit
            if not running:
                break
            finished, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in finished:
                tally.merge(running.pop(future), future.result())
    stop = session.stopped or session.import_problem
    for test in runnable:
        if stop is not None:
            session.outcomes.setdefault(test.id, stop)


def _run_unit(sandbox: Sandbox, job: Job, cases: dict[str, Case], unit: _Unit, limits: Limits, clock: float,
              extracted: Extracted, quiet: bool) -> Session:
    """One unit's tests in a sandbox (relaunched as needed), in a session of their own."""
    part = Session()
    _run_batch(sandbox, job, cases, unit.tests, limits, clock, extracted, part, quiet)
    return part


class _Tally:
    """How far a grading has got: the units' sessions merged into the grading's, the tests done
    (for ``progress``), and the tests that no longer need to run (``judged``'s answer)."""

    def __init__(self, session: Session, total: int, limits: Limits,
                 judged: Callable[[list[Test]], set[str]] | None, progress: Progress | None):
        self.session, self.total, self.limits, self.judged, self.progress = session, total, limits, judged, progress
        self.done = 0
        self.dropped: set[str] = set()
        if progress is not None:
            progress(0, total)

    def stopped(self) -> bool:
        return bool(self.session.stopped or self.session.import_problem)

    def count(self, unit: _Unit) -> None:
        """``unit``'s tests are done (run, or none of them needs to run any more)."""
        self.done += len(unit.tests)
        if self.progress is not None:
            self.progress(self.done, self.total)

    def merge(self, unit: _Unit, part: Session) -> None:
        """What ``unit``'s sandbox gave joins the grading's session; then its tests are judged."""
        session = self.session
        session.runs.extend(part.runs)
        session.outcomes.update(part.outcomes)
        session.import_problem = session.import_problem or part.import_problem
        session.stopped = session.stopped or part.stopped
        timed_out = sum(o.timed_out for o in session.outcomes.values())
        if not session.stopped and self.limits.give_up_after and timed_out >= self.limits.give_up_after:
            session.stopped = _timed_out(timed_out)
        if self.judged is not None:
            self.dropped = self.judged(unit.tests)
        self.count(unit)


def _timed_out(tests: int) -> Problem:
    """Why the tests not run yet never will be, once the submission timed out on ``tests`` tests."""
    return Problem(f"not run: the submission timed out on {tests} tests, so the others were skipped", Trouble.TIMEOUT)


def _give_up(session: Session, remaining: list[str], problem: Problem) -> None:
    """The submission cannot go on: ``problem`` says why, and is the outcome of every test left."""
    session.stopped = problem
    for tid in remaining:
        session.outcomes.setdefault(tid, problem)


def _run_batch(sandbox: Sandbox, job: Job, cases: dict[str, Case], tests: list[Test], limits: Limits,
               clock: float, extracted: Extracted, session: Session, quiet: bool = False) -> None:
    """The ``tests`` in one sandbox, relaunched (up to ``limits.max_restarts`` times) after a test
    that hung or killed the process, for the tests after it.  Each run has a job folder of its
    own holding only its own tests' inputs, each under a token drawn for that run: the test's id,
    its number and how many tests the exercise has never reach the sandbox."""
    test_seconds = {t.id: _timeout(t, limits) for t in tests}
    remaining = [t.id for t in tests]
    runs = 0
    while remaining:
        left = limits.submission_seconds - (time.perf_counter() - clock)
        if left <= 0.5:
            _give_up(session, remaining, Problem(f"not run: the submission used up its time budget "
                                                 f"({limits.submission_seconds:g} s)", Trouble.TIMEOUT))
            break
        run, tokens = _run_once(sandbox, job, cases, remaining, test_seconds, limits, left)
        session.runs.append(run)
        runs += 1
        _keep_outcomes(session.outcomes, run.transcript, tokens, quiet)
        if not run.transcript.import_ok:
            session.import_problem = _loading_problem(run.transcript.imported, run, extracted, limits, quiet)
            for tid in remaining:
                session.outcomes.setdefault(tid, session.import_problem)
            break
        remaining = _still_to_run(run, tokens, len(tests), remaining, session, limits, runs, test_seconds, quiet)
    # An isolated test whose run used up the budget or flooded the channel ends the submission too.
    if runs and not session.stopped and session.runs[-1].killed in _FATAL:
        why, trouble = _fatal(session.runs[-1].killed, limits, runs)
        session.stopped = Problem("not run: " + why, trouble)


def _run_once(sandbox: Sandbox, job: Job, cases: dict[str, Case], remaining: list[str], test_seconds: dict,
              limits: Limits, left: float) -> tuple[Run, dict[str, str]]:
    """One run of the ``remaining`` tests, each under a token drawn for it (token -> test id),
    with ``left`` seconds of the submission's budget."""
    tokens = {secrets.token_hex(8): tid for tid in remaining}
    files = run_files([(token, cases[tid]) for token, tid in tokens.items()], limits)
    folder = Path(work_folder("grader-job-"))
    try:
        libs = job.write(folder, files)
        run = sandbox.run(folder, Limits(**{**limits.as_dict(), "submission_seconds": left}),
                          {token: test_seconds[tid] for token, tid in tokens.items()}, libs=libs)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return run, tokens


def _keep_outcomes(outcomes: dict, transcript, tokens: dict[str, str], quiet: bool) -> None:
    """What came back of each test in a run's transcript: its result, or that it was too large."""
    outcomes.update({tid: Returned(_quiet(transcript.results[token]) if quiet else transcript.results[token])
                     for token, tid in tokens.items() if token in transcript.results})
    outcomes.update({tid: TOO_LARGE for token, tid in tokens.items()
                     if token in transcript.too_large and token not in transcript.results})


def _still_to_run(run: Run, tokens: dict[str, str], count: int, remaining: list[str], session: Session,
                  limits: Limits, runs: int, test_seconds: dict, quiet: bool) -> list[str]:
    """After a run that loaded the submission: the outcome of the test it ended in, then the tests
    to run in a new sandbox, or none when the run finished or the submission cannot go on
    (``session.stopped`` says why)."""
    outcomes, transcript = session.outcomes, run.transcript
    running = tokens.get(run.running) if run.running else None
    if running and running not in outcomes:
        outcomes[running] = _ended(run, test_seconds.get(running, 0), limits, quiet)
    remaining = [tid for tid in remaining if tid not in outcomes]
    if not remaining or transcript.phase == "done":
        gave_up = transcript.gave_up(count)
        for tid in remaining:
            outcomes[tid] = _timed_out(gave_up) if gave_up else Problem("no result came back for this test",
                                                                         Trouble.CRASHED)
        if gave_up:
            session.stopped = _timed_out(gave_up)
        return []
    timed_out = sum(o.timed_out for o in outcomes.values())
    if limits.give_up_after and timed_out >= limits.give_up_after:
        _give_up(session, remaining, _timed_out(timed_out))
        return []
    if run.killed in _FATAL or runs > limits.max_restarts:
        why, trouble = _fatal(run.killed, limits, runs)
        _give_up(session, remaining, Problem(f"not run: {why}", trouble))
        return []
    return remaining


# A quiet exercise's feedback says, of each test, whether it passed, failed, timed out or crashed:
# never a number the submission chose (an exit status, a signal, a line, an exception's type).
_QUIET_CRASH = "the submission's process ended during this test"


def _quiet(message: dict) -> dict:
    """A result message with each exception reduced to "an exception" (or the starter's
    ``NotImplementedError``): no text, type, line or function the submission chose."""
    def plain(error):
        kind = error.get("type") if isinstance(error, dict) else None
        return {"type": "NotImplementedError" if kind == "NotImplementedError" else "Exception"}

    out = dict(message)
    if isinstance(out.get("error"), dict):
        out["error"] = plain(out["error"])
    if isinstance(out.get("calls"), list):
        out["calls"] = [{**c, "error": plain(c["error"])} if isinstance(c, dict) and isinstance(c.get("error"), dict)
                        else c for c in out["calls"]]
    return out


def _ended(run: Run, seconds: float, limits: Limits, quiet: bool) -> Problem:
    """What to say of the test that was running when its run ended: for a quiet exercise, that
    it timed out or that the process ended, and nothing of how."""
    problem = feedback.death(run, seconds, limits)
    if quiet and problem.trouble is Trouble.CRASHED:
        return Problem(_QUIET_CRASH, Trouble.CRASHED)
    return problem


def _loading_problem(message: dict | None, run: Run, extracted: Extracted, limits: Limits,
                     quiet: bool) -> Problem:
    """Why the submission could not be loaded: for a quiet exercise, with no exit status and no
    exception's text, type or line."""
    if not quiet:
        return feedback.import_problem(message, run, extracted, limits)
    problem = feedback.import_problem(_quiet(message) if isinstance(message, dict) else message, run, extracted,
                                      limits, quiet=True)
    if problem.trouble is Trouble.CRASHED:
        return Problem("loading the submission failed" if message is not None
                       else "the submission's process ended while loading", Trouble.CRASHED)
    return problem


_FATAL = ("submission_timeout", "channel_overflow", "memory_files")


def _fatal(killed: str | None, limits: Limits, runs: int) -> tuple[str, Trouble]:
    """Why a submission cannot go on after a run that was killed for ``killed`` (or that ended
    ``runs`` times), and the trouble it is."""
    if killed == "submission_timeout":
        return f"the submission used up its time budget ({limits.submission_seconds:g} s)", Trouble.TIMEOUT
    if killed == "channel_overflow":
        return "the submission flooded the grader's results channel", Trouble.CRASHED
    if killed == "memory_files":
        return feedback.memory_files_text(limits), Trouble.CRASHED
    return f"the submission's process ended {runs} times", Trouble.CRASHED


# ----------------------------------------------------------------------------------- 6. judge



def _raised_answer(call, entry: dict) -> CallResult | None:
    """The exception a ``Call(raises=True)`` raised, as its answer (``checks.Raised``, its classes
    named by the harness), or None when the call returned or may not raise."""
    error = entry.get("error")
    if entry.get("ok") or not call.raises or not isinstance(error, dict) or not isinstance(error.get("bases"), list):
        return None
    return CallResult(Raised(str(error.get("type", "")), tuple(str(b) for b in error["bases"]),
                             str(error.get("message", ""))[:200]))

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
        raised = _raised_answer(test.calls[k], entry)
        if raised is not None:
            results.append(raised)
            continue
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
    # The public checks are public; the packages they need are there as in the learner's copy, with
    # the machine's parts of the other exercises installed as the grader's own, compiled.
    copies = tuple(Lib(lib.name, parts=other_parts(name)) for lib in exercise.libs)
    job = Job(extracted.source, json.dumps(_spec(limits, [])).encode(), libs=(checks_dir,), copies=copies)
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
