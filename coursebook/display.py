"""Showing numbers on a page: vectors in the prose, tables and matrices as real tables, texts a
model wrote as wrapped blocks, and the source of an engine function (never one an exercise
grades)."""
from __future__ import annotations

import html
import inspect
import numbers
import textwrap

from course import catalogue


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


TEXT_WIDTH = 78                 # characters of a text block's plain-text line: the column shows about 80


class TextBlocks:
    """Labelled texts for a page (a model's replies): each label over its text, set as prose that
    wraps at the column's edge on the site and in JupyterLab (never a line that scrolls), and, as
    plain text, wrapped at ``TEXT_WIDTH`` characters under its label, indented."""

    EMPTY = "(empty)"           # what an empty text shows: a reply that ended at once

    def __init__(self, blocks, width: int = TEXT_WIDTH):
        self.blocks = [(str(label), str(text) if str(text).strip() else self.EMPTY) for label, text in blocks]
        self.width = width

    def _repr_html_(self) -> str:
        esc = html.escape
        quote = ("margin: 0.2em 0 0.9em 0; padding: 0.3em 0.8em; border-left: 3px solid #c8c8c8; "
                 "white-space: pre-wrap; overflow-wrap: anywhere; font-family: inherit")
        parts = [f'<div class="coursebook-text"><div><strong>{esc(label)}</strong></div>'
                 f'<blockquote style="{quote}">{esc(text)}</blockquote></div>'
                 for label, text in self.blocks]
        return '<div class="coursebook-texts">' + "".join(parts) + "</div>"

    def __str__(self) -> str:
        out = []
        for label, text in self.blocks:
            out += textwrap.wrap(label, self.width) or [""]
            for line in text.split("\n"):
                out += textwrap.wrap(line, self.width - 2, initial_indent="  ", subsequent_indent="  ",
                                     break_long_words=True, replace_whitespace=False) or ["  "]
        return "\n".join(line.rstrip() for line in out)

    __repr__ = __str__


def text_blocks(blocks, width: int = TEXT_WIDTH) -> TextBlocks:
    """Texts under their labels, ``[(label, text), ...]`` or ``{label: text}``: a model's replies
    shown as readable, wrapped blocks rather than as strings or as a table's long cells."""
    items = list(blocks.items()) if isinstance(blocks, dict) else list(blocks)
    for i, item in enumerate(items):
        if not isinstance(item, (tuple, list)) or len(item) != 2:
            raise ValueError(f"text block {i} is not a (label, text) pair: {item!r}")
    if not isinstance(width, int) or width < 20:
        raise ValueError(f"width must be a whole number of characters, at least 20, got {width!r}")
    return TextBlocks(items, width)


class GradedSourceError(ValueError):
    """show_source was asked for a function that an exercise grades, or for the engine's own
    implementation of one (an exercise's counterpart, such as the machine's requantizer)."""


def graded_names() -> frozenset[str]:
    """The functions the exercises grade and the engine's implementations of them."""
    return catalogue.protected_names()


def _counterpart_of(fn):
    """The exercise whose answer ``fn`` implements (a counterpart in the catalogue), or None."""
    module = getattr(fn, "__module__", "") or ""
    qualname = getattr(fn, "__qualname__", "") or ""
    for part in catalogue.counterparts():
        if (part.qualname and part.module == module and part.qualname == qualname) or part.covers_module(module):
            return part
    return None


