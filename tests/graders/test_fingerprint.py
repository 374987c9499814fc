"""The batch's grader fingerprint covers everything that can change a grade: change any file of
the grader (in a copy of the package) and a resumed batch regrades; change another exercise's
hidden tests and it does not."""
import shutil

import pytest

from graders import registry
from graders.batch import run_batch

from grader_helpers import FAST, GOOD

EXERCISE = "kv_cache_bytes"


@pytest.fixture
def package_copy(tmp_path, monkeypatch):
    """A copy of the graders package that ``registry.fingerprint`` reads instead of the real one."""
    copy = tmp_path / "graders"
    shutil.copytree(registry.PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(registry, "PACKAGE", copy)
    registry.fingerprint.cache_clear()
    yield copy
    registry.fingerprint.cache_clear()


def test_the_fingerprint_covers_the_shared_modules_a_grade_depends_on(package_copy):
    files = {p.relative_to(package_copy).as_posix() for p in registry.grader_files(EXERCISE)}
    # the modules it left out once: five exercises use _scalar.py; the registry builds the tests,
    # results.py writes the result
    assert {"exercises/_scalar.py", "registry.py", "results.py", f"exercises/{EXERCISE}.py"} <= files
    assert {"grading.py", "sandbox/__init__.py", "sandbox/runner.py", "sandbox/seccomp.py", "sandbox/supervisor.py",
            "sandbox/transcript.py", "harness.py", "checks.py", "notebook.py"} <= files
    assert "exercises/softmax.py" not in files           # another exercise's hidden tests


def test_changing_any_grader_file_regrades_the_batch(package_copy, tmp_path):
    folder = tmp_path / "class"
    folder.mkdir()
    (folder / "good.py").write_text(GOOD[EXERCISE])
    (folder / "wrong.py").write_text("def kv_cache_bytes(*a):\n    return 1\n")
    out = tmp_path / "gb.csv"

    def batch():
        registry.fingerprint.cache_clear()
        return run_batch(folder, EXERCISE, out, jobs=2, limits=FAST, progress=False)

    assert batch()["graded"] == 2
    assert batch()["graded"] == 0                         # unchanged: resumed
    files = registry.grader_files(EXERCISE)
    assert len(files) >= 15
    for path in files:          # one more file changed each time: only that change can regrade
        path.write_bytes(path.read_bytes() + b"\n# a change\n")
        assert batch()["graded"] == 2, f"a change to {path.relative_to(package_copy)} did not regrade"
    other = package_copy / "exercises" / "softmax.py"
    other.write_bytes(other.read_bytes() + b"\n# a change\n")
    assert batch()["graded"] == 0


def test_a_module_added_tomorrow_counts_from_the_day_it_is_added(package_copy):
    before = registry.fingerprint(EXERCISE)
    (package_copy / "exercises" / "_matrices.py").write_text("SHARED = 1\n")
    registry.fingerprint.cache_clear()
    middle = registry.fingerprint(EXERCISE)
    (package_copy / "judging.py").write_text("RULE = 2\n")
    registry.fingerprint.cache_clear()
    assert len({before, middle, registry.fingerprint(EXERCISE)}) == 3
