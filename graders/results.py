"""Results in Gradescope's ``results.json`` format, written atomically, and as text.

A result has ``score``, ``max_score``, ``execution_time``, ``output`` (the summary shown above
the tests) and ``tests``: each with ``name``, ``score``, ``max_score``, ``status`` (``passed``
or ``failed``), ``output`` and ``visibility``.  The grader adds what an instructor needs:
``exercise``, ``status`` of the submission (``ok``, ``timeout``, ``crashed``, ``missing``,
``unreadable``, ``grader_error``), the ``isolation`` actually used, the submission's
``sha256`` and the grader's ``fingerprint`` (a batch regrades when either changes), and the
submission's own printed output, capped, under ``submission_output`` (never parsed; Gradescope
ignores keys it does not know).

Text in a result comes partly from the submission (what it printed, its exceptions' messages,
its file name), so it is data, never trusted: ``clean`` makes every string of a result valid
UTF-8 (a lone surrogate such as ``"\\udc80"`` becomes the six characters ``\\udc80``), bounds its
length, and turns what JSON cannot hold (NaN, a tuple, a numpy number) into what it can.
``make_result`` cleans every result it builds and ``write_json`` / ``write_text`` clean again
before writing, so a result is always written: only the disk can make a write fail.
``zero_result`` is the one builder of a result that grades nothing (the grader failed, the file
cannot be read, it is a link or not a notebook): every test of the exercise at zero, with why.
"""
from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path

from . import registry

__all__ = ["STATUSES", "make_result", "write_json", "write_text", "format_text", "test_entry", "clean",
           "clean_text", "zero_result", "grader_failed", "printable", "one_line"]

STATUSES = ("ok", "timeout", "crashed", "missing", "unreadable", "grader_error", "usage_error", "interrupted")
MAX_TEST_OUTPUT = 2_000      # characters of one test's feedback (parts of it come from the sandbox)
MAX_OUTPUT = 20_000          # characters of the summary
MAX_STRING = 100_000         # characters of any other string of a result (the printed output is capped
                             # before, by the sandbox; a traceback, a file name)
MAX_DEPTH = 32               # nesting of a result's data kept (ours is about 4 deep)


def clean_text(text, limit: int | None = MAX_STRING) -> str:
    """``text`` as a string that UTF-8 can encode (lone surrogates escaped as ``\\udc80``), at most
    ``limit`` characters (None: as long as it is)."""
    if not isinstance(text, str):
        text = str(text)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text if limit is None else _cap(text, limit)


