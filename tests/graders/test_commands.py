"""The command line: ``python -m graders grade|check|list``, exit statuses, the results.json."""
import argparse
import io
import json
import os
import subprocess
import sys

import pytest

from graders import cli, registry

from grader_helpers import GOOD, PYTHON, ROOT


def graders(*args, cwd=ROOT):
    return subprocess.run([PYTHON, "-m", "graders", *map(str, args)], cwd=cwd, capture_output=True,
                          text=True, timeout=120)


def test_grade_prints_feedback_and_writes_gradescope_results(tmp_path):
    sub = tmp_path / "attend_step.py"
    sub.write_text(GOOD["attend_step"].replace("/ np.sqrt(q.shape[0])", ""))   # forgets the scaling
    out = tmp_path / "results.json"
    proc = graders("grade", sub, "--json", out)
    assert proc.returncode == 0, proc.stderr
    assert "Score:" in proc.stdout and "[FAIL]" in proc.stdout and "sqrt(d)" in proc.stdout
    result = json.loads(out.read_text())
    for key in ("score", "max_score", "execution_time", "output", "tests", "isolation", "status"):
        assert key in result
    assert 0 < result["score"] < result["max_score"] and result["status"] == "ok"
    assert result["isolation"] in ("bwrap", "subprocess")
    for test in result["tests"]:
        assert set(test) >= {"name", "score", "max_score", "status", "output", "visibility"}
        assert test["status"] in ("passed", "failed") and test["visibility"] == "visible"
    assert result["score"] == sum(t["score"] for t in result["tests"])


@pytest.mark.parametrize("content, status", [
    (b"", "unreadable"),
    (b'{"cells": [{"cell_type": "code", "source": "def soft', "unreadable"),
    (b"def softmax(x:\n    return x\n", "missing"),
    (b"def soft_max(x):\n    return x\n", "missing"),
    (b"import sys\ndef softmax(x, _=sys.exit(3)):\n    return x\n", "crashed"),
])
def test_a_result_is_written_whatever_the_submission(tmp_path, content, status):
    sub = tmp_path / ("softmax.ipynb" if content.startswith(b"{") or not content else "softmax.py")
    sub.write_bytes(content)
    out = tmp_path / "r.json"
    proc = graders("grade", sub, "--exercise", "softmax", "--json", out)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(out.read_text())
    assert result["status"] == status and result["score"] == 0 and result["max_score"] > 0
    assert "Traceback" not in proc.stdout + proc.stderr
    assert all(t["output"] for t in result["tests"])


def test_the_exercise_comes_from_metadata_or_file_name(tmp_path):
    nb = {"cells": [{"cell_type": "code", "metadata": {}, "source": GOOD["kv_cache_bytes"], "outputs": [],
                     "execution_count": None}],
          "metadata": {"kvcourse": {"exercise": "kv_cache_bytes", "chapter": 3}}, "nbformat": 4, "nbformat_minor": 5}
    (tmp_path / "homework 3.ipynb").write_text(json.dumps(nb))
    proc = graders("grade", tmp_path / "homework 3.ipynb")
    assert proc.returncode == 0 and proc.stdout.startswith("kv_cache_bytes:")
    (tmp_path / "jdoe-time_per_token.py").write_text(GOOD["time_per_token"])
    proc = graders("grade", tmp_path / "jdoe-time_per_token.py")
    assert proc.returncode == 0 and proc.stdout.startswith("time_per_token:")


@pytest.mark.parametrize("args, words", [
    ([], "required"),
    (["nonsense"], "invalid choice"),
    (["grade"], "required"),
    (["grade", "no/such/file.py", "--exercise", "softmax"], "no such file"),
    (["grade", "README.md", "--exercise", "nope"], "no exercise named 'nope'"),
    (["grade", "README.md"], "cannot tell which exercise"),
    (["batch", "."], "--exercise"),
    (["batch", ".", "--exercise", "softmax", "--out", "x.csv", "--jobs", "0"], "at least 1"),
    (["grade", "README.md", "--exercise", "softmax", "--timeout", "-1"], "must be positive"),
])
def test_usage_errors_exit_2(args, words):
    proc = graders(*args)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert words in proc.stderr and "Traceback" not in proc.stderr


def test_a_usage_error_still_leaves_a_result_when_one_was_asked_for(tmp_path):
    out = tmp_path / "r.json"
    proc = graders("grade", tmp_path / "missing.py", "--exercise", "softmax", "--json", out)
    assert proc.returncode == 2
    assert json.loads(out.read_text())["status"] == "usage_error"


