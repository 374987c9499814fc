"""Showing numbers on a page: vectors in the prose, tables and matrices as real tables, and the
source of an engine function (never one an exercise grades)."""
from __future__ import annotations

import html
import inspect
import numbers


def vec(x, digits: int = 4, brackets: str = "()") -> str:
    """A vector as text, each number rounded for display: vec([0.75172, 1.5035]) is
    "(0.7517, 1.5035)"; ``brackets="[]"`` for "[0.7517, 1.5035]"."""
    return brackets[0] + ", ".join(f"{float(v):.{digits}f}" for v in x) + brackets[1]


def _is_number(value) -> bool:
    return isinstance(value, numbers.Number) and not isinstance(value, bool)


def _cell_text(value, fmt) -> str:
    if fmt is None:
        return str(value)
    if callable(fmt):
        return str(fmt(value))
    return format(value, fmt)


class Table:
    """A table for a page: HTML on the site and in JupyterLab, Markdown, and aligned text
    (``print(table)``, and what tests and plain-text readers see).  Numbers are right-aligned."""

    def __init__(self, header, rows, numeric, caption=""):
        self.header = [str(h) for h in header]
        self.rows = [[str(c) for c in row] for row in rows]
        self.numeric = list(numeric)
        self.caption = caption

    def _cls(self, i: int) -> str:
        # the class for the site's style sheet, the inline alignment for JupyterLab
        return ' class="num" style="text-align: right"' if self.numeric[i] else ' style="text-align: left"'

    def _repr_html_(self) -> str:
        esc = html.escape
        head = "".join(f"<th{self._cls(i)}>{esc(h)}</th>" for i, h in enumerate(self.header))
        body = "".join("<tr>" + "".join(f"<td{self._cls(i)}>{esc(c)}</td>" for i, c in enumerate(row)) + "</tr>"
                       for row in self.rows)
        caption = f"<caption>{esc(self.caption)}</caption>" if self.caption else ""
        return (f'<table class="coursebook-table">{caption}<thead><tr>{head}</tr></thead>'
                f"<tbody>{body}</tbody></table>")

    def _repr_markdown_(self) -> str:
        def line(cells):
            return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"
        rule = "|" + "|".join("---:" if n else ":---" for n in self.numeric) + "|"
        lines = [line(self.header), rule] + [line(r) for r in self.rows]
        return (f"*{self.caption}*\n\n" if self.caption else "") + "\n".join(lines)

    def __str__(self) -> str:
        widths = [max(len(r[i]) for r in [self.header] + self.rows) for i in range(len(self.header))]
        def line(cells):
            return "  ".join(c.rjust(w) if self.numeric[i] else c.ljust(w)
                             for i, (c, w) in enumerate(zip(cells, widths))).rstrip()
        text = "\n".join([line(self.header), "  ".join("-" * w for w in widths)] + [line(r) for r in self.rows])
        return (self.caption + "\n" + text) if self.caption else text

    __repr__ = __str__


def table(rows, columns, formats=None, caption: str = "") -> Table:
    """A table of ``rows`` (sequences of values, one per column) under the headers ``columns``.

    ``formats`` gives, per column, a format spec (",", ".2f", "{:,} B" style specs without braces)
    or a function of the value, or None for ``str``; a dict maps column names to formats.
    """
    columns = list(columns)
    rows = [list(r) for r in rows]
    for r in rows:
        if len(r) != len(columns):
            raise ValueError(f"a row of {len(r)} values under {len(columns)} columns: {r}")
    if formats is None:
        formats = [None] * len(columns)
    elif isinstance(formats, dict):
        unknown = set(formats) - set(columns)
        if unknown:
            raise ValueError(f"formats for columns that do not exist: {sorted(unknown)}")
        formats = [formats.get(c) for c in columns]
    elif len(formats) != len(columns):
        raise ValueError(f"{len(formats)} formats for {len(columns)} columns")
    numeric = [bool(rows) and all(_is_number(r[i]) for r in rows) for i in range(len(columns))]
    cells = [[_cell_text(v, f) for v, f in zip(r, formats)] for r in rows]
    return Table(columns, cells, numeric, caption)


def matrix(M, digits: int = 4, row_label: str = "", col_label: str = "", masked=None, caption: str = "") -> Table:
    """A 2-D array as a table, rows and columns numbered from 0 ("query 0", "key 2" given
    ``row_label="query"``, ``col_label="key"``); where ``masked`` is true the cell says "masked"."""
    import numpy as np

    M = np.asarray(M)
    if M.ndim != 2:
        raise ValueError(f"matrix() shows 2-D arrays, got shape {M.shape}")
    rows = []
    for i in range(M.shape[0]):
        cells = ["masked" if masked is not None and masked[i, j] else f"{M[i, j]:.{digits}f}"
                 for j in range(M.shape[1])]
        rows.append([f"{row_label} {i}".strip()] + cells)
    header = [""] + [f"{col_label} {j}".strip() for j in range(M.shape[1])]
    return Table(header, rows, [False] + [True] * M.shape[1], caption)


class GradedSourceError(ValueError):
    """show_source was asked for a function that an exercise grades, or for the engine's own
    implementation of one (an exercise's counterpart, such as the machine's requantizer)."""


def graded_names() -> frozenset[str]:
    """The functions the exercises grade and the engine's implementations of them."""
    try:
        from graders.answer_leaks import protected_names
    except ModuleNotFoundError:         # a learner's copy: no grader, and every graded body a starter
        return frozenset()
    return protected_names()


def _counterpart_of(fn):
    """The exercise whose answer ``fn`` implements (a counterpart in the registry), or None."""
    try:
        from graders.answer_leaks import counterparts
    except ModuleNotFoundError:         # a learner's copy: the counterparts are starters there
        return None
    module = getattr(fn, "__module__", "") or ""
    qualname = getattr(fn, "__qualname__", "") or ""
    for part in counterparts():
        if (part.qualname and part.module == module and part.qualname == qualname) or part.covers_module(module):
            return part
    return None


def show_source(fn) -> None:
    """Print the source of an engine function, the code that runs on this page.  A function an
    exercise grades is refused, and so is the engine's own implementation of one: a chapter
    teaches it by its maths and its results, and links to the exercise."""
    name = getattr(fn, "__name__", "")
    if name in graded_names():
        raise GradedSourceError(f"{name} is graded by an exercise: a chapter never shows its source")
    part = _counterpart_of(fn)
    if part is not None:
        raise GradedSourceError(f"{part.spec} implements the answer of the exercise {part.exercise} "
                                f"(chapter {part.chapter}): a chapter never shows its source")
    print(inspect.getsource(fn))
