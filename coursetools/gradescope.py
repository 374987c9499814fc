"""Gradescope autograders: ``python -m graders autograder EXERCISE... --out DIR`` (or
``python -m coursetools autograder``).

Gradescope unzips an autograder into ``/autograder/source``, runs its ``setup.sh`` there once
(as root, when it builds the assignment's image), then, for every submission, copies the
student's files into ``/autograder/submission/`` (under the names the student gave them), runs
``/autograder/run_autograder`` and reads ``/autograder/results/results.json``.  What runs there is
the grader's (``graders.autograder``); this module packs it.

``DIR/EXERCISE.zip`` holds, at its top::

    setup.sh           apt: bubblewrap and util-linux (the sandbox), python3 and pip;
                       pip: requirements.txt
    run_autograder     $AUTOGRADER_PYTHON -m graders.autograder, in $AUTOGRADER_ROOT/source
    requirements.txt   the lines of the course's requirements.txt for the packages grading imports
    exercise.json      {"exercise": EXERCISE}: the exercise is pinned here, never read from the
                       submission
    graders/           the grader, with the hidden tests of EXERCISE only (every other module of
                       graders/exercises/ that is not a shared helper is left out)
    course/ ga2/ ...   the course packages grading imports (``course``: the exercises' catalogue)
                       and those that exercise's hidden tests import (their ``libs`` and their
                       imports): the GA-2 machine for attention_tail and mutants

The course's build tools (this package) are not in it: grading never imports them.
"""
from __future__ import annotations

import ast
import io
import json
import os
import re
import stat
import zipfile
from pathlib import Path

from graders import registry
from graders.autograder import RUN_AUTOGRADER, SETUP_SH, SKIP_PARTS

__all__ = ["AutograderError", "build", "build_all", "grader_files", "course_packages", "requirements"]

#: Modules of graders/ left out of an autograder: none today.
NOT_GRADING: tuple[str, ...] = ()
#: A fixed time for every member of the zip: the same sources make the same bytes.
ZIP_TIME = (2020, 1, 1, 0, 0, 0)


class AutograderError(RuntimeError):
    """The autograder cannot be built as asked (an unknown exercise, a missing package)."""


# ------------------------------------------------------------------------------------ building


def _course_root() -> Path:
    return Path(__file__).resolve().parent.parent


def _top_level_imports(source: str, *, module_level_only: bool = False) -> set[str]:
    """The top-level names of the absolute imports of a module's source (every import, or only
    those of the module's own body: what importing it needs)."""
    tree = ast.parse(source)
    nodes = tree.body if module_level_only else ast.walk(tree)
    names = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    return names


def _python_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*.py") if not SKIP_PARTS & set(p.parts))


