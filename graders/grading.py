"""Grading one submission, start to end: read it, run it in a sandbox, compare, report.

1. ``notebook.extract`` keeps the definitions of the submission (or says why it cannot be read).
2. The hidden tests of the exercise (``registry.tests``) are written to a job folder as inputs
   only: ``spec.json`` (the calls) and ``inputs.npz`` (their arrays).
3. One sandboxed process runs every test (``sandbox.Sandbox``); the harness sends back what each
   call returned.  A test that hangs or kills the process loses that test only: the process is
   relaunched for the tests after it (up to ``Limits.max_restarts`` times, within the
   submission's time budget).
4. Each test's ``check`` compares the returned data with the grader's own expected values, here,
   in the grader's process.  The points of the passed tests add up to the score.

Whatever happens, a result comes back (``grader_error`` when the grader itself failed).
"""
from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np

from . import registry
from .checks import CallResult, Fail, describe
from .harness import decode, encode
from .notebook import MAX_FILE_BYTES, Extracted, Unreadable, extract, infer_exercise, peek
from .registry import Ref
from .results import make_result, test_entry
from .sandbox import Limits, Run, Sandbox, work_folder

__all__ = ["UsageError", "grade_bytes", "grade_file", "check_file", "job_files"]

GRADER_VERSION = "1"


class UsageError(ValueError):
    """The grader was asked something it cannot do (unknown exercise, no such file...)."""


# ------------------------------------------------------------------------------ the job folder

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
        return encode(arg, store)

    cases = []
    for test in registry.tests(exercise):
        cases.append({"id": test.id, "timeout": _timeout(test, limits),
                      "calls": [{"fn": c.fn, "args": [encode_arg(a) for a in c.args],
                                 "capture_args": c.capture_args} for c in test.calls]})
    spec = {"limits": {"memory_bytes": limits.memory_bytes,
                       "cpu_seconds": int(limits.submission_seconds + limits.import_seconds) + 2,
                       "file_bytes": limits.tmpfs_bytes, "open_files": limits.open_files},
            "import_timeout": limits.import_seconds,
            "submission_timeout": limits.submission_seconds,
            "give_up_after_timeouts": limits.give_up_after,
            "cases": cases}
    import io
    buf = io.BytesIO()
    if arrays:
        np.savez(buf, **arrays)
    files = (json.dumps(spec).encode(), buf.getvalue())
    _job_cache[key] = files
    return files


def _timeout(test, limits: Limits) -> float:
    """A test's time limit: its own when it sets one, else the default of the limits."""
    return float(test.timeout if test.timeout is not None else limits.test_seconds)


def _test_seconds(exercise: str, limits: Limits) -> dict[str, float]:
    spec = json.loads(job_files(exercise, limits)[0])
    return {case["id"]: float(case["timeout"]) for case in spec["cases"]}


def _write_job(folder: Path, source: str, exercise: str, limits: Limits) -> None:
    spec, npz = job_files(exercise, limits)
    (folder / "submission.py").write_text(source, encoding="utf-8")
    (folder / "spec.json").write_bytes(spec)
    if npz:
        (folder / "inputs.npz").write_bytes(npz)
    folder.chmod(0o755)
    for p in folder.iterdir():
        p.chmod(0o644)


# ------------------------------------------------------------------------------------ grading


def grade_file(path, exercise: str | None = None, *, limits: Limits | None = None,
               isolation: str = "auto") -> dict:
    path = Path(path)
    if not path.exists():
        raise UsageError(f"{path}: no such file")
    if path.is_dir():
        raise UsageError(f"{path} is a folder; use 'batch' to grade a folder of submissions")
    return grade_bytes(read_submission(path), path.name, exercise, limits=limits, isolation=isolation,
                       label=str(path))


