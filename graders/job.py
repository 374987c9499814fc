"""What a sandbox gets of one submission: the job folder.

A job is the submission's extracted source, the spec the harness reads (its limits and the
calls of the hidden tests, ``spec.json``) and the inputs' arrays (``inputs.npz``), never an
expected value; and the course packages its tests need importable, read-only (``Lib``: a copy
made in the job folder without the modules it hides).

``job_files(exercise, limits)`` encodes an exercise's hidden tests once per process (their
inputs are deterministic); ``Job.write(folder)`` lays a job out for the sandbox.  A package's
copy is made and compiled once per process (``prepared_copy``) and written into each run's own
folder with its compiled modules, so that no run compiles it again.
"""
from __future__ import annotations

import ast
import base64
import hashlib
import io
import json
import py_compile
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from course.catalogue import counterparts
from course.starters import starter_source

from . import machine_parts, registry
from .harness import encode
from .registry import Lib, Module, Ref, Step, Test
from .sandbox import Limits

__all__ = ["Job", "Case", "copy_package", "prepared_copy", "PreparedCopy", "test_cases", "run_files", "job_files"]


@dataclass(frozen=True)
class Job:
    """What the sandbox gets: the extracted source, the spec (limits and calls), the inputs'
    arrays, and the course packages to make importable (read-only) next to it: ``libs`` as they
    are (folders), ``copies`` as copies made in the job folder (``registry.Lib``: a package
    without the modules it hides)."""

    source: str
    spec: bytes
    inputs: bytes = b""
    libs: tuple[Path, ...] = ()
    copies: tuple[Lib, ...] = ()

    def write(self, folder: Path, files: tuple[bytes, bytes] | None = None) -> tuple[Path, ...]:
        """Write the job into ``folder`` (with ``files``, one run's ``(spec.json, inputs.npz)``,
        instead of the job's own); returns every package folder to make importable."""
        spec, inputs = files if files is not None else (self.spec, self.inputs)
        (folder / "submission.py").write_text(self.source, encoding="utf-8")
        (folder / "spec.json").write_bytes(spec)
        if inputs:
            (folder / "inputs.npz").write_bytes(inputs)
        copied = tuple(prepared_copy(lib).write(folder / "lib") for lib in self.copies)
        folder.chmod(0o755)                 # the sandbox's own user reads it
        for path in folder.rglob("*"):
            path.chmod(0o755 if path.is_dir() else 0o644)
        return tuple(self.libs) + copied


@dataclass(frozen=True)
class PreparedCopy:
    """A package's copy for the sandbox (``copy_package``) with its modules compiled, held in
    memory: ``files`` maps each path under the package's folder to its bytes, the compiled
    modules (``__pycache__/*.pyc``, checked against the source's hash) included."""

    name: str
    files: tuple[tuple[str, bytes], ...]

    def write(self, into: Path) -> Path:
        """The copy written into ``into`` (a fresh folder of one run); returns its folder."""
        target = into / self.name
        for rel, data in self.files:
            (target / rel).parent.mkdir(parents=True, exist_ok=True)
            (target / rel).write_bytes(data)
        return target


_prepared: dict[tuple, PreparedCopy] = {}
_prepared_lock = threading.Lock()


def prepared_copy(lib: Lib) -> PreparedCopy:
    """``copy_package(lib)`` made and compiled once per process for as long as the package's
    files stay the same.  The sandbox's interpreter runs with ``-B`` over a read-only folder: a
    copy without compiled modules would be compiled from its source in every run (about a sixth
    of a run's start-up here), and the same bytes serve every run.  The compiled files are
    checked against their source's hash by the importing interpreter, so a stale one is never
    used."""
    key = (lib, _package_digest(lib.name))
    with _prepared_lock:
        if key not in _prepared:
            _prepared.clear()                  # one current copy per package is all a grader needs
            _prepared[key] = _prepare(lib)
        return _prepared[key]


def _package_digest(name: str) -> str:
    """The hash of a course package's modules and of the grader's parts installed into copies."""
    digest = hashlib.sha256()
    root = registry.package_dir(name)
    for path in sorted(root.rglob("*.py")):
        if "__pycache__" not in path.parts:
            digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    digest.update((Path(__file__).parent / "machine_parts.py").read_bytes())
    return digest.hexdigest()


def _prepare(lib: Lib) -> PreparedCopy:
    """The copy made in a private temporary folder, compiled there, read back into memory."""
    with tempfile.TemporaryDirectory(prefix="grader-lib-") as tmp:
        target = copy_package(lib, Path(tmp))
        for source in sorted(target.rglob("*.py")):
            py_compile.compile(str(source), doraise=True, optimize=0,
                               invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH)
        files = tuple((path.relative_to(target).as_posix(), path.read_bytes())
                      for path in sorted(target.rglob("*")) if path.is_file())
    return PreparedCopy(lib.name, files)


