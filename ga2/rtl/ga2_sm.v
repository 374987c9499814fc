// ga2_sm: the softmax unit, for SM.  Scores are int8 in Q4.4 (the low byte of each source
// word), probabilities Q0.16 (whole words):
//
//   d_i = max(x) - x_i                  0 .. 255
//   e_i = floor(65536 * exp(-d_i / 16)) the exp table (ga2_exp_rom.v)
//   z   = sum_i e_i                     65536 <= z <= 65536 * len
//   p_i = (e_i * 65536 + z / 2) / z     the divider (ga2_divu.v), one division per cycle
//
// Three passes over the scores, each opening with one cycle that points the address counter
// at the first score; busy cycle p of a pass reads score p - 1 (p = 1 .. len):
//
//   max   len + 3    read, operand register, compare into max
//   sum   len + 5    read, operand register, d (register), table (registered), add into z
//   div   len + 39   read, operand register, d, table, numerator register, 33 divider
//                    stages, write p_i to dst
//   wait = 3 * len + 47                                          (the spec's cycle table)
//
// As in the requantizer, when dst lies above src the scores are walked from the last down,
// so a probability never overwrites a score before the last pass has read it.
`default_nettype none

module ga2_sm #(
    parameter integer SPAD_AW = 12
) (
    input  wire               clk,
    input  wire               rst,
    input  wire               start,
    input  wire [15:0]        dst,
    input  wire [15:0]        src,
    input  wire [15:0]        len,
    output wire [SPAD_AW-1:0] spad_raddr,
    input  wire [31:0]        spad_rdata,
    output wire               spad_we,
    output wire [SPAD_AW-1:0] spad_waddr,
    output wire [31:0]        spad_wdata,
    output wire               done
);
    localparam [1:0] P_IDLE = 2'd0, P_MAX = 2'd1, P_SUM = 2'd2, P_DIV = 2'd3;
    localparam integer DIV_STAGES = 33;
    // the busy cycle of a pass after its last read in which the pass ends
    localparam [16:0] TAIL_MAX = 17'd2, TAIL_SUM = 17'd4, TAIL_DIV = 17'd5 + DIV_STAGES[16:0];

    reg  [1:0]  pass;
    reg  [16:0] p;
    reg         down;
    reg  [15:0] count, src_r, rd, wr;

    wire [16:0] tail = pass == P_MAX ? TAIL_MAX : pass == P_SUM ? TAIL_SUM : TAIL_DIV;
    wire        pass_end = pass != P_IDLE && p == {1'b0, count} + tail;
    wire        reading = pass != P_IDLE && p != 17'd0 && p <= {1'b0, count};
    assign done = pass == P_DIV && pass_end;

    // the pipeline: valid bits travel with the score (v1: read data, v2: operand, v3: d, v4: e)
    reg               v1, v2, v3, v4, v5;
    reg signed [7:0]  x;                  // the operand register
    reg signed [7:0]  max_x;
    reg        [7:0]  d;
    reg        [28:0] z;
    reg        [32:0] numerator;
    wire       [16:0] e;
    wire              div_valid;
    wire       [32:0] quotient;

    ga2_exp_rom u_table (.clk(clk), .d(d), .e(e));

    ga2_divu #(.NW(33), .DW(29)) u_divider (
        .clk       (clk),
        .rst       (rst),
        .in_valid  (v5),
        .num       (numerator),
        .den       (z),
        .out_valid (div_valid),
        .quotient  (quotient)
    );

    wire signed [8:0] gap = {max_x[7], max_x} - {x[7], x};   // 0 .. 255 once max_x is the max

    always @(posedge clk) begin
        v1 <= !rst && reading;
        v2 <= !rst && v1;
        v3 <= !rst && v2 && pass != P_MAX;
        v4 <= !rst && v3;
        v5 <= !rst && v4 && pass == P_DIV;
        if (pass != P_IDLE) begin         // idle, the data registers hold
            x  <= spad_rdata[7:0];
            d  <= gap[7:0];
            numerator <= {e, 16'd0} + {5'd0, z[28:1]};
        end
    end

    always @(posedge clk) begin
        if (rst) begin
            pass <= P_IDLE;
        end else if (start) begin
            pass  <= P_MAX;
            p     <= 17'd0;
            down  <= dst > src;
            count <= len;
            src_r <= src;
            wr    <= dst > src ? dst + len - 16'd1 : dst;
        end else if (pass != P_IDLE) begin
            p <= pass_end ? 17'd0 : p + 17'd1;
            if (pass_end) pass <= pass == P_MAX ? P_SUM : pass == P_SUM ? P_DIV : P_IDLE;
            if (p == 17'd0) rd <= down ? src_r + count - 16'd1 : src_r;
            else if (reading) rd <= down ? rd - 16'd1 : rd + 16'd1;
            if (pass == P_MAX && p == 17'd0) max_x <= -8'sd128;
            else if (pass == P_MAX && v2 && x > max_x) max_x <= x;
            if (pass == P_SUM && p == 17'd0) z <= 29'd0;
            else if (pass == P_SUM && v4) z <= z + {12'd0, e};
            if (spad_we) wr <= down ? wr - 16'd1 : wr + 16'd1;
        end
    end

    // p_i <= 65536: bit 32 of the quotient is always 0; d = gap is 0 .. 255 (its sign bit is 0);
    // scores are int8, the low byte of their words
    wire unused_bits = &{1'b0, quotient[32], gap[8], spad_rdata[31:8]};

    assign spad_raddr = reading ? rd[SPAD_AW-1:0] : {SPAD_AW{1'b0}};
    assign spad_we    = pass == P_DIV && div_valid;
    assign spad_waddr = spad_we ? wr[SPAD_AW-1:0] : {SPAD_AW{1'b0}};
    assign spad_wdata = spad_we ? quotient[31:0] : 32'd0;
endmodule

`default_nettype wire
