// ga2_sram: one word-addressed memory of GA-2, EXT or SPAD.
//
// 32-bit words, one write port and one read port, both synchronous:
//
//   write   we, waddr, wdata in cycle t    mem[waddr] holds wdata from cycle t+1 on
//   read    raddr in cycle t               rdata = mem[raddr] in cycle t + READ_LATENCY
//
// A read in the cycle of a write to the same word returns the old word (read-first).
// SPAD is on-chip SRAM: READ_LATENCY 1.  EXT stands for the external DRAM; its access
// latency is modelled as READ_LATENCY 8, the registered array read followed by seven
// pipeline registers.  Writes are posted (one cycle) in both.
`default_nettype none

module ga2_sram #(
    parameter integer WORDS        = 4096,
    parameter integer AW           = 12,    // address bits: 2^AW >= WORDS
    parameter integer READ_LATENCY = 1      // >= 1
) (
    input  wire          clk,
    input  wire          we,
    input  wire [AW-1:0] waddr,
    input  wire [31:0]   wdata,
    input  wire [AW-1:0] raddr,
    output wire [31:0]   rdata
);
    reg [31:0] mem [0:WORDS-1];
    reg [31:0] q;

    always @(posedge clk) begin
        if (we) mem[waddr] <= wdata;
        q <= mem[raddr];
    end

    generate
        if (READ_LATENCY == 1) begin : g_sram
            assign rdata = q;
        end else begin : g_dram
            // stage[i] holds the word read i + 1 cycles ago
            (* mem2reg *) reg [31:0] stage [1:READ_LATENCY-1];
            integer i;
            always @(posedge clk) begin
                stage[1] <= q;
                for (i = 2; i < READ_LATENCY; i = i + 1) stage[i] <= stage[i-1];
            end
            assign rdata = stage[READ_LATENCY-1];
        end
    endgenerate
endmodule

`default_nettype wire
