// ga2_divu: a pipelined unsigned divider, one quotient bit per stage (restoring division).
//
//   quotient = floor(num / den)        (den > 0)
//
// Stage s brings down bit NW-1-s of the dividend into the partial remainder r and subtracts
// den when it fits:  r' = 2r + bit;  if r' >= den: r' -= den, quotient bit 1.  The dividend's
// register fills with quotient bits as its own bits are used up.  r < den before each stage,
// so r needs DW + 1 bits.  A division entering in cycle t (in_valid) leaves in cycle t + NW
// (out_valid); one enters and one leaves every cycle.  Valid bits are reset; data are not.
`default_nettype none

module ga2_divu #(
    parameter integer NW = 33,            // dividend and quotient bits (= stages)
    parameter integer DW = 29             // divisor and remainder bits
) (
    input  wire          clk,
    input  wire          rst,
    input  wire          in_valid,
    input  wire [NW-1:0] num,
    input  wire [DW-1:0] den,
    output wire          out_valid,
    output wire [NW-1:0] quotient
);
    reg [NW-1:0] valid;
    // the stages' registers (arrays of registers, not memories: every stage is written at once)
    (* mem2reg *) reg [DW:0]   r [0:NW-1];   // after stage s: partial remainder
    (* mem2reg *) reg [NW-1:0] q [0:NW-1];   // after stage s: dividend bits left, quotient bits so far
    (* mem2reg *) reg [DW-1:0] d [0:NW-1];   // the divisor, travelling with its dividend

    function [DW+NW:0] divide_step;       // {r', q'} of one stage
        input [DW:0]   r_in;
        input [NW-1:0] q_in;
        input [DW-1:0] d_in;
        reg   [DW+1:0] trial;
        begin
            trial = {r_in, q_in[NW-1]} - {2'b00, d_in};
            if (trial[DW+1]) divide_step = {r_in[DW-1:0], q_in[NW-1], q_in[NW-2:0], 1'b0};   // 2r + bit < den
            else             divide_step = {trial[DW:0], q_in[NW-2:0], 1'b1};
        end
    endfunction

    // The stages hold while the pipeline is empty (which also saves the simulators the work).
    wire    active = in_valid || valid != {NW{1'b0}};
    integer s;
    always @(posedge clk) begin
        valid <= rst ? {NW{1'b0}} : {valid[NW-2:0], in_valid};
        if (active) begin
            {r[0], q[0]} <= divide_step({(DW+1){1'b0}}, num, den);
            d[0] <= den;
            for (s = 1; s < NW; s = s + 1) begin
                {r[s], q[s]} <= divide_step(r[s-1], q[s-1], d[s-1]);
                d[s] <= d[s-1];
            end
        end
    end

    assign out_valid = valid[NW-1];
    assign quotient  = q[NW-1];
endmodule

`default_nettype wire
