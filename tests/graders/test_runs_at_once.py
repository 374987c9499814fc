"""How many of one submission's isolated sandboxes run at once (``grading.runs_at_once``), who
asks for how many (``grade --sandboxes``, a batch), and that the ones that did run at once
overlapped.  What two sandboxes running at once cannot share is attacked in the hostile suite
(``mutants_neighbour.py``) and in ``test_sandbox_attacks.py`` (locks, watches, mincore)."""
import os
from types import SimpleNamespace

import pytest

from graders import Limits, cli, grading
from graders.batch import run_batch
from graders.sandbox import modes

from grader_helpers import GOOD


def _sandbox(mode_class, own_user=True):
    return SimpleNamespace(isolation=mode_class("for the test"), own_user=own_user)


@pytest.mark.parametrize("cores, expected", [(1, 1), (2, 2), (8, 2)])
def test_one_per_core_two_at_most_where_runs_are_contained(monkeypatch, cores, expected):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cores)))
    for mode_class in (modes.Bubblewrap, modes.Namespaces):
        assert grading.runs_at_once(_sandbox(mode_class), Limits()) == expected


def test_what_is_asked_for_wins_except_in_the_fallback_without_namespaces(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    assert grading.runs_at_once(_sandbox(modes.Bubblewrap), Limits(sandboxes=1)) == 1
    assert grading.runs_at_once(_sandbox(modes.Namespaces), Limits(sandboxes=3)) == 3
    # two runs there would share the machine's folders, and one's sweep would reach the other
    assert modes.Subreaper.contained is False
    for asked in (None, 1, 2, 4):
        assert grading.runs_at_once(_sandbox(modes.Subreaper), Limits(sandboxes=asked)) == 1
        # runs as one user (a grader that is not root) share that user's limits: one at a time
        for mode_class in (modes.Bubblewrap, modes.Namespaces):
            assert grading.runs_at_once(_sandbox(mode_class, own_user=False), Limits(sandboxes=asked)) == 1


def test_the_grade_command_passes_its_sandboxes_flag(monkeypatch, tmp_path, capsys):
    seen = []

    def fake_grade_file(path, exercise=None, *, limits, **kwargs):
        seen.append(limits.sandboxes)
        return {"score": 0, "max_score": 0, "tests": [], "status": "ok", "output": "", "exercise": "softmax"}

    monkeypatch.setattr(grading, "grade_file", fake_grade_file)
    submission = tmp_path / "softmax.py"
    submission.write_text(GOOD["softmax"])
    for argv, expected in ((["--sandboxes", "1"], 1), ([], None)):
        cli.main(["grade", str(submission), "--exercise", "softmax", "--no-progress", *argv])
        assert seen[-1] == expected
    with pytest.raises(SystemExit):
        cli.main(["grade", str(submission), "--sandboxes", "0"])
    assert "--sandboxes" in capsys.readouterr().err


def test_a_batch_asks_for_one_sandbox_per_submission(monkeypatch, tmp_path):
    asked = []
    real = grading.runs_at_once

    def spy(sandbox, limits):
        asked.append(limits.sandboxes)
        return real(sandbox, limits)

    monkeypatch.setattr(grading, "runs_at_once", spy)
    (tmp_path / "class").mkdir()
    (tmp_path / "class" / "a.py").write_text(GOOD["softmax"])
    run_batch(tmp_path / "class", "softmax", tmp_path / "book.csv", jobs=1, progress=False)
    assert asked == [1]
