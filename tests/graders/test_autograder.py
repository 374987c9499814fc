"""``python -m graders autograder``: Gradescope's zip per exercise, unzipped into a temporary
folder laid out as Gradescope lays /autograder out, and run through its own ``run_autograder``
(``AUTOGRADER_ROOT`` the folder, ``AUTOGRADER_PYTHON`` this venv's interpreter): correct, wrong,
hostile and malformed notebooks, none or two, get the scores ``python -m graders grade`` gives."""
from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import zipfile
from pathlib import Path

import pytest

from graders import registry

from grader_helpers import HOSTILE, PYTHON, ROOT

#: Gradescope's results.json: the keys it reads at the top and in a test (its documented
#: format); anything else of ours must sit under extra_data.
GRADESCOPE_TOP = {"score", "execution_time", "output", "output_format", "test_output_format",
                  "test_name_format", "visibility", "stdout_visibility", "extra_data", "tests", "leaderboard"}
GRADESCOPE_TEST = {"score", "max_score", "status", "name", "name_format", "number", "output",
                   "output_format", "tags", "visibility", "extra_data"}
GRADED = ("softmax", "attention_tail", "time_per_token")


@pytest.fixture(scope="module")
def zips(tmp_path_factory):
    out = tmp_path_factory.mktemp("autograders")
    proc = subprocess.run([PYTHON, "-m", "graders", "autograder", *GRADED, "--out", str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300, env=_env(ROOT))
    assert proc.returncode == 0, proc.stderr
    return out


def _env(pythonpath: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOGRADER_")}
    env["PYTHONPATH"] = str(pythonpath)
    return env


def gradescope(zips: Path, exercise: str, tmp_path: Path, files: dict[str, bytes]) -> tuple[dict, str]:
    """Unzip the exercise's autograder as Gradescope does (source/, run_autograder beside it), put
    ``files`` in submission/, run it; (results.json, its log)."""
    root = tmp_path / "autograder"
    with zipfile.ZipFile(zips / f"{exercise}.zip") as archive:
        archive.extractall(root / "source")
    shutil.copy(root / "source" / "run_autograder", root / "run_autograder")
    (root / "run_autograder").chmod(0o755)
    (root / "submission").mkdir()
    for name, data in files.items():
        (root / "submission" / name).parent.mkdir(parents=True, exist_ok=True)
        (root / "submission" / name).write_bytes(data)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",)}
    env.update(AUTOGRADER_ROOT=str(root), AUTOGRADER_PYTHON=PYTHON)
    proc = subprocess.run([str(root / "run_autograder")], capture_output=True, text=True, timeout=600,
                          env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    return json.loads((root / "results" / "results.json").read_text()), proc.stdout


def grade_locally(tmp_path: Path, exercise: str, name: str, data: bytes) -> dict:
    """``python -m graders grade FILE --exercise EXERCISE --json`` in the course checkout."""
    folder = tmp_path / "local"
    folder.mkdir(exist_ok=True)
    (folder / name).write_bytes(data)
    out = folder / "result.json"
    proc = subprocess.run([PYTHON, "-m", "graders", "grade", str(folder / name), "--exercise", exercise,
                           "--json", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env=_env(ROOT))
    assert proc.returncode == 0, proc.stderr
    return json.loads(out.read_text())


def notebook(source: str, exercise: str | None = None) -> bytes:
    """A notebook whose answer cell is ``source``."""
    meta = {"kvcourse": {"exercise": exercise, "chapter": 1}} if exercise else {}
    return json.dumps({"cells": [{"cell_type": "code", "metadata": {"tags": ["answer"]}, "source": source,
                                  "outputs": [], "execution_count": None}],
                       "metadata": meta, "nbformat": 4, "nbformat_minor": 5}).encode()


def solution(exercise: str) -> bytes:
    return (ROOT / "solutions" / f"{exercise}.ipynb").read_bytes()


def assert_gradescope_format(result: dict) -> None:
    assert set(result) <= GRADESCOPE_TOP, set(result) - GRADESCOPE_TOP
    assert {"score", "tests", "output", "extra_data"} <= set(result)
    for test in result["tests"]:
        assert set(test) <= GRADESCOPE_TEST, set(test) - GRADESCOPE_TEST
        assert {"name", "score", "max_score", "status", "output", "visibility"} <= set(test)
        assert test["status"] in ("passed", "failed") and 0 <= test["score"] <= test["max_score"]
    assert result["score"] == pytest.approx(sum(t["score"] for t in result["tests"]))
    # what Gradescope shows the student never carries the isolation paragraph
    assert "Isolation:" not in result["output"]
    assert not any("Isolation:" in t["output"] for t in result["tests"])


def assert_same_scores(result: dict, local: dict) -> None:
    assert [(t["name"], t["score"], t["status"]) for t in result["tests"]] == \
           [(t["name"], t["score"], t["status"]) for t in local["tests"]]
    assert result["score"] == local["score"]
    assert result["extra_data"]["status"] == local["status"]


# ------------------------------------------------------------------------------- the package


# The hidden tests' private helpers each exercise imports (and so its package ships): no other
# exercise's hidden tests or helpers reach its package.
HELPERS_USED = {
    "kv_cache_bytes": ("_scalar",), "max_batch": ("_scalar",), "arithmetic_intensity": ("_scalar",),
    "time_per_token": ("_scalar",), "prefill_time": ("_scalar",),
    "attend_step": ("_decode_step",), "latent_attend_step": ("_decode_step",),
}


def test_each_zip_has_gradescopes_layout_and_only_its_exercises_hidden_tests(zips):
    requirements = {line.strip() for line in (ROOT / "requirements.txt").read_text().splitlines()}
    for exercise in GRADED:
        with zipfile.ZipFile(zips / f"{exercise}.zip") as archive:
            names = archive.namelist()
            modes = {info.filename: info.external_attr >> 16 for info in archive.infolist()}
            assert {"setup.sh", "run_autograder", "requirements.txt", "exercise.json"} <= set(names)
            assert modes["run_autograder"] & stat.S_IXUSR and modes["setup.sh"] & stat.S_IXUSR
            assert json.loads(archive.read("exercise.json")) == {"exercise": exercise}
            hidden = sorted(n for n in names if n.startswith("graders/exercises/"))
            helpers = [f"graders/exercises/{name}.py" for name in HELPERS_USED.get(exercise, ())]
            assert hidden == sorted(["graders/exercises/__init__.py", *helpers, f"graders/exercises/{exercise}.py"])
            assert not any(n.split("/")[0] in ("solutions", "exercises", "tests", "kvcache", "coursebook",
                                               "public_checks", "book", "coursetools") for n in names)
            assert "course/catalogue.py" in names          # what the grader knows of the exercises
            pins = archive.read("requirements.txt").decode().split()
            assert "numpy>=1.26,<3" in pins and set(pins) <= requirements
            setup = archive.read("setup.sh").decode()
            assert "apt-get install" in setup and "bubblewrap" in setup and "-r requirements.txt" in setup
            run = archive.read("run_autograder").decode()
            assert "${AUTOGRADER_ROOT:-/autograder}" in run and "${AUTOGRADER_PYTHON:-python3}" in run
            # the machine goes with the exercises whose grader runs programs on it, and only with them
            assert ("ga2/machine.py" in names) == (exercise == "attention_tail")


def test_an_unknown_exercise_is_a_usage_error(tmp_path):
    proc = subprocess.run([PYTHON, "-m", "graders", "autograder", "nosuch", "--out", str(tmp_path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, env=_env(ROOT))
    assert proc.returncode == 2 and "no exercise named 'nosuch'" in proc.stderr
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------------------- grading


def test_a_correct_notebook_of_any_name_gets_full_marks_as_grade_gives(zips, tmp_path):
    result, log = gradescope(zips, "softmax", tmp_path, {"Jane Doe - homework 3 (1).ipynb": solution("softmax")})
    assert_gradescope_format(result)
    local = grade_locally(tmp_path, "softmax", "softmax.ipynb", solution("softmax"))
    assert_same_scores(result, local)
    assert result["score"] == local["max_score"] > 0
    assert result["extra_data"]["exercise"] == "softmax"
    assert result["extra_data"]["isolation_paragraph"].startswith("Isolation: ")
    assert result["extra_data"]["isolation_paragraph"] in log          # the instructor's log has it
    assert result["stdout_visibility"] == "hidden"


def test_a_wrong_notebook_scores_as_grade_scores_it(zips, tmp_path):
    wrong = notebook("import numpy as np\n\n\ndef softmax(scores):\n    e = np.exp(scores)\n"
                     "    return e / e.sum(axis=-1, keepdims=True)\n", "softmax")
    result, _ = gradescope(zips, "softmax", tmp_path, {"submission.ipynb": wrong})
    assert_gradescope_format(result)
    local = grade_locally(tmp_path, "softmax", "submission.ipynb", wrong)
    assert_same_scores(result, local)
    assert 0 < result["score"] < local["max_score"]


def test_the_exercise_is_the_packages_not_the_notebooks(zips, tmp_path):
    """A notebook whose metadata and name say another exercise is graded as the package's."""
    other = solution("softmax")
    result, _ = gradescope(zips, "time_per_token", tmp_path, {"softmax.ipynb": other})
    assert_gradescope_format(result)
    assert result["extra_data"]["exercise"] == "time_per_token"
    assert [t["name"] for t in result["tests"]] == [i.name for i in registry.items("time_per_token")]
    assert result["score"] == 0
    assert_same_scores(result, grade_locally(tmp_path, "time_per_token", "softmax.ipynb", other))


def test_a_program_exercise_runs_on_the_shipped_machine(zips, tmp_path):
    result, _ = gradescope(zips, "attention_tail", tmp_path, {"tail.ipynb": solution("attention_tail")})
    assert_gradescope_format(result)
    local = grade_locally(tmp_path, "attention_tail", "tail.ipynb", solution("attention_tail"))
    assert_same_scores(result, local)
    assert result["score"] == local["max_score"] > 0


def test_hostile_notebooks_score_as_grade_scores_them(zips, tmp_path):
    """A notebook that prints and writes fake results (results.json where Gradescope reads it
    included) and one that kills its parent: the scores grade gives, the real results file."""
    fake = (HOSTILE / "fake_result.py").read_text()
    fake += ("\n\ndef _claim():\n    for path in ('/autograder/results/results.json', "
             f"{str(tmp_path / 'autograder' / 'results' / 'results.json')!r}):\n"
             "        try:\n            with open(path, 'w') as f:\n                json.dump(FAKE, f)\n"
             "        except OSError:\n            pass\n\n\n_claim()\n")
    result, _ = gradescope(zips, "softmax", tmp_path / "a", {"hw.ipynb": notebook(fake, "softmax")})
    assert_gradescope_format(result)
    assert result["score"] < 14
    assert_same_scores(result, grade_locally(tmp_path / "a", "softmax", "hw.ipynb", notebook(fake, "softmax")))
    killer = notebook((HOSTILE / "kill_parent.py").read_text(), "time_per_token")
    result, _ = gradescope(zips, "time_per_token", tmp_path / "b", {"hw.ipynb": killer})
    assert_gradescope_format(result)
    assert result["score"] == 0 and result["tests"]
    assert_same_scores(result, grade_locally(tmp_path / "b", "time_per_token", "hw.ipynb", killer))


def test_a_malformed_notebook_gets_a_clear_zero(zips, tmp_path):
    broken = b'{"cells": [{"cell_type": "code", "source": "def softmax(x):'
    result, _ = gradescope(zips, "softmax", tmp_path, {"softmax.ipynb": broken})
    assert_gradescope_format(result)
    local = grade_locally(tmp_path, "softmax", "softmax.ipynb", broken)
    assert_same_scores(result, local)
    assert result["score"] == 0 and result["extra_data"]["status"] == "unreadable"
    assert "could not be read" in result["output"]


@pytest.mark.parametrize("files, words", [
    ({}, "no notebook (.ipynb) was handed in (no file at all)"),
    ({"answer.txt": b"def softmax(x): ...\n", "scan.pdf": b"%PDF-1.4"},
     "no notebook (.ipynb) was handed in (the files handed in: answer.txt, scan.pdf)"),
    ({"a.ipynb": b"{}", "old/b.ipynb": b"{}", ".ipynb_checkpoints/a-checkpoint.ipynb": b"{}"},
     "2 notebooks were handed in (a.ipynb, old/b.ipynb): hand in only your softmax exercise notebook"),
])
def test_no_notebook_or_several_get_a_zero_with_the_reason(zips, tmp_path, files, words):
    result, _ = gradescope(zips, "softmax", tmp_path, files)
    assert_gradescope_format(result)
    assert words in result["output"]
    assert result["score"] == 0
    assert [(t["name"], t["max_score"]) for t in result["tests"]] == \
           [(i.name, float(i.points)) for i in registry.items("softmax")]
    assert all(words in t["output"] for t in result["tests"])


# ------------------------------------------------------------------ where no sandbox can run


def test_a_sandbox_that_refuses_to_run_is_a_result_not_a_crash(tmp_path, monkeypatch, capsys):
    """Where the sandbox refuses to start (bubblewrap unusable and the fallback unwilling to run
    the submission as root), the student gets every test at 0 and a sentence that the problem is
    the course's; the instructor's log and extra_data say what it was."""
    import graders.grading as grading
    from graders import autograder
    from graders.sandbox import SandboxUnavailable

    def refuse(*args, **kwargs):
        raise SandboxUnavailable("the fallback will not run a submission as root")
    (tmp_path / "submission").mkdir()
    (tmp_path / "submission" / "hw.ipynb").write_bytes(solution("softmax"))
    for how in ("raises", "inside"):
        if how == "raises":      # refused before grading starts
            monkeypatch.setattr(grading, "grade_file", refuse)
        else:                    # refused inside grading: the grader's own grader_error result
            monkeypatch.undo()
            monkeypatch.setattr(grading, "Sandbox", refuse)
        written = autograder.run(tmp_path, "softmax")
        on_disk = json.loads((tmp_path / "results" / "results.json").read_text())
        assert on_disk == written
        assert_gradescope_format(on_disk)
        assert on_disk["score"] == 0 and len(on_disk["tests"]) == len(registry.items("softmax"))
        assert "on the course's side, not in your notebook" in on_disk["output"]
        assert on_disk["extra_data"]["status"] == "grader_error"
        assert "as root" in json.dumps(on_disk["extra_data"])
        assert "as root" in capsys.readouterr().out


# ------------------------------------------------------------- a killed grader, a forged file


def test_results_so_far_say_what_was_graded_and_what_happened():
    """What results.json holds while grading goes on: the tests judged with their scores, the
    others at 0, and words for a student that neither blame the notebook nor the course."""
    from graders import autograder
    from graders.outcomes import Verdict
    tests = registry.tests("softmax")
    verdicts = {tests[0].id: Verdict(True), tests[1].id: Verdict(False, "differs from the expected")}
    result = autograder.gradescope_result(autograder.interrupted_result("softmax", verdicts, 0.0, "hw.ipynb"))
    assert_gradescope_format(result)
    assert result["extra_data"]["status"] == "interrupted"
    assert result["score"] == tests[0].points
    assert [t["status"] for t in result["tests"][:2]] == ["passed", "failed"]
    assert all(t["output"].startswith("not graded: the grading stopped") for t in result["tests"][2:])
    assert f"2 of {len(tests)} hidden tests were graded" in result["output"]
    assert "on the course's side" not in result["output"] and "memory" in result["output"]


def test_finish_keeps_only_the_graders_results_and_ends_what_the_sandboxes_left(tmp_path):
    """``--finish``: a results.json the grader wrote is kept (a partial one says so in the log);
    one of another user (a forged one), a link, or none at all is replaced by a zero that says
    the grader could not grade; nothing else stays in the folder."""
    from graders import autograder
    from graders.results import write_json
    folder = autograder.prepare_results(tmp_path)
    assert os.stat(folder).st_mode & 0o077 == 0
    partial = autograder.gradescope_result(autograder.interrupted_result("softmax", {}, 0.0))
    write_json(folder / "results.json", partial)
    (folder / "forged.json").write_text("{}")
    said = autograder.finish(tmp_path, "softmax")
    assert any("holds the tests graded until then" in line for line in said)
    assert sorted(os.listdir(folder)) == ["results.json"]
    assert json.loads((folder / "results.json").read_text()) == json.loads(json.dumps(partial))
    perfect = {"score": 14.0, "tests": [], "output": "All passed."}
    for forge in ("other user", "link", "none"):
        target = folder / "results.json"
        target.unlink(missing_ok=True)
        if forge == "other user":
            target.write_text(json.dumps(perfect))
            if os.geteuid() == 0:
                os.chown(target, 123_457, 123_457)
            else:
                continue
        elif forge == "link":
            elsewhere = tmp_path / "perfect.json"
            elsewhere.write_text(json.dumps(perfect))
            target.symlink_to(elsewhere)
        said = autograder.finish(tmp_path, "softmax")
        written = json.loads(target.read_text())
        assert not target.is_symlink() and os.stat(target).st_uid == os.geteuid()
        assert written["score"] == 0 and written["extra_data"]["status"] == "grader_error", forge
        assert len(written["tests"]) == len(registry.items("softmax"))
        assert any("could not grade" in line for line in said), said