def read_submission(path) -> bytes:
    """The bytes of a submission file, at most one byte past what the grader reads (so that a huge
    file is refused with a message, not loaded); a FIFO or a device is a usage error."""
    path = Path(path)
    if not path.is_file():
        raise UsageError(f"{path} is not a regular file")
    try:
        with open(path, "rb") as f:
            return f.read(MAX_FILE_BYTES + 1)
    except OSError as err:
        raise UsageError(f"{path} cannot be read: {err.strerror}") from None


def resolve_exercise(data: bytes, filename: str, exercise: str | None) -> str:
    """The exercise to grade against: given, or from the notebook's metadata or the file name."""
    return _resolve(data, filename, exercise)[0]


def _resolve(data: bytes, filename: str, exercise: str | None) -> tuple[str, str | None]:
    """(exercise, a note for the learner or None).  When the notebook's metadata and the file name
    name different exercises, the one whose functions the submission defines wins (the metadata
    when both or neither), and the note says so."""
    known = registry.names()
    if exercise is not None:
        if exercise not in known:
            raise UsageError(f"no exercise named {exercise!r}; the grader knows: {', '.join(known)}")
        return exercise, None
    hint, defined = peek(data, filename)
    by_meta = hint if hint in known else None
    by_name = infer_exercise(filename, None, known)
    name = by_meta or by_name
    if name is None:
        raise UsageError(f"cannot tell which exercise {filename} is for (no kvcourse metadata, and its "
                         f"name contains none of: {', '.join(known)}); pass --exercise NAME")
    if by_meta and by_name and by_meta != by_name:
        def defines(ex):
            return set(registry.get(ex).functions) <= defined
        if defines(by_name) and not defines(by_meta):
            name, why = by_name, "the one whose function it defines"
        else:
            why = "as its metadata says"
        return name, (f"the notebook's metadata says it is the exercise '{by_meta}' but its file name "
                      f"says '{by_name}': graded as '{name}' ({why}); pass --exercise NAME to choose")
    return name, None


def grade_bytes(data: bytes, filename: str, exercise: str | None = None, *,
                limits: Limits | None = None, isolation: str = "auto", label: str | None = None) -> dict:
    """Grade the submission ``data`` (named ``filename``) and return its result dict."""
    limits = limits or Limits()
    start = time.perf_counter()
    sha = hashlib.sha256(data).hexdigest()
    label = label or filename
    name, note = _resolve(data, filename, exercise)     # UsageError goes to the caller
    try:
        return _grade(data, filename, name, limits, isolation, start, sha, label, note)
    except Exception as err:  # noqa: BLE001 - a result is always produced
        detail = "".join(traceback.format_exception_only(type(err), err)).strip()
        tests = []
        try:
            tests = [test_entry(t.name, t.points, False, "not graded: the grader failed", t.visibility)
                     for t in registry.tests(name)]
        except Exception:  # noqa: BLE001
            pass
        return make_result(exercise=name, tests=tests, status="grader_error", isolation="none",
                           execution_time=time.perf_counter() - start,
                           output=f"The grader itself failed ({detail}); this is not your fault. "
                                  "Please tell the course staff.",
                           submission=label, sha256=sha, fingerprint=registry.fingerprint(name),
                           extra={"grader_traceback": traceback.format_exc()[-4000:]})


