"""graders.grading as one story, and the pieces it is told with: the transcript of the results
channel (read once, by one set of rules), the typed outcomes and verdicts, one job writer, a
submission read once, and the supervisor's own guards."""
import json
import os
import subprocess
import textwrap
from pathlib import Path

import pytest

from graders import Limits, grading, notebook, registry
from graders.grading import Problem, Returned, Trouble, Verdict, judge
from graders.notebook import Extracted
from graders.sandbox.transcript import MAX_FAILURES, Transcript

from grader_helpers import FAST, GOOD, PYTHON, ROOT, grade_text


def feed(transcript, *messages):
    for message in messages:
        transcript.feed(message if isinstance(message, bytes) else json.dumps(message).encode())
    return transcript


IMPORTED = [{"t": "hello"}, {"t": "import_start"}, {"t": "import", "ok": True}]


# ---------------------------------------------------------------------------- the transcript


def test_only_the_harness_sequence_starts_a_test():
    t = feed(Transcript(tests=frozenset({"t01", "t02"})), *IMPORTED, {"t": "start", "id": "t01"})
    assert (t.phase, t.running) == ("test", "t01")
    feed(t, {"t": "start", "id": "t02"}, {"t": "start", "id": ["t02"]}, {"t": "start", "id": "t99"})
    assert t.running == "t01"                               # a start in the middle of a test: ignored
    feed(t, {"t": "result", "id": "t01", "calls": []}, {"t": "start", "id": "t01"})
    assert t.phase == "between"                             # a test starts once
    feed(t, {"t": "start", "id": "t02"})
    assert t.running == "t02"


def test_a_start_during_the_import_is_ignored():
    t = feed(Transcript(tests=frozenset({"t01"})), {"t": "import_start"}, {"t": "start", "id": "t01"})
    assert t.phase == "import" and t.running is None


def test_the_last_result_before_the_next_start_wins():
    t = feed(Transcript(tests=frozenset({"t01", "t02"})), *IMPORTED, {"t": "start", "id": "t01"},
             {"t": "result", "id": "t01", "calls": ["fake"]},        # written by the submission first
             {"t": "result", "id": "t02", "calls": ["fake"]},        # not the test that runs
             {"t": "result", "id": "t01", "calls": ["harness"]},     # the harness's own, after the call
             {"t": "start", "id": "t02"}, {"t": "result", "id": "t01", "calls": ["late"]})
    assert t.results == {"t01": {"t": "result", "id": "t01", "calls": ["harness"]}}


def test_an_end_faked_during_a_test_is_ignored_and_one_between_tests_does_not_stop_the_harness():
    t = feed(Transcript(tests=frozenset({"t01", "t02"})), *IMPORTED, {"t": "start", "id": "t01"},
             {"t": "done", "gave_up": 1})
    assert t.phase == "test" and t.finished is None
    feed(t, {"t": "result", "id": "t01", "calls": []}, {"t": "done", "gave_up": 2})
    assert t.phase == "done"
    feed(t, {"t": "start", "id": "t02"}, {"t": "result", "id": "t02", "calls": []}, {"t": "done"})
    assert set(t.results) == {"t01", "t02"} and t.phase == "done" and t.gave_up(2) is None


def test_the_import_counts_once_and_its_free_text_is_capped_and_checked():
    failures = {f"import m{k}": "x" * 1000 for k in range(200)} | {"import scipy": "No module named 'scipy'"}
    t = feed(Transcript(), {"t": "import_start"},
             {"t": "import", "ok": True, "import_failures": {"import scipy": "nope", 3: "x"}},
             {"t": "import", "ok": False, "import_failures": failures})
    assert t.import_ok and t.known_import_failures({"import scipy"}) == {"import scipy": "nope"}
    t = feed(Transcript(), {"t": "import_start"}, {"t": "import", "ok": True, "import_failures": failures})
    assert len(t.import_failures) == MAX_FAILURES and all(len(v) <= 200 for v in t.import_failures.values())
    assert t.known_import_failures({"import numpy"}) == {}


