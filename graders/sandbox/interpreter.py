"""The Python a sandbox runs: the interpreter as a sandbox names it, the folders it needs, and the
clean environment every sandboxed process starts with.

The command lines (``commands``) and the copy of the files a run sees (``resident``) both read
these; neither reads the other for them.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy

__all__ = ["interpreter", "python_roots", "site_dirs", "environment"]


def interpreter() -> str:
    """The interpreter as a sandbox names it: normalized, so that a grader started as
    ``../.venv/bin/python`` names a path that exists in the sandbox, where only the
    installation's folders are."""
    return os.path.normpath(os.path.abspath(sys.executable))


def site_dirs() -> list[str]:
    """The package folders put on the sandboxed ``sys.path`` (``-S``: no ``.pth`` files are run,
    so an editable install's path to the course checkout never gets there)."""
    return [str(Path(numpy.__file__).resolve().parent.parent)]


def python_roots() -> list[str]:
    """Folders the sandboxed interpreter needs: the installation and the packages' folders
    (outermost only: a folder inside another is not listed)."""
    roots = [sys.base_prefix, sys.prefix] + site_dirs()
    out: list[str] = []
    for root in roots:
        for path in {os.path.abspath(root), os.path.realpath(root)}:
            if not any(path == r or path.startswith(r.rstrip("/") + "/") for r in out):
                out = [r for r in out if not r.startswith(path.rstrip("/") + "/")] + [path]
    return out


def environment(home: str) -> dict[str, str]:
    """The whole environment of a sandbox: nothing of the grader's."""
    return {"PATH": "/usr/bin:/bin", "HOME": home, "TMPDIR": "/tmp", "LANG": "C.UTF-8",
            "LC_ALL": "C.UTF-8", "PYTHONHASHSEED": "0", "PYTHONIOENCODING": "utf-8",
            "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
            "NUMEXPR_NUM_THREADS": "1", "MPLBACKEND": "Agg"}