def _grade(data, filename, name, limits, isolation, start, sha, label, note=None) -> dict:
    exercise = registry.get(name)
    tests = registry.tests(name)
    fingerprint = registry.fingerprint(name)
    common = dict(exercise=name, submission=label, sha256=sha, fingerprint=fingerprint)

    try:
        extracted = extract(data, filename, exercise.functions)
    except Unreadable as err:
        entries = [test_entry(t.name, t.points, False, f"not run: {err}", t.visibility) for t in tests]
        return make_result(tests=entries, status="unreadable", isolation="none",
                           execution_time=time.perf_counter() - start,
                           output=f"The submission could not be read: {err}. Every test scores 0.", **common)

    extracted.memory_bytes = limits.memory_bytes
    notes = ([note] if note else []) + list(extracted.notes)
    missing = set(extracted.missing(exercise.functions))
    for fn in sorted(missing):
        notes.append(f"no function named '{fn}' was found: {extracted.suggestion(fn)}")
    runnable = [t for t in tests if not ({c.fn for c in t.calls} & missing)]

    outcomes: dict[str, tuple] = {}       # test id -> ("result", message) | ("problem", text, status)
    sandbox = None
    runs: list[Run] = []
    import_error = None
    if runnable:
        sandbox = Sandbox(isolation)
        outcomes, runs, import_error = _run_tests(sandbox, extracted, name, runnable, limits, start)

    entries = []
    statuses = set()
    for test in tests:
        if test not in runnable:
            fns = sorted({c.fn for c in test.calls} & missing)
            entries.append(test_entry(test.name, test.points, False,
                                      f"not run: no function named {', '.join(repr(f) for f in fns)}",
                                      test.visibility))
            continue
        outcome = outcomes.get(test.id)
        passed, message, status = _judge(test, outcome, extracted, _timeout(test, limits))
        if status:
            statuses.add(status)
        entries.append(test_entry(test.name, test.points, passed, message, test.visibility))

    if not runnable:
        status = "missing"
    elif import_error is not None:
        status = import_error[1]
        notes.insert(0, import_error[0])
    elif "timeout" in statuses:
        status = "timeout"
    elif "crashed" in statuses:
        status = "crashed"
    else:
        status = "ok"

    isolation_used = sandbox.mode if sandbox else "none"
    output_lines = []
    passed = sum(e["status"] == "passed" for e in entries)
    score = sum(e["score"] for e in entries)
    total = sum(e["max_score"] for e in entries)
    output_lines.append(f"{passed} of {len(entries)} hidden tests passed: {score:g} / {total:g} points.")
    failures = {}
    for run in runs:        # what the channel says is untrusted: strings only, few and short
        for m in run.messages:
            if m.get("t") == "import" and m.get("ok") and isinstance(m.get("import_failures"), dict):
                failures.update({k: v[:200] for k, v in list(m["import_failures"].items())[:50]
                                 if k in extracted.imports and isinstance(v, str)})
    for stmt, why in list(failures.items())[:5]:
        notes.append(f"'{stmt}' failed in the grader ({why}); only numpy and Python's standard "
                     "library are available")
    output_lines.extend(f"Note: {n}" for n in notes)
    oom = sum(r.oom_killed for r in runs)
    if oom:
        output_lines.append(f"Note: the kernel stopped {oom} of its processes for going over the memory "
                            f"limit ({_size(limits.memory_bytes)} for all its processes together)")
    if sandbox:
        output_lines.append(f"Isolation: {sandbox.description}.")
    printed = "".join(r.output for r in runs)
    dropped = sum(r.output_dropped for r in runs)
    if dropped:
        printed += f"\n[... {dropped} more bytes of output dropped]"
    return make_result(tests=entries, status=status, isolation=isolation_used,
                       execution_time=time.perf_counter() - start, output="\n".join(output_lines),
                       submission_output=printed,
                       extra={"isolation_detail": sandbox.description if sandbox else "",
                              "grader_version": GRADER_VERSION,
                              "runs": [{"killed": r.killed, "returncode": r.returncode,
                                        "seconds": round(r.elapsed, 3), "cgroup": r.cgroup,
                                        "oom_killed": r.oom_killed} for r in runs]},
                       **common)


