"""Where an exercise's answer could leak: a definition of a graded function that is not a starter.

The course never gives an answer away: no page of the site prints the body of a function an
exercise grades, and the learner's copy (``make release``) holds no implementation of one.  This
module finds the definitions that break that rule in any file a learner can read:

* Python files: every ``def NAME`` (at any depth: in a class, inside another function) and every
  ``NAME = lambda ...`` whose NAME is a graded function;
* notebooks: the same in every code cell, in the fenced code of Markdown cells and in the text
  of every output (a printed ``inspect.getsource``);
* HTML pages: the same in every ``<pre>`` block (code cells, their outputs, code in the text);
* what the site's exercise pages ship to the browser: zip archives (every member, read as the
  file it is), gzip files (read as the file inside) and compiled Python (``.pyc``, from another
  Python version than this one, so not read as code: a graded name anywhere in its bytes counts
  as a leak).  (JSON data is not read: an exercise page's data is a notebook, ``NAME.ipynb``.)

A definition is allowed when it is a **starter**: its body, after an optional docstring, is one
``raise NotImplementedError(...)``.  A signature shown alone (``def f(x):`` and no body, as the
statement of an exercise shows it) defines nothing and is allowed too.  Text that does not parse
as Python is read line by line: each ``def NAME(`` there is cut out with the lines indented
under it and judged the same way; one that cannot be read at all counts as a leak.

The graded names come from the course's catalogue (``course.catalogue``), so a new exercise is
covered the day it is listed there.  So do the names of the engine's own implementations of an
answer, the exercise's ``counterparts`` (``"ga2.quant:requant"``: the requantizer the machine
runs is the ``requant`` exercise): ``protected_names()`` is both, and the default of every
function here.  ``find_leaks(path)`` is the one call the tests and the release make.
"""
from __future__ import annotations

import ast
import gzip
import html
import io
import json
import re
import textwrap
import zipfile
import zlib
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

from course.catalogue import Counterpart, counterparts, graded_functions, protected_names
from course.notebooks import cell_source, is_starter, joined, without_magics

__all__ = ["Leak", "graded_functions", "Counterpart", "counterparts", "protected_names", "is_starter",
           "leaks_in_source", "leaks_in_text", "leaks_in_notebook", "leaks_in_html", "leaks_in_compiled",
           "leaks_in_bytes", "find_leaks", "describe"]


@dataclass(frozen=True)
class Leak:
    file: str
    where: str          # "line 12", "cell 4, output", "<pre> block 7"...
    name: str
    reason: str

    def __str__(self) -> str:
        return f"{self.file}: {self.where}: {self.name}: {self.reason}"


# ---------------------------------------------------------------- Python source


