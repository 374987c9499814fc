// ga2_rq: the requantizer, for RQ.
//
//   dst[i] = sat127(round_half_away(src[i] * m / 2^s)), then max(0, .) if relu     i < len
//
// src[i] is a whole int32 word, m < 2^24, s <= 63; the result is an int8, sign-extended into
// its word.  In integers, with p = src[i] * m (|p| < 2^55) and h = 2^(s-1):
//   s = 0    q = p
//   s > 0    q = (p + h) >> s   when p >= 0,   (p + h - 1) >> s   when p < 0   (arithmetic shift)
//
// One word per cycle, three stages: read, multiply (registered product), round, saturate and
// write.  Busy cycles c = 0 .. len+1: word c is read in cycle c and written in cycle c + 2;
// done in c = len + 1, so wait = len + 2 (the spec's cycle table).
//
// The whole source is read before it can be overwritten, as if copied first: when dst lies
// above src the words are processed from the last down, otherwise from the first up (a write
// lands only on words already read).
`default_nettype none

module ga2_rq #(
    parameter integer SPAD_AW = 12
) (
    input  wire               clk,
    input  wire               rst,
    input  wire               start,
    input  wire [15:0]        dst,
    input  wire [15:0]        src,
    input  wire [15:0]        len,
    input  wire [23:0]        mant,
    input  wire [5:0]         shift,
    input  wire               relu,
    output wire [SPAD_AW-1:0] spad_raddr,
    input  wire [31:0]        spad_rdata,
    output wire               spad_we,
    output wire [SPAD_AW-1:0] spad_waddr,
    output wire [31:0]        spad_wdata,
    output wire               done
);
    reg        busy;
    reg        down;                      // walk from the last word to the first
    reg [16:0] c;
    reg [15:0] count, rd, wr;
    reg [23:0] m_r;
    reg [5:0]  s_r;
    reg        relu_r;

    wire reading = busy && c < {1'b0, count};
    wire writing = busy && c >= 17'd2;
    assign done = busy && c == {1'b0, count} + 17'd1;

    // stage 2: the product of the word read in the previous cycle
    reg signed [56:0] product;
    always @(posedge clk) if (busy) product <= $signed(spad_rdata) * $signed({1'b0, m_r});

    // stage 3: round half away from zero, shift, saturate
    wire signed [63:0] p       = {{7{product[56]}}, product};
    wire               away    = product[56] && s_r != 6'd0;
    wire signed [63:0] half    = s_r == 6'd0 ? 64'sd0 : 64'sd1 <<< (s_r - 6'd1);
    wire signed [63:0] rounded = (p + half - (away ? 64'sd1 : 64'sd0)) >>> s_r;
    wire signed [63:0] floor_q = relu_r ? 64'sd0 : -64'sd127;
    wire        [7:0]  q       = rounded > 64'sd127 ? 8'd127 : rounded < floor_q ? floor_q[7:0] : rounded[7:0];

    always @(posedge clk) begin
        if (rst) begin
            busy <= 1'b0;
        end else if (start) begin
            busy   <= 1'b1;
            down   <= dst > src;
            c      <= 17'd0;
            count  <= len;
            rd     <= dst > src ? src + len - 16'd1 : src;
            wr     <= dst > src ? dst + len - 16'd1 : dst;
            m_r    <= mant;
            s_r    <= shift;
            relu_r <= relu;
        end else if (busy) begin
            c <= c + 17'd1;
            if (reading) rd <= down ? rd - 16'd1 : rd + 16'd1;
            if (writing) wr <= down ? wr - 16'd1 : wr + 16'd1;
            if (done) busy <= 1'b0;
        end
    end

    assign spad_raddr = reading ? rd[SPAD_AW-1:0] : {SPAD_AW{1'b0}};
    assign spad_we    = writing;
    assign spad_waddr = writing ? wr[SPAD_AW-1:0] : {SPAD_AW{1'b0}};
    assign spad_wdata = writing ? {{24{q[7]}}, q} : 32'd0;
endmodule

`default_nettype wire