def _run_tests(sandbox: Sandbox, extracted: Extracted, name: str, runnable, limits: Limits, start):
    """Run the runnable tests, relaunching after a test that hung or killed the process."""
    test_seconds = _test_seconds(name, limits)
    outcomes: dict[str, tuple] = {}
    runs: list[Run] = []
    import_error = None
    remaining = [t.id for t in runnable]
    folder = Path(work_folder("grader-job-"))
    try:
        _write_job(folder, extracted.source, name, limits)
        while remaining:
            left = limits.submission_seconds - (time.perf_counter() - start)
            if left <= 0.5:
                for tid in remaining:
                    outcomes[tid] = ("problem", f"not run: the submission used up its time budget "
                                                f"({limits.submission_seconds:g} s)", "timeout")
                break
            run_limits = Limits(**{**limits.as_dict(), "submission_seconds": left})
            run = sandbox.run(folder, run_limits, test_seconds,
                              only=None if not runs else remaining)
            runs.append(run)
            imported = None
            current = None          # a result counts only for the test that was started last,
            for message in run.messages:   # and the last one wins (the harness writes it last)
                kind = message.get("t")
                if kind == "import" and imported is None:
                    imported = message
                elif kind == "start" and isinstance(message.get("id"), str):
                    current = message["id"]
                elif kind == "result" and message.get("id") == current and current in remaining:
                    outcomes[current] = ("result", message)
            if imported is None or not imported.get("ok"):
                import_error = _import_problem(imported, run, extracted, limits)
                for tid in remaining:
                    if tid not in outcomes:
                        outcomes[tid] = ("problem", f"not run: {import_error[0]}", import_error[1])
                break
            if run.running and run.running not in outcomes:
                outcomes[run.running] = ("problem", *_death(run, test_seconds.get(run.running, 0), limits))
            remaining = [tid for tid in remaining if tid not in outcomes]
            if not remaining or run.phase == "done":
                gave_up = next((m.get("gave_up") for m in run.messages if m.get("t") == "done"), None)
                if type(gave_up) is not int or not 0 < gave_up <= len(test_seconds):
                    gave_up = None          # the channel is untrusted: only a plausible count is said
                for tid in remaining:
                    outcomes[tid] = (("problem", f"not run: the submission timed out on {gave_up} tests, so "
                                                 "the others were skipped", "timeout") if gave_up else
                                     ("problem", "no result came back for this test", "crashed"))
                break
            timed_out = sum(1 for o in outcomes.values() if o[0] == "problem" and o[2] == "timeout") + \
                sum(1 for o in outcomes.values() if o[0] == "result" and o[1].get("timeout"))
            if limits.give_up_after and timed_out >= limits.give_up_after:
                for tid in remaining:
                    outcomes[tid] = ("problem", f"not run: the submission timed out on {timed_out} tests, so "
                                                "the others were skipped", "timeout")
                break
            if run.killed in ("submission_timeout", "channel_overflow") or len(runs) > limits.max_restarts:
                why = {"submission_timeout": f"the submission used up its time budget "
                                             f"({limits.submission_seconds:g} s)",
                       "channel_overflow": "the submission flooded the grader's results channel"
                       }.get(run.killed, f"the submission's process ended {len(runs)} times")
                for tid in remaining:
                    outcomes[tid] = ("problem", f"not run: {why}",
                                     "timeout" if run.killed == "submission_timeout" else "crashed")
                break
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return outcomes, runs, import_error


def _death(run: Run, seconds: float, limits: Limits) -> tuple[str, str]:
    """What to say about the test that was running when the process ended or was killed."""
    if run.killed == "test_timeout":
        return (f"took longer than {seconds:g} s (the time limit of this test); is there an infinite loop?",
                "timeout")
    if run.killed == "submission_timeout":
        return (f"the submission used up its time budget ({limits.submission_seconds:g} s) during this test",
                "timeout")
    if run.killed == "channel_overflow":
        return "the submission flooded the grader's results channel during this test", "crashed"
    if run.oom_killed:
        return (f"ran out of memory during this test: its processes went over the limit of "
                f"{_size(limits.memory_bytes)} together, and the kernel stopped them"), "crashed"
    return f"the submission's process ended during this test ({_exit_text(run.returncode)})", "crashed"


