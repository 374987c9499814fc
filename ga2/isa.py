"""The GA-2 instruction set in one place: what a program is made of.

This module gathers the parts a reader of the instruction set needs, each defined
in its own module:

    instructions   ``Instr``, ``build``, ``FIELDS``: the six instructions as plain data
    limits         ``check_program``, ``ProgramError``: what a valid program is
    listing        ``disassemble``, ``assemble``: the text form
    encoding       ``encode``, ``decode``: the binary form (32-bit words)
    cycles         ``cycle_counts``, ``wait_cycles``: the cycle model

Example::

    >>> from ga2.isa import build, disassemble, cycle_counts
    >>> ins = build("MM", dst=2816, A=0, B=512, M=1, K=16, N=4, lda=16, ldb=16, ldc=4)
    >>> disassemble(ins)
    'MM dst=2816 A=0 B=512 M=1 K=16 N=4 tb=0 lda=16 ldb=16 ldc=4'
    >>> cycle_counts([ins, build("HALT")])
    CycleCounts(total=114, matrix=110, dma=0, vector=0, instructions=1)
"""
from __future__ import annotations

from .cycles import ISSUE_CYCLES, UNIT, CycleCounts, cycle_counts, instruction_cycles, wait_cycles
from .encoding import OPCODES, EncodingError, decode, decode_instr, encode, encode_instr
from .instructions import DEFAULTS, FIELDS, OPS, Instr, InstructionFormError, as_instr, build
from .limits import (EXT_WORDS, MANTISSA_LIMIT, MAX_K, MAX_M, MAX_N, MAX_SHIFT, SPAD_WORDS, ProgramError,
                     check_program)
from .listing import AssemblyError, assemble, disassemble, format_listing, parse_listing

__all__ = [
    "FIELDS", "OPS", "DEFAULTS", "Instr", "build", "as_instr", "InstructionFormError",
    "EXT_WORDS", "SPAD_WORDS", "MAX_M", "MAX_N", "MAX_K", "MANTISSA_LIMIT", "MAX_SHIFT",
    "ProgramError", "check_program",
    "disassemble", "assemble", "format_listing", "parse_listing", "AssemblyError",
    "OPCODES", "EncodingError", "encode", "decode", "encode_instr", "decode_instr",
    "ISSUE_CYCLES", "UNIT", "CycleCounts", "wait_cycles", "instruction_cycles", "cycle_counts",
]
