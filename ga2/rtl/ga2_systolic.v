// ga2_systolic: the 4 x 4 systolic array, output-stationary.
//
// Row i of A enters at the left of row i, column j of B at the top of column j; each PE
// passes a to the right and b downwards and accumulates a*b (ga2_pe.v), so PE (i, j) ends
// holding C[i][j] = sum_k A[i][k] * B[k][j].  The feeder (ga2_mm.v) skews the operands:
// A[i][k] enters row i and B[k][j] enters column j in step k + i (resp. k + j), so that
// they meet in PE (i, j) in step k + i + j.
//
//   a_left[8i+7:8i]     operand entering row i        b_top[8j+7:8j]   entering column j
//   acc[32(4i+j)+31:..] the accumulator of PE (i, j)
`default_nettype none

module ga2_systolic (
    input  wire         clk,
    input  wire         clear,
    input  wire         enable,
    input  wire [31:0]  a_left,
    input  wire [31:0]  b_top,
    output wire [511:0] acc
);
    // a_bus[i][j]: the a entering PE (i, j) (j = 4: leaving the array); b_bus likewise
    wire [7:0] a_bus [0:3][0:4];
    wire [7:0] b_bus [0:4][0:3];

    genvar i, j;
    generate
        for (i = 0; i < 4; i = i + 1) begin : g_edge
            assign a_bus[i][0] = a_left[8*i +: 8];
            assign b_bus[0][i] = b_top[8*i +: 8];
        end
        for (i = 0; i < 4; i = i + 1) begin : g_row
            for (j = 0; j < 4; j = j + 1) begin : g_col
                ga2_pe u_pe (
                    .clk    (clk),
                    .clear  (clear),
                    .enable (enable),
                    .a_in   (a_bus[i][j]),
                    .b_in   (b_bus[i][j]),
                    .a_out  (a_bus[i][j+1]),
                    .b_out  (b_bus[i+1][j]),
                    .acc    (acc[32*(4*i+j) +: 32])
                );
            end
        end
    endgenerate
endmodule

`default_nettype wire