class Source:
    """Lines of an engine function's source, for a page: highlighted HTML on the site and in
    JupyterLab (each line a block of its own, so a line longer than the column wraps under its own
    indentation instead of running past the column's edge), and plain text for ``print`` and tests.

    ``lines`` is [(line number in the file, text)], in order; a gap in the numbers is drawn as one
    "..." line at the indentation of the line after it.
    """

    def __init__(self, title: str, lines, origin: int | None = None, length: int | None = None):
        self.title = title
        self.lines = list(lines)
        self.origin = self.lines[0][0] if origin is None else origin    # the file's line of the function's line 1
        self.length = len(self.lines) if length is None else length    # the function's lines

    def _shown(self):
        """[(line number or None for an elision, text)]: the lines with "..." where some are left out."""
        shown, previous = [], None
        for number, text in self.lines:
            if previous is not None and number != previous + 1:
                indent = len(text) - len(text.lstrip())
                shown.append((None, " " * indent + "..."))
            shown.append((number, text))
            previous = number
        return shown

    @property
    def heading(self) -> str:
        """The function's name and, for a part of it, its lines counted from the function's first
        (1), as ``start`` and ``end`` count them: the same on the site, in the course's notebooks
        and in the learner's copy, whose files hold starters of other lengths above the function."""
        if len(self.lines) == self.length:
            return self.title
        return f"{self.title}, lines {self.first - self.origin + 1}-{self.last - self.origin + 1} of its {self.length}"

    @property
    def first(self) -> int:
        return self.lines[0][0]

    @property
    def last(self) -> int:
        return self.lines[-1][0]

    def __str__(self) -> str:
        return "\n".join(text for _, text in self._shown())

    __repr__ = __str__

    def _repr_html_(self) -> str:
        from pygments import highlight
        from pygments.formatters import HtmlFormatter
        from pygments.lexers import PythonLexer

        shown = self._shown()
        # One highlight of the whole text, so that strings and docstrings spanning lines are
        # coloured as Python reads them; the formatter closes its spans at each line's end.
        coloured = highlight("\n".join(text for _, text in shown), PythonLexer(stripnl=False),
                             HtmlFormatter(nowrap=True)).split("\n")
        body = []
        for (_, text), line in zip(shown, coloured):
            hang = len(text) - len(text.lstrip()) + 4      # wrapped parts sit under the code, indented
            body.append(f'<span class="cs-line" style="display: block; padding-left: {hang}ch; '
                        f'text-indent: -{hang}ch">{line or " "}</span>')
        title = html.escape(self.heading)
        return (f'<div class="coursebook-source highlight-python notranslate">'
                f'<div class="coursebook-source-title">{title}</div>'
                f'<div class="highlight"><pre style="white-space: pre-wrap">{"".join(body)}</pre></div></div>')


def _refuse_graded(fn) -> None:
    """Raise GradedSourceError when ``fn`` is graded by an exercise or implements an answer."""
    name = getattr(fn, "__name__", "")
    if name in graded_names():
        raise GradedSourceError(f"{name} is graded by an exercise: a chapter never shows its source")
    part = _counterpart_of(fn)
    if part is not None:
        raise GradedSourceError(f"{part.spec} implements the answer of the exercise {part.exercise} "
                                f"(chapter {part.chapter}): a chapter never shows its source")


def _find_line(lines, where, after: int, name: str, what: str) -> int:
    """The index in ``lines`` of ``where``: a line number of the function (1 is its first line),
    or the first line from index ``after`` on that contains the text ``where``."""
    if isinstance(where, bool) or not isinstance(where, (int, str)):
        raise TypeError(f"{what} must be a line number or a text the line contains, got {where!r}")
    if isinstance(where, int):
        if not 1 <= where <= len(lines):
            raise ValueError(f"{what}={where}: {name} has lines 1 to {len(lines)}")
        return where - 1
    for i in range(after, len(lines)):
        if where in lines[i]:
            return i
    raise ValueError(f"{what}={where!r}: no line of {name} contains it"
                     + (f" after line {after}" if after else ""))


def _header_length(lines) -> int:
    """How many of a function's source lines are its decorators and its signature."""
    import ast
    import textwrap

    node = ast.parse(textwrap.dedent("\n".join(lines))).body[0]
    return node.body[0].lineno - 1


