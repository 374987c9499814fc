"""Reading a submission defensively: from a notebook or a .py file to the source the grader runs.

A learner's notebook is full of things that are not the answer: scratch work, calls of the
public checks, shell and magic lines, cells run twice, a cell with a typo.  The grader keeps only
what defines the answer, top to bottom, in cell order:

- imports (each wrapped so that a module missing in the sandbox does not sink the whole file:
  the name stays undefined and the feedback says which import failed);
- ``def`` and ``class`` statements, with their decorators;
- simple top-level assignments: constants (``EPS = 1e-12``, ``SCALE = np.sqrt(2)``), aliases
  (``softmax = my_softmax``) and, for the names the exercise asks for, anything; a constant that
  calls a module (``P = ga2.attn.rq_params(ex)``) is left undefined, not fatal, when it cannot be
  computed in the sandbox (the module is missing there, or the part of it the value needs).

Everything else at top level (calls, loops, prints, ``run_checks(...)``) is dropped, so the
answer is found by the function names the exercise asks for and the last definition wins.
``%`` and ``!`` lines are dropped; cells with a syntax error are read statement by statement,
keeping what parses; duplicated cells, a wrong kernelspec and missing metadata are fine.
A file that cannot be read at all raises ``Unreadable`` with a message meant for the learner.
"""
from __future__ import annotations

import ast
import difflib
import errno
import json
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Unreadable", "Refused", "Extracted", "Source", "read", "read_file", "open_file", "extract", "extract_file",
           "infer_exercise", "peek"]

# Modules the course's notebooks import that are never needed by an answer: dropped silently.
DROPPED_IMPORTS = {"public_checks"}
# Cell magics whose body is Python: the magic line goes, the body stays.
PYTHON_CELL_MAGICS = {"time", "timeit", "capture", "prun", "debug"}
# Builtins a constant may be computed with (N = int(1e6), SIZES = tuple(range(4))).
SAFE_BUILTINS = {"int", "float", "complex", "bool", "str", "bytes", "tuple", "list", "dict", "set",
                 "frozenset", "range", "len", "abs", "min", "max", "round", "sum", "pow", "sorted",
                 "reversed", "enumerate", "zip", "divmod"}
# The most the grader reads: a notebook may carry big outputs (images), but its code is small; a
# file past these limits is refused with a message rather than parsed (the parsing happens in the
# grader's own process, so it must stay bounded in time and memory).
MAX_FILE_BYTES = 128 << 20
MAX_CODE_CHARS = 1 << 20
# A notebook's JSON is weighed before it is decoded (``json.loads`` would build every object of
# it in the grader's process: a 120 MB notebook of ``{}`` is 3 GB of dicts).  Long strings of
# base64 are outputs (an image): their bytes are dropped before decoding, never read (code has
# spaces and brackets, so a cell's source is never one).  What is
# left may hold at most MAX_JSON_ITEMS containers and items (structural characters outside
# strings; a notebook of 300 cells with outputs has about 20,000) and at most MAX_JSON_STRINGS
# strings (every line of a cell's source is one).
LONG_STRING = 1 << 16
MAX_JSON_ITEMS = 1_000_000
MAX_JSON_STRINGS = 1_000_000
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
_BASE64 = re.compile(rb'"[A-Za-z0-9+/=\\]*"')       # with \n escapes between lines
_STRUCTURE = (b"{", b"[", b",", b":")
_JSON_START = re.compile(rb"(?:\xef\xbb\xbf)?\s*\{")
_LINE_MAGIC = re.compile(r"^\s*(?:[%!]|[\w.\[\], ]+=\s*[%!])")
_HELP_LINE = re.compile(r"^\s*\??[\w.]+\?\??\s*$")


class Unreadable(ValueError):
    """The submission cannot be read at all (the message says why, for the learner)."""


class Refused(Unreadable):
    """The submission is not a regular file the grader opens: a symbolic link, a folder, a FIFO or
    a device, or it is gone or unreadable (the message names it and says why)."""