def copy_package(lib: Lib, into: Path) -> Path:
    """A copy of the course package ``lib.name`` in ``into`` as the learner's copy has it, without
    the modules ``lib.hide`` names (``.py`` files only: no compiled files, no data): every module
    counterpart of an exercise left out (``ga2.rtl``, ``ga2.mutants``) and every function
    counterpart a starter (``ga2.quant.requant``, ``ga2.attn.attention_tail``), so that no answer
    of any exercise is readable in any sandbox.  The parts ``lib.parts`` names are then installed
    into the copy at its import, as the grader's own versions, compiled (``machine_parts``): the
    machine works and none of its graded parts has source text there.

    When something is hidden, the copy's ``__init__`` imports just the modules the package's own
    ``__init__`` imports and the copy still has (``from . import a, b``); the copy is named like
    the package, so it imports as it."""
    source = registry.package_dir(lib.name)
    target = into / lib.name
    hidden = set(lib.hide)
    parts = [c for c in counterparts() if c.module.split(".")[0] == lib.name]
    left_out = [c for c in parts if not c.qualname]
    for path in sorted(source.rglob("*.py")):
        rel = path.relative_to(source)
        module = ".".join((lib.name, *rel.with_suffix("").parts)).removesuffix(".__init__")
        if "__pycache__" in rel.parts or rel.parts[0].removesuffix(".py") in hidden \
                or any(c.covers_module(module) for c in left_out):
            continue
        text = path.read_text(encoding="utf-8")
        for part in parts:
            if part.qualname and part.module == module:
                text = _starter(text, part)
        (target / rel).parent.mkdir(parents=True, exist_ok=True)
        (target / rel).write_text(text, encoding="utf-8")
    init = (_reduced_init(source / "__init__.py", lib) if hidden
            else (target / "__init__.py").read_text(encoding="utf-8"))
    if lib.parts:
        (target / "_grader_parts.py").write_text(_parts_module(lib), encoding="utf-8")
        init += "from . import _grader_parts  # noqa: E402,F401 - the grader's parts, installed\n"
    (target / "__init__.py").write_text(init, encoding="utf-8")
    return target


def _starter(source: str, part) -> str:
    """``source`` with the function counterpart ``part`` a starter, as in the learner's copy."""
    return starter_source(source, part, f"; then install yours with install({part.name}=...)")


def _parts_module(lib: Lib) -> str:
    """A module of the copy that installs the grader's own ``lib.parts`` (``machine_parts``,
    compiled: the file holds its bytecode, no source) into the copy, as a learner's ``install``
    would."""
    unknown = set(lib.parts) - set(machine_parts.PARTS)
    if unknown:
        raise ValueError(f"the grader has no version of its own of {', '.join(sorted(unknown))}")
    code = base64.b64encode(machine_parts.compiled()).decode("ascii")
    return (f'"""The grader\'s {" and ".join(lib.parts)}, compiled, installed into this copy of {lib.name}."""\n'
            "import base64 as _base64\nimport marshal as _marshal\nimport types as _types\n\n"
            "from .parts import install as _install\n\n"
            f'_grader = _types.ModuleType("{lib.name}._grader_parts_code")\n'
            f'exec(_marshal.loads(_base64.b64decode("{code}")), _grader.__dict__)\n'
            f"_install(**{{name: getattr(_grader, name) for name in {tuple(lib.parts)!r}}})\n"
            "del _grader, _install, _base64, _marshal, _types\n")


