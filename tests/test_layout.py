"""The repository's layout: each folder holds what its name says.

``kvcache`` is the engine alone and imports nothing of the book; ``kvcache`` and ``lessons`` each
list their modules in their ``__init__``'s module map, every one of them and nothing else; the
tests mirror the source tree, with no two test files of the same name (pytest imports a test
file by its name) and none repeating its folder's name.

One room per product: ``graders`` is the grader, ``coursetools`` the build tools (the learner's
copy, the answer-leak scan, the Gradescope packager), ``course`` what all of them read (the
exercises' catalogue, notebooks, starters), which imports nothing of the course.  No module of
the course's packages imports, at any depth, a module that imports it back.
"""
from __future__ import annotations

import ast
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# What the book brings and the engine must not need: the chapters' helpers and reference
# implementations, plotting, widgets, notebook machinery.
BOOK_MODULES = {"coursebook", "lessons", "matplotlib", "ipywidgets", "anywidget", "traitlets", "IPython",
                "nbformat", "nbclient", "myst_nb", "jupyter_book"}


def imported_roots(path: Path) -> set[str]:
    """The top-level package of every absolute import in a Python file, at any depth."""
    roots = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    return roots


def test_no_engine_module_imports_the_book():
    found = {path.name: sorted(imported_roots(path) & BOOK_MODULES) for path in sorted((ROOT / "kvcache").glob("*.py"))}
    assert found and not {name: roots for name, roots in found.items() if roots}


