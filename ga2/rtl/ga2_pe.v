// ga2_pe: one processing element of the 4 x 4 systolic array.
//
// Its operands arrive from the left (a) and from above (b), are held one cycle in input
// registers and passed on to the right and downwards from there; the product of the held pair
// is registered, then added to the accumulator.  So a pair entering in step t is multiplied in
// step t+1 and accumulated at the end of step t+2.
//
//   clear     accumulator and product := 0 (the products in flight are dropped)
//   enable    the array steps; when low, every register holds
`default_nettype none

module ga2_pe (
    input  wire               clk,
    input  wire               clear,
    input  wire               enable,
    input  wire signed [7:0]  a_in,
    input  wire signed [7:0]  b_in,
    output reg  signed [7:0]  a_out,
    output reg  signed [7:0]  b_out,
    output reg  signed [31:0] acc
);
    reg signed [15:0] product;

    always @(posedge clk) begin
        if (clear) begin
            a_out   <= 8'sd0;
            b_out   <= 8'sd0;
            product <= 16'sd0;
            acc     <= 32'sd0;
        end else if (enable) begin
            a_out   <= a_in;
            b_out   <= b_in;
            product <= a_out * b_out;
            acc     <= acc + {{16{product[15]}}, product};
        end
    end
endmodule

`default_nettype wire