def open_file(path):
    """``path`` opened for reading as a regular file, never through a symbolic link: ``lstat``
    first (a link is refused without reading where it points), then ``O_NOFOLLOW`` (a link put in
    its place meanwhile fails to open), ``O_NONBLOCK`` (a FIFO cannot hang the grader), and
    ``fstat`` of what was opened.  Raises ``Refused``."""
    name = os.fsdecode(os.path.basename(os.fspath(path))) or os.fsdecode(os.fspath(path))
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        raise Refused(f"{name}: no such file") from None
    except OSError as err:
        raise Refused(f"{name} could not be read ({err.strerror})") from None
    if stat.S_ISLNK(mode):
        raise Refused(f"{name} is a symbolic link; the grader reads only regular files, never what a "
                      "link points to (hand in the notebook itself)")
    if stat.S_ISDIR(mode):
        raise Refused(f"{name} is a folder, not a notebook or a .py file")
    if not stat.S_ISREG(mode):
        raise Refused(f"{name} is not a regular file")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as err:
        why = "it became a symbolic link" if err.errno == errno.ELOOP else err.strerror
        raise Refused(f"{name} could not be read ({why})") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise Refused(f"{name} is not a regular file")
    return os.fdopen(fd, "rb")


def read_file(path, limit: int | None = None) -> bytes:
    """The bytes of the submission file ``path`` (``open_file``), at most ``limit`` of them (by
    default one byte past what the grader reads, so that a huge file is refused, not loaded)."""
    with open_file(path) as f:
        try:
            return f.read(MAX_FILE_BYTES + 1 if limit is None else limit)
        except OSError as err:
            raise Refused(f"{os.path.basename(os.fspath(path))} could not be read ({err.strerror})") from None


@dataclass
class Extracted:
    """The part of a submission the grader runs, and where each line came from."""

    source: str
    origins: list[tuple[str, int]]   # for each line of ``source``: (cell label, line in that cell)
    definitions: dict[str, str]      # name -> where it was last defined ("cell 4, line 2")
    exercise: str | None = None      # from the notebook's metadata, when it says
    notes: list[str] = field(default_factory=list)
    kind: str = "notebook"
    imports: set[str] = field(default_factory=set)   # the import statements wrapped, as reported
    guarded: dict[str, str] = field(default_factory=dict)  # defined only under `if __name__ == "__main__":`

    def locate(self, line: int | None) -> str | None:
        """Where line ``line`` of ``source`` came from, in the learner's terms."""
        if not line or not (1 <= line <= len(self.origins)):
            return None
        label, n = self.origins[line - 1]
        return f"{label}, line {n}" if label else f"line {n}"

    def missing(self, names) -> list[str]:
        return [n for n in names if n not in self.definitions]

    def suggestion(self, name: str) -> str:
        """A hint when ``name`` is not defined: where it is hidden, or the closest names that are."""
        if name in self.guarded:
            return (f"it is defined only inside `if __name__ == \"__main__\":` ({self.guarded[name]}), "
                    "which does not run when the grader loads the submission as a module; define it "
                    "at the top level")
        callables = [n for n in self.definitions if not n.startswith("_")]
        close = difflib.get_close_matches(name, callables, n=2, cutoff=0.5)
        if close:
            return f"did you mean to name {' or '.join(close)} '{name}'?"
        if callables:
            return f"the submission defines {', '.join(sorted(callables)[:8])}"
        return "the submission defines no functions"


# ------------------------------------------------------------------------------------- reading


def extract_file(path, functions=()) -> Extracted:
    """Read ``path`` (``.ipynb`` or anything else as Python) and extract it."""
    path = Path(path)
    return extract(read_file(path), path.name, functions)


def extract(data: bytes, filename: str, functions=()) -> Extracted:
    """Extract the answer from the bytes of a submission called ``filename``."""
    return read(data, filename).extract(functions)