def test_the_engine_runs_where_the_book_cannot_be_imported():
    """Every engine module imports in a fresh interpreter in which importing any of the book's
    modules fails."""
    modules = sorted(f"kvcache.{p.stem}" for p in (ROOT / "kvcache").glob("*.py") if p.stem != "__init__")
    code = (
        "import importlib, sys\n"
        f"BOOK = {sorted(BOOK_MODULES)!r}\n"
        "class Refuse:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in BOOK:\n"
        "            raise ImportError(f'the engine imported {name}')\n"
        "sys.meta_path.insert(0, Refuse())\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in BOOK))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["[]"]
    assert "kvcache.model" in modules and "kvcache.serving" in modules and "kvcache.generate" in modules


def module_map(package: str) -> list[str]:
    """The names a package's docstring lists in its module map: the lines indented by four
    spaces whose first word is a name, then two spaces or more."""
    doc = ast.get_docstring(ast.parse((ROOT / package / "__init__.py").read_text(encoding="utf-8")))
    return re.findall(r"^    (\w+)  +\S", doc, flags=re.M)


@pytest.mark.parametrize("package", ["kvcache", "lessons", "coursebook/figures"])
def test_the_module_map_names_every_module_once(package):
    modules = sorted(p.stem for p in (ROOT / package).glob("*.py") if p.stem != "__init__")
    listed = module_map(package)
    assert len(listed) == len(set(listed))
    assert sorted(listed) == modules


def collected_test_files():
    return sorted(p for p in (ROOT / "tests").rglob("test_*.py") if "hostile" not in p.parts)


def test_no_two_test_files_share_a_name():
    counts = Counter(p.name for p in collected_test_files())
    assert len(counts) > 20 and not [name for name, n in counts.items() if n > 1]


def test_no_test_file_repeats_its_folder_s_name():
    """``tests/ga2/test_attn.py``, not ``tests/ga2/test_ga2_attn.py`` (a plural folder counts in
    the singular too: ``tests/lessons/test_lesson_x.py`` would repeat it)."""
    repeating = [str(p.relative_to(ROOT)) for p in collected_test_files()
                 if p.parent.name != "tests"
                 and p.stem.removeprefix("test_").startswith(p.parent.name.removesuffix("s"))]
    assert not repeating


def test_the_tests_of_each_package_are_in_its_folder():
    for package in ("kvcache", "lessons", "coursebook", "ga2", "public_checks", "tools", "course", "graders",
                    "coursetools"):
        assert list((ROOT / "tests" / package).glob("test_*.py")), package
    suite_wide = ("test_docs.py", "test_layout.py", "test_code_shape.py", "test_xdist_scheduling.py")
    assert not [p.name for p in (ROOT / "tests").glob("test_*.py") if p.name not in suite_wide]


# ---------------------------------------------------------------------------------- rooms

#: The course's packages: every folder of the repository with an ``__init__.py`` at its top.
PACKAGES = sorted(p.parent.name for p in ROOT.glob("*/__init__.py"))


def package_files(package: str) -> list[Path]:
    return sorted(p for p in (ROOT / package).rglob("*.py") if "__pycache__" not in p.parts)


def test_the_packages_are_the_rooms_the_contributing_guide_names():
    assert {"kvcache", "lessons", "coursebook", "answers", "ga2", "public_checks", "course", "graders",
            "coursetools", "bench"} <= set(PACKAGES)
    guide = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
    assert not [p for p in PACKAGES if f"| `{p}/` |" not in guide]


def test_the_catalogue_s_package_imports_nothing_of_the_course():
    """``course`` is shipped everywhere (the learner's copy, every autograder): it stands alone."""
    found = {p.name: sorted(imported_roots(p) & set(PACKAGES)) for p in package_files("course")}
    assert found and not {name: roots for name, roots in found.items() if roots}


def test_the_grader_holds_no_build_tool():
    """The learner's copy, the leak scan and the Gradescope packager are ``coursetools``'; no module
    of the grader imports them when it loads (the Gradescope zip has the grader without them), and
    nothing the learner's copy ships imports them at all."""
    assert not [p.name for p in (ROOT / "graders").glob("*.py") if p.stem in ("release", "answer_leaks")]
    for path in package_files("graders"):
        module_level = {node.module.split(".")[0] for node in ast.parse(path.read_text(encoding="utf-8")).body
                        if isinstance(node, ast.ImportFrom) and node.module and not node.level}
        assert "coursetools" not in module_level, path
    for package in ("kvcache", "lessons", "coursebook", "answers", "ga2", "public_checks", "course"):
        assert not [p for p in package_files(package) if "coursetools" in imported_roots(p)], package
    assert not [p for p in package_files("coursebook") if "graders" in imported_roots(p)]


def test_the_machine_loads_without_the_catalogue():
    """The grader's sandbox holds a copy of ``ga2`` alone: no module of it imports ``course`` when
    it loads (``ga2.parts`` reads the catalogue inside the functions a learner calls)."""
    for path in package_files("ga2"):
        top = {node.module.split(".")[0] for node in ast.parse(path.read_text(encoding="utf-8")).body
               if isinstance(node, ast.ImportFrom) and node.module and not node.level}
        top |= {alias.name.split(".")[0] for node in ast.parse(path.read_text(encoding="utf-8")).body
                if isinstance(node, ast.Import) for alias in node.names}
        assert "course" not in top, path


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return getattr(test, "id", getattr(test, "attr", None)) == "TYPE_CHECKING"


def _imports(tree: ast.AST):
    """Every import statement of a module, at any depth, but those under ``if TYPE_CHECKING:``."""
    stack = [tree]
    while stack:
        node = stack.pop()
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _type_checking(child):
                stack.extend(child.orelse)
            elif isinstance(child, (ast.Import, ast.ImportFrom)):
                yield child
            else:
                stack.append(child)


def module_names() -> dict[str, tuple[Path, bool]]:
    """{dotted name: (file, is a package's __init__)} of every module of the course's packages."""
    found = {}
    for package in PACKAGES:
        for path in package_files(package):
            parts = path.relative_to(ROOT).with_suffix("").parts
            is_init = parts[-1] == "__init__"
            found[".".join(parts[:-1] if is_init else parts)] = (path, is_init)
    return found


def import_graph() -> dict[str, set[str]]:
    """{module: the course modules it imports}, from the source alone: ``from a import b`` is an
    edge to ``a.b`` when that is a module, else to ``a``; relative imports resolved."""
    modules = module_names()
    graph = {}
    for name, (path, is_init) in modules.items():
        package = name if is_init else name.rpartition(".")[0]
        edges = set()
        for node in _imports(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = node.module or ""
                if node.level:
                    up = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                    base = ".".join(up + ([node.module] if node.module else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            for target in targets:
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    edges.add(target)
        graph[name] = edges
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_cycle_finder_finds_a_cycle_and_only_cycles():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set(), "c": {"b"}}) == []


def test_no_module_of_the_course_imports_one_that_imports_it_back():
    graph = import_graph()
    assert {"kvcache.cache", "kvcache.paged", "ga2.listing", "graders.sandbox.commands", "course.catalogue"} <= set(graph)
    assert "kvcache.cache" in graph["kvcache.paged"] and "ga2.instructions" in graph["ga2.listing"]
    assert cycles(graph) == []


def test_the_sandbox_imports_nothing_of_the_grader_outside_it():
    """``graders/sandbox/`` is one room: the supervisor, the transcript of the results channel and
    the watch loop are in it, so nothing in it reaches up into the grader that uses it."""
    graph = import_graph()
    sandbox = {name for name in graph if name == "graders.sandbox" or name.startswith("graders.sandbox.")}
    assert {"graders.sandbox.supervisor", "graders.sandbox.transcript", "graders.sandbox.commands"} <= sandbox
    assert "graders.sandbox.supervisor" in graph["graders.sandbox.commands"]
    outside = {name: sorted(target for target in graph[name] if target.startswith("graders") and target not in sandbox)
               for name in sorted(sandbox)}
    assert {name: targets for name, targets in outside.items() if targets} == {}
