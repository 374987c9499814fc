"""Every exercise the course grades: one module of hidden tests per exercise.

``graders/exercises/NAME.py`` defines ``EXERCISE = Exercise(...)``; adding an exercise is adding
that module and the exercise's line in the course's catalogue (``course.catalogue``: its chapter,
title and the functions it grades).  An exercise's ``make_tests()`` returns its hidden tests: each is a list of calls of
the learner's functions on inputs made with fixed seeds, a number of points, and a ``check`` that
receives what the calls returned (as plain data) and raises ``Fail`` with a message for the
learner when the answer is wrong.  Expected values live only in the checks' closures, in the
grader's process; the sandbox only ever sees the calls' inputs.

Most exercises are a list of tests, each worth its points.  An exercise can say more:

- ``libs``: course packages its tests need importable in the sandbox (``Lib("ga2", hide=...)``:
  the GA-2 machine for a check to run programs on, without the modules that would answer it);
- ``Module``: an argument the harness makes into a module object, from a compiled module body
  the grader sends (no file, no source text): a program builder for a learner's check to judge;
- ``Test.isolated``: the test runs in a sandbox of its own, so that nothing one call learned
  (memory, files, processes) can reach another; ``Test.phase`` with ``Exercise.proceed``: later
  tests run only when the earlier ones allow it (a check that rejects a correct builder is not
  run on the mutants);
- ``report`` and ``items``: what the result's entries are, when they are not one per test
  (wheats and chaffs: one entry for "accepts every correct builder", one for "caught X of N");
- ``quiet``: nothing the submission printed or put in an exception reaches the feedback;
- ``test_seconds``, ``submission_seconds``: its own default limits (a flag given to the grader wins).
"""
from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.util
import pkgutil
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy

from course import catalogue

__all__ = ["Ref", "Step", "Module", "Lib", "Call", "Test", "case", "Item", "Exercise", "names", "get", "tests",
           "items",
           "fingerprint", "grader_files", "lib_files", "package_dir", "UnknownExercise"]

VISIBILITIES = ("visible", "hidden", "after_due_date", "after_published")


@dataclass(frozen=True)
class Ref:
    """An argument that is part of what an earlier call of the same test returned:
    ``Ref(3, (1,))`` is element 1 of the result of call 3 (the cache that step made)."""

    call: int
    path: tuple = ()


@dataclass(frozen=True)
class Module:
    """An argument the harness makes into a module: ``code`` is a module's body compiled by the
    grader (``marshal`` bytes of a code object), run in a fresh module named ``name`` whose
    package is ``package`` (so that its relative imports find that package's modules, which the
    exercise's ``libs`` make importable).  The module has no file and no source text: the
    sandbox gets compiled code only, and ``inspect.getsource`` fails on everything in it."""

    name: str
    code: bytes = field(repr=False)
    package: str = ""