@dataclass
class Source:
    """A submission read once: its code cells in order (label, text), the exercise its notebook
    metadata names, and its kind (``notebook`` or ``python``).  The code is parsed once, on first
    use, for both choosing the exercise (``defined_names``) and extracting the answer."""

    cells: list[tuple[str, str]]
    exercise: str | None = None
    kind: str = "notebook"
    _parsed: tuple | None = field(default=None, repr=False)

    def statements(self) -> tuple[list, list[str]]:
        """([(cell label, top-level statement, its lines, first line number)], notes), parsed once.
        Raises ``Unreadable`` when there is more code than the grader reads."""
        if self._parsed is None:
            self._parsed = _parse_cells(self.cells)
        if isinstance(self._parsed, Unreadable):
            raise self._parsed
        return self._parsed

    def defined_names(self) -> set[str]:
        """The names its top-level statements bind (definitions, imports, assignments): which
        exercise's functions it defines.  Never raises."""
        try:
            statements, _ = self.statements()
        except Unreadable:
            return set()
        names = set()
        for _, node, _, _ in statements:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names.update((a.asname or a.name).split(".")[0] for a in node.names if a.name != "*")
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Assign, ast.AnnAssign)):
                names.update(_bound_names(node))
        return names

    def extract(self, functions=()) -> Extracted:
        statements, notes = self.statements()
        return _extract_statements(statements, list(notes), set(functions), self.exercise, self.kind)


def read(data: bytes, filename: str) -> Source:
    """The bytes of a submission called ``filename`` as a ``Source`` (the JSON of a notebook is
    decoded here, once); ``Unreadable`` with a message for the learner when it cannot be."""
    if not data.strip():
        raise Unreadable(f"{filename} is empty")
    if len(data) > MAX_FILE_BYTES:
        raise Unreadable(f"{filename} is more than {MAX_FILE_BYTES / 1e6:.0f} MB; the grader reads files of up to "
                         f"{MAX_FILE_BYTES / 1e6:.0f} MB (clear the notebook's outputs and submit again)")
    if b"\x00" in data[:8192]:
        raise Unreadable(f"{filename} is not a text file (is it a zip or an image?)")
    is_notebook = filename.lower().endswith(".ipynb") or (
        _JSON_START.match(data) is not None and b'"cells"' in data[:100_000])
    if is_notebook:                      # weighed before anything is decoded
        data = _within_budget(data, filename)
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise Unreadable(f"{filename} is not UTF-8 text") from None
    if is_notebook:
        cells, exercise = _notebook_cells(text, filename)
        return Source(cells, exercise, "notebook")
    return Source([("", text)], None, "python")


def _within_budget(data: bytes, filename: str) -> bytes:
    """The notebook's JSON without its long base64 strings (outputs: each becomes ``""``), once its
    structure is known to be within ``MAX_JSON_ITEMS`` and ``MAX_JSON_STRINGS``; ``Unreadable``
    otherwise.  Counting is done on the bytes, building nothing but the strings' positions: a
    ``count`` per structural character, and only when that upper bound is over the budget, a pass
    over the strings to subtract what they hold."""
    if data.count(b'"') > 2 * MAX_JSON_STRINGS + 1:
        raise Unreadable(f"{filename} is not a notebook the grader reads: it holds more than "
                         f"{MAX_JSON_STRINGS:,} strings (clear the notebook's outputs and submit again)")
    long = [m.span() for m in _STRING.finditer(data)
            if m.end() - m.start() > LONG_STRING and _BASE64.fullmatch(data, *m.span())]
    if long:
        ends = [0] + [end for _, end in long]
        starts = [start for start, _ in long] + [len(data)]
        data = b'""'.join(data[a:b] for a, b in zip(ends, starts))
    items = sum(data.count(c) for c in _STRUCTURE)
    if items > MAX_JSON_ITEMS:
        inside = sum(sum(m.group().count(c) for c in _STRUCTURE) for m in _STRING.finditer(data))
        if items - inside > MAX_JSON_ITEMS:
            raise Unreadable(f"{filename} is not a notebook the grader reads: its JSON holds more than "
                             f"{MAX_JSON_ITEMS:,} items (clear the notebook's outputs and submit again)")
    return data


