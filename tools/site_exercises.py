"""What an exercise page of the site runs in the reader's browser: the course's files it ships.

The page (``book/_static/exercise/exercise-page.js``) runs the exercise's public checks on the
reader's code with Python in a Web Worker (``book/_static/runtime/``).  It needs, besides the
Python runtime that ``tools/site_runtime.py`` makes:

* ``_static/exercise/course.zip``: the course's packages the public checks import, found by
  following their imports (``public_checks``, ``ga2`` for the GA-2 exercises), in the form the
  learner's copy ships them (``make release``): ``public_checks`` as it is, an engine with every
  function that implements an answer made a starter and every module that does left out
  (``ga2.quant.requant``, ``ga2.rtl``...).  Never ``graders``, never ``solutions``.
* ``_static/exercise/NAME.ipynb``, one per exercise: the exercise notebook, outputs cleared (the
  editor's starter is its answer cells; "Download notebook" saves it with the reader's code in
  them), with the rest in its metadata: the functions it grades, which cell is its public checks,
  and the earlier exercises whose answers its notebook puts into GA-2
  (``ga2.install_from("requant.ipynb")``).

Both are derived from the exercise notebooks and the list of exercises alone: a new exercise
gets its page's editor with nothing added here.  ``tools/sphinx_exercises.py`` writes them
into the built site; ``coursetools.answer_leaks.find_leaks`` reads both (the zip's members, the
notebooks), and the site's test runs it on them.
"""
from __future__ import annotations

import ast
import io
import json
import re
import shutil
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: The packages every page ships (the checks' entry and its data).
ALWAYS = ("public_checks",)
#: What a page never ships, whatever imports it.
NEVER = ("graders", "solutions", "tests", "tools")
SKIP = {"__pycache__", ".ipynb_checkpoints"}
NOTEBOOK_NAME = re.compile(r"^([A-Za-z_]\w*)\.ipynb$")


class SiteExerciseError(RuntimeError):
    """The course's files cannot be shipped as they are (the message says which and why)."""


# ---------------------------------------------------------------- the exercises


def exercise_names() -> list[str]:
    """Every exercise of the course's catalogue (``course.catalogue``), by name."""
    from course import catalogue
    return list(catalogue.names())


def exercise_entry(name: str):
    """The catalogue's entry of exercise ``name``: its chapter and the functions it grades."""
    from course import catalogue
    return catalogue.get(name)


def _cells(nb: dict) -> list[dict]:
    return [c for c in nb.get("cells", []) if isinstance(c, dict)]


def _source(cell: dict) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else str(source)


def answer_cells(nb: dict) -> list[dict]:
    """The code cells tagged ``answer``, in order."""
    return [c for c in _cells(nb) if c.get("cell_type") == "code"
            and "answer" in ((c.get("metadata") or {}).get("tags") or [])]


def _calls(source: str, name: str) -> bool:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return False
    return any(isinstance(n, ast.Call) and ((isinstance(n.func, ast.Name) and n.func.id == name)
                                            or (isinstance(n.func, ast.Attribute) and n.func.attr == name))
               for n in ast.walk(tree))


def checks_cell(nb: dict, name: str) -> str:
    """The notebook's public-checks cell: the last code cell that calls ``run_checks``."""
    found = [_source(c) for c in _cells(nb) if c.get("cell_type") == "code" and _calls(_source(c), "run_checks")]
    if not found:
        raise SiteExerciseError(f"exercises/{name}.ipynb has no cell that calls run_checks")
    return found[-1]


def installs(nb: dict, known: set[str]) -> list[str]:
    """The exercises whose answers the notebook puts into GA-2 before its own: every
    ``"NAME.ipynb"`` of an exercise named in a cell that calls ``install_from``."""
    found: list[str] = []
    for cell in _cells(nb):
        source = _source(cell)
        if cell.get("cell_type") != "code" or not _calls(source, "install_from"):
            continue
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                match = NOTEBOOK_NAME.match(node.value)
                if match and match[1] in known and match[1] not in found:
                    found.append(match[1])
    return found


def clear_outputs(nb: dict) -> dict:
    nb = json.loads(json.dumps(nb))
    for cell in _cells(nb):
        if cell.get("cell_type") == "code":
            cell["outputs"] = []
            cell["execution_count"] = None
    return nb


def exercise_data(name: str, root: Path = ROOT) -> dict:
    """What exercise ``name``'s page reads (its ``NAME.ipynb``): the exercise notebook, outputs
    cleared, whose metadata ``kvcourse.page`` says the rest: the functions it grades, the index of
    its public-checks cell and the earlier exercises whose answers it puts into GA-2.  The page's
    starter is the notebook's answer cells; "Download notebook" saves this notebook with the
    reader's code in them."""
    path = root / "exercises" / f"{name}.ipynb"
    nb = clear_outputs(json.loads(path.read_text(encoding="utf-8")))
    if not answer_cells(nb):
        raise SiteExerciseError(f"exercises/{name}.ipynb has no code cell tagged 'answer'")
    entry = exercise_entry(name)
    checks = checks_cell(nb, name)
    index = max(i for i, c in enumerate(nb["cells"]) if c.get("cell_type") == "code" and _source(c) == checks)
    kvcourse = nb.setdefault("metadata", {}).setdefault("kvcourse", {})
    kvcourse.setdefault("exercise", name)
    kvcourse.setdefault("chapter", entry.chapter)
    kvcourse["page"] = {"functions": list(entry.functions), "checks_cell": index,
                        "installs": [n for n in installs(nb, set(exercise_names())) if n != name]}
    return nb


def starter(nb: dict) -> str:
    """The editor's first text: the answer cells, one after the other (what exercise-page.js shows)."""
    return "\n\n\n".join(_source(c).rstrip("\n") for c in answer_cells(nb)) + "\n"


# ---------------------------------------------------------------- the packages


def _imports(source: str) -> set[str]:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module.split(".")[0])
    return found