def test_a_grader_crash_still_produces_a_result(tmp_path, monkeypatch, capsys):
    import graders.grading as grading

    def boom(*args, **kwargs):
        raise RuntimeError("the grader broke")
    monkeypatch.setattr(grading, "_grade", boom)
    sub = tmp_path / "softmax.py"
    sub.write_text(GOOD["softmax"])
    out = tmp_path / "r.json"
    assert cli.main(["grade", str(sub), "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["status"] == "grader_error" and result["score"] == 0
    assert "not your fault" in result["output"] and len(result["tests"]) > 0
    assert "Score: 0" in capsys.readouterr().out


@pytest.mark.parametrize("isolation", ["auto", "subprocess"])
def test_check_runs_the_public_checks_only(isolation):
    proc = graders("check", "solutions/softmax.ipynb", "--isolation", isolation)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "public checks passed; hidden tests run at grading" in proc.stdout
    proc = graders("check", "exercises/softmax.ipynb", "--isolation", isolation)
    assert proc.returncode == 1 and "not implemented yet" in proc.stdout


def test_check_reports_a_failing_public_check(tmp_path):
    sub = tmp_path / "softmax.py"
    sub.write_text("import numpy as np\ndef softmax(s):\n    return np.ones_like(np.asarray(s, float))\n")
    proc = graders("check", sub)
    assert proc.returncode == 1 and "[FAIL]" in proc.stdout and "hidden tests run at grading" not in proc.stdout


def test_list_names_every_exercise(capsys):
    assert cli.main(["list"]) == 0
    out = capsys.readouterr().out
    for name in ("softmax", "causal_attention", "attend_step", "kv_cache_bytes", "max_batch",
                 "arithmetic_intensity", "time_per_token", "prefill_time"):
        assert name in out


def test_metadata_and_file_name_disagreeing_are_refused_and_an_inferred_exercise_is_stated(tmp_path):
    """A notebook named for one exercise whose metadata names another was graded as the other
    (25/25 on the wrong exercise): the submission chose.  Now it is refused (exit 2) unless the
    grader passes --exercise, and an exercise that was inferred is stated with where from."""
    def nb(source, exercise):
        return json.dumps({"cells": [{"cell_type": "code", "metadata": {}, "source": source, "outputs": [],
                                      "execution_count": None}],
                           "metadata": {"kvcourse": {"exercise": exercise}}, "nbformat": 4, "nbformat_minor": 5})
    (tmp_path / "softmax.ipynb").write_text(nb(GOOD["kv_cache_bytes"], "kv_cache_bytes"))
    proc = graders("grade", tmp_path / "softmax.ipynb", "--json", tmp_path / "r.json")
    assert proc.returncode == 2 and proc.stdout == "", proc.stdout
    assert "metadata says it is the exercise 'kv_cache_bytes' but its file name says 'softmax'" in proc.stderr
    assert "pass --exercise NAME" in proc.stderr
    assert json.loads((tmp_path / "r.json").read_text())["status"] == "usage_error"
    proc = graders("check", tmp_path / "softmax.ipynb")
    assert proc.returncode == 2 and "file name says 'softmax'" in proc.stderr
    proc = graders("grade", tmp_path / "softmax.ipynb", "--exercise", "kv_cache_bytes")
    assert proc.returncode == 0 and "Score: 9 / 9" in proc.stdout and "graded as" not in proc.stderr
    (tmp_path / "jdoe.ipynb").write_text(nb(GOOD["kv_cache_bytes"], "kv_cache_bytes"))
    proc = graders("grade", tmp_path / "jdoe.ipynb")
    assert proc.returncode == 0 and proc.stdout.startswith("kv_cache_bytes:"), proc.stdout
    assert "graded as 'kv_cache_bytes', the exercise its notebook's metadata names" in proc.stderr
    (tmp_path / "max_batch-jdoe.py").write_text(GOOD["max_batch"])
    proc = graders("grade", tmp_path / "max_batch-jdoe.py")
    assert proc.returncode == 0 and "the exercise its file name names" in proc.stderr


@pytest.mark.parametrize("source, status", [
    ("x = " + "-" * 200_000 + "1\n", "missing"),        # too deep for the parser: a note
    ("x = 1\n" * 400_000, "unreadable"),                # 2.4 MB of code: refused, not parsed
    ("[" * 100_000, "missing"),
])
def test_pathological_code_gets_a_result_not_a_grader_error(tmp_path, source, status):
    sub = tmp_path / "softmax.py"
    sub.write_text(source)
    out = tmp_path / "r.json"
    proc = graders("grade", sub, "--json", out)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(out.read_text())
    assert result["status"] == status and result["score"] == 0, result["output"]
    assert "Traceback" not in proc.stdout + proc.stderr


def test_a_fifo_or_a_device_is_a_usage_error_not_a_hang(tmp_path):
    """read_bytes() on a FIFO used to block the grader forever (and /dev/zero to fill memory)."""
    fifo = tmp_path / "softmax.py"
    os.mkfifo(fifo)
    out = tmp_path / "r.json"
    proc = graders("grade", fifo, "--json", out)
    assert proc.returncode == 2 and "not a regular file" in proc.stderr
    assert json.loads(out.read_text())["status"] == "usage_error"
    proc = graders("grade", "/dev/zero", "--exercise", "softmax")
    assert proc.returncode == 2 and "not a regular file" in proc.stderr


def test_a_reader_that_goes_away_gets_no_traceback(tmp_path):
    """``python -m graders grade ... | head`` (a reader gone before the end) used to end in a BrokenPipeError traceback."""
    out = tmp_path / "r.json"
    proc = subprocess.run(f"'{PYTHON}' -m graders grade solutions/softmax.ipynb --json '{out}' | true",
                          shell=True, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr, proc.stderr
    assert json.loads(out.read_text())["score"] == 14


@pytest.mark.parametrize("target, error", [
    ("graders.grading._resolve", RecursionError("deep")),              # a RuntimeError: was a usage error, exit 2
    ("graders.grading.read_submission", KeyError("boom")),
    ("graders.results.write_json", TypeError("not JSON serializable")),  # only its first call fails
])
def test_the_grader_crashing_anywhere_still_writes_a_result_and_exits_0(tmp_path, monkeypatch, capsys, target, error):
    import importlib
    module_name, attr = target.rsplit(".", 1)
    module = importlib.import_module(module_name)
    real, calls = getattr(module, attr), []

    def boom(*args, **kwargs):
        calls.append(1)
        if attr == "write_json" and len(calls) > 1:
            return real(*args, **kwargs)
        raise error
    monkeypatch.setattr(module, attr, boom)
    sub = tmp_path / "softmax.py"
    sub.write_text(GOOD["softmax"])
    out = tmp_path / "r.json"
    assert cli.main(["grade", str(sub), "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["status"] == "grader_error" and result["score"] == 0
    assert "not your fault" in result["output"]
    assert "Score: 0" in capsys.readouterr().out


def test_feedback_that_cannot_be_printed_still_leaves_the_result(tmp_path, monkeypatch, capsys):
    import graders.results
    monkeypatch.setattr(graders.results, "format_text", lambda *a, **k: 1 / 0)
    sub = tmp_path / "softmax.py"
    sub.write_text(GOOD["softmax"])
    out = tmp_path / "r.json"
    assert cli.main(["grade", str(sub), "--json", str(out)]) == 0
    assert json.loads(out.read_text())["score"] == 14
    assert "Score: 14" in capsys.readouterr().out


def test_escape_sequences_from_the_submission_never_reach_the_terminal(tmp_path):
    """What a submission prints or raises is shown to the instructor: raw, its escape sequences
    could clear or retitle the terminal, write the clipboard (OSC 52), or hide a line (\\r)."""
    sub = tmp_path / "kv_cache_bytes.py"
    sub.write_text('def kv_cache_bytes(*a):\n    print("\\x1b[2J\\x1b]52;c;cHduZWQ=\\x07")\n'
                   '    raise ValueError("\\x1b[31mred\\x1b[0m\\r\\x9b hidden")\n')
    proc = graders("grade", sub, "--show-output")
    assert proc.returncode == 0
    assert not any(c in proc.stdout for c in "\x1b\x07\r\x9b"), repr(proc.stdout)
    assert "\\x1b[31mred" in proc.stdout and "\\x1b]52;c;" in proc.stdout


def test_a_gradebook_cell_is_never_a_spreadsheet_formula(tmp_path):
    from graders.batch import run_batch
    (tmp_path / "class").mkdir()
    (tmp_path / "class" / "=HYPERLINK(1) kv_cache_bytes.py").write_text("def kv_cache_bytes(*a):\n    return 1\n")
    run_batch(tmp_path / "class", "kv_cache_bytes", tmp_path / "gb.csv", jobs=1, progress=False)
    import csv
    rows = list(csv.DictReader(open(tmp_path / "gb.csv", newline="")))
    assert rows[0]["submission"] == "'=HYPERLINK(1) kv_cache_bytes.py"


@pytest.mark.parametrize("isolation", ["bwrap", "subprocess"])
def test_a_grader_started_from_another_folder_by_a_relative_interpreter_path(tmp_path, isolation):
    # ``cd tests && ../.venv/bin/python -m graders grade ...``: the sandbox has only the
    # installation's folders, so the interpreter must be named by its normalized path there.
    sub = tmp_path / "attend_step.py"
    sub.write_text(GOOD["attend_step"])
    out = tmp_path / "results.json"
    here = ROOT / "tests" / "graders"
    python = os.path.relpath(os.path.normpath(os.path.abspath(PYTHON)), here)
    assert python.startswith("..")
    proc = subprocess.run([python, "-m", "graders", "grade", str(sub), "--json", str(out),
                           "--isolation", isolation], cwd=here, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(out.read_text())
    assert result["status"] == "ok" and result["score"] == result["max_score"], result["output"]


def test_help_describes_every_argument(capsys):
    """Every argument of every command has a sentence (SUBMISSION, DIR, --exercise, release --out
    had none)."""
    parser = cli.build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, sub in commands.choices.items():
        for action in sub._actions:
            if not isinstance(action, argparse._HelpAction):
                assert action.help, f"{name} {action.dest} has no help"
    with pytest.raises(SystemExit):
        cli.main(["grade", "--help"])
    out = capsys.readouterr().out
    assert "SUBMISSION" in out and "symbolic link is refused" in out and "Instructors: always pass it" in out


def test_a_link_is_refused_by_grade_and_check(tmp_path):
    link = tmp_path / "softmax.py"
    link.symlink_to(ROOT / "solutions" / "softmax.ipynb")
    for command in ("grade", "check"):
        proc = graders(command, link, "--exercise", "softmax")
        assert proc.returncode == 2 and "is a symbolic link" in proc.stderr, proc.stderr
        assert "def softmax" not in proc.stdout + proc.stderr


def test_check_names_a_syntax_error_as_grade_does(tmp_path):
    cells = ["import numpy as np\n", "def softmax(scores):\n    e = np.exp(scores\n    return e / e.sum()\n"]
    nb = {"cells": [{"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None, "source": c}
                    for c in cells], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    (tmp_path / "softmax.ipynb").write_text(json.dumps(nb))
    checked = graders("check", tmp_path / "softmax.ipynb", "--exercise", "softmax")
    graded = graders("grade", tmp_path / "softmax.ipynb", "--exercise", "softmax")
    assert checked.returncode == 1 and "syntax error at cell 2, line 2" in checked.stdout, checked.stdout
    assert "syntax error at cell 2, line 2" in graded.stdout


class Terminal(io.StringIO):
    """stderr as a terminal shows it: what was written, with carriage returns."""

    def isatty(self):
        return True


def shown_lines(text: str) -> list[str]:
    """The terminal's final lines: each carriage return starts the line over."""
    return [line.rsplit("\r", 1)[-1].rstrip() for line in text.split("\n")]


def test_grade_shows_a_progress_line_on_a_terminal_and_nowhere_else(tmp_path, monkeypatch, capsys):
    sub = tmp_path / "kv_cache_bytes.py"
    sub.write_text(GOOD["kv_cache_bytes"])
    out = tmp_path / "r.json"
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    assert cli.main(["grade", str(sub), "--exercise", "kv_cache_bytes", "--json", str(out)]) == 0
    n = len(registry.tests("kv_cache_bytes"))
    written = terminal.getvalue()
    updates = [part.split(" (")[0] for part in written.replace("\n", "").split("\r") if part.strip()]
    assert updates[0] == f"kv_cache_bytes: 0 of {n} hidden tests done"
    assert updates[-1] == f"kv_cache_bytes: {n} of {n} hidden tests done"
    counts = [int(u.split(": ")[1].split(" of ")[0]) for u in updates]
    assert counts == sorted(counts)                         # it only goes forward
    assert written.endswith("\n") and shown_lines(written)[-1] == ""   # what follows starts a line
    assert "hidden tests done" not in capsys.readouterr().out      # the feedback has none of it
    assert "hidden tests done" not in out.read_text()               # nor the results JSON


@pytest.mark.parametrize("terminal, flags", [(False, []), (True, ["--no-progress"])])
def test_no_progress_line_off_a_terminal_or_when_asked(tmp_path, monkeypatch, capsys, terminal, flags):
    sub = tmp_path / "kv_cache_bytes.py"
    sub.write_text(GOOD["kv_cache_bytes"])
    stream = Terminal() if terminal else io.StringIO()
    monkeypatch.setattr(sys, "stderr", stream)
    assert cli.main(["grade", str(sub), "--exercise", "kv_cache_bytes", *flags]) == 0
    assert stream.getvalue() == ""
    assert "Score: 9 / 9" in capsys.readouterr().out


def test_the_progress_line_rewrites_itself_whole():
    terminal = Terminal()
    line = cli.ProgressLine(terminal, "mutants")
    line.update(10, 54)
    line.update(9, 9)        # a shorter text blanks what the longer one left
    line.finish()
    line.finish()            # once
    assert shown_lines(terminal.getvalue()) == ["mutants: 9 of 9 hidden tests done (0 s)", ""]
    quiet = Terminal()
    cli.ProgressLine(quiet).finish()                # nothing shown, nothing to end
    assert quiet.getvalue() == ""