def _notebook_cells(text: str, filename: str) -> tuple[list[tuple[str, str]], str | None]:
    try:
        nb = json.loads(text)
    except json.JSONDecodeError as err:
        raise Unreadable(f"{filename} is not a valid notebook: invalid JSON at line {err.lineno} "
                         f"({err.msg}); was it saved completely?") from None
    except (RecursionError, MemoryError):
        raise Unreadable(f"{filename} is not a valid notebook: its JSON is nested too deeply to read") from None
    if not isinstance(nb, dict):
        raise Unreadable(f"{filename} is not a notebook (its JSON is not an object)")
    raw_cells = nb.get("cells")
    if raw_cells is None and isinstance(nb.get("worksheets"), list):      # nbformat 3
        raw_cells = [c for ws in nb["worksheets"] if isinstance(ws, dict)
                     for c in (ws.get("cells") or [])]
    if not isinstance(raw_cells, list):
        raise Unreadable(f"{filename} is not a notebook (it has no list of cells)")
    return _code_cells(raw_cells), _metadata_exercise(nb.get("metadata"))


def _code_cells(raw_cells: list) -> list[tuple[str, str]]:
    """("cell N", source) of each code cell whose source is text (a string or a list of them)."""
    cells = []
    for number, cell in enumerate(raw_cells, start=1):
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        source = cell.get("source", cell.get("input", ""))
        if isinstance(source, list):
            source = "".join(s for s in source if isinstance(s, str))
        if not isinstance(source, str):
            continue
        cells.append((f"cell {number}", source))
    return cells


def _metadata_exercise(meta) -> str | None:
    """The exercise the notebook's metadata names (``kvcourse.exercise``), when it is a name."""
    if isinstance(meta, dict) and isinstance(meta.get("kvcourse"), dict):
        name = meta["kvcourse"].get("exercise")
        return name if isinstance(name, str) and name.isidentifier() else None
    return None


# ----------------------------------------------------------------------------------- filtering


def _clean_lines(source: str) -> list[str] | None:
    """The cell's lines with magics and shell lines blanked (kept as blank lines so that line
    numbers still match the learner's cell).  None when the whole cell is not Python."""
    lines = source.splitlines()
    if lines and lines[0].lstrip().startswith("%%"):
        magic = lines[0].lstrip()[2:].split()[0] if lines[0].lstrip()[2:].split() else ""
        if magic not in PYTHON_CELL_MAGICS:
            return None
        lines[0] = ""
    return ["" if (_LINE_MAGIC.match(l) or _HELP_LINE.match(l)) else l for l in lines]


def _chunks(lines: list[str]) -> list[tuple[int, list[str]]]:
    """Split code into top-level statements' chunks (first line index, lines), used to keep the
    parts of a cell that parse when another part does not."""
    starts = []
    for i, line in enumerate(lines):
        if line and not line[0].isspace() and not line.startswith("#"):
            first = line.split(None, 1)[0]
            if first.rstrip(":") in ("else", "elif", "except", "finally") or line[0] in ")]}":
                continue
            if starts and lines[starts[-1]].startswith("@") and i == starts[-1] + 1:
                continue  # a decorator stays with its def
            if starts and lines[i - 1:i] and lines[i - 1].rstrip().endswith("\\"):
                continue
            starts.append(i)
    if not starts or starts[0] != 0:
        starts.insert(0, 0)
    bounds = starts + [len(lines)]
    return [(bounds[k], lines[bounds[k]:bounds[k + 1]]) for k in range(len(starts))]


def _parse(lines: list[str]):
    return ast.parse("\n".join(lines) + "\n")


def _try_parse(lines: list[str]):
    """(tree, None), or (None, why) when the code cannot be parsed: a syntax error, a null byte,
    or nesting too deep for the parser (which raises RecursionError or MemoryError for those)."""
    try:
        return _parse(lines), None
    except SyntaxError as err:
        return None, err
    except (ValueError, RecursionError, MemoryError) as err:
        return None, err


