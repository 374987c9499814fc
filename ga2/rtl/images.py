"""The files between Python and the testbench: programs and memory images as hex, one word
a line, and the testbench's results (see ``tb/ga2_tb.sv`` for the folder's layout).

    prog_k.hex      the encoded program (``ga2.encoding.encode``)
    ext_k.hex       EXT before program k: EXT_WORDS words        spad_k.hex   SPAD: SPAD_WORDS
    ext_out_k.hex   EXT after HALT (the testbench's $writememh)  spad_out_k.hex
    stdout          RESULT k STATUS total matrix dma vector instructions
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import NamedTuple

import numpy as np

from ..cycles import CycleCounts

__all__ = ["write_words", "read_words", "write_case", "read_case", "TestbenchResult", "parse_results"]

_RESULT = re.compile(r"^RESULT\s+(\d+)\s+(HALT|FAULT|TIMEOUT)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s*$", re.M)


def write_words(path: Path, words) -> None:
    """Words (any integers, taken mod 2^32) as 8-digit hex lines."""
    values = np.asarray(words, dtype=np.int64).ravel() & 0xFFFFFFFF
    path.write_text("".join(f"{v:08x}\n" for v in values.tolist()))


def read_words(path: Path, size: int) -> tuple[np.ndarray, np.ndarray]:
    """A $writememh dump of ``size`` words: (int32 words, addresses of undefined words).

    Comment lines (Icarus writes some) are skipped.  A word with x or z digits (a circuit that
    wrote an undriven value, in Icarus) reads as 0 and is listed as undefined.
    """
    lines = [line.strip() for line in path.read_text().splitlines()]
    hexes = [line for line in lines if line and not line.startswith("//")]
    if len(hexes) != size or any(len(h) != 8 for h in hexes):
        raise ValueError(f"{path.name}: expected {size} words of 8 hex digits, got {len(hexes)} lines")
    text = "".join(hexes)
    undefined = np.zeros(0, dtype=np.int64)
    if not re.fullmatch(r"[0-9a-fA-F]*", text):
        undefined = np.array([k for k, h in enumerate(hexes) if not re.fullmatch(r"[0-9a-fA-F]{8}", h)])
        text = re.sub(r"[^0-9a-fA-F]", "0", text)
    return np.frombuffer(bytes.fromhex(text), dtype=">u4").astype(np.uint32).view(np.int32), undefined


def write_case(run_dir: Path, k: int, program_words, ext, spad) -> None:
    """The three input files of program k."""
    write_words(run_dir / f"prog_{k}.hex", program_words)
    write_words(run_dir / f"ext_{k}.hex", ext)
    write_words(run_dir / f"spad_{k}.hex", spad)


def read_case(run_dir: Path, k: int, ext_words: int, spad_words: int):
    """EXT and SPAD after program k, each as (words, undefined addresses)."""
    return (read_words(run_dir / f"ext_out_{k}.hex", ext_words),
            read_words(run_dir / f"spad_out_{k}.hex", spad_words))


class TestbenchResult(NamedTuple):
    """One RESULT line: how program k stopped and the five counters."""

    index: int
    status: str
    counters: CycleCounts


def parse_results(stdout: str, programs: int) -> list[TestbenchResult]:
    """The RESULT lines of programs 0 .. programs-1, in order (ValueError if one is missing)."""
    found = {}
    for match in _RESULT.finditer(stdout):
        index, status, *counts = match.groups()
        total, matrix, dma, vector, instructions = map(int, counts)
        found[int(index)] = TestbenchResult(int(index), status, CycleCounts(total, matrix, dma, vector, instructions))
    missing = [k for k in range(programs) if k not in found]
    if missing:
        tail = "\n".join(stdout.strip().splitlines()[-5:])
        raise ValueError(f"the testbench reported no result for program {missing[0]} "
                         f"({len(missing)} missing); its last output:\n{tail}")
    return [found[k] for k in range(programs)]