def _exit_text(code) -> str:
    import signal as _signal
    if code is None:
        return "no exit status"
    if 128 < code < 128 + 65:           # bubblewrap reports a signal's death as 128 + signal
        code = 128 - code
    if code < 0:
        try:
            name = _signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        extra = {"SIGKILL": "; killed: out of memory, or the submission killed itself",
                 "SIGXCPU": "; the CPU time limit", "SIGSEGV": "; a crash in native code",
                 "SIGXFSZ": "; the file size limit"}.get(name, "")
        return f"killed by {name}{extra}"
    return f"exit status {code}: it called os._exit() or exited before returning" if code == 0 \
        else f"exit status {code}"


def _import_problem(message, run: Run, extracted: Extracted, limits: Limits) -> tuple[str, str]:
    if message is None:
        if run.killed == "import_timeout":
            return (f"loading the submission took longer than {limits.import_seconds:g} s "
                    "(an infinite loop at import?)", "timeout")
        if run.killed == "submission_timeout":
            return f"the submission used up its time budget ({limits.submission_seconds:g} s)", "timeout"
        return f"the submission's process ended while loading ({_exit_text(run.returncode)})", "crashed"
    if message.get("timeout"):
        return (f"loading the submission took longer than {limits.import_seconds:g} s "
                "(an infinite loop at import?)", "timeout")
    return f"loading the submission failed: {_error_text(message.get('error'), extracted)}", "crashed"


def _error_text(error, extracted: Extracted, fn: str | None = None) -> str:
    if not isinstance(error, dict):
        return "an error"
    kind = str(error.get("type", "Exception"))[:80]
    text = str(error.get("message", ""))[:300]
    where = extracted.locate(error.get("line")) if isinstance(error.get("line"), int) else None
    func = str(error.get("function") or "")[:100]
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
        return f"ran out of memory{loc} (the limit is {_gib(extracted)} per submission)"
    if kind == "InputError":
        return text
    return f"{kind}: {text}{loc}" if text else f"{kind}{loc}"


def _gib(extracted) -> str:
    return _size(getattr(extracted, "memory_bytes", 2 << 30))


def _size(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n} bytes"


def _judge(test, outcome, extracted: Extracted, seconds: float) -> tuple[bool, str, str | None]:
    """(passed, message, status) of one test from what came back."""
    if outcome is None:
        return False, "no result came back for this test", "crashed"
    if outcome[0] == "problem":
        return False, outcome[1], outcome[2]
    message = outcome[1]
    calls = message.get("calls")
    if not isinstance(calls, list):
        return False, "the result of this test could not be read", "crashed"
    n = len(test.calls)

    def prefix(k):
        return f"{test.step} {k + 1} of {n}: " if n > 1 else ""

    results = []
    for k, entry in enumerate(calls[:n]):
        if not isinstance(entry, dict):
            return False, prefix(k) + "the result could not be read", None
        fn = test.calls[k].fn
        if not entry.get("ok"):
            return False, prefix(k) + f"{fn} {_raised(entry.get('error'), extracted)}", None
        try:
            value = decode(entry.get("value"))
            after = decode(entry["args_after"]) if "args_after" in entry else None
            originals = decode(entry["originals_after"]) if "originals_after" in entry else None
        except Exception:  # noqa: BLE001 - malformed data is a wrong answer, not a grader crash
            return False, prefix(k) + f"what {fn} returned could not be read as data", None
        results.append(CallResult(value, list(after) if isinstance(after, (list, tuple)) else None,
                                  list(originals) if isinstance(originals, (list, tuple)) else None,
                                  _seconds(entry.get("seconds"))))
    if message.get("timeout"):
        k = len(results)
        return False, prefix(k) + (f"took longer than {seconds:g} s (the time limit of this test); "
                                   "is there an infinite loop?"), "timeout"
    if message.get("error"):
        return False, prefix(len(results)) + _error_text(message.get("error"), extracted), None
    if len(results) < n:
        return False, prefix(len(results)) + "no result came back", "crashed"
    try:
        test.check(results)
    except Fail as fail:
        return False, str(fail), None
    except Exception as err:  # noqa: BLE001 - an unexpected form of answer
        value = results[-1].value if results else None
        return False, (f"the answer has an unexpected form ({describe(value)}) and could not be checked "
                       f"[{type(err).__name__}]"), None
    return True, "", None


