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
implementation of a function an exercise grades anywhere in it (``graders.answer_leaks``: every
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
import shutil
import tempfile
import textwrap
from pathlib import Path

from .answer_leaks import Counterpart, counterparts, describe, find_leaks, is_starter

__all__ = ["ReleaseError", "make_release", "starter_source"]

MARKER = ".kvcourse-release"
NEVER = ("solutions", "graders")          # folders never shipped
SKIP_PARTS = {"__pycache__", ".ipynb_checkpoints", ".pytest_cache", ".hypothesis"}


class ReleaseError(RuntimeError):
    pass


def course_root() -> Path:
    return Path(__file__).resolve().parent.parent


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _code_cells(nb: dict):
    for cell in nb.get("cells", []):
        if isinstance(cell, dict) and cell.get("cell_type") == "code":
            src = cell.get("source", "")
            yield cell, ("".join(src) if isinstance(src, list) else str(src))


def _answer_cells(nb: dict) -> list[str]:
    return [src for cell, src in _code_cells(nb)
            if "answer" in (cell.get("metadata", {}) or {}).get("tags", [])]


def _imports(source: str) -> set[str]:
    try:
        tree = ast.parse("\n".join(l for l in source.splitlines() if not l.lstrip().startswith(("%", "!"))))
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
                                                  for d in ("exercises", "solutions", "graders", "book",
                                                            "public_checks", "kvcache", "ga2", "tests")):
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
        _copy_packages(root, tmp, needed, report)
        _copy_book(root, tmp, report)
        _write_readme(tmp, report)
        _verify(root, tmp)
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
        answers = _answer_cells(nb)
        solution = root / "solutions" / path.name
        if solution.exists():
            try:
                reference = _answer_cells(json.loads(solution.read_text(encoding="utf-8")))
            except ValueError:
                reference = []
            for src in answers:
                if src.strip() and any(src.strip() == ref.strip() for ref in reference):
                    raise ReleaseError(f"exercises/{path.name}: its answer cell is the reference answer of "
                                       f"solutions/{path.name}; refusing to release a solution")
        if answers and not any("NotImplementedError" in src for src in answers):
            report.append(f"warning: exercises/{path.name}: the answer cell does not raise NotImplementedError")
        for cell, src in _code_cells(nb):
            cell["outputs"] = []
            cell["execution_count"] = None
            imports |= _imports(src)
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


def _copy_packages(root: Path, tmp: Path, imports: set[str], report: list[str]) -> None:
    packages = ["public_checks"]
    queue = set(imports)
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
        for src in (root / name).glob("*.py"):
            queue |= _imports(src.read_text(encoding="utf-8"))
    for name in packages:
        _copy_tree(root / name, tmp / name)
        report += _strip_counterparts(tmp, name)
    report.append(f"packages: {', '.join(packages)}")
    shipped = sorted(str(init.parent.relative_to(tmp)).replace(os.sep, ".")
                     for name in packages for init in (tmp / name).rglob("__init__.py"))
    (tmp / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=68"]\nbuild-backend = "setuptools.build_meta"\n\n'
        '[project]\nname = "kv-cache-course-learner"\nversion = "0.1.0"\nrequires-python = ">=3.10"\n'
        'dependencies = ["numpy>=1.26", "matplotlib>=3.8", "jupyterlab>=4.2", "ipywidgets>=8.1"]\n\n'
        f'[tool.setuptools]\npackages = {json.dumps(shipped)}\n\n'
        '[tool.setuptools.package-data]\npublic_checks = ["data/*.json"]\n', encoding="utf-8")


def _module_path(tmp: Path, module: str) -> Path | None:
    """The file (``a/b.py``) or package folder (``a/b/``) of a dotted module in the copy, if any."""
    base = tmp.joinpath(*module.split("."))
    if base.is_dir():
        return base
    return base.with_suffix(".py") if base.with_suffix(".py").is_file() else None


