"""Comparing what a learner's function returned with what the grader expects, with messages.

Every message says what is wrong (type, shape, dtype, which entry or step, how far off) and
never shows a hidden input or an expected value: relative errors and shapes, not numbers.
The values compared are plain data decoded from the sandbox (``numpy.ndarray``, ``int``,
``float``, ``dict``, ``tuple``, ``list`` or ``Opaque``); no learner code runs here.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .harness import Opaque

__all__ = ["Fail", "Raised", "CallResult", "describe", "as_array", "check_array", "check_close",
           "check_exact_int", "check_real", "ratio_hint", "unchanged"]

RTOL = 1e-9
ATOL = 1e-12


class Fail(AssertionError):
    """The answer is wrong; the message is shown to the learner."""


@dataclass(frozen=True)
class Raised:
    """What a call made with ``Call(raises=True)`` raised: the exception's class as the harness
    names it (``"ValueError"``, ``"submission.MyError"``), the names of every class it is an
    instance of, read by the harness through ``type``'s own descriptors, and its message."""

    type: str
    bases: tuple[str, ...]
    message: str = ""

    def is_a(self, name: str) -> bool:
        """An instance of Python's own class ``name`` (a look-alike of the same name defined by
        the submission is ``submission.name``, not ``name``)."""
        return name in self.bases


@dataclass
class CallResult:
    value: object
    args_after: list | None = None        # the arguments as they were after the call
    originals_after: list | None = None   # the same, with dict arguments' original values
    seconds: float = 0.0


def describe(value) -> str:
    """A learner-readable description of a value's type (never its content)."""
    if isinstance(value, np.ndarray):
        return f"an array of shape {tuple(value.shape)} and dtype {value.dtype}"
    if isinstance(value, np.generic):
        return f"a numpy {value.dtype} scalar"
    if isinstance(value, Opaque):
        return f"a {value.type_name}" + (f" ({value.why})" if value.why else "")
    if value is None:
        return "None"
    if isinstance(value, bool):
        return "a bool"
    if isinstance(value, (int, float, str)):
        return f"a Python {type(value).__name__}"
    if isinstance(value, (list, tuple)):
        return f"a {type(value).__name__} of {len(value)} items"
    if isinstance(value, dict):
        keys = ", ".join(_short(repr(k)) for k in list(value)[:6])
        return f"a dict with keys {keys or '(none)'}"
    return f"a {type(value).__name__}"


