"""The six GA-2 instructions as plain data.

An instruction is an operation name and one integer per field, in the order of
``FIELDS[op]``::

    LD   dst src len                          SPAD[dst+i] = EXT[src+i]          i < len
    ST   src dst len                          EXT[dst+i]  = SPAD[src+i]         i < len
    MM   dst A B M K N tb lda ldb ldc         C = A (M x K) times B' (K x N), int8 -> int32
    RQ   dst src len m s relu                 dst[i] = sat127(round(src[i] * m / 2^s))
    SM   dst src len                          integer softmax of Q4.4 scores -> Q0.16
    HALT                                      stop

``Instr`` holds no behaviour beyond reading its fields: the limits are checked by
``ga2.limits``, the text and binary forms live in ``ga2.listing`` and ``ga2.encoding``,
the cycle model in ``ga2.cycles`` and the meaning in ``ga2.machine``.
"""
from __future__ import annotations

import numbers
import operator
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["FIELDS", "OPS", "DEFAULTS", "Instr", "build", "as_instr", "InstructionFormError"]

#: The fields of each operation, in listing and encoding order.
FIELDS: dict[str, tuple[str, ...]] = {
    "LD": ("dst", "src", "len"),
    "ST": ("src", "dst", "len"),
    "MM": ("dst", "A", "B", "M", "K", "N", "tb", "lda", "ldb", "ldc"),
    "RQ": ("dst", "src", "len", "m", "s", "relu"),
    "SM": ("dst", "src", "len"),
    "HALT": (),
}

OPS: tuple[str, ...] = tuple(FIELDS)

#: Fields that may be left out when building: a plain product, a requantizer without ReLU.
DEFAULTS: dict[str, dict[str, int]] = {"MM": {"tb": 0}, "RQ": {"relu": 0}}


class InstructionFormError(ValueError):
    """An instruction that cannot even be formed: unknown op, unknown or missing field.

    ``field`` names the offending field (``"op"`` for the operation itself).
    """

    def __init__(self, op, field: str, reason: str):
        self.op, self.field, self.reason = op, field, reason
        super().__init__(f"{op}: field '{field}': {reason}")

    def __reduce__(self):
        return (type(self), (self.op, self.field, self.reason))


@dataclass(frozen=True)
class Instr:
    """One instruction: ``op`` and the field values in ``FIELDS[op]`` order.

    Fields read by name: ``ins["dst"]`` or ``ins.dst``; ``ins.fields`` is a dict.  ``ins["op"]``
    is the operation, so code written for instructions as dicts (the published chapter's) reads it too.
    Values are stored as given (``build`` turns integer-like values into ``int``),
    so an out-of-range or non-integer value survives until ``ga2.limits`` refuses it
    with the instruction's index.
    """

    op: str
    values: tuple = ()

    @property
    def fields(self) -> dict[str, object]:
        """``{name: value}`` in field order."""
        return dict(zip(FIELDS.get(self.op, ()), self.values))

    def __getitem__(self, name: str):
        if name == "op":
            return self.op
        names = FIELDS.get(self.op, ())
        if name in names:
            return self.values[names.index(name)]
        raise KeyError(f"{self.op} has no field {name!r} (its fields: {', '.join(names) or 'none'})")

    def __getattr__(self, name: str):
        # Only reached for names that are not real attributes: field access by name.
        # Private and dataclass names must fail plainly, or copying and pickling recurse.
        if name.startswith("_") or name in ("op", "values"):
            raise AttributeError(name)
        try:
            return self[name]
        except KeyError as err:
            raise AttributeError(str(err)) from None

    def __str__(self) -> str:
        """The instruction's line of text, ``OP name=value ...`` with every field in ``FIELDS[op]``
        order (``ga2.listing`` reads it back and numbers a program's lines)."""
        return " ".join([self.op] + [f"{name}={value}" for name, value in self.fields.items()])


def _as_int_if_integral(value):
    """``int(value)`` for ints, bools and numpy integers; anything else unchanged."""
    if type(value) is int:  # the common case, without the slow abstract-class check
        return value
    if isinstance(value, numbers.Integral):
        return operator.index(value)
    return value


def build(op: str, **fields) -> Instr:
    """The instruction ``op`` with the given fields (defaults: ``tb=0``, ``relu=0``).

    Unknown ops and unknown or missing field names raise ``InstructionFormError``.
    Values are not range-checked here: that is ``ga2.limits.check_program``'s job,
    which knows the memory sizes and reports the instruction's index.
    """
    names = FIELDS.get(op) if isinstance(op, str) else None
    if names is None:
        raise InstructionFormError(op, "op", f"unknown operation (GA-2 has {', '.join(OPS)})")
    defaults = DEFAULTS.get(op)
    given = {**defaults, **fields} if defaults else fields
    try:                # the common case in one pass: exactly the op's fields (the simulator's hot path)
        values = tuple(map(given.__getitem__, names)) if len(given) == len(names) else None
    except KeyError:
        values = None
    if values is None:
        unknown = [name for name in fields if name not in names]
        if unknown:
            raise InstructionFormError(op, unknown[0],
                                       f"not a field of {op} (its fields: {', '.join(names) or 'none'})")
        missing = [name for name in names if name not in given]
        raise InstructionFormError(op, missing[0], "missing")
    if not set(map(type, values)) <= _INT:  # numpy integers and bools become ints
        values = tuple(_as_int_if_integral(v) for v in values)
    return Instr(op, values)


_INT = frozenset({int})


def as_instr(item) -> Instr:
    """``item`` as an ``Instr``: an ``Instr`` as is, or a mapping ``{"op": ..., field: value}``."""
    if isinstance(item, Instr):
        return item
    if isinstance(item, Mapping):
        if "op" not in item:
            raise InstructionFormError(None, "op", "missing")
        fields = {k: v for k, v in item.items() if k != "op"}
        return build(item["op"], **fields)
    raise InstructionFormError(type(item).__name__, "op", "not an instruction (an Instr or a mapping with 'op')")