def _statements(label: str, lines: list[str], notes: list[str]):
    """(statement, its source lines, first line number) of the code in ``lines``."""
    tree, err = _try_parse(lines)
    if tree is not None:
        pieces = [(tree, lines, 0)]
    else:
        if isinstance(err, SyntaxError):
            where = f"{label}, line {err.lineno}" if label else f"line {err.lineno}"
            notes.append(f"syntax error at {where} ({err.msg}); the statements around it that parse were kept")
        else:
            where = label or "the file"
            notes.append(f"{where} could not be read as Python (an expression nested too deeply, or a "
                         "null byte); the statements around it that parse were kept")
        pieces = []
        for offset, chunk in _chunks(lines):
            tree, _ = _try_parse(chunk)
            if tree is not None:
                pieces.append((tree, chunk, offset))
    for tree, chunk, offset in pieces:
        for node in tree.body:
            start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
            yield node, chunk[start - 1:node.end_lineno], offset + start


def _is_main_guard(node) -> bool:
    """``if __name__ == "__main__":`` (either way round)."""
    if not isinstance(node, ast.If) or not isinstance(node.test, ast.Compare):
        return False
    test = node.test
    if len(test.ops) != 1 or not isinstance(test.ops[0], ast.Eq):
        return False
    sides = [test.left, test.comparators[0]]
    return (any(isinstance(x, ast.Name) and x.id == "__name__" for x in sides)
            and any(isinstance(x, ast.Constant) and x.value == "__main__" for x in sides))


def _root_name(expr) -> str | None:
    while isinstance(expr, ast.Attribute):
        expr = expr.value
    return expr.id if isinstance(expr, ast.Name) else None


def _simple_value(value, modules: set[str]) -> bool:
    """True for a value worth keeping at top level: no calls except of imported modules'
    functions (``np.sqrt(2)``, ``functools.partial(...)``) and a few builtins (``int(1e6)``)."""
    for node in ast.walk(value):
        if isinstance(node, (ast.Await, ast.Yield, ast.YieldFrom, ast.NamedExpr)):
            return False
        if isinstance(node, ast.Call):
            root = _root_name(node.func)
            if root is None or (root not in modules and not
                                (isinstance(node.func, ast.Name) and root in SAFE_BUILTINS)):
                return False
    return True


def _calls_a_module(value, modules: set[str]) -> bool:
    """The value calls a function of an imported module (``ga2.quant.mantissa_shift(x)``)."""
    return any(isinstance(n, ast.Call) and _root_name(n.func) in modules for n in ast.walk(value))


def _bound_names(node) -> list[str]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
    names = []
    for target in targets:
        for sub in ast.walk(target):
            if isinstance(sub, ast.Name):
                names.append(sub.id)
    return names


def _all_names(target) -> bool:
    return all(isinstance(n, (ast.Name, ast.Tuple, ast.List, ast.Store, ast.Starred))
               for n in ast.walk(target))


def _parse_cells(cells) -> tuple[list, list[str]] | Unreadable:
    """Every cell's top-level statements, magics dropped, broken cells read statement by statement."""
    notes: list[str] = []
    cleaned = [(label, _clean_lines(source)) for label, source in cells]
    size = sum(len(line) + 1 for _, lines in cleaned if lines for line in lines)
    if size > MAX_CODE_CHARS:
        return Unreadable(f"the submission has {size / 1e6:.1f} MB of code; the grader reads up to "
                          f"{MAX_CODE_CHARS / 1e6:.0f} MB (is there data pasted into a cell? load it "
                          "from a file instead)")
    statements = [(label, node, seg, first) for label, lines in cleaned if lines is not None
                  for node, seg, first in _statements(label, lines, notes)]
    return statements, notes


def _extract_statements(statements, notes: list[str], functions: set[str], exercise, kind: str) -> Extracted:
    """Keep what defines the answer (see the module's docstring), in order."""
    kept = _Kept(functions)
    for label, node, seg, first in statements:
        kept.statement(label, node, seg, first)
    if kept.count == 0 and not kept.definitions:
        notes.append("no function definitions were found")
    guarded = {n: w for n, w in kept.guarded.items() if n not in kept.definitions}
    return Extracted("\n".join(kept.lines) + "\n", kept.origins, kept.definitions, exercise, notes, kind,
                     kept.imports, guarded)


