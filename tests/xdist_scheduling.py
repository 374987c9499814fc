"""The order in which ``pytest -n N --dist loadfile`` (``make test``) hands the test files to its
workers, and which files go to one worker together.

pytest-xdist's own ``loadfile`` order puts the files with the most tests first.  The files that
take minutes have few tests (the learner's copy: four tests, the notebooks of the whole course run
twice in a venv of its own; JupyterLab in Chromium: one test a file), so they came last, and the run
ended with one worker on one of them while the other had nothing left to do.  Here the files known
to take minutes start first, heaviest first, and the many short files fill the other worker's time
around them (the longest-first rule of scheduling jobs on machines); every other file keeps
xdist's order.  A file missing from the list, or one that no longer exists, only changes the order.

The two files of the learner's copy share its session fixture (``learner_copy``: the release and
a venv made by pip, a minute of the machine's two cores): they form one unit, so one worker makes
the copy once rather than each worker its own.
"""
from __future__ import annotations

#: Files that keep one worker busy for minutes, roughly heaviest first (``--durations`` summed by file,
#: on the shared build machine; the order only has to be about right).
HEAVY_FIRST = (
    "tests/coursetools/test_learner_copy.py",
    "tests/graders/test_hostile_fallback.py",
    "tests/graders/test_hostile.py",
    "tests/site/test_exercise_pages.py",
    "tests/graders/test_gradescope_container.py",
    "tests/kvcache/test_speculative.py",
    "tests/graders/test_mutants_exercise.py",
    "tests/site/test_every_page.py",
    "tests/graders/test_autograder.py",
    "tests/coursetools/test_course_lab.py",
    "tests/graders/test_fallback_answers.py",
    "tests/graders/test_block_allocator_exercise.py",
    "tests/site/test_jupyterlab.py",
    "tests/site/test_jupyterlab_ga2.py",
)

#: {file: the file whose unit it joins}: files sharing a session fixture too costly to make twice.
TOGETHER = {
    "tests/coursetools/test_learner_copy_lab.py": "tests/coursetools/test_learner_copy.py",
}


def unit_of(nodeid: str) -> str:
    """The unit of work (a file, or the file it joins) of a test's node id."""
    path = nodeid.split("::", 1)[0]
    return TOGETHER.get(path, path)


def ordered(units: dict[str, dict]) -> dict[str, dict]:
    """``units`` ({unit: its tests}, in xdist's order) with the heavy ones first, heaviest first."""
    rank = {path: k for k, path in enumerate(HEAVY_FIRST)}
    heavy = sorted((u for u in units if u in rank), key=rank.__getitem__)
    return {u: units[u] for u in heavy} | {u: tests for u, tests in units.items() if u not in rank}


def make_scheduler(config, log):
    """xdist's ``loadfile`` scheduling with the units and the order above (None for any other
    ``--dist``: xdist's own)."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class HeavyFirstFileScheduling(LoadFileScheduling):
        _reordered = False

        def _split_scope(self, nodeid: str) -> str:
            return unit_of(nodeid)

        def _assign_work_unit(self, node) -> None:
            # the queue is complete when the first unit is handed out (xdist's schedule() fills it
            # from the whole collection, then assigns from its front): reorder it then, once
            if not self._reordered:
                queue = ordered(dict(self.workqueue))
                self.workqueue.clear()
                self.workqueue.update(queue)
                self._reordered = True
            super()._assign_work_unit(node)

    return HeavyFirstFileScheduling(config, log)
