// ga2_dma: the DMA, for LD (EXT -> SPAD) and ST (SPAD -> EXT).
//
// One word per cycle: read, the source memory's latency, one buffer register, write.
// With busy cycles c = 0, 1, ...:
//
//   c = 0 .. len-1                 read word c of the source
//   c = LAT+1 .. len+LAT           write word c-LAT-1 (from the buffer register)
//   done in c = len + LAT          wait = len + LAT + 1
//
// LAT is the source's read latency: EXT 8 for LD (wait len + 9), SPAD 1 for ST (wait len + 2),
// the two rows of the spec's cycle table.  Idle, the unit drives its ports to zero (the top
// level ORs the units' ports together).
`default_nettype none

module ga2_dma #(
    parameter integer EXT_AW       = 13,
    parameter integer SPAD_AW      = 12,
    parameter integer EXT_LATENCY  = 8,
    parameter integer SPAD_LATENCY = 1
) (
    input  wire               clk,
    input  wire               rst,
    input  wire               start_ld,
    input  wire               start_st,
    input  wire [15:0]        dst,
    input  wire [15:0]        src,
    input  wire [15:0]        len,
    output wire [EXT_AW-1:0]  ext_raddr,
    input  wire [31:0]        ext_rdata,
    output wire               ext_we,
    output wire [EXT_AW-1:0]  ext_waddr,
    output wire [31:0]        ext_wdata,
    output wire [SPAD_AW-1:0] spad_raddr,
    input  wire [31:0]        spad_rdata,
    output wire               spad_we,
    output wire [SPAD_AW-1:0] spad_waddr,
    output wire [31:0]        spad_wdata,
    output wire               done
);
    reg        busy;
    reg        store;                     // ST: SPAD -> EXT; else LD: EXT -> SPAD
    reg [16:0] c;                         // busy cycle
    reg [15:0] count;                     // len
    reg [15:0] rd;                        // next source address
    reg [15:0] wr;                        // next destination address
    reg [31:0] buffer;

    wire [16:0] latency = store ? SPAD_LATENCY[16:0] : EXT_LATENCY[16:0];
    wire reading = busy && c < {1'b0, count};
    wire writing = busy && c > latency;
    assign done = busy && c == {1'b0, count} + latency;

    always @(posedge clk) begin
        buffer <= store ? spad_rdata : ext_rdata;
        if (rst) begin
            busy <= 1'b0;
        end else if (start_ld || start_st) begin
            busy  <= 1'b1;
            store <= start_st;
            c     <= 17'd0;
            count <= len;
            rd    <= src;
            wr    <= dst;
        end else if (busy) begin
            c <= c + 17'd1;
            if (reading) rd <= rd + 16'd1;
            if (writing) wr <= wr + 16'd1;
            if (done) busy <= 1'b0;
        end
    end

    assign ext_raddr  = reading && !store ? rd[EXT_AW-1:0] : {EXT_AW{1'b0}};
    assign spad_raddr = reading && store ? rd[SPAD_AW-1:0] : {SPAD_AW{1'b0}};
    assign ext_we     = writing && store;
    assign ext_waddr  = ext_we ? wr[EXT_AW-1:0] : {EXT_AW{1'b0}};
    assign ext_wdata  = ext_we ? buffer : 32'd0;
    assign spad_we    = writing && !store;
    assign spad_waddr = spad_we ? wr[SPAD_AW-1:0] : {SPAD_AW{1'b0}};
    assign spad_wdata = spad_we ? buffer : 32'd0;
endmodule

`default_nettype wire