class _Kept:
    """The code kept of a submission, statement by statement: its lines and where each came from
    (cell, line), the names it defines and where, its imports, and the names defined only under
    ``if __name__ == "__main__":`` (which the grader never runs)."""

    def __init__(self, functions: set[str]):
        self.functions = functions
        self.lines: list[str] = ["__grader_import_failures__ = {}"]
        self.origins: list[tuple[str, int]] = [("", 0)]
        self.definitions: dict[str, str] = {}
        self.modules: set[str] = set()
        self.imports: set[str] = set()
        self.guarded: dict[str, str] = {}
        self.count = 0

    def emit(self, lines, label, first) -> None:
        for k, line in enumerate(lines):
            self.lines.append(line)
            self.origins.append((label, first + k))

    def statement(self, label, node, seg, first) -> None:
        where = f"{label}, line {first}" if label else f"line {first}"
        if _is_main_guard(node):
            self.main_guard(node, label, first)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            self.import_(node, seg, label, first, where)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            self.emit(seg, label, first)
            self.definitions[node.name] = where
            self.count += 1
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            self.assignment(node, seg, label, first, where)

    def main_guard(self, node, label, first) -> None:
        """Nothing of it runs; the names it defines are remembered, for the feedback."""
        for sub in node.body:
            if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Assign, ast.AnnAssign)):
                line = first + sub.lineno - node.lineno
                for n in _bound_names(sub):
                    self.guarded[n] = f"{label}, line {line}" if label else f"line {line}"

    def import_(self, node, seg, label, first, where) -> None:
        """An import the sandbox may lack runs under ``try``, its failure recorded; relative
        imports and the dropped ones (plotting, widgets) are left out."""
        names = [a.name for a in node.names]
        top = (node.module or "").split(".")[0] if isinstance(node, ast.ImportFrom) else None
        tops = [top] if top is not None else [n.split(".")[0] for n in names]
        if isinstance(node, ast.ImportFrom) and node.level:
            return  # relative imports mean nothing here
        if all(t in DROPPED_IMPORTS for t in tops):
            return
        bound = [a.asname or (a.name.split(".")[0] if isinstance(node, ast.Import) else a.name) for a in node.names]
        self.modules.update(b for b in bound if b != "*")
        text = " ".join(l.strip() for l in seg)[:120]
        self.imports.add(text)
        self.emit(["try:"], label, first)
        self.emit(["    " + l for l in seg], label, first)
        self.emit(["except ImportError as __grader_err:",
                   f"    __grader_import_failures__[{text!r}] = str(__grader_err)"], label, first)
        self.count += 1
        for b in bound:
            if b != "*":
                self.definitions[b] = where

    def assignment(self, node, seg, label, first, where) -> None:
        """An assignment to plain names is kept when it binds a graded name or its value is simple;
        one that calls a module runs under ``try`` (the sandbox may lack the module)."""
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        if not all(_all_names(t) for t in targets):
            return
        names = _bound_names(node)
        if not (set(names) & self.functions) and not _simple_value(node.value, self.modules):
            return
        if set(names) & self.functions or not _calls_a_module(node.value, self.modules):
            self.emit(seg, label, first)
        else:   # a module the sandbox lacks, or lacks part of, leaves this value undefined
            self.emit(["try:"], label, first)
            self.emit(["    " + l for l in seg], label, first)
            self.emit(["except Exception:", "    pass"], label, first)
        for n in names:
            self.definitions[n] = where
        self.count += 1


# ---------------------------------------------------------------------------------- exercise

def peek(data: bytes, filename: str) -> tuple[str | None, set[str]]:
    """(the exercise the notebook's metadata names, the names defined at the top level of its
    code); never raises (an unreadable submission peeks as nothing)."""
    try:
        source = read(data, filename)
    except Unreadable:
        return None, set()
    return source.exercise, source.defined_names()


def infer_exercise(filename: str, metadata_name: str | None, known) -> str | None:
    """The exercise a submission is for: its notebook metadata, else the longest known exercise
    name found in its file name (``attend_step (1).ipynb``, ``jdoe-kv_cache_bytes.py``)."""
    known = list(known)
    if metadata_name in known:
        return metadata_name
    stem = Path(filename).stem.lower().replace("-", "_").replace(" ", "_")
    found = [name for name in known if name in stem]
    return max(found, key=len) if found else None