def clean(value, _depth: int = 0):
    """``value`` as data ``json.dumps`` writes in strict JSON and UTF-8 encodes: strings (keys too)
    through ``clean_text``, non-finite floats as None, tuples and sets as lists, anything else as
    its ``str``; deeper than ``MAX_DEPTH`` as a string that says so."""
    if _depth > MAX_DEPTH:
        return "[nested too deeply]"
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, dict):
        return {clean_text(k, 1_000): clean(v, _depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [clean(v, _depth + 1) for v in value]
    try:                                  # numpy scalars and the like
        number = float(value) if hasattr(value, "__float__") and not hasattr(value, "__len__") else None
    except Exception:  # noqa: BLE001 - anything that fails to convert is shown as text
        number = None
    if number is not None:
        return number if math.isfinite(number) else None
    return clean_text(value, 1_000)


def _cap(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 15] + " [... cut short]"


def test_entry(name: str, points: float, passed: bool, message: str, visibility: str = "visible",
               number: str | None = None, score: float | None = None) -> dict:
    """One entry of ``tests``: all of its points when ``passed``, none otherwise, or ``score``
    of them when given (partial credit: "caught 30 of 39")."""
    score = float(points if passed else 0.0) if score is None else float(min(max(score, 0.0), points))
    entry = {"name": name, "score": score, "max_score": float(points),
             "status": "passed" if passed else "failed",
             "output": _cap(message, MAX_TEST_OUTPUT) if message else ("passed" if passed else "failed"),
             "visibility": visibility}
    if number:
        entry["number"] = number
    return entry


def make_result(*, exercise: str | None, tests: list[dict], status: str, isolation: str,
                execution_time: float, output: str, submission: str = "", sha256: str = "",
                fingerprint: str = "", submission_output: str = "", extra: dict | None = None) -> dict:
    assert status in STATUSES, status
    result = {
        "score": round(sum(t["score"] for t in tests), 6),
        "max_score": round(sum(t["max_score"] for t in tests), 6),
        "execution_time": round(float(execution_time), 3),
        "output": _cap(output, MAX_OUTPUT),
        "stdout_visibility": "hidden",
        "tests": tests,
        "exercise": exercise,
        "status": status,
        "isolation": isolation,
        "submission": submission,
        "sha256": sha256,
        "fingerprint": fingerprint,
        "submission_output": submission_output,
    }
    if extra:
        result.update(extra)
    return clean(result)


def zero_result(exercise: str | None, status: str, output: str, test_output: str, *, submission: str = "",
                sha256: str = "", execution_time: float = 0.0, extra: dict | None = None) -> dict:
    """A result that grades nothing: every test of ``exercise`` (when the grader knows it) at zero
    with ``test_output``, ``output`` as the summary, so that the maximum score stays right."""
    tests, fingerprint = [], ""
    try:
        tests = [test_entry(i.name, i.points, False, test_output, i.visibility) for i in registry.items(exercise)]
        fingerprint = registry.fingerprint(exercise)
    except Exception:  # noqa: BLE001 - an unknown exercise or a broken grader still gets its result
        pass
    return make_result(exercise=exercise, tests=tests, status=status, isolation="none",
                       execution_time=execution_time, output=output, submission=submission,
                       sha256=sha256, fingerprint=fingerprint, extra=extra)


def grader_failed(exercise: str | None, why: str, *, submission: str = "", sha256: str = "",
                  execution_time: float = 0.0, traceback: str | None = None) -> dict:
    """The result of the grader failing on a submission (``grader_error``, retried by a batch):
    what ``grade``, ``batch`` and the command line all give."""
    extra = {"grader_traceback": clean_text(traceback[-4000:])} if traceback else None
    return zero_result(exercise, "grader_error",
                       f"The grader itself failed ({_cap(one_line(why), 2_000)}); this is not your fault. "
                       "Please tell the course staff.", "not graded: the grader failed",
                       submission=submission, sha256=sha256, execution_time=execution_time, extra=extra)


def write_text(path, text: str) -> None:
    """Write ``text`` to ``path`` atomically: a temporary file in the same folder, fsync'd, then
    ``os.replace``.  A reader (or a rerun after a kill) sees the old file or the new one, whole."""
    path = Path(path)
    data = clean_text(text, None).encode("utf-8")   # valid whatever ``text`` holds
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def write_json(path, data) -> None:
    """Atomic JSON write (same scheme as ``write_text``) of ``data`` made valid by ``clean``."""
    write_text(path, json.dumps(clean(data), indent=1, ensure_ascii=False, allow_nan=False) + "\n")


_CONTROL = {c: f"\\x{c:02x}" for c in [*range(0x00, 0x09), *range(0x0b, 0x20), 0x7f, *range(0x80, 0xa0)]}
# What reorders or breaks a line where a terminal or a browser shows it: the direction overrides,
# embeddings and isolates (U+202A-U+202E, U+2066-U+2069), the direction marks, and the line and
# paragraph separators.
_INVISIBLE = {c: f"\\u{c:04x}" for c in [0x061C, 0x200E, 0x200F, 0x2028, 0x2029, *range(0x202A, 0x202F),
                                          *range(0x2066, 0x206A)]}
_SHOWN = {**_CONTROL, **_INVISIBLE}
_ONE_LINE = {**_SHOWN, 0x0A: "\\n", 0x0D: "\\r"}


def printable(text: str) -> str:
    """``text`` with control characters shown as ``\\x1b`` and so on, and the direction overrides
    and isolates as ``\\u202e``: what a submission printed or put in an exception message must not
    drive the instructor's terminal (escape sequences that clear it, retitle it, write the
    clipboard, or a carriage return that hides a line) nor reorder what a line says.  Newlines
    and tabs stay (``one_line`` shows them too)."""
    return clean_text(text, None).translate(_SHOWN)


def one_line(text) -> str:
    """``text`` as ``printable`` shows it, on one line: newlines and carriage returns shown as
    ``\\n`` and ``\\r``.  Every text a submission chose (its file name, its metadata, its
    exceptions' messages) goes into the instructor's log and the gradebook this way, so that none
    can make a line of its own ("Score: 20 / 20") or turn one around."""
    return clean_text(text, None).translate(_ONE_LINE)


def _points(x: float) -> str:
    return f"{x:g}"


def format_text(result: dict, *, show_output: bool = False) -> str:
    """The per-test feedback and the score, as the CLI prints it."""
    lines = []
    exercise = result.get("exercise") or "?"
    lines.append(f"{one_line(exercise)}: {one_line(result.get('submission') or 'submission')}")
    if result.get("output"):
        lines.extend("  " + l for l in result["output"].splitlines())
    for test in result.get("tests", []):
        mark = "pass" if test["status"] == "passed" else "FAIL"
        lines.append(f"  [{mark}] {_points(test['score']):>4}/{_points(test['max_score']):<4} {one_line(test['name'])}")
        if test["status"] != "passed" and test.get("output"):
            # a test's feedback is one line of the grader's, with the submission's words in it
            lines.append(f"           {one_line(test['output'])}")
    if show_output and result.get("submission_output"):
        lines.append("  what the submission printed (capped):")
        lines.extend("    | " + l for l in result["submission_output"].splitlines()[:200])
    passed = sum(t["status"] == "passed" for t in result.get("tests", []))
    lines.append(f"Score: {_points(result['score'])} / {_points(result['max_score'])} "
                 f"({passed} of {len(result.get('tests', []))} tests passed; status {result['status']})")
    return "\n".join(printable(line) for line in lines)
