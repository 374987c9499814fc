"""The repository's layout: each folder holds what its name says.

``kvcache`` is the engine alone and imports nothing of the book; ``kvcache`` and ``lessons`` each
list their modules in their ``__init__``'s module map, every one of them and nothing else; the
tests mirror the source tree, with no two test files of the same name (pytest imports a test
file by its name) and none repeating its folder's name.
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
    for package in ("kvcache", "lessons", "coursebook", "ga2", "public_checks", "tools"):
        assert list((ROOT / "tests" / package).glob("test_*.py")), package
    assert not [p.name for p in (ROOT / "tests").glob("test_*.py") if p.name not in ("test_docs.py", "test_layout.py")]
