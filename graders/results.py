"""Results in Gradescope's ``results.json`` format, written atomically, and as text.

A result has ``score``, ``max_score``, ``execution_time``, ``output`` (the summary shown above
the tests) and ``tests``: each with ``name``, ``score``, ``max_score``, ``status`` (``passed``
or ``failed``), ``output`` and ``visibility``.  The grader adds what an instructor needs:
``exercise``, ``status`` of the submission (``ok``, ``timeout``, ``crashed``, ``missing``,
``unreadable``, ``grader_error``), the ``isolation`` actually used, the submission's
``sha256`` and the grader's ``fingerprint`` (a batch regrades when either changes), and the
submission's own printed output, capped, under ``submission_output`` (never parsed; Gradescope
ignores keys it does not know).
"""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

__all__ = ["STATUSES", "make_result", "write_json", "format_text", "test_entry"]

STATUSES = ("ok", "timeout", "crashed", "missing", "unreadable", "grader_error", "usage_error")
MAX_TEST_OUTPUT = 2_000      # characters of one test's feedback (parts of it come from the sandbox)
MAX_OUTPUT = 20_000          # characters of the summary


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
    return result


def write_text(path, text: str) -> None:
    """Write ``text`` to ``path`` atomically: a temporary file in the same folder, fsync'd, then
    ``os.replace``.  A reader (or a rerun after a kill) sees the old file or the new one, whole."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(text)
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
    """Atomic JSON write (same scheme as ``write_text``)."""
    write_text(path, json.dumps(data, indent=1, ensure_ascii=False) + "\n")


_CONTROL = {c: f"\\x{c:02x}" for c in [*range(0x00, 0x09), *range(0x0b, 0x20), 0x7f, *range(0x80, 0xa0)]}


def printable(text: str) -> str:
    """``text`` with control characters shown as ``\\x1b`` and so on: what a submission printed or
    put in an exception message must not drive the instructor's terminal (escape sequences that
    clear it, retitle it, write the clipboard, or a carriage return that hides a line)."""
    return str(text).translate(_CONTROL)


def _points(x: float) -> str:
    return f"{x:g}"


def format_text(result: dict, *, show_output: bool = False) -> str:
    """The per-test feedback and the score, as the CLI prints it."""
    lines = []
    exercise = result.get("exercise") or "?"
    lines.append(f"{exercise}: {result.get('submission') or 'submission'}")
    if result.get("output"):
        lines.extend("  " + l for l in result["output"].splitlines())
    for test in result.get("tests", []):
        mark = "pass" if test["status"] == "passed" else "FAIL"
        line = f"  [{mark}] {_points(test['score']):>4}/{_points(test['max_score']):<4} {test['name']}"
        if test["status"] != "passed" and test.get("output"):
            line += "\n" + "\n".join(f"           {part}" for part in str(test["output"]).splitlines())
        lines.append(line)
    if show_output and result.get("submission_output"):
        lines.append("  what the submission printed (capped):")
        lines.extend("    | " + l for l in result["submission_output"].splitlines()[:200])
    passed = sum(t["status"] == "passed" for t in result.get("tests", []))
    lines.append(f"Score: {_points(result['score'])} / {_points(result['max_score'])} "
                 f"({passed} of {len(result.get('tests', []))} tests passed; status {result['status']})")
    return "\n".join(printable(line) for line in lines)
