"""The softmax unit's exp table as Verilog: ``ga2_exp_rom.v`` is written by this module.

    e(d) = floor(65536 * exp(-d / 16)),   d = 0 .. 255        (ga2/SPEC.md, the softmax unit)

The values are computed in exact decimal arithmetic (60 significant digits), not in floating
point, so the table is the definition's and not one float rounding away from it; the tests
compare it with ``ga2.softmax.EXP_TABLE`` and check the committed file is what this module
writes.  ``python -m ga2.rtl.exp_rom`` rewrites the file.
"""
from __future__ import annotations

import decimal
from pathlib import Path

__all__ = ["ROM_PATH", "exp_values", "rom_text", "main"]

ROM_PATH = Path(__file__).resolve().parent / "ga2_exp_rom.v"


def exp_values() -> list[int]:
    """floor(65536 * exp(-d / 16)) for d = 0 .. 255, exactly."""
    context = decimal.Context(prec=60, rounding=decimal.ROUND_FLOOR)
    return [int((decimal.Decimal(65536) * context.exp(decimal.Decimal(-d) / 16)).to_integral_value(context=context))
            for d in range(256)]


def rom_text() -> str:
    """The Verilog module: a 256 x 17-bit table with a registered output."""
    cases = "\n".join(f"            8'd{d:<3d}: e <= 17'd{v};" for d, v in enumerate(exp_values()))
    return f"""\
// ga2_exp_rom: the softmax unit's exp table, e(d) = floor(65536 * exp(-d / 16)), d = 0 .. 255.
// Written by ga2/rtl/exp_rom.py (exact decimal arithmetic); do not edit by hand.
//
//   d in cycle t  ->  e = e(d) in cycle t+1 (a synchronous ROM)
`default_nettype none

module ga2_exp_rom (
    input  wire        clk,
    input  wire [7:0]  d,
    output reg  [16:0] e
);
    always @(posedge clk) begin
        case (d)
{cases}
        endcase
    end
endmodule

`default_nettype wire
"""


def main() -> int:
    ROM_PATH.write_text(rom_text())
    print(f"wrote {ROM_PATH}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