def _find_function(tree: ast.Module, qualname: str):
    """The (async) function definition at ``qualname`` ("f", "Class.method") in a module's tree."""
    scope, node = tree.body, None
    for part in qualname.split("."):
        node = next((n for n in scope if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                     and n.name == part), None)
        if node is None:
            return None
        scope = node.body
    return node if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) else None


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
    """``source`` with the function ``part.qualname`` turned into a starter: the same signature and
    decorators, the first paragraph of its docstring, which exercise builds it, and one
    ``raise NotImplementedError``."""
    tree = ast.parse(source)
    fn = _find_function(tree, part.qualname)
    if fn is None:
        raise ReleaseError(f"counterpart {part.spec} (exercise {part.exercise}): no function {part.qualname} in "
                           f"{part.module}")
    doc = (ast.get_docstring(fn) or "").split("\n\n")[0].strip()
    told = (f"{part.module}.{part.qualname} is the exercise {part.exercise} of chapter {part.chapter}: write it "
            f"in exercises/{part.exercise}.ipynb{install_hint}.")
    fields = {"name": fn.name, "args": fn.args, "body": [ast.Expr(ast.Constant(...))],
              "decorator_list": fn.decorator_list, "returns": fn.returns, "type_comment": None,
              "type_params": getattr(fn, "type_params", [])}
    signature = ast.unparse(ast.fix_missing_locations(type(fn)(**{f: fields[f] for f in type(fn)._fields if f in fields})))
    signature = signature.rsplit("\n", 1)[0]                       # the decorators and the def line
    told_lines = textwrap.wrap(told, 88, break_on_hyphens=False)
    told_lines0 = textwrap.wrap(told, 76, break_on_hyphens=False)
    docstring = [f'    """{doc}' if doc else f'    """{told_lines.pop(0)}'] + ([""] if doc else [])
    docstring += [f"    {line}".rstrip() for line in told_lines] + ['    """']
    message = [f"        {line + ' ' if k < len(told_lines0) - 1 else line!r}"
               for k, line in enumerate(told_lines0)]
    text = "\n".join([signature] + docstring + ["    raise NotImplementedError("] + message + ["    )"])
    text = textwrap.indent(text, " " * fn.col_offset)
    lines = source.splitlines(keepends=True)
    first = min([fn.lineno] + [d.lineno for d in fn.decorator_list])
    return "".join(lines[:first - 1]) + text + "\n" + "".join(lines[fn.end_lineno:])


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


def _copy_book(root: Path, tmp: Path, report: list[str]) -> None:
    site = root / "_build" / "html"
    if not (site / "index.html").exists():
        report.append("book: the site is not built (no _build/html/index.html): run 'make book', then "
                      "'make release' again to include it")
        (tmp / "BOOK-NOT-INCLUDED.txt").write_text(
            "The course site was not built when this release was made.\n"
            "Run 'make book' in the course checkout, then 'make release' again.\n", encoding="utf-8")
        return

    def ignore(folder, names):
        return [n for n in names if n in NEVER or n in SKIP_PARTS or n.startswith("solutions")]
    shutil.copytree(site, tmp / "book", ignore=ignore)
    count = sum(1 for _ in (tmp / "book").rglob("*.html"))
    report.append(f"book: the built site, {count} pages (open book/index.html)")


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


def _write_readme(tmp: Path, report: list[str]) -> None:
    machine = MACHINE_README if (tmp / "ga2").is_dir() else ""
    book = "book/index.html" if (tmp / "book").exists() else "(not included: see BOOK-NOT-INCLUDED.txt)"
    (tmp / "README.md").write_text(f"""# The KV cache course: the learner's copy

- The course: {book}
- The exercises: `exercises/*.ipynb`

Set up once, in this folder:

```sh
python3 -m venv .venv && .venv/bin/pip install -e .
.venv/bin/jupyter lab exercises
```

Each exercise notebook has a statement, a starter cell to fill in, and public checks you run in
place ("public tests passed; hidden tests run at grading").  Hand in the notebook as it is:
the grade comes from hidden tests your course runs on it.
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
        fn = _find_function(ast.parse(path.read_text(encoding="utf-8")), part.qualname) if path.is_file() else None
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
