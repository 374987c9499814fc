"""What a sandbox gets of one submission: the job folder.

A job is the submission's extracted source, the spec the harness reads (its limits and the
calls of the hidden tests, ``spec.json``) and the inputs' arrays (``inputs.npz``), never an
expected value; and the course packages its tests need importable, read-only (``Lib``: a copy
made in the job folder without the modules it hides).

``job_files(exercise, limits)`` encodes an exercise's hidden tests once per process (their
inputs are deterministic); ``Job.write(folder)`` lays a job out for the sandbox.
"""
from __future__ import annotations

import ast
import io
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import registry
from .harness import encode
from .registry import Lib, Module, Ref, Step, Test
from .sandbox import Limits

__all__ = ["Job", "copy_package", "job_files"]


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

    def write(self, folder: Path) -> tuple[Path, ...]:
        """Write the job into ``folder``; returns every package folder to make importable."""
        (folder / "submission.py").write_text(self.source, encoding="utf-8")
        (folder / "spec.json").write_bytes(self.spec)
        if self.inputs:
            (folder / "inputs.npz").write_bytes(self.inputs)
        copied = tuple(copy_package(lib, folder / "lib") for lib in self.copies)
        folder.chmod(0o755)                 # the sandbox's own user reads it
        for path in folder.rglob("*"):
            path.chmod(0o755 if path.is_dir() else 0o644)
        return tuple(self.libs) + copied


def copy_package(lib: Lib, into: Path) -> Path:
    """A copy of the course package ``lib.name`` in ``into``, without the modules ``lib.hide``
    names (``.py`` files only: no compiled files, no data).  When something is hidden, the copy's
    ``__init__`` imports just the modules the package's own ``__init__`` imports and the copy
    still has (``from . import a, b``); the copy is named like the package, so it imports as it."""
    source = registry.package_dir(lib.name)
    target = into / lib.name
    hidden = set(lib.hide)
    for path in sorted(source.rglob("*.py")):
        rel = path.relative_to(source)
        if "__pycache__" in rel.parts or rel.parts[0].removesuffix(".py") in hidden:
            continue
        (target / rel).parent.mkdir(parents=True, exist_ok=True)
        (target / rel).write_bytes(path.read_bytes())
    if hidden:
        (target / "__init__.py").write_text(_reduced_init(source / "__init__.py", lib), encoding="utf-8")
    return target


def _reduced_init(init: Path, lib: Lib) -> str:
    """The ``__init__`` of a copy of a package without ``lib.hide``."""
    kept = []
    for node in ast.walk(ast.parse(init.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level == 1 and not node.module:
            kept += [a.name for a in node.names if a.name not in lib.hide and a.name not in kept]
    lines = [f'"""{lib.name} as the grader\'s sandbox has it: without {", ".join(sorted(lib.hide))}."""']
    if kept:
        lines.append(f"from . import {', '.join(kept)}  # noqa: F401")
    return "\n".join(lines) + "\n"


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


_job_cache: dict[tuple, tuple[bytes, bytes]] = {}


def job_files(exercise: str, limits: Limits) -> tuple[bytes, bytes]:
    """(spec.json, inputs.npz) of an exercise's hidden tests: inputs only, never expected values."""
    key = (exercise, tuple(sorted(limits.as_dict().items())))
    if key in _job_cache:
        return _job_cache[key]
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
        if c.methods:
            call["methods"] = [{"name": name, "args": None if args is None else [encode_arg(a) for a in args]}
                               for name, args in c.methods]
        return call

    cases = [{"id": test.id, "timeout": _timeout(test, limits), "calls": [encode_call(c) for c in test.calls]}
             for test in registry.tests(exercise)]
    buf = io.BytesIO()
    if arrays:
        np.savez(buf, **arrays)
    files = (json.dumps(_spec(limits, cases)).encode(), buf.getvalue())
    _job_cache[key] = files
    return files


def _timeout(test: Test, limits: Limits) -> float:
    """A test's time limit: its own when it sets one, else the default of the limits."""
    return float(test.timeout if test.timeout is not None else limits.test_seconds)