def shipped_packages(root: Path = ROOT) -> list[str]:
    """The course's packages the public checks import, and what those import in turn."""
    queue, seen = set(ALWAYS), []
    while queue:
        name = queue.pop()
        if name in seen or name in NEVER or not (root / name / "__init__.py").is_file():
            continue
        seen.append(name)
        for src in (root / name).rglob("*.py"):
            if not SKIP & set(src.parts):
                queue |= _imports(src.read_text(encoding="utf-8"))
    return sorted(seen, key=lambda n: (n not in ALWAYS, n))


def learner_copy(root: Path, dest: Path) -> list[str]:
    """The shipped packages under ``dest`` as ``make release`` ships them; the release's report."""
    from coursetools import release
    report = []
    for name in shipped_packages(root):
        release._copy_tree(root / name, dest / name)
        report += release._strip_counterparts(dest, name)
        if name not in ALWAYS:
            report += release._strip_graded(dest, name)
    return report


def course_zip(root: Path = ROOT) -> bytes:
    """course.zip: the shipped packages' Python files and the public checks' data, deflated."""
    with tempfile.TemporaryDirectory(prefix="site-exercises-") as tmp:
        tmp = Path(tmp)
        learner_copy(root, tmp)
        out = io.BytesIO()
        with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as archive:
            for path in sorted(p for p in tmp.rglob("*") if p.is_file()):
                rel = path.relative_to(tmp)
                if SKIP & set(rel.parts) or path.suffix not in (".py", ".json"):
                    continue
                archive.writestr(zipfile.ZipInfo(rel.as_posix(), (2020, 1, 1, 0, 0, 0)), path.read_bytes(),
                                 compress_type=zipfile.ZIP_DEFLATED)
        return out.getvalue()


def write(out: Path, root: Path = ROOT) -> list[Path]:
    """Write ``course.zip`` and every ``NAME.ipynb`` into ``out``; the files written."""
    out.mkdir(parents=True, exist_ok=True)
    written = [out / "course.zip"]
    written[0].write_bytes(course_zip(root))
    for name in exercise_names():
        target = out / f"{name}.ipynb"
        target.write_text(json.dumps(exercise_data(name, root), ensure_ascii=False, indent=1) + "\n",
                          encoding="utf-8")
        written.append(target)
    return written


if __name__ == "__main__":
    import sys
    for path in write(Path(sys.argv[1])):
        print(f"{path}: {path.stat().st_size:,} bytes")