def _reduced_init(init: Path, lib: Lib) -> str:
    """The ``__init__`` of a copy of a package without ``lib.hide``: its imports of the modules
    the copy still has (``from . import a, b``, ``from .parts import install``)."""
    kept, names = [], []
    for node in ast.walk(ast.parse(init.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level == 1 and not node.module:
            kept += [a.name for a in node.names if a.name not in lib.hide and a.name not in kept]
        elif isinstance(node, ast.ImportFrom) and node.level == 1 and node.module.split(".")[0] not in lib.hide:
            names.append(f"from .{node.module} import {', '.join(a.name for a in node.names)}  # noqa: F401")
    lines = [f'"""{lib.name} as the grader\'s sandbox has it: without {", ".join(sorted(lib.hide))}."""']
    if kept:
        lines.append(f"from . import {', '.join(kept)}  # noqa: F401")
    return "\n".join(lines + names) + "\n"


def _spec(limits: Limits, cases: list[dict]) -> dict:
    """The harness's spec: its limits (one CPU budget: the whole submission and its import, and
    2 s to spare) and the cases."""
    return {"limits": {"memory_bytes": limits.memory_bytes,
                       "cpu_seconds": int(limits.submission_seconds + limits.import_seconds) + 2,
                       "file_bytes": limits.tmpfs_bytes, "open_files": limits.open_files},
            "import_timeout": limits.import_seconds,
            "submission_timeout": limits.submission_seconds,
            "give_up_after_timeouts": limits.give_up_after,
            "cases": cases}


@dataclass(frozen=True)
class Case:
    """One hidden test as the harness gets it, with no id: its time limit, its calls (encoded as
    the harness reads them) and the arrays they refer to (``{"$nd": key}``, keys of this case
    alone)."""

    timeout: float
    calls: list
    arrays: dict


_cases_cache: dict[tuple, dict[str, Case]] = {}


def test_cases(exercise: str, limits: Limits) -> dict[str, Case]:
    """Every hidden test of ``exercise`` encoded once per process, by test id: inputs only, never
    expected values.  A run's files are made from these (``run_files``)."""
    key = (exercise, tuple(sorted(limits.as_dict().items())))
    if key not in _cases_cache:
        _cases_cache[key] = {test.id: _encode_test(test, limits) for test in registry.tests(exercise)}
    return _cases_cache[key]


def _encode_test(test: Test, limits: Limits) -> Case:
    """A test's calls as the harness reads them; arrays by reference, each stored once."""
    arrays: dict[str, np.ndarray] = {}
    ids: dict[int, str] = {}

    def store(arr):
        k = ids.get(id(arr))
        if k is None:
            k = ids[id(arr)] = f"a{len(arrays)}"
            arrays[k] = arr
        return {"$nd": k}

    def encode_arg(arg):
        if isinstance(arg, Ref):
            return {"$ref": [arg.call, *arg.path]}
        if isinstance(arg, Module):
            return {"$module": {"name": arg.name, "package": arg.package,
                                "code": store(np.frombuffer(arg.code, dtype=np.uint8))}}
        if isinstance(arg, Step):                   # resolved against the steps of its call
            return {"$ref": [arg.index, *arg.path]}
        return encode(arg, store)

    def encode_call(c):
        call = {"fn": c.fn, "args": [encode_arg(a) for a in c.args], "capture_args": c.capture_args}
        if c.raises:
            call["raises"] = True
        if c.methods:
            call["methods"] = [{"name": name, "args": None if args is None else [encode_arg(a) for a in args]}
                               for name, args in c.methods]
        return call

    return Case(_timeout(test, limits), [encode_call(c) for c in test.calls], arrays)


def _renamed(node, names: dict[str, str]):
    """An encoded value with every array reference ``{"$nd": key}`` renamed by ``names``."""
    if isinstance(node, dict):
        if set(node) == {"$nd"}:
            return {"$nd": names[node["$nd"]]}
        return {k: _renamed(v, names) for k, v in node.items()}
    if isinstance(node, list):
        return [_renamed(v, names) for v in node]
    return node


def run_files(cases: list[tuple[str, Case]], limits: Limits) -> tuple[bytes, bytes]:
    """(spec.json, inputs.npz) of one sandbox run: only the ``(token, case)`` pairs given, in the
    order given, each under its token (the grader's opaque name for it in this run), its arrays
    numbered in the run's order.  Nothing in them says which test a case is or where it stands
    among the exercise's tests."""
    arrays: dict[str, np.ndarray] = {}
    encoded = []
    for token, case in cases:
        names = {}
        for key, arr in case.arrays.items():
            names[key] = f"a{len(arrays)}"
            arrays[names[key]] = arr
        encoded.append({"id": token, "timeout": case.timeout, "calls": _renamed(case.calls, names)})
    buf = io.BytesIO()
    if arrays:
        np.savez(buf, **arrays)
    return json.dumps(_spec(limits, encoded)).encode(), buf.getvalue()


def job_files(exercise: str, limits: Limits) -> tuple[bytes, bytes]:
    """(spec.json, inputs.npz) of all of an exercise's hidden tests in their fixed order, under
    their test ids (the form a test of the harness reads; a grading sends each run its own cases
    only, ``run_files``)."""
    return run_files(list(test_cases(exercise, limits).items()), limits)


def _timeout(test: Test, limits: Limits) -> float:
    """A test's time limit: its own when it sets one, else the default of the limits."""
    return float(test.timeout if test.timeout is not None else limits.test_seconds)
