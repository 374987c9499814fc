"""The stored expected values of the public checks: ``public_checks/data/NAME.json``.

The files are written by the course's build tools from references that are not part of the
learner's copy; a check compares an answer with them and computes no expected value itself.
"""
from __future__ import annotations

import functools
import json
import math
from importlib import resources
from pathlib import Path

import numpy as np

DATA = Path(__file__).resolve().parent / "data"


@functools.lru_cache(maxsize=None)
def load(name: str) -> dict:
    """The data of exercise ``name`` (read once).  Read as the package's resource, so that it is
    found wherever the package is: a folder, or the zip an exercise page of the site runs it from."""
    return json.loads(resources.files(__package__).joinpath("data", f"{name}.json").read_text(encoding="utf-8"))


def array(value) -> np.ndarray:
    """A stored table as a fresh float64 array (a learner's function may write into it)."""
    return np.array(value, dtype=np.float64)


def same(got, want, tol: float = 1e-9) -> bool:
    """``got`` is the stored value ``want`` up to ``tol`` (arrays: element by element, absolute;
    numbers: relative)."""
    if isinstance(want, list):
        got = np.asarray(got, dtype=np.float64)
        want = np.asarray(want, dtype=np.float64)
        return got.shape == want.shape and bool(np.all(np.isfinite(got))) and float(np.max(np.abs(got - want), initial=0.0)) <= tol
    if isinstance(got, bool) or not isinstance(got, (int, float, np.integer, np.floating)):
        return False
    return math.isclose(float(got), float(want), rel_tol=tol, abs_tol=1e-15)


def mistake(case: dict, got, hints: dict, tol: float = 1e-9) -> str:
    """The hint of the first stored mistake of ``case`` that ``got`` matches, or ""."""
    for name, text in hints.items():
        value = case.get("mistakes", {}).get(name)
        if value is not None and value != case["expected"] and same(got, value, tol):
            return " " + text
    return ""