@dataclass(frozen=True)
class Lib:
    """A course package importable in the sandbox while the hidden tests run: ``name`` is its
    import name (a top-level package of the course, ``"ga2"``); the modules named in ``hide``
    (top-level modules or sub-packages) are left out of the sandbox's copy, whose ``__init__``
    then imports only what is left.  The copy is the learner's copy otherwise: the exercises'
    counterparts in it are starters or left out.  ``parts`` are installed into it as the grader's
    own versions, compiled (``graders.machine_parts``: a machine that must run RQ has a
    requantizer with no source text).  The public checks see the learner's copy whole, with every
    part installed so."""

    name: str
    hide: tuple[str, ...] = ()
    parts: tuple[str, ...] = ()


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
    "bases", ...}}``: an exception a step raises is part of the answer, not the end of it.

    ``raises`` makes an exception the call itself raises its answer too (a function that must
    refuse bad input): the check then receives a ``checks.Raised`` (the classes of the exception,
    named by the harness, never by the learner's code) in place of a value, and the test goes on
    to its next call."""

    fn: str
    args: tuple
    capture_args: bool = False
    methods: tuple = ()
    raises: bool = False


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
    isolated: bool = False             # run in a sandbox of its own (nothing of another test reaches it)
    phase: int = 0                     # tests run phase by phase (``Exercise.proceed`` may stop a phase)

    def __post_init__(self):
        if self.visibility not in VISIBILITIES:
            raise ValueError(f"visibility must be one of {VISIBILITIES}")
        if self.points < 0 or not self.calls:
            raise ValueError(f"test {self.name!r}: points must be >= 0 and there must be calls")


def case(name: str, points: float, calls, check: Callable, *inputs, **options) -> Test:
    """One row of an exercise's table of hidden tests: the test ``name`` worth ``points``, whose
    ``calls`` are checked by ``check(*inputs, results)``.  ``check`` is a module-level function and
    ``inputs`` (what the calls were made from, with fixed seeds, or what they must give) are bound
    here, in the row.  ``options`` are ``Test``'s own (``timeout``, ``step``, ``isolated``...)."""
    return Test(name, points, list(calls), functools.partial(check, *inputs), **options)


@dataclass(frozen=True)
class Item:
    """One entry of a result (a Gradescope test): its name, points and visibility."""

    name: str
    points: float
    visibility: str = "visible"


@dataclass(frozen=True)
class Exercise:
    """An exercise's hidden tests and how they are run.  What it is (its chapter, title, the
    functions it grades and their ``counterparts`` in the engines) is the course's catalogue's
    (``course.catalogue``): the properties below read it by ``name``.

    ``proceed(phase, verdicts)`` is asked before each phase after the first, with the verdicts
    so far (test id -> ``grading.Verdict``): None runs the phase, a reason skips its tests.
    ``items(tests)`` lists the result's entries and ``report(tests, verdicts)`` makes them
    (``results.test_entry`` dicts, the same names in the same order).
    """

    name: str
    make_tests: Callable[[], list[Test]] = field(compare=False)
    libs: tuple[Lib, ...] = ()
    quiet: bool = False
    test_seconds: float | None = None
    submission_seconds: float | None = None
    proceed: Callable[[int, dict], str | None] | None = field(default=None, compare=False)
    items: Callable[[list[Test]], list[Item]] | None = field(default=None, compare=False)
    report: Callable[[list[Test], dict], list[dict]] | None = field(default=None, compare=False)

    @property
    def entry(self) -> catalogue.Entry:
        return catalogue.get(self.name)

    @property
    def chapter(self) -> int:
        return self.entry.chapter

    @property
    def title(self) -> str:
        return self.entry.title

    @property
    def functions(self) -> tuple[str, ...]:
        return self.entry.functions

    @property
    def counterparts(self) -> tuple[str, ...]:
        return self.entry.counterparts


UnknownExercise = catalogue.UnknownExercise


PACKAGE = Path(__file__).resolve().parent       # the graders package (``fingerprint`` reads it)


def _exercise_names(folder: Path) -> list[str]:
    return sorted(m.name for m in pkgutil.iter_modules([str(folder)]) if not m.name.startswith("_"))


def names() -> tuple[str, ...]:
    """The exercises the grader knows (the catalogue's), in name order."""
    return catalogue.names()


@functools.lru_cache(maxsize=None)
def get(name: str) -> Exercise:
    if name not in names():
        raise UnknownExercise(f"no exercise named {name!r}; the grader knows: {', '.join(names())}")
    module = importlib.import_module(f"graders.exercises.{name}")
    exercise = getattr(module, "EXERCISE", None)
    if not isinstance(exercise, Exercise) or exercise.name != name:
        raise UnknownExercise(f"graders/exercises/{name}.py does not define EXERCISE for {name!r}")
    return exercise


_lock = threading.Lock()
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


def items(name: str) -> list[Item]:
    """The entries a result of ``name`` has: one per hidden test, or what the exercise says."""
    exercise, built = get(name), tests(name)
    if exercise.items is not None:
        return list(exercise.items(built))
    return [Item(t.name, t.points, t.visibility) for t in built]


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


def package_dir(name: str) -> Path:
    """The folder of the course package ``name`` (found, not imported)."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise UnknownExercise(f"no course package named {name!r}")
    return Path(list(spec.submodule_search_locations)[0]).resolve()


def lib_files(name: str) -> list[Path]:
    """The Python files of the course packages ``name``'s tests run with (``Exercise.libs``):
    they decide a grade too (the machine the check runs on, the builder its variants come from)."""
    return [path for lib in get(name).libs for path in _package_files(package_dir(lib.name))]


def _package_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts)


@functools.lru_cache(maxsize=None)
def fingerprint(name: str) -> str:
    """A hash of everything that decides a grade for ``name``: the grader's files
    (``grader_files``), the course packages its tests run with (``lib_files``), and the versions
    of Python and numpy that run the submission and compute the expected values.  A batch
    regrades a submission when this changes."""
    digest = hashlib.sha256(f"python {sys.version_info[0]}.{sys.version_info[1]} numpy {numpy.__version__}\0".encode())
    for path in grader_files(name):
        digest.update(path.relative_to(PACKAGE).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    for lib in get(name).libs:
        root = package_dir(lib.name)
        for path in _package_files(root):
            digest.update(f"{lib.name}/{path.relative_to(root).as_posix()}".encode() + b"\0"
                          + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]