def _short(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def as_array(value, what: str, shape: tuple, *, strict_shape: bool = False) -> np.ndarray:
    """``value`` as a real floating array of ``shape``.  Lists of numbers are accepted, and so is
    a shape that differs only by axes of length 1 (``(1, d)`` for ``(d,)``) unless
    ``strict_shape``: the test of the shape takes the point for that, not every value test."""
    if isinstance(value, (list, tuple)):
        try:
            value = np.asarray(value, dtype=np.float64)
        except (TypeError, ValueError):
            raise Fail(f"{what} is {describe(value)}, not an array of numbers") from None
    if isinstance(value, np.generic) and shape == ():
        value = np.asarray(value)
    if not isinstance(value, np.ndarray):
        raise Fail(f"{what} is {describe(value)}; expected an array of shape {shape}")
    if value.dtype.kind not in "biuf":
        raise Fail(f"{what} has dtype {value.dtype}; expected real numbers")
    if value.shape != tuple(shape):
        squeezable = (value.size == math.prod(shape)
                      and [n for n in value.shape if n != 1] == [n for n in shape if n != 1])
        if strict_shape or not squeezable:
            raise Fail(f"{what} has shape {tuple(value.shape)}; expected {tuple(shape)}")
        value = value.reshape(shape)
    return value.astype(np.float64, copy=False)


def check_close(actual: np.ndarray, expected: np.ndarray, what: str, *, rtol: float = RTOL,
                atol: float = ATOL, hint: str = "") -> None:
    """Raise ``Fail`` unless ``|actual - expected| <= atol + rtol |expected|`` everywhere."""
    expected = np.asarray(expected, dtype=np.float64)
    finite = np.isfinite(actual)
    if not finite.all():
        kinds = sorted({"NaN" if np.isnan(v) else "infinity" for v in actual[~finite].ravel()[:50]})
        raise Fail(f"{what} contains {' and '.join(kinds)} ({int((~finite).sum())} of {actual.size} "
                   f"entries){'; ' + hint if hint else ''}")
    err = np.abs(actual - expected)
    bad = err > atol + rtol * np.abs(expected)
    if bad.any():
        rel = float(np.max(err) / max(float(np.max(np.abs(expected))), atol))
        where = ""
        if actual.ndim == 2:
            rows = np.flatnonzero(bad.any(axis=1))
            where = f" (rows {_ranges(rows)})"
        elif actual.ndim == 1 and actual.size > 1:
            where = f" (entries {_ranges(np.flatnonzero(bad))})"
        raise Fail(f"{what} differs in {int(bad.sum())} of {actual.size} entries{where}, "
                   f"largest error {rel:.1e} relative to the largest entry{'; ' + hint if hint else ''}")


def check_array(value, expected: np.ndarray, what: str, *, rtol: float = RTOL, atol: float = ATOL,
                hint=None) -> None:
    """Shape-tolerant value check: ``as_array`` then ``check_close``.  ``hint(actual)`` may
    return a diagnosis (such as "matches attention without the causal mask")."""
    actual = as_array(value, what, np.shape(expected))
    try:
        check_close(actual, expected, what, rtol=rtol, atol=atol)
    except Fail as fail:
        extra = hint(actual) if hint else None
        low = getattr(value, "dtype", None)
        if low is not None and low.kind == "f" and low.itemsize < 8:
            extra = "; ".join(filter(None, [extra, f"it has dtype {low}, which is not precise enough here: "
                                                   "work in float64"]))
        if extra:
            raise Fail(f"{fail}; {extra}") from None
        raise


def _ranges(indices) -> str:
    indices = [int(i) for i in indices]
    parts, start = [], None
    for k, i in enumerate(indices):
        if start is None:
            start = i
        if k + 1 == len(indices) or indices[k + 1] != i + 1:
            parts.append(str(start) if start == i else f"{start}-{i}")
            start = None
    text = ", ".join(parts[:5])
    return text + (", ..." if len(parts) > 5 else "")


def ratio_hint(ratio: float, hints: dict[float, str]) -> str:
    """A diagnosis when ``actual / expected`` is one of a few telling ratios (2: keys and values
    counted twice, 8: bits for bytes, 1000: milliseconds for seconds...)."""
    for target, text in hints.items():
        if math.isfinite(ratio) and target != 0 and abs(ratio / target - 1) < 1e-6:
            return text
    return ""


def check_exact_int(value, expected: int, what: str, hints: dict[float, str] | None = None) -> None:
    """An exact integer: Python int or numpy integer, or a float that is exactly that integer."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise Fail(f"{what} is {describe(value)}; expected an integer")
    if isinstance(value, (float, np.floating)):
        if not math.isfinite(value) or value != math.floor(value):
            raise Fail(f"{what} is {describe(value)} that is not a whole number; expected an exact integer")
        actual = int(value)
    else:
        actual = int(value)
    if actual != expected:
        try:                                # int / int: an OverflowError for a huge answer
            ratio = actual / expected if expected else math.inf
        except OverflowError:
            ratio = math.inf
        if expected == 0:                   # never "should be 0": that would be the expected value
            text = f"{what} is {'too large' if actual > 0 else 'negative'} here"
        elif actual == 0:
            text = f"{what} is 0, which is wrong here"
        elif abs(ratio) < 1e300:
            rel = abs(actual - expected) / abs(expected)
            text = f"{what} is off by a relative {rel:.1e}"
        else:
            text = f"{what} is far too large"
        extra = ratio_hint(ratio, hints or {}) if expected else ""
        if extra:
            text += f"; {extra}"
        if isinstance(value, np.integer) and abs(expected) >= 2 ** 31:
            text += f"; its type is numpy {value.dtype}: did the product overflow? Use Python ints"
        raise Fail(text)


def check_real(value, expected: float, what: str, *, rtol: float = RTOL, hints=None) -> None:
    """A real number within ``rtol`` of ``expected`` (int, float or numpy scalar accepted)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        if isinstance(value, np.ndarray) and value.size == 1 and value.dtype.kind in "iuf":
            value = value.reshape(())[()]
        else:
            raise Fail(f"{what} is {describe(value)}; expected a number")
    actual = float(value)
    if not math.isfinite(actual):
        raise Fail(f"{what} is {'NaN' if math.isnan(actual) else 'infinite'}")
    if abs(actual - expected) > rtol * abs(expected) + 1e-300:
        rel = abs(actual - expected) / abs(expected) if expected else math.inf
        text = f"{what} is off by a relative {rel:.1e}"
        extra = ratio_hint(actual / expected if expected else math.inf, hints or {})
        raise Fail(text + (f"; {extra}" if extra else ""))


def unchanged(before, after, what: str) -> None:
    """Raise ``Fail`` when an argument came back different from what was passed (a dict with
    other keys, an array modified in place)."""
    if isinstance(before, dict):
        if not isinstance(after, dict):
            raise Fail(f"{what} was replaced")
        if set(before) != set(after):
            added = sorted(map(repr, set(after) - set(before)))
            removed = sorted(map(repr, set(before) - set(after)))
            parts = ([f"keys added: {', '.join(added)}"] if added else []) + \
                    ([f"keys removed: {', '.join(removed)}"] if removed else [])
            raise Fail(f"{what} was modified ({'; '.join(parts)})")
        for key in before:
            unchanged(before[key], after[key], f"{what}[{key!r}]")
        return
    if isinstance(before, np.ndarray):
        if not isinstance(after, np.ndarray):
            raise Fail(f"{what} was replaced by {describe(after)}")
        if after.shape != before.shape:
            raise Fail(f"{what} was modified: its shape changed from {before.shape} to {after.shape}")
        if after.dtype != before.dtype:
            raise Fail(f"{what} was modified: its dtype changed to {after.dtype}")
        same = (after == before) | (np.isnan(after) & np.isnan(before)) if after.dtype.kind == "f" \
            else (after == before)
        if not np.all(same):
            raise Fail(f"{what} was modified in place ({int((~same).sum())} of {after.size} entries changed)")
        return
    if before != after:
        raise Fail(f"{what} was modified")


def with_right_answer(prop, right):
    """A check of a property (the inputs left as they were, a shape, a dtype) that counts only
    together with the right answer on the same calls, checked by ``right``: an answer that
    computes nothing (``None``, zeros of the right shape) leaves its inputs alone too, and earns
    nothing for it."""
    def check(results):
        value = prop(results)
        try:
            right(results)
        except Fail as fail:
            raise Fail(f"{fail} (this test counts only together with the right answer)") from None
        return value
    return check