def source(fn, start=None, end=None) -> Source:
    """The source of an engine function as a ``Source``, or the part of it the text discusses:
    from ``start`` to ``end`` (both included), each a line number of the function (1 is its
    ``def``) or a text that the line contains (``start`` the first line that does, ``end`` the
    first one from ``start`` on).  A part keeps the function's signature above it, and "..."
    where lines are left out.  A function an exercise grades is refused (GradedSourceError)."""
    _refuse_graded(fn)
    lines, first = inspect.getsourcelines(fn)
    margin = len(lines[0]) - len(lines[0].lstrip())       # a method is shown from its own margin
    lines = [line.rstrip("\n") for line in lines]
    lines = [line[margin:] if line[:margin].strip() == "" else line.lstrip() for line in lines]
    name = getattr(fn, "__qualname__", getattr(fn, "__name__", repr(fn)))
    lo = 0 if start is None else _find_line(lines, start, 0, name, "start")
    hi = len(lines) - 1 if end is None else _find_line(lines, end, lo, name, "end")
    if hi < lo:
        raise ValueError(f"end={end!r} is line {hi + 1} of {name}, before start={start!r} (line {lo + 1})")
    keep = sorted(set(range(min(_header_length(lines), lo))) | set(range(lo, hi + 1)))
    title = f"{getattr(fn, '__module__', '')}.{name}".lstrip(".")
    return Source(title, [(first + i, lines[i]) for i in keep], origin=first, length=len(lines))


def show_source(fn, start=None, end=None) -> None:
    """Show the source of an engine function, the code that runs on this page, highlighted and
    sized to the text column (in a notebook; ``print`` elsewhere); ``start`` and ``end`` keep
    only the lines the text discusses (see ``source``).  A function an exercise grades is
    refused, and so is the engine's own implementation of one: a chapter teaches it by its maths
    and its results, and links to the exercise."""
    from IPython.display import display

    display(source(fn, start, end))


def _field_names(obj) -> list[str]:
    import dataclasses

    if not dataclasses.is_dataclass(obj) or isinstance(obj, type):
        raise TypeError(f"fields_table shows dataclass instances, got {type(obj).__name__}")
    return [f.name for f in dataclasses.fields(obj) if f.repr]


def _fields_of_one(item, labels: dict, formats: dict, caption: str) -> Table:
    """One dataclass instance as a table of a row per field ("field", "value")."""
    rows = []
    for name in _field_names(item):
        value = getattr(item, name)
        fmt = formats.get(name, "," if _is_number(value) and isinstance(value, int) else None)
        rows.append((labels.get(name, name), _cell_text(value, fmt)))
    return Table(["field", "value"], rows, [False, False], caption)


def _column_formats(names: list[str], objects: list, formats: dict) -> dict:
    """Each field's format: the one given, else "," when the field is an integer in every row."""
    unknown = set(formats) - set(names)
    if unknown:
        raise ValueError(f"formats for fields that do not exist: {sorted(unknown)}")

    def whole(n):
        return all(isinstance(getattr(o, n), int) and _is_number(getattr(o, n)) for o in objects)
    return {n: formats.get(n, "," if whole(n) else None) for n in names}


def fields_table(items, labels=None, formats=None, caption: str = "") -> Table:
    """Dataclass instances as a table, instead of their repr: a mapping {label: instance} or a
    list of instances of one class gives a row per instance and a column per field; a single
    instance gives a row per field ("field", "value").  ``labels`` renames fields
    ({"n_layers": "layers L"}); ``formats`` is ``table``'s, by field name (default: "," for
    integers)."""
    labels = dict(labels or {})
    if not isinstance(items, (dict, list, tuple)):
        return _fields_of_one(items, labels, dict(formats or {}), caption)
    keyed = dict(items) if isinstance(items, dict) else None
    objects = list(keyed.values()) if keyed is not None else list(items)
    if not objects:
        raise ValueError("fields_table needs at least one instance")
    names = _field_names(objects[0])
    if any(type(o) is not type(objects[0]) for o in objects):
        raise TypeError("fields_table shows instances of one class per table, got "
                        + ", ".join(sorted({type(o).__name__ for o in objects})))
    formats = _column_formats(names, objects, formats or {})
    rows = [[getattr(o, n) for n in names] for o in objects]
    columns = [labels.get(n, n) for n in names]
    if keyed is not None:
        rows = [[str(k)] + r for k, r in zip(keyed, rows)]
        columns = [labels.get("", "key")] + columns
        formats = [None] + [formats[n] for n in names]
    else:
        formats = [formats[n] for n in names]
    return table(rows, columns, formats, caption)
