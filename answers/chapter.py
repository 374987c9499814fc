"""A chapter that runs on the learner's answers: what it says first, and a Run All that goes on.

In the learner's copy a chapter calls functions the exercises ask for.  Its first code cell
(``answers.say_what_runs``) installs the answers written so far and says, in one paragraph, which
exercises the chapter calls and, for each, whether it is written, when its notebook was saved
(the chapter reads the saved file) and whether it passes its public checks; an answer that fails
them is named before the chapter uses it.

Then a cell that needs an answer not written yet stops with one line and a link to the exercise,
not a traceback, and does not stop Run All: ``guard_cells`` adds an AST transformer to IPython
that runs each cell inside ``try`` and hands ``NotImplementedError`` of a starter to
``stopped``.  What such a cell would have defined is remembered, so a later cell that reads one of
those names stops with one line too, and every other cell runs.
"""
from __future__ import annotations

import ast
import json
import os
import re
import time
from pathlib import Path

from .saved import answer_source, defined_names, exercises_folder

__all__ = ["AnswerStatus", "answer_status", "introduce", "guard_cells", "stopped", "exercise_link"]

#: The sentence a starter's NotImplementedError begins with names its exercise.
EXERCISE_IN_MESSAGE = re.compile(r"is the exercise (?P<exercise>\w+)")
#: The name the guarded cell keeps its last expression's value in, to show it after the ``try``.
LAST_VALUE = "_answers_last_value"

_UNAVAILABLE: dict[str, str] = {}       # a name a stopped cell would have defined -> its exercise
_NAMES: dict[str, str] = {}             # function -> exercise, of the chapter running


class AnswerStatus:
    """One exercise as a chapter finds it: written or not, saved when, its public checks."""

    def __init__(self, exercise: str, path: Path, written: bool, saved: float | None,
                 passed: int = 0, total: int = 0, problem: str = ""):
        self.exercise, self.path, self.written, self.saved = exercise, path, written, saved
        self.passed, self.total, self.problem = passed, total, problem

    @property
    def passing(self) -> bool:
        return self.written and not self.problem and self.total > 0 and self.passed == self.total


def exercise_link(exercise: str) -> str:
    """The exercise notebook as a Markdown link, relative to the notebook running (its folder is
    the kernel's working folder in JupyterLab)."""
    target = exercises_folder() / f"{exercise}.ipynb"
    try:
        rel = os.path.relpath(target, Path.cwd())
    except ValueError:
        rel = str(target)
    return f"[exercises/{exercise}.ipynb]({Path(rel).as_posix()})"


def _check_functions(nb: dict, namespace: dict) -> list:
    """The functions the exercise's public-check cell passes to ``run_checks``, from ``namespace``."""
    for cell in nb.get("cells", []):
        source = "".join(cell.get("source", "")) if cell.get("cell_type") == "code" else ""
        if "run_checks(" not in source:
            continue
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "run_checks":
                return [namespace.get(arg.id) for arg in node.args[1:] if isinstance(arg, ast.Name)]
    return []


def answer_status(exercise: str) -> AnswerStatus:
    """Whether ``exercise`` is written in its saved notebook, when that was saved, and how many
    of its public checks the saved answer passes."""
    path = exercises_folder() / f"{exercise}.ipynb"
    try:
        nb = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        return AnswerStatus(exercise, path, False, None, problem=f"its notebook cannot be read ({err})")
    saved = path.stat().st_mtime
    source = answer_source(nb)
    defined = defined_names(source)
    if not defined or all(defined.values()):
        return AnswerStatus(exercise, path, False, saved)
    namespace: dict = {"__name__": f"answer_of_{exercise}"}
    try:
        exec(compile(source, str(path), "exec"), namespace)  # noqa: S102 - the learner's own answer
        fns = _check_functions(nb, namespace)
        from public_checks import evaluate
        outcomes = evaluate(exercise, *fns) if fns and None not in fns else []
    except Exception as err:  # noqa: BLE001 - a broken answer is reported, not raised
        return AnswerStatus(exercise, path, True, saved, problem=f"{type(err).__name__}: {err}")
    passed = sum(o.status == "passed" for o in outcomes)
    return AnswerStatus(exercise, path, True, saved, passed, len(outcomes))


def _when(saved: float | None) -> str:
    if saved is None:
        return ""
    stamp = time.localtime(saved)
    today = time.localtime()
    day = "" if stamp[:3] == today[:3] else time.strftime("%d %b ", stamp)
    return f"saved {day}{time.strftime('%H:%M', stamp)}"


