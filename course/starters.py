"""A function's source turned into its starter: what the learner's copy and the grader's sandbox
hold in place of an answer the engines implement.

The starter keeps the function's signature and decorators, the first paragraph of its docstring,
says which exercise builds it (and how to put the learner's own in its place), and is one ``raise
NotImplementedError``.
"""
from __future__ import annotations

import ast
import textwrap

from .catalogue import Counterpart

__all__ = ["NoSuchFunction", "find_function", "starter_source"]


class NoSuchFunction(LookupError):
    """The module's source has no function of the counterpart's name."""


def find_function(tree: ast.Module, qualname: str):
    """The (async) function definition at ``qualname`` ("f", "Class.method") in a module's tree."""
    scope, node = tree.body, None
    for part in qualname.split("."):
        node = next((n for n in scope if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                     and n.name == part), None)
        if node is None:
            return None
        scope = node.body
    return node if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) else None


def _signature(fn) -> str:
    """The decorators and the ``def`` line of ``fn``, as Python writes them."""
    fields = {"name": fn.name, "args": fn.args, "body": [ast.Expr(ast.Constant(...))],
              "decorator_list": fn.decorator_list, "returns": fn.returns, "type_comment": None,
              "type_params": getattr(fn, "type_params", [])}
    node = type(fn)(**{f: fields[f] for f in type(fn)._fields if f in fields})
    return ast.unparse(ast.fix_missing_locations(node)).rsplit("\n", 1)[0]


def starter_source(source: str, part: Counterpart, install_hint: str = "") -> str:
    """``source`` with the function ``part.qualname`` turned into a starter: the same signature and
    decorators, the first paragraph of its docstring, which exercise builds it, and one
    ``raise NotImplementedError``."""
    fn = find_function(ast.parse(source), part.qualname)
    if fn is None:
        raise NoSuchFunction(f"counterpart {part.spec} (exercise {part.exercise}): no function {part.qualname} in "
                             f"{part.module}")
    doc = (ast.get_docstring(fn) or "").split("\n\n")[0].strip()
    told = (f"{part.module}.{part.qualname} is the exercise {part.exercise} of chapter {part.chapter}: write it "
            f"in exercises/{part.exercise}.ipynb{install_hint}.")
    told_lines = textwrap.wrap(told, 88, break_on_hyphens=False)
    told_lines0 = textwrap.wrap(told, 76, break_on_hyphens=False)
    docstring = [f'    """{doc}' if doc else f'    """{told_lines.pop(0)}'] + ([""] if doc else [])
    docstring += [f"    {line}".rstrip() for line in told_lines] + ['    """']
    message = [f"        {line + ' ' if k < len(told_lines0) - 1 else line!r}"
               for k, line in enumerate(told_lines0)]
    text = "\n".join([_signature(fn)] + docstring + ["    raise NotImplementedError("] + message + ["    )"])
    text = textwrap.indent(text, " " * fn.col_offset)
    lines = source.splitlines(keepends=True)
    first = min([fn.lineno] + [d.lineno for d in fn.decorator_list])
    return "".join(lines[:first - 1]) + text + "\n" + "".join(lines[fn.end_lineno:])