@pytest.mark.parametrize("count, said", [(2, 2), (0, None), (99, None), (True, None), ("2", None), (2.0, None)])
def test_only_a_plausible_give_up_count_is_said(count, said):
    t = feed(Transcript(tests=frozenset({"t01"})), *IMPORTED, {"t": "done", "gave_up": count})
    assert t.gave_up(5) == said


def test_lines_that_are_not_messages_are_counted_not_kept():
    t = feed(Transcript(), b"", b"not json", b"[1, 2]", b'{"t": 3}', b'{"no": "kind"}', b"\xff\xfe",
             b"[" * 100_000)
    assert t.junk == 7 and t.phase == "startup" and t.results == {}


# ------------------------------------------------------------------------ outcomes, verdicts

EXTRACTED = Extracted("x = 1\n", [("", 1)], {})


def test_a_problem_is_judged_as_it_is_and_the_verdict_carries_its_trouble():
    test = registry.tests("kv_cache_bytes")[0]
    assert judge(test, Problem("not run: gone", Trouble.TIMEOUT), EXTRACTED, 2.0) == \
        Verdict(False, "not run: gone", Trouble.TIMEOUT)
    assert judge(test, None, EXTRACTED, 2.0).trouble is Trouble.CRASHED
    assert judge(test, Returned({"calls": "junk"}), EXTRACTED, 2.0).trouble is Trouble.CRASHED
    assert Returned({"timeout": True}).timed_out and not Returned({}).timed_out
    assert Problem("x", Trouble.TIMEOUT).timed_out and not Problem("x", Trouble.CRASHED).timed_out


def test_returned_data_is_checked_against_the_graders_expected_values():
    from graders.harness import encode
    test = registry.tests("kv_cache_bytes")[0]              # the 7B-class example
    right = {"calls": [{"ok": True, "value": encode(2 * 32 * 32 * 128 * 8192 * 2)}]}
    wrong = {"calls": [{"ok": True, "value": encode(1)}]}
    assert judge(test, Returned(right), EXTRACTED, 2.0) == Verdict(True)
    verdict = judge(test, Returned(wrong), EXTRACTED, 2.0)
    assert not verdict.passed and verdict.trouble is None and verdict.message
    timed = judge(test, Returned({"calls": [], "timeout": True}), EXTRACTED, 0.5)
    assert timed.trouble is Trouble.TIMEOUT and "0.5 s" in timed.message


def test_a_verdict_for_every_test_and_the_worst_trouble_is_the_status():
    source = GOOD["kv_cache_bytes"].replace("    return 2 *", "    if n_tokens == 0:\n        import os; os._exit(3)\n"
                                            "    return 2 *")
    result = grade_text(source, "kv_cache_bytes")
    assert result["status"] == "crashed"
    failed = [t for t in result["tests"] if t["status"] == "failed"]
    assert len(failed) == 1 and "exit status 3" in failed[0]["output"]


# ------------------------------------------------------------------------------- the job


def test_grading_and_the_public_checks_write_their_jobs_with_one_writer(monkeypatch, tmp_path):
    written = []
    real = grading.Job.write

    def record(job, folder, files=None):             # a run's files, or the job's own
        written.append(json.loads(files[0] if files else job.spec))
        return real(job, folder, files)
    monkeypatch.setattr(grading.Job, "write", record)
    limits = Limits(submission_seconds=7, import_seconds=3)
    sub = tmp_path / "softmax.py"
    sub.write_text(GOOD["softmax"])
    grading.grade_file(sub, limits=limits)
    report = grading.check_file(sub, limits=limits)
    assert report["problem"] is None and report["outcomes"]
    graded, checked = written
    assert graded["limits"] == checked["limits"]            # one CPU budget, whichever job it is
    assert graded["limits"]["cpu_seconds"] == 7 + 3 + 2
    assert checked["cases"] == [] and len(graded["cases"]) == len(registry.tests("softmax"))
    assert not any("expected" in json.dumps(case) for case in graded["cases"])


