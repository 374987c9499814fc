"""Every exercise the course grades: one module of hidden tests per exercise.

``graders/exercises/NAME.py`` defines ``EXERCISE = Exercise(...)``; adding an exercise is adding
that module.  An exercise's ``make_tests()`` returns its hidden tests: each is a list of calls of
the learner's functions on inputs made with fixed seeds, a number of points, and a ``check`` that
receives what the calls returned (as plain data) and raises ``Fail`` with a message for the
learner when the answer is wrong.  Expected values live only in the checks' closures, in the
grader's process; the sandbox only ever sees the calls' inputs.
"""
from __future__ import annotations

import functools
import hashlib
import importlib
import pkgutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

__all__ = ["Ref", "Step", "Call", "Test", "Exercise", "names", "get", "tests", "fingerprint", "grader_files",
           "UnknownExercise"]

VISIBILITIES = ("visible", "hidden", "after_due_date", "after_published")


@dataclass(frozen=True)
class Ref:
    """An argument that is part of what an earlier call of the same test returned:
    ``Ref(3, (1,))`` is element 1 of the result of call 3 (the cache that step made)."""

    call: int
    path: tuple = ()


@dataclass(frozen=True)
class Step:
    """Inside ``Call.methods``: what step ``index`` of the same call returned (the block an
    earlier ``allocate()`` handed out), or part of it (``path``)."""

    index: int
    path: tuple = ()


@dataclass(frozen=True)
class Call:
    """One call of a learner's function.  ``capture_args`` sends the arguments back after the
    call, to check that the function did not modify them.

    ``methods`` drives an object the call returns (a class the learner writes): ``(name, args)``
    steps run in order on it, ``args`` a tuple (a method call; ``Step`` refers to an earlier
    step's result) or None (an attribute read, a property).  The call then returns, for each
    step, ``{"ok": True, "value": ...}`` or ``{"ok": False, "error": {"type", "message",
    "bases", ...}}``: an exception a step raises is part of the answer, not the end of it."""

    fn: str
    args: tuple
    capture_args: bool = False
    methods: tuple = ()


@dataclass
class Test:
    """One hidden test: the calls, what they are worth, and the check of what they returned.

    ``check(results)`` gets one ``CallResult`` per call and raises ``checks.Fail`` when the
    answer is wrong.  ``step`` names one call in messages ("step 4 of 9" for a decode loop).
    """

    name: str
    points: float
    calls: list[Call]
    check: Callable[[list], Any]
    timeout: float | None = None       # seconds; None: the grader's default (Limits.test_seconds)
    visibility: str = "visible"
    step: str = "call"
    id: str = ""

    def __post_init__(self):
        if self.visibility not in VISIBILITIES:
            raise ValueError(f"visibility must be one of {VISIBILITIES}")
        if self.points < 0 or not self.calls:
            raise ValueError(f"test {self.name!r}: points must be >= 0 and there must be calls")


@dataclass(frozen=True)
class Exercise:
    name: str
    chapter: int
    functions: tuple[str, ...]
    make_tests: Callable[[], list[Test]] = field(compare=False)
    title: str = ""


class UnknownExercise(KeyError):
    def __str__(self) -> str:
        return str(self.args[0])


PACKAGE = Path(__file__).resolve().parent       # the graders package (``fingerprint`` reads it)


def _exercise_names(folder: Path) -> list[str]:
    return sorted(m.name for m in pkgutil.iter_modules([str(folder)]) if not m.name.startswith("_"))


@functools.lru_cache(maxsize=None)
def names() -> tuple[str, ...]:
    """The exercises the grader knows, in name order."""
    return tuple(_exercise_names(Path(__file__).resolve().parent / "exercises"))


@functools.lru_cache(maxsize=None)
def get(name: str) -> Exercise:
    if name not in names():
        raise UnknownExercise(f"no exercise named {name!r}; the grader knows: {', '.join(names())}")
    module = importlib.import_module(f"graders.exercises.{name}")
    exercise = getattr(module, "EXERCISE", None)
    if not isinstance(exercise, Exercise) or exercise.name != name:
        raise UnknownExercise(f"graders/exercises/{name}.py does not define EXERCISE for {name!r}")
    return exercise


_lock = __import__("threading").Lock()
_tests_cache: dict[str, list[Test]] = {}


def tests(name: str) -> list[Test]:
    """The hidden tests of ``name``, built once per process (inputs and expected values are
    deterministic: every seed is fixed), with ids t01, t02, ..."""
    with _lock:
        if name not in _tests_cache:
            built = list(get(name).make_tests())
            for number, test in enumerate(built, start=1):
                test.id = f"t{number:02d}"
            _tests_cache[name] = built
        return _tests_cache[name]


def grader_files(name: str, package: Path | None = None) -> list[Path]:
    """Every file whose content can change a grade of ``name``: every module of the grader
    (``graders/**/*.py``, the sandbox, the harness, the supervisor, the checks, the results...),
    so that a helper module added tomorrow counts from the day it is added, except the other
    exercises' own modules (a change to one exercise's hidden tests does not regrade another's)."""
    package = package or PACKAGE
    exercises = package / "exercises"
    others = {exercises / f"{other}.py" for other in _exercise_names(exercises) if other != name}
    return sorted(path for path in package.rglob("*.py")
                  if path not in others and "__pycache__" not in path.parts)


@functools.lru_cache(maxsize=None)
def fingerprint(name: str) -> str:
    """A hash of everything that decides a grade for ``name``: the grader's files
    (``grader_files``), and the versions of Python and numpy that run the submission and compute
    the expected values.  A batch regrades a submission when this changes."""
    import sys

    import numpy
    digest = hashlib.sha256(f"python {sys.version_info[0]}.{sys.version_info[1]} numpy {numpy.__version__}\0".encode())
    for path in grader_files(name):
        digest.update(path.relative_to(PACKAGE).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]
