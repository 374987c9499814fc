// ga2_mm: the matrix unit.  MM stages its operands into two buffers, runs them through the
// 4 x 4 systolic array and drains the accumulators to SPAD:
//
//   C[i][j] = sum_k A[i][k] * B'[k][j]       i < M, j < N, k < K    (int8 x int8 -> int32)
//   A[i][k]  = SPAD[A + i*lda + k]
//   B'[k][j] = SPAD[B + k*ldb + j]   (tb = 0)     SPAD[B + j*ldb + k]   (tb = 1)
//   SPAD[dst + i*ldc + j] = C[i][j], row after row (with overlapping rows the later one wins)
//
// Every operand is read before any result is written, so C may overlap A or B.
// The cycles of one MM (busy cycles, done in the last):
//
//   setup           1        clear the array, point the address generator at A
//   load            M*K+K*N  one SPAD read per cycle: A row by row, then B
//   fill            2        SPAD's read latency, and the operand register before the buffers
//   run             K+M+N+1  steps 0 .. K+M+N of the skewed wavefront: in step t the feeder
//                            registers take A[i][t-i] and B'[t-j][j], so the pair of PE (i, j)
//                            for k arrives there in step k+i+j+1 and is accumulated at the end
//                            of step k+i+j+3 (ga2_pe.v); the last, PE (M-1, N-1) and k = K-1,
//                            at the end of step K+M+N
//   drain           M*N+1    one accumulator per cycle through the output register
//   wait = M*K + K*N + M*N + M + K + N + 5                       (the spec's cycle table)
`default_nettype none

module ga2_mm #(
    parameter integer SPAD_AW = 12
) (
    input  wire               clk,
    input  wire               rst,
    input  wire               start,
    input  wire [15:0]        dst,
    input  wire [15:0]        a_addr,
    input  wire [15:0]        b_addr,
    input  wire [2:0]         m,
    input  wire [6:0]         k,
    input  wire [2:0]         n,
    input  wire               tb,
    input  wire [15:0]        lda,
    input  wire [15:0]        ldb,
    input  wire [15:0]        ldc,
    output wire [SPAD_AW-1:0] spad_raddr,
    input  wire [31:0]        spad_rdata,
    output wire               spad_we,
    output wire [SPAD_AW-1:0] spad_waddr,
    output wire [31:0]        spad_wdata,
    output wire               done
);
    localparam [2:0] P_IDLE = 3'd0, P_SETUP = 3'd1, P_LOAD = 3'd2, P_FILL = 3'd3, P_RUN = 3'd4, P_DRAIN = 3'd5;

    reg [2:0]  phase;
    reg [2:0]  m_r, n_r;
    reg [6:0]  k_r;
    reg        tb_r;
    reg [15:0] dst_r, b_r, lda_r, ldb_r, ldc_r;

    // ---------------------------------------------------------------- load: the address generator
    // It walks a matrix as `outer` rows of `inner` words, row r at base + r * stride:
    //   A            outer i < M, inner k < K, stride lda
    //   B, tb = 0    outer k < K, inner j < N, stride ldb
    //   B, tb = 1    outer j < N, inner k < K, stride ldb (the rows of B are the columns of B')
    reg        in_b;                      // reading B (else A)
    reg [6:0]  outer, inner;
    reg [15:0] base;
    wire [6:0] outer_last = in_b ? (tb_r ? {4'd0, n_r} : k_r) - 7'd1 : {4'd0, m_r} - 7'd1;
    wire [6:0] inner_last = in_b ? (tb_r ? k_r : {4'd0, n_r}) - 7'd1 : k_r - 7'd1;
    wire       row_end    = inner == inner_last;
    wire       matrix_end = row_end && outer == outer_last;
    wire       reading    = phase == P_LOAD;
    wire [15:0] read_addr = base + {9'd0, inner};

    // where the word lands: abuf[{i, k}], bbuf[{k, j}]
    wire [7:0] slot = !in_b ? {outer[1:0], inner[5:0]}
                    : tb_r  ? {inner[5:0], outer[1:0]}
                    :         {outer[5:0], inner[1:0]};

    // two stages between the read and the buffer: SPAD's latency, then the operand register
    reg       tag1_valid, tag1_b, tag2_valid, tag2_b;
    reg [7:0] tag1_slot, tag2_slot;
    reg [7:0] operand;

    reg [7:0] abuf [0:255];
    reg [7:0] bbuf [0:255];

    always @(posedge clk) begin
        tag1_valid <= !rst && reading;
        tag1_b     <= in_b;
        tag1_slot  <= slot;
        tag2_valid <= !rst && tag1_valid;
        tag2_b     <= tag1_b;
        tag2_slot  <= tag1_slot;
        if (tag1_valid) operand <= spad_rdata[7:0];   // int8 operands: the low byte
        if (tag2_valid && !tag2_b) abuf[tag2_slot] <= operand;
        if (tag2_valid && tag2_b)  bbuf[tag2_slot] <= operand;
    end

    // ---------------------------------------------------------------- run: the feeder and the array
    reg  [6:0]  step;                     // run: the wavefront's step; fill: its cycle
    wire [31:0] a_left, b_top;            // the feeder registers, one per row and column
    wire [511:0] acc;
    wire        run = phase == P_RUN;
    wire        clear = phase == P_SETUP;

    // In step t row i is fed A[i][t-i] and column j is fed B'[t-j][j] (zero outside the matrices).
    genvar g;
    generate
        for (g = 0; g < 4; g = g + 1) begin : g_feed
            localparam [1:0] LANE = g;
            wire [6:0] lag  = step - {5'd0, LANE};     // before the lane's first step it wraps past 64
            wire       live = run && lag < k_r;
            reg  [7:0] a_feed, b_feed;
            always @(posedge clk) begin
                a_feed <= live && {1'b0, LANE} < m_r ? abuf[{LANE, lag[5:0]}] : 8'd0;
                b_feed <= live && {1'b0, LANE} < n_r ? bbuf[{lag[5:0], LANE}] : 8'd0;
            end
            assign a_left[8*g +: 8] = a_feed;
            assign b_top[8*g +: 8]  = b_feed;
        end
    endgenerate

    ga2_systolic u_array (
        .clk    (clk),
        .clear  (clear),
        .enable (run),
        .a_left (a_left),
        .b_top  (b_top),
        .acc    (acc)
    );

    wire [6:0] run_last = k_r + {4'd0, m_r} + {4'd0, n_r};

    // ---------------------------------------------------------------- drain
    reg  [1:0]  ci, cj;                   // the accumulator being drained
    reg  [15:0] row_base;                 // dst + ci * ldc
    reg         draining;                 // an accumulator was selected last cycle: write it
    reg         selected_all;             // the last accumulator has been selected
    reg  [15:0] out_addr;
    reg  [31:0] out_word;
    wire        drain = phase == P_DRAIN;
    wire        drain_select = drain && !selected_all;
    wire        last_c = ci == m_r[1:0] - 2'd1 && cj == n_r[1:0] - 2'd1;

    // ---------------------------------------------------------------- the sequencer
    always @(posedge clk) begin
        if (rst) begin
            phase    <= P_IDLE;
            draining <= 1'b0;
        end else begin
            case (phase)
                P_IDLE: if (start) begin
                    phase <= P_SETUP;
                    m_r <= m; n_r <= n; k_r <= k; tb_r <= tb;
                    dst_r <= dst; b_r <= b_addr; lda_r <= lda; ldb_r <= ldb; ldc_r <= ldc;
                    base <= a_addr;
                end
                P_SETUP: begin
                    phase <= P_LOAD;
                    in_b  <= 1'b0;
                    outer <= 7'd0;
                    inner <= 7'd0;
                end
                P_LOAD: begin
                    if (!row_end) begin
                        inner <= inner + 7'd1;
                    end else if (!matrix_end) begin
                        inner <= 7'd0;
                        outer <= outer + 7'd1;
                        base  <= base + (in_b ? ldb_r : lda_r);
                    end else if (!in_b) begin
                        in_b  <= 1'b1;
                        inner <= 7'd0;
                        outer <= 7'd0;
                        base  <= b_r;
                    end else begin
                        phase <= P_FILL;
                        step  <= 7'd0;
                    end
                end
                P_FILL: begin
                    step <= step + 7'd1;
                    if (step == 7'd1) begin
                        phase <= P_RUN;
                        step  <= 7'd0;
                    end
                end
                P_RUN: begin
                    step <= step + 7'd1;
                    if (step == run_last) begin
                        phase    <= P_DRAIN;
                        ci       <= 2'd0;
                        cj       <= 2'd0;
                        row_base <= dst_r;
                        selected_all <= 1'b0;
                    end
                end
                P_DRAIN: begin
                    draining <= drain_select;
                    if (drain_select) begin
                        out_word <= acc[32 * {ci, cj} +: 32];
                        out_addr <= row_base + {14'd0, cj};
                        if (last_c) selected_all <= 1'b1;
                        if (cj != n_r[1:0] - 2'd1) begin
                            cj <= cj + 2'd1;
                        end else if (ci != m_r[1:0] - 2'd1) begin
                            cj       <= 2'd0;
                            ci       <= ci + 2'd1;
                            row_base <= row_base + ldc_r;
                        end
                    end
                    if (done) begin
                        phase    <= P_IDLE;
                        draining <= 1'b0;
                    end
                end
                default: phase <= P_IDLE;
            endcase
        end
    end

    assign done       = drain && selected_all;

    // Operands are int8 (the low byte of a word); addresses are reduced to SPAD's width, which
    // is exact: a valid program never addresses SPAD at or beyond 2^SPAD_AW (ga2/limits.py).
    wire unused_bits = &{1'b0, spad_rdata[31:8], read_addr[15:SPAD_AW], out_addr[15:SPAD_AW]};
    assign spad_raddr = reading ? read_addr[SPAD_AW-1:0] : {SPAD_AW{1'b0}};
    assign spad_we    = drain && draining;
    assign spad_waddr = spad_we ? out_addr[SPAD_AW-1:0] : {SPAD_AW{1'b0}};
    assign spad_wdata = spad_we ? out_word : 32'd0;
endmodule

`default_nettype wire