def _seconds(value) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0


def _raised(error, extracted) -> str:
    text = _error_text(error, extracted)
    if text.startswith(("called sys.exit", "ran out of memory", "is not implemented yet")):
        return text
    if isinstance(error, dict) and error.get("type") == "NameError" and "is not a function" in str(error.get("message")):
        return "is not a function in the submission"
    return f"raised {text}"


# ------------------------------------------------------------------------------------- check


def check_file(path, exercise: str | None = None, *, limits: Limits | None = None,
               isolation: str = "auto") -> dict:
    """Run the public checks of the exercise on a submission, in the sandbox.  Returns
    ``{"exercise", "outcomes": [{"description", "status", "message"}], "problem", "isolation"}``."""
    import public_checks
    limits = limits or Limits()
    path = Path(path)
    if not path.exists():
        raise UsageError(f"{path}: no such file")
    data = read_submission(path)
    name = resolve_exercise(data, path.name, exercise)
    checks_dir = Path(public_checks.__file__).resolve().parent
    if not (checks_dir / f"{name}.py").exists():
        return {"exercise": name, "outcomes": [], "isolation": "none",
                "problem": f"there are no public checks for {name} yet (public_checks/{name}.py)"}
    functions = registry.get(name).functions
    try:
        extracted = extract(data, path.name, functions)
    except Unreadable as err:
        return {"exercise": name, "outcomes": [], "isolation": "none", "problem": str(err)}
    missing = extracted.missing(functions)
    if missing:
        return {"exercise": name, "outcomes": [], "isolation": "none",
                "problem": f"no function named '{missing[0]}' was found: {extracted.suggestion(missing[0])}"}
    sandbox = Sandbox(isolation)
    folder = Path(work_folder("grader-check-"))
    try:
        (folder / "submission.py").write_text(extracted.source, encoding="utf-8")
        (folder / "spec.json").write_text(json.dumps({
            "limits": {"memory_bytes": limits.memory_bytes, "file_bytes": limits.tmpfs_bytes,
                       "open_files": limits.open_files, "cpu_seconds": int(limits.submission_seconds) + 2},
            "import_timeout": limits.import_seconds, "submission_timeout": limits.submission_seconds,
            "cases": []}))
        folder.chmod(0o755)
        for p in folder.iterdir():
            p.chmod(0o644)
        run = sandbox.run(folder, limits, {}, public=name, public_checks=checks_dir)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    out = {"exercise": name, "outcomes": [], "isolation": sandbox.mode, "problem": None,
           "printed": run.output}
    imported = next((m for m in run.messages if m.get("t") == "import"), None)
    public = next((m for m in run.messages if m.get("t") == "public"), None)
    if imported is None or not imported.get("ok"):
        out["problem"] = _import_problem(imported, run, extracted, limits)[0]
    elif public is None or public.get("timeout"):
        out["problem"] = (f"the public checks did not finish within {limits.submission_seconds:g} s"
                          if (public or {}).get("timeout") or run.killed
                          else f"the submission's process ended during the checks ({_exit_text(run.returncode)})")
    elif public.get("error"):
        out["problem"] = "the public checks could not run: " + _error_text(public["error"], extracted)
    else:
        for o in public.get("outcomes") or []:
            if isinstance(o, dict) and o.get("status") in ("passed", "failed", "not implemented"):
                out["outcomes"].append({"description": str(o.get("description", ""))[:300],
                                        "status": o["status"], "message": str(o.get("message", ""))[:600]})
    return out
