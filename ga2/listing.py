"""The text form of GA-2 instructions: one line each, ``OP name=value ...``.

    MM dst=2816 A=0 B=512 M=1 K=16 N=4 tb=0 lda=16 ldb=16 ldc=4
    HALT

Fields appear in ``FIELDS[op]`` order, every one of them (defaults included), so
``assemble(disassemble(i)) == i``.  A listing numbers the lines (``  4 MM ...``);
``assemble`` accepts and ignores that number, and anything after ``#``.

One instruction is one line: ``disassemble`` of a program (a list) gives its lines, and
``assemble`` of text with several instruction lines gives the list back.
"""
from __future__ import annotations

from .instructions import Instr, InstructionFormError, as_instr, build

__all__ = ["disassemble", "assemble", "format_listing", "parse_listing", "AssemblyError"]


class AssemblyError(ValueError):
    """A line that is not a GA-2 instruction; the message quotes the line."""


def disassemble(ins) -> str:
    """One line of text, e.g. ``LD dst=0 src=32 len=16``; for a program, one line each."""
    if isinstance(ins, (list, tuple)):
        return "\n".join(disassemble(item) for item in ins)
    return str(as_instr(ins))


def assemble(text: str):
    """The instruction written on a line (the inverse of ``disassemble``).

    A leading line number and a trailing ``# comment`` are ignored.  Missing fields take
    their defaults (``tb``, ``relu``); anything else wrong raises ``AssemblyError``.  Text
    with several instruction lines is a program: the list of its instructions comes back.
    """
    lines = [line for line in text.splitlines() if line.split("#", 1)[0].strip()]
    if len(lines) > 1:
        return [_assemble_line(line) for line in lines]
    return _assemble_line(text)


def _assemble_line(line: str) -> Instr:
    words = line.split("#", 1)[0].split()
    if words and words[0].isdigit():
        words = words[1:]
    if not words:
        raise AssemblyError(f"no instruction on the line {line!r}")
    op, fields = words[0].upper(), {}
    for word in words[1:]:
        name, eq, value = word.partition("=")
        if not eq or not name:
            raise AssemblyError(f"{word!r} is not name=value, in {line!r}")
        if name in fields:
            raise AssemblyError(f"field {name!r} given twice, in {line!r}")
        try:
            fields[name] = int(value, 0)
        except ValueError:
            raise AssemblyError(f"field {name!r}: {value!r} is not an integer, in {line!r}") from None
    try:
        return build(op, **fields)
    except InstructionFormError as err:
        raise AssemblyError(f"{err}, in {line!r}") from None


def format_listing(program) -> str:
    """The numbered listing of a program, one instruction a line (``  0 LD dst=0 ...``)."""
    return "\n".join(f"{index:3d} {disassemble(ins)}" for index, ins in enumerate(program))


def parse_listing(text: str) -> list[Instr]:
    """Every instruction of a listing; blank and comment-only lines are skipped."""
    return [_assemble_line(line) for line in text.splitlines() if line.split("#", 1)[0].strip()]

