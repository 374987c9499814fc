"""The report ``public_checks.run_checks`` prints: lines that fit an output on the course's pages.

An exercise page shows the report of its starter code, so the report's lines are wrapped to
``public_checks.REPORT_WIDTH`` (88) characters, which fits the site's text column; the words and their order stay.
"""
import re

import pytest

import public_checks
from public_checks import PublicCheckFailed, run_checks

WIDTH = 88       # characters of a monospaced output line that fit the site's text column
LONG_NAME = "a_rather_long_exercise_name_for_a_function"


def todo(*args):
    raise NotImplementedError


def words(text: str) -> list[str]:
    return text.split()


def fake_checks(monkeypatch, checks):
    monkeypatch.setattr(public_checks, "load_checks", lambda name: list(checks))


def test_not_implemented_is_said_in_lines_that_fit(monkeypatch, capsys):
    fake_checks(monkeypatch, [("one case", lambda fn: fn(1))])
    assert not run_checks(LONG_NAME, todo)
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines == [f"{LONG_NAME}: not implemented yet.",
                     "Write your answer in the cell above, run it, then run this cell again."]
    assert all(len(line) <= WIDTH for line in lines)


@pytest.mark.parametrize("name", ["kv_cache_bytes", "max_batch", "batched_decode_step", "BlockAllocator"])
def test_every_exercises_starter_report_fits(name, capsys):
    """The real checks of a few exercises against a starter that raises NotImplementedError."""
    fns = [todo]
    if name == "BlockAllocator":
        class Starter:
            def __init__(self, *args, **kwargs):
                raise NotImplementedError
        fns = [Starter]
    assert not run_checks(name, *fns)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"{name}: not implemented yet." and "then run this cell again" in lines[-1]
    assert max(len(line) for line in lines) <= WIDTH


def test_a_long_failure_message_is_wrapped_under_its_check(monkeypatch, capsys):
    message = ("max_batch(24000000000, 14000000000, 32, 32, 128, 4096, 2) returned 5, expected 4: "
               "the memory left beside the weights divided by one sequence's cache, rounded down")

    def wrong(fn):
        raise AssertionError(message)

    fake_checks(monkeypatch, [("the A10 example, a batch of whole sequences", wrong), ("passes", lambda fn: None)])
    with pytest.raises(PublicCheckFailed):
        run_checks("max_batch", todo)
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert all(len(line) <= WIDTH for line in lines), lines
    failed = [i for i, line in enumerate(lines) if line.startswith("[FAIL]")]
    assert len(failed) == 1
    i = failed[0]
    continued = []
    for line in lines[i + 1:]:
        if not line.startswith(" " * 7):
            break
        continued.append(line)
    assert continued, "the long line was wrapped, its continuation indented under the description"
    assert words(" ".join([lines[i], *continued])) == words(f"[FAIL] the A10 example, a batch of whole sequences: {message}")
    assert lines[-1] == "1 of 2 public checks passed."


def test_a_word_longer_than_the_width_is_not_cut(monkeypatch, capsys):
    long_word = "x" * 120

    def wrong(fn):
        raise AssertionError(f"got {long_word}")

    fake_checks(monkeypatch, [("a check", wrong)])
    with pytest.raises(PublicCheckFailed):
        run_checks("max_batch", todo)
    out = capsys.readouterr().out
    assert long_word in out.split()


def test_a_message_of_several_lines_keeps_its_lines(monkeypatch, capsys):
    def wrong(fn):
        raise AssertionError("expected\n  [[1, 2],\n   [3, 4]]\ngot nothing")

    fake_checks(monkeypatch, [("a matrix", wrong)])
    with pytest.raises(PublicCheckFailed):
        run_checks("max_batch", todo)
    out = capsys.readouterr().out
    assert "[FAIL] a matrix: expected\n  [[1, 2],\n   [3, 4]]\ngot nothing\n" in out


def test_passing_reports_name_the_grader_command(monkeypatch, capsys):
    fake_checks(monkeypatch, [("one", lambda fn: None)])
    assert run_checks(LONG_NAME, todo)
    out = capsys.readouterr().out
    assert all(len(line) <= WIDTH for line in out.splitlines())
    assert re.sub(r"\s+", " ", out).strip().endswith(
        f"{LONG_NAME}: public checks passed; hidden tests run at grading "
        f"(python -m graders grade exercises/{LONG_NAME}.ipynb).")


def test_a_crash_is_located_in_its_function_the_same_wherever_the_function_sits():
    """An answer that crashes is located by the line of its function (1 is the ``def``), so the
    report reads the same in the notebook (each cell numbered from 1) and on the site's exercise
    page (the answer cells one after the other, lines of the others above it)."""
    from public_checks import evaluate
    answer = "import numpy as np\n\n\ndef softmax(s):\n    s = np.asarray(s)\n    return s[10]\n"
    said = set()
    for above in ("", "def helper():\n    return 1\n\n\n# the notebook's first answer cell\n\n\n"):
        namespace: dict = {}
        exec(compile(above + answer, "your code", "exec"), namespace)  # noqa: S102 - a test's own answer
        said |= {o.message.rsplit(" (", 1)[1] for o in evaluate("softmax", namespace["softmax"])
                 if o.status == "failed"}
    assert said == {"line 3 of softmax)"}, said