def _join(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def paragraph(statuses: list[AnswerStatus]) -> tuple[str, str]:
    """(Markdown, plain text) of the chapter's first words: one short paragraph."""
    parts_md, parts_txt, failing = [], [], []
    for s in statuses:
        if not s.written:
            state = "not written yet"
        elif s.problem:
            state = f"{_when(s.saved)}, but it does not run: {s.problem}"
            failing.append(s.exercise)
        elif s.passing:
            state = f"{_when(s.saved)}, passes its {s.total} public checks"
        else:
            state = f"{_when(s.saved)}, **fails {s.total - s.passed} of its {s.total} public checks**"
            failing.append(s.exercise)
        parts_md.append(f"`{s.exercise}` ({exercise_link(s.exercise)}: {state})")
        parts_txt.append(f"{s.exercise} (exercises/{s.exercise}.ipynb: {state.replace('**', '')})")
    head = "This chapter runs on your answers to "
    tail = [" The chapter reads each exercise's saved notebook: save it (Ctrl+S) and run this cell again."]
    if any(not s.written for s in statuses):
        tail.insert(0, " A cell that needs an answer not written yet says so in one line; the others run.")
    if failing:
        tail.insert(0, f" The chapter uses {_join(failing)} as written, so the figures it computes from "
                       f"{'it' if len(failing) == 1 else 'them'} may differ from the text's: run the public "
                       "checks in the exercise to see what is wrong.")
    markdown = head + _join(parts_md) + "." + "".join(tail)
    plain = head + _join(parts_txt) + "." + "".join(tail).replace("**", "")
    return markdown, plain


def _show(markdown: str, plain: str) -> None:
    try:
        from IPython.display import display
        display({"text/markdown": markdown, "text/plain": plain}, raw=True)
    except ImportError:
        print(plain)


def introduce(names: dict[str, str]) -> list[AnswerStatus]:
    """Say in one paragraph what the chapter runs on: the exercises of ``names`` ({function:
    exercise}), each written or not, saved when, passing its public checks or not."""
    exercises = sorted(set(names.values()))
    statuses = [answer_status(e) for e in exercises]
    if statuses:
        _show(*paragraph(statuses))
    return statuses


# ------------------------------------------------------------------------------ Run All goes on


def _bound_names(body: list[ast.stmt]) -> list[str]:
    """The names a cell's top level binds (assignments, definitions, imports, loop targets)."""
    bound = set()
    for stmt in body:
        for node in ast.walk(stmt):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                bound.add(node.id)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                bound.add(node.name)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                bound.update((a.asname or a.name).split(".")[0] for a in node.names)
    return sorted(bound)


class GuardCells(ast.NodeTransformer):
    """Each cell as ``try: <cell>; except BaseException: <stopped or raise>``, its last expression's
    value shown after the ``try`` as IPython shows a cell's last expression."""

    def visit_Module(self, node: ast.Module) -> ast.Module:
        body = list(node.body)
        if not body or any(isinstance(s, ast.ImportFrom) and s.module == "__future__" for s in body):
            return node
        last = body[-1] if isinstance(body[-1], ast.Expr) else None
        if last is not None:
            body[-1] = ast.copy_location(ast.Assign(targets=[ast.Name(LAST_VALUE, ast.Store())], value=last.value), last)
        bound = _bound_names(node.body)
        handler = ast.parse(
            f"try:\n    pass\nexcept BaseException as _answers_error:\n"
            f"    import answers.chapter as _answers_chapter\n"
            f"    if not _answers_chapter.stopped(_answers_error, {bound!r}):\n"
            f"        raise\n").body[0]
        handler.body = body
        new = [ast.parse(f"{LAST_VALUE} = None").body[0], handler]
        if last is not None:
            new.append(ast.Expr(ast.Name(LAST_VALUE, ast.Load())))
        node.body = new
        return ast.fix_missing_locations(node)


def _starter_exercise(err: BaseException) -> str | None:
    """The exercise whose starter raised ``err`` (its message names it), or None."""
    if not isinstance(err, NotImplementedError):
        return None
    found = EXERCISE_IN_MESSAGE.search(str(err))
    if found:
        return found["exercise"]
    tb = err.__traceback__
    name = None
    while tb is not None:
        name = tb.tb_frame.f_code.co_name
        tb = tb.tb_next
    return _NAMES.get(name or "")


def stopped(err: BaseException, bound: list[str]) -> bool:
    """The cell stopped on an answer not written yet (a starter's NotImplementedError, or a name
    only such a cell would have defined): say so in one line and return True; else False."""
    exercise = _starter_exercise(err)
    if exercise is None and isinstance(err, NameError) and getattr(err, "name", None) in _UNAVAILABLE:
        exercise = _UNAVAILABLE[err.name]
        needs = f"`{err.name}`, which an earlier cell computes with your `{exercise}`"
    elif exercise is not None:
        needs = f"your `{exercise}`"
    elif _UNAVAILABLE and isinstance(err, Exception):
        # a cell above stopped half-way for want of an answer (a list it was filling is short):
        # most likely this error comes from there
        exercise = sorted(set(_UNAVAILABLE.values()))[0]
        needs = (f"what a cell above could not finish without your `{exercise}` "
                 f"(it stopped on {type(err).__name__}: {err})")
    else:
        return False
    for name in bound:
        _UNAVAILABLE.setdefault(name, exercise)
    _show(f"This cell needs {needs} ({exercise_link(exercise)}), not written yet: it stops here, and "
          "the cells that do not need it go on.",
          f"This cell needs {needs.replace('`', '')} (exercises/{exercise}.ipynb), not written yet: it stops "
          "here, and the cells that do not need it go on.")
    return True


def guard_cells(names: dict[str, str]) -> bool:
    """Run every later cell of this IPython kernel under ``GuardCells`` (once); False outside
    IPython."""
    _NAMES.update(names)
    _UNAVAILABLE.clear()
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    if shell is None:
        return False
    if not any(isinstance(t, GuardCells) for t in shell.ast_transformers):
        shell.ast_transformers.append(GuardCells())
    return True