# ------------------------------------------------------------------------- read once


def test_a_notebook_is_decoded_and_parsed_once(monkeypatch):
    """Choosing the exercise (from the metadata: the file name names none) and extracting the
    answer share one decoding of the JSON and one parse per cell; they used to be a regular
    expression over the text and then the parser."""
    decoded, parsed = [], []
    real_loads, real_parse = notebook.json.loads, notebook._parse
    monkeypatch.setattr(notebook.json, "loads",       # (json is shared: count the notebook's decodings)
                        lambda text, *a, **k: decoded.append('"cells"' in str(text)[:20]) or real_loads(text, *a, **k))
    monkeypatch.setattr(notebook, "_parse", lambda *a, **k: parsed.append(1) or real_parse(*a, **k))
    cells = ["import numpy as np\n", GOOD["softmax"], "print(softmax([1.0, 2.0]))\n"]
    nb = {"cells": [{"cell_type": "code", "metadata": {}, "outputs": [], "source": c} for c in cells],
          "metadata": {"kvcourse": {"exercise": "softmax"}}, "nbformat": 4, "nbformat_minor": 5}
    data = json.dumps(nb).encode()
    decoded.clear()
    result = grading.grade_bytes(data, "jdoe.ipynb", limits=FAST)
    assert result["exercise"] == "softmax" and result["score"] == result["max_score"]
    assert "graded as 'softmax'" in result["output"]
    assert sum(decoded) == 1 and len(parsed) == len(cells)


def test_the_names_a_submission_defines_come_from_the_parser():
    source = notebook.read(textwrap.dedent('''
        import numpy as np, os.path as osp
        from math import sqrt as root
        text = """
        def softmax(x):
            return x
        """
        class Model: pass
        if __name__ == "__main__":
            def hidden(): pass
        ''').encode(), "s.py")
    assert source.defined_names() == {"np", "osp", "root", "text", "Model"}    # not what a string holds


# ---------------------------------------------------------------------- the supervisor


def test_the_supervisor_builds_a_file_system_only_as_pid_1_of_its_own_namespaces(tmp_path):
    """Anywhere else its mounts would land on the grader's machine: it refuses (run here in a
    throw-away mount namespace, so that even a regression could not touch this machine)."""
    report_r, report_w = os.pipe()
    cmd = [PYTHON, "-I", "-S", "-B", str(ROOT / "graders" / "sandbox" / "supervisor.py"), "--report-fd", str(report_w),
           "--workdir", "/tmp/scratch", "--keep", "/usr"]
    if os.geteuid() == 0:
        cmd = ["unshare", "--mount"] + cmd
    proc = subprocess.run(cmd, pass_fds=(report_w,), capture_output=True, timeout=60)
    os.close(report_w)
    report = os.read(report_r, 1 << 16).decode()
    os.close(report_r)
    assert proc.returncode == 71, proc.stderr
    assert "only by PID 1" in json.loads(report.splitlines()[0])["error"]


@pytest.mark.parametrize("isolation", ["auto", "subprocess"])
def test_a_sandbox_that_cannot_start_the_harness_is_the_graders_failure_not_the_learners(isolation, tmp_path):
    """No spec in the job folder: the harness never starts.  That is a grader_error (the grader
    says so), not a submission that "ended while loading"."""
    from graders.sandbox import Sandbox
    tmp_path.chmod(0o755)
    (tmp_path / "submission.py").write_text("x = 1\n")
    (tmp_path / "submission.py").chmod(0o644)
    with pytest.raises(RuntimeError, match="could not start the harness"):
        Sandbox(isolation).run(tmp_path, FAST, {})
