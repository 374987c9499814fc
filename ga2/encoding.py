"""The binary form of GA-2 programs: 32-bit words, 1 to 4 per instruction.

The first word of every instruction carries the opcode in bits 31..28, which also
tells the decoder how many words follow.  Fields are packed as below (bit ranges
are inclusive, ``[word] hi..lo``); unused bits are zero::

    op    opcode  words  layout
    HALT  0       1      -
    LD    1       2      len [0] 15..0     dst [1] 31..16   src [1] 15..0
    ST    2       2      len [0] 15..0     src [1] 31..16   dst [1] 15..0
    MM    3       4      tb [0] 27   M [0] 26..24   N [0] 23..21   K [0] 20..14
                         dst [1] 31..16   A [1] 15..0     B [2] 31..16   lda [2] 15..0
                         ldb [3] 31..16   ldc [3] 15..0
    RQ    4       3      relu [0] 27   s [0] 26..21   len [0] 15..0
                         dst [1] 31..16   src [1] 15..0   m [2] 23..0
    SM    5       2      len [0] 15..0     dst [1] 31..16   src [1] 15..0

Every instruction that passes ``ga2.limits`` fits (addresses and lengths < 2^16,
M, N <= 4 < 2^3, K <= 64 < 2^7, m < 2^24, s <= 63 < 2^6), so
``decode(encode(p)) == p`` for every valid program.  A value that does not fit its
bits raises ``EncodingError`` naming the field, never a silent truncation.
"""
from __future__ import annotations

from .instructions import FIELDS, Instr, as_instr

__all__ = ["OPCODES", "LAYOUT", "EncodingError", "encode_instr", "encode", "decode_instr", "decode"]

OPCODES = {"HALT": 0, "LD": 1, "ST": 2, "MM": 3, "RQ": 4, "SM": 5}
_OP_OF_CODE = {code: op for op, code in OPCODES.items()}
_OPCODE_SHIFT = 28

#: field -> (word, lowest bit, width), per op.
LAYOUT: dict[str, dict[str, tuple[int, int, int]]] = {
    "HALT": {},
    "LD": {"len": (0, 0, 16), "dst": (1, 16, 16), "src": (1, 0, 16)},
    "ST": {"len": (0, 0, 16), "src": (1, 16, 16), "dst": (1, 0, 16)},
    "SM": {"len": (0, 0, 16), "dst": (1, 16, 16), "src": (1, 0, 16)},
    "MM": {"tb": (0, 27, 1), "M": (0, 24, 3), "N": (0, 21, 3), "K": (0, 14, 7),
           "dst": (1, 16, 16), "A": (1, 0, 16), "B": (2, 16, 16), "lda": (2, 0, 16),
           "ldb": (3, 16, 16), "ldc": (3, 0, 16)},
    "RQ": {"relu": (0, 27, 1), "s": (0, 21, 6), "len": (0, 0, 16),
           "dst": (1, 16, 16), "src": (1, 0, 16), "m": (2, 0, 24)},
}
assert all(set(LAYOUT[op]) == set(FIELDS[op]) for op in FIELDS)


def _word_count(op: str) -> int:
    return 1 + max((word for word, _, _ in LAYOUT[op].values()), default=0)


def _used_bits(op: str) -> list[int]:
    """Per word, the mask of the bits the layout uses (the opcode included)."""
    masks = [0] * _word_count(op)
    masks[0] |= 0xF << _OPCODE_SHIFT
    for word, low, width in LAYOUT[op].values():
        masks[word] |= ((1 << width) - 1) << low
    return masks


_WORDS = {op: _word_count(op) for op in LAYOUT}
_USED = {op: _used_bits(op) for op in LAYOUT}


class EncodingError(ValueError):
    """A field that does not fit its bits, or words that are not an instruction."""


def encode_instr(ins) -> list[int]:
    """The words of one instruction (unsigned 32-bit integers)."""
    ins = as_instr(ins)
    words = [0] * _WORDS[ins.op]
    words[0] = OPCODES[ins.op] << _OPCODE_SHIFT
    for name, value in ins.fields.items():
        word, low, width = LAYOUT[ins.op][name]
        if not isinstance(value, int) or not 0 <= value < (1 << width):
            raise EncodingError(f"{ins.op}: field '{name}'={value!r} does not fit its {width} bits")
        words[word] |= value << low
    return words


def encode(program) -> list[int]:
    """All the words of a program, instruction after instruction."""
    return [word for ins in program for word in encode_instr(ins)]


def decode_instr(words, position: int = 0) -> tuple[Instr, int]:
    """The instruction starting at ``words[position]`` and the position after it."""
    first = int(words[position])
    code = first >> _OPCODE_SHIFT
    if not 0 <= first < (1 << 32) or code not in _OP_OF_CODE:
        raise EncodingError(f"word {position} = {first:#x} does not start an instruction")
    op = _OP_OF_CODE[code]
    n = _WORDS[op]
    if position + n > len(words):
        raise EncodingError(f"word {position}: {op} needs {n} words, only {len(words) - position} left")
    chunk = [int(w) for w in words[position:position + n]]
    for k, (word, used) in enumerate(zip(chunk, _USED[op])):
        if word & ~used & 0xFFFFFFFF or not 0 <= word < (1 << 32):
            raise EncodingError(f"word {position + k} = {word:#x}: bits outside the {op} layout are set")
    values = []
    for name in FIELDS[op]:
        word, low, width = LAYOUT[op][name]
        values.append((chunk[word] >> low) & ((1 << width) - 1))
    return Instr(op, tuple(values)), position + n


def decode(words) -> list[Instr]:
    """Every instruction in ``words`` (the inverse of ``encode``)."""
    program, position = [], 0
    while position < len(words):
        ins, position = decode_instr(words, position)
        program.append(ins)
    return program