def _definitions(tree: ast.AST, names: frozenset[str]):
    """(name, line, is starter) of each definition of a graded name in ``tree``."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in names:
            yield node.name, node.lineno, is_starter(node)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(node.value, ast.Lambda):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Name) and target.id in names:
                    yield target.id, node.lineno, False


def leaks_in_source(source: str, file: str, where: str = "", names: frozenset[str] | None = None) -> list[Leak]:
    """Leaks in a piece of Python (a module, a code cell)."""
    names = protected_names() if names is None else names
    try:
        tree = ast.parse(without_magics(source))
    except SyntaxError:
        return leaks_in_text(source, file, where, names)
    prefix = f"{where}, " if where else ""
    return [Leak(file, f"{prefix}line {line}", name, "defined with a body (an implementation, not a starter)")
            for name, line, starter in _definitions(tree, names) if not starter]


_DEF = re.compile(r"^(?P<indent>[ \t]*)(?:async[ \t]+)?def[ \t]+(?P<name>[A-Za-z_]\w*)[ \t]*\(")
_LAMBDA = re.compile(r"^[ \t]*(?P<name>[A-Za-z_]\w*)[ \t]*(?::[^=]*)?=[ \t]*lambda\b")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def leaks_in_text(text: str, file: str, where: str = "", names: frozenset[str] | None = None) -> list[Leak]:
    """Leaks in text that is not a whole Python program: printed output, a fragment of code.

    Each ``def NAME(`` line of a graded NAME is cut out with the lines below it that are blank or
    indented deeper, dedented and parsed on its own.
    """
    names = protected_names() if names is None else names
    lines = text.splitlines()
    prefix = f"{where}, " if where else ""
    leaks = []
    for i, line in enumerate(lines):
        lam = _LAMBDA.match(line)
        if lam and lam["name"] in names:
            leaks.append(Leak(file, f"{prefix}line {i + 1}", lam["name"], "assigned a lambda (an implementation)"))
            continue
        match = _DEF.match(line)
        if not match or match["name"] not in names:
            continue
        depth, block = _indent(line), [line]
        for follower in lines[i + 1:]:
            if follower.strip() and _indent(follower) <= depth and not block[-1].rstrip().endswith(("(", ",", "\\")):
                break
            block.append(follower)
        chunk = textwrap.dedent("\n".join(block)).rstrip()
        verdict = _judge_chunk(chunk)
        if verdict:
            leaks.append(Leak(file, f"{prefix}line {i + 1}", match["name"], verdict))
    return leaks


def _judge_chunk(chunk: str) -> str:
    """"" when the cut-out definition is a starter or a bare signature, else why not."""
    for candidate, signature_only in ((chunk, False), (chunk + "\n    ...", True)):
        try:
            tree = ast.parse(candidate)
        except SyntaxError:
            continue
        fn = tree.body[0] if tree.body else None
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            break
        if signature_only:
            return ""                      # "def f(x):" and no body: a signature, not a definition
        return "" if is_starter(fn) else "defined with a body (an implementation, not a starter)"
    return "a definition that cannot be read as Python (so it cannot be shown to be a starter)"


# ---------------------------------------------------------------- notebooks and pages


_FENCE = re.compile(r"^(?P<fence>`{3,}|~{3,})[^\n]*\n(?P<body>.*?)^(?P=fence)[ \t]*$", re.MULTILINE | re.DOTALL)


def _output_texts(cell: dict):
    for out in cell.get("outputs", []) or []:
        if not isinstance(out, dict):
            continue
        if "text" in out:
            yield joined(out["text"])
        for mime, value in (out.get("data") or {}).items():
            if mime.startswith("text/"):
                yield joined(value)


def leaks_in_notebook(nb: dict, file: str, names: frozenset[str] | None = None) -> list[Leak]:
    """Leaks in a notebook's code cells, its Markdown's fenced code and its outputs."""
    names = protected_names() if names is None else names
    leaks = []
    for number, cell in enumerate(nb.get("cells", []) or []):
        if not isinstance(cell, dict):
            continue
        source = cell_source(cell)
        if cell.get("cell_type") == "code":
            leaks += leaks_in_source(source, file, f"cell {number}", names)
        elif cell.get("cell_type") == "markdown":
            for fence in _FENCE.finditer(source):
                leaks += leaks_in_source(fence["body"], file, f"cell {number}, code in the text", names)
        for text in _output_texts(cell):
            leaks += leaks_in_text(html.unescape(re.sub(r"<[^>]+>", "", text)), file, f"cell {number}, output", names)
    return leaks


class _PreBlocks(HTMLParser):
    """The text of every <pre> element, tags inside it dropped, entities decoded."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.blocks: list[str] = []
        self._depth = 0
        self._text: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag == "pre":
            self._depth += 1
        elif tag == "br" and self._depth:
            self._text.append("\n")

    def handle_endtag(self, tag):
        if tag == "pre" and self._depth:
            self._depth -= 1
            if not self._depth:
                self.blocks.append("".join(self._text))
                self._text = []

    def handle_data(self, data):
        if self._depth:
            self._text.append(data)


def leaks_in_html(page: str, file: str, names: frozenset[str] | None = None) -> list[Leak]:
    """Leaks in every <pre> block of an HTML page."""
    names = protected_names() if names is None else names
    parser = _PreBlocks()
    parser.feed(page)
    parser.close()
    leaks = []
    for number, block in enumerate(parser.blocks, start=1):
        leaks += leaks_in_source(block, file, f"<pre> block {number}", names)
    return leaks


#: The kinds of file the scan reads (by suffix, lower case).
READ = (".py", ".ipynb", ".html", ".htm", ".md", ".zip", ".gz", ".pyc")


def leaks_in_compiled(data: bytes, file: str, names: frozenset[str] | None = None) -> list[Leak]:
    """A compiled module (``.pyc``) cannot be shown to hold only starters: any graded name in it
    (a function's name is stored as its text) is a leak."""
    names = protected_names() if names is None else names
    return [Leak(file, "compiled code", name, "a compiled module that names a graded function cannot be "
                 "shown to hold only a starter") for name in sorted(names) if name.encode() in data]


def leaks_in_bytes(data: bytes, name: str, label: str, names: frozenset[str] | None = None) -> list[Leak]:
    """Leaks in the contents ``data`` of a file called ``name`` (its suffix says how to read it)."""
    names = protected_names() if names is None else names
    suffix = Path(name).suffix.lower()
    if suffix == ".gz":
        inner = name[:-3]
        if Path(inner).suffix.lower() not in READ:
            return []                      # a gzipped binary (the site's WebAssembly module)
        try:
            return leaks_in_bytes(gzip.decompress(data), inner, f"{label} (gunzipped)", names)
        except (OSError, EOFError, zlib.error):
            return [Leak(label, "the whole file", "?", "a gzip file that cannot be read cannot be checked")]
    if suffix == ".zip":
        try:
            archive = zipfile.ZipFile(io.BytesIO(data))
            members = [m for m in archive.infolist() if not m.is_dir()]
            return [leak for m in members
                    for leak in leaks_in_bytes(archive.read(m), m.filename, f"{label}:{m.filename}", names)]
        except (zipfile.BadZipFile, OSError, EOFError, zlib.error, NotImplementedError):
            return [Leak(label, "the whole file", "?", "a zip archive that cannot be read cannot be checked")]
    if suffix == ".pyc":
        return leaks_in_compiled(data, label, names)
    if suffix not in READ:
        return []
    text = data.decode("utf-8", errors="replace")
    if suffix == ".py":
        return leaks_in_source(text, label, "", names)
    if suffix == ".ipynb":
        try:
            nb = json.loads(text)
        except ValueError:
            return [Leak(label, "the whole file", "?", "a notebook that is not valid JSON cannot be checked")]
        return leaks_in_notebook(nb, label, names)
    if suffix == ".md":
        return [leak for fence in _FENCE.finditer(text)
                for leak in leaks_in_source(fence["body"], label, "code in the text", names)]
    return leaks_in_html(text, label, names)


def find_leaks(path: str | Path, names: frozenset[str] | None = None) -> list[Leak]:
    """Every leak in a file or, recursively, in a folder: ``.py`` files, notebooks, HTML pages,
    Markdown files (their fenced code), compiled Python, and the files inside zip archives and
    gzip files."""
    names = protected_names() if names is None else names
    path = Path(path)
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    leaks = []
    for file in files:
        label = str(file.relative_to(path)) if file != path else str(file)
        if file.suffix.lower() not in READ:
            continue
        if file.name.endswith(".gz") and Path(file.name[:-3]).suffix.lower() not in READ:
            continue                       # never read a large gzipped binary into memory
        leaks += leaks_in_bytes(file.read_bytes(), file.name, label, names)
    return leaks


def describe(leaks: list[Leak], limit: int = 20) -> str:
    """The leaks, one a line, for an error message."""
    lines = [str(leak) for leak in leaks[:limit]]
    if len(leaks) > limit:
        lines.append(f"... and {len(leaks) - limit} more")
    return "\n".join(lines)
