"""A notebook's cells as the course reads them, and the test of a starter.

A cell's ``source`` is a string or a list of lines (nbformat allows both); ``cell_source`` joins
it.  The answer cell of an exercise notebook is the code cell tagged ``answer``.

A **starter** is a function whose body, after an optional docstring, is one ``raise
NotImplementedError(...)``, or a class whose every method is one: what the learner fills in.
"""
from __future__ import annotations

import ast
import inspect
import textwrap

__all__ = ["joined", "cell_source", "code_cells", "answer_cells", "without_magics", "is_docstring",
           "raises_not_implemented", "is_starter", "is_starter_object"]


def joined(text) -> str:
    """A notebook's multi-line string (a cell's source, an output's text) as one string: nbformat
    stores it as a string or as a list of lines."""
    return "".join(text) if isinstance(text, list) else str(text)


def cell_source(cell: dict) -> str:
    """The cell's source as one string, whichever form the file stores it in."""
    return joined(cell.get("source", ""))


def code_cells(nb: dict):
    """(cell, its source) for every code cell of a notebook, in order."""
    for cell in nb.get("cells", []) or []:
        if isinstance(cell, dict) and cell.get("cell_type") == "code":
            yield cell, cell_source(cell)


def _tags(cell: dict) -> list:
    return (cell.get("metadata", {}) or {}).get("tags", []) or []


def answer_cells(nb: dict, *, every_code_cell_if_untagged: bool = False) -> list[str]:
    """The sources of the code cells tagged ``answer`` (or of every code cell, when asked and
    none is tagged)."""
    cells = list(code_cells(nb))
    tagged = [source for cell, source in cells if "answer" in _tags(cell)]
    if tagged or not every_code_cell_if_untagged:
        return tagged
    return [source for _, source in cells]


def without_magics(source: str) -> str:
    """IPython lines (``%timeit``, ``!ls``) as blank lines, so the rest parses as Python and
    keeps its line numbers."""
    return "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines())


def is_docstring(node: ast.stmt) -> bool:
    return isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)


def raises_not_implemented(node: ast.stmt) -> bool:
    """``raise NotImplementedError`` or ``raise NotImplementedError(...)``."""
    if not isinstance(node, ast.Raise) or node.exc is None:
        return False
    exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
    return isinstance(exc, ast.Name) and exc.id == "NotImplementedError"


def is_starter(node: ast.AST) -> bool:
    """A function whose body (after its docstring) is one ``raise NotImplementedError``, or a
    class whose every method is one."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        body = node.body[1:] if node.body and is_docstring(node.body[0]) else node.body
        return len(body) == 1 and raises_not_implemented(body[0])
    if isinstance(node, ast.ClassDef):
        methods = [n for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
        return bool(methods) and all(is_starter(m) for m in methods)
    return False


def is_starter_object(obj) -> bool:
    """A function or class that is still a starter, read from its source file (False when it has
    no source to read: compiled, or defined at a prompt)."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(obj)))
    except (OSError, TypeError, SyntaxError):
        return False
    return bool(tree.body) and is_starter(tree.body[0])