def _helpers_used(module: Path, exercises: Path) -> set[str]:
    """The private helper modules (``graders/exercises/_*.py``) a hidden-test module imports, and
    those they import in turn: ``from ._name import ...`` or ``from graders.exercises._name ...``."""
    used: set[str] = set()
    queue = [module]
    while queue:
        tree = ast.parse(queue.pop().read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not isinstance(node, ast.ImportFrom) or not node.module:
                continue
            name = node.module.rsplit(".", 1)[-1] if node.module.startswith("graders.exercises.") \
                else node.module if node.level == 1 else ""
            if name.startswith("_") and name not in used and (exercises / f"{name}.py").is_file():
                used.add(name)
                queue.append(exercises / f"{name}.py")
    return used


def grader_files(exercise: str, root: Path) -> list[Path]:
    """The grader's files for ``exercise``: every module of ``graders/`` but the hidden tests of the
    other exercises and the helpers only they use (``graders/exercises/_*.py`` ship with the
    exercises that import them), less ``NOT_GRADING``."""
    exercises = root / "graders" / "exercises"
    if not (exercises / f"{exercise}.py").is_file():
        known = sorted(p.stem for p in exercises.glob("*.py") if not p.stem.startswith("_"))
        raise AutograderError(f"no exercise named {exercise!r}; the grader knows: {', '.join(known)}")
    shipped = {exercise, "__init__"} | _helpers_used(exercises / f"{exercise}.py", exercises)
    return [p for p in _python_files(root / "graders")
            if (p.parent != exercises and p.name not in NOT_GRADING) or p.stem in shipped]


def course_packages(exercise: str, root: Path, files: list[Path]) -> list[str]:
    """The course packages the exercise's grading imports, found by their imports and the
    exercise's ``libs``: every import of its hidden tests (a check may import the machine it runs
    a program on inside a function), the imports the other grader modules make when loaded (not
    those of a command grading does not run, such as ``check``'s public checks), and in turn every
    import of those packages.  Whatever a package is called or wherever it moves, what grading
    imports is what is shipped."""
    queue = {lib.name for lib in registry.get(exercise).libs}
    exercises = root / "graders" / "exercises"
    for path in files:
        queue |= _top_level_imports(path.read_text(encoding="utf-8"), module_level_only=path.parent != exercises)
    found: list[str] = []
    while queue:
        name = queue.pop()
        if name in found or name == "graders" or not (root / name / "__init__.py").is_file():
            continue
        found.append(name)
        for path in _python_files(root / name):
            queue |= _top_level_imports(path.read_text(encoding="utf-8"))
    return sorted(found)


def _requirement_name(line: str) -> str:
    return re.split(r"[<>=!~\[; ]", line.strip(), maxsplit=1)[0].lower().replace("-", "_")


def requirements(files: list[Path], root: Path) -> list[str]:
    """The lines of ``requirements.txt`` (its pins, as they are) for the packages that the shipped
    modules import when they are loaded: what grading needs, not the book's toolchain."""
    imported = set()
    for path in files:
        imported |= _top_level_imports(path.read_text(encoding="utf-8"), module_level_only=True)
    lines = [line.strip() for line in (root / "requirements.txt").read_text(encoding="utf-8").splitlines()
             if line.strip() and not line.lstrip().startswith("#")]
    return [line for line in lines if _requirement_name(line) in {n.lower() for n in imported}]


def _add(archive: zipfile.ZipFile, name: str, data: bytes, executable: bool = False) -> None:
    info = zipfile.ZipInfo(name, ZIP_TIME)
    info.compress_type = zipfile.ZIP_DEFLATED
    info.external_attr = ((0o755 if executable else 0o644) | stat.S_IFREG) << 16
    archive.writestr(info, data)


def build(exercise: str, out: Path, root: Path | None = None) -> Path:
    """Write ``out/EXERCISE.zip``, Gradescope's autograder for ``exercise``; returns its path."""
    root = (root or _course_root()).resolve()
    files = grader_files(exercise, root)
    packages = course_packages(exercise, root, files)
    shipped = files + [p for name in packages for p in sorted((root / name).rglob("*"))
                       if p.is_file() and not SKIP_PARTS & set(p.parts) and p.suffix not in (".pyc", ".pyo")]
    needed = requirements([p for p in shipped if p.suffix == ".py"], root)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    target = out / f"{exercise}.zip"
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        _add(archive, "setup.sh", SETUP_SH.encode(), executable=True)
        _add(archive, "run_autograder", RUN_AUTOGRADER.encode(), executable=True)
        _add(archive, "requirements.txt", ("\n".join(needed) + "\n").encode())
        _add(archive, "exercise.json", (json.dumps({"exercise": exercise}) + "\n").encode())
        for path in shipped:
            _add(archive, path.relative_to(root).as_posix(), path.read_bytes())
    tmp = target.with_name(f".{target.name}.tmp")            # a whole zip or none: replaced at once
    tmp.write_bytes(buffer.getvalue())
    os.replace(tmp, target)
    return target


def build_all(exercises: list[str], out: Path, root: Path | None = None) -> list[str]:
    """Build the zips of ``exercises``; the report's lines."""
    report = []
    for name in exercises:
        path = build(name, out, root)
        with zipfile.ZipFile(path) as archive:
            hidden = [n for n in archive.namelist() if n.startswith("graders/exercises/")
                      and not Path(n).stem.startswith("_")]
            packages = sorted({n.split("/")[0] for n in archive.namelist() if "/" in n} - {"graders"})
        tests = len(registry.tests(name))
        report.append(f"{path}: {name} ({tests} hidden tests, {', '.join(hidden)}"
                      + (f"; with {', '.join(packages)}" if packages else "") + ")")
    return report
