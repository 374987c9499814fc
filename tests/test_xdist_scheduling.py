"""The order in which ``make test`` hands the test files to its workers (``xdist_scheduling``):
the files that take minutes first, the learner's copy's two files as one unit, no test lost."""
from pathlib import Path

from xdist_scheduling import HEAVY_FIRST, TOGETHER, ordered, unit_of

ROOT = Path(__file__).resolve().parents[1]


def test_every_file_the_schedule_names_exists():
    for path in (*HEAVY_FIRST, *TOGETHER, *TOGETHER.values()):
        assert (ROOT / path).is_file(), f"{path} is gone: update tests/xdist_scheduling.py"
    assert len(set(HEAVY_FIRST)) == len(HEAVY_FIRST)


def test_the_heavy_files_go_first_heaviest_first_and_the_rest_keep_their_order():
    units = {"tests/a.py": {"tests/a.py::one": False, "tests/a.py::two": False},
             HEAVY_FIRST[2]: {f"{HEAVY_FIRST[2]}::t": False},
             "exercises/softmax.ipynb": {"exercises/softmax.ipynb::Cell 0": False},
             HEAVY_FIRST[0]: {f"{HEAVY_FIRST[0]}::t": False},
             "tests/b.py": {"tests/b.py::one": False}}
    got = ordered(units)
    assert list(got) == [HEAVY_FIRST[0], HEAVY_FIRST[2], "tests/a.py", "exercises/softmax.ipynb", "tests/b.py"]
    assert got == units                                      # every unit, with every one of its tests


def test_the_learner_copys_two_files_are_one_unit_and_every_other_file_its_own():
    lab = unit_of("tests/coursetools/test_learner_copy_lab.py::test_the_copys_readme_opens_rendered")
    copy = unit_of("tests/coursetools/test_learner_copy.py::test_the_copys_packages_are_its_own")
    assert lab == copy == "tests/coursetools/test_learner_copy.py"
    assert unit_of("tests/graders/test_hostile.py::test_x[softmax-bwrap]") == "tests/graders/test_hostile.py"
    assert unit_of("exercises/softmax.ipynb::Cell 3") == "exercises/softmax.ipynb"
