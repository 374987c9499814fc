"""The learner's exercise notebooks as saved: where they are, the source of their answer cells, and
which functions and classes those cells define (each a starter or written).  Read by ``answers``
(installing) and ``answers.chapter`` (what a chapter runs on)."""
from __future__ import annotations

import ast
from pathlib import Path

from course.notebooks import answer_cells
from course.notebooks import is_starter as starter_node

#: The copy's (or the checkout's) top folder: the packages beside ``answers`` are the course's.
ROOT = Path(__file__).resolve().parent.parent


def exercises_folder() -> Path:
    """The exercise notebooks of this copy (``exercises/`` beside the packages)."""
    return ROOT / "exercises"


def answer_source(nb: dict) -> str:
    """The answer cells of an exercise notebook, as one source."""
    return "\n\n".join(answer_cells(nb))


def defined_names(source: str) -> dict[str, bool]:
    """{name: is a starter} of the top-level functions and classes of an answer cell."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return {}
    return {n.name: starter_node(n) for n in tree.body
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
