// ga2_control: fetch, decode, dispatch, and the five cycle counters.
//
// Every instruction takes 2 issue cycles and then waits for its unit:
//
//   FETCH    the program memory reads the words pc .. pc+3
//   DECODE   the fields are cut out of the words (layout of ga2/encoding.py); the unit of the
//            op gets its start strobe and the fields; pc advances by the instruction's length
//   EXEC     the unit works; the control waits for its done strobe (asserted in its last
//            cycle), so the unit's own pipeline sets the wait of the spec's cycle table
//
// HALT is FETCH + DECODE (2 cycles) and stops the core; an unknown opcode stops it with
// fault set (programs are validated before they are loaded, so a fault means a bad image).
//
// Counters (reset by rst): total counts every cycle from the first FETCH to HALT's DECODE;
// matrix, dma and vector count the EXEC cycles of MM, of LD and ST, of RQ and SM;
// instructions counts the instructions other than HALT.
`default_nettype none

module ga2_control #(
    parameter integer IMEM_AW = 12
) (
    input  wire               clk,
    input  wire               rst,
    // program memory
    output reg  [IMEM_AW-1:0] pc,
    output wire               fetch,      // the FETCH cycle: read words pc .. pc+3
    input  wire [127:0]       words,
    // the decoded instruction: start strobes (DECODE cycle) and fields
    output wire               start_ld,
    output wire               start_st,
    output wire               start_mm,
    output wire               start_rq,
    output wire               start_sm,
    output wire [15:0]        f_dst,
    output wire [15:0]        f_src,      // LD, ST, RQ, SM: source; MM: A
    output wire [15:0]        f_len,
    output wire [15:0]        f_b,
    output wire [2:0]         f_m,
    output wire [6:0]         f_k,
    output wire [2:0]         f_n,
    output wire               f_tb,
    output wire [15:0]        f_lda,
    output wire [15:0]        f_ldb,
    output wire [15:0]        f_ldc,
    output wire [23:0]        f_mant,
    output wire [5:0]         f_shift,
    output wire               f_relu,
    // units
    input  wire               dma_done,
    input  wire               mm_done,
    input  wire               vec_done,
    // status and counters
    output wire               halted,
    output wire               fault,
    output reg  [31:0]        cnt_total,
    output reg  [31:0]        cnt_matrix,
    output reg  [31:0]        cnt_dma,
    output reg  [31:0]        cnt_vector,
    output reg  [31:0]        cnt_instr
);
    localparam [3:0] OP_HALT = 4'd0, OP_LD = 4'd1, OP_ST = 4'd2, OP_MM = 4'd3, OP_RQ = 4'd4, OP_SM = 4'd5;
    localparam [2:0] S_FETCH = 3'd0, S_DECODE = 3'd1, S_EXEC = 3'd2, S_HALTED = 3'd3, S_FAULT = 3'd4;
    localparam [1:0] U_DMA = 2'd0, U_MATRIX = 2'd1, U_VECTOR = 2'd2;

    reg [2:0] state;
    reg [1:0] unit;                       // the unit of the instruction in EXEC

    wire [31:0] w0 = words[31:0];
    wire [31:0] w1 = words[63:32];
    wire [31:0] w2 = words[95:64];
    wire [31:0] w3 = words[127:96];
    wire [3:0]  op = w0[31:28];

    assign fetch = state == S_FETCH;
    wire decoding = state == S_DECODE;
    assign start_ld = decoding && op == OP_LD;
    assign start_st = decoding && op == OP_ST;
    assign start_mm = decoding && op == OP_MM;
    assign start_rq = decoding && op == OP_RQ;
    assign start_sm = decoding && op == OP_SM;

    // ST is the one op whose first address field is the source (src [1] 31..16, dst [1] 15..0)
    assign f_dst   = op == OP_ST ? w1[15:0] : w1[31:16];
    assign f_src   = op == OP_ST ? w1[31:16] : w1[15:0];
    assign f_len   = w0[15:0];
    assign f_tb    = w0[27];
    assign f_m     = w0[26:24];
    assign f_n     = w0[23:21];
    assign f_k     = w0[20:14];
    assign f_b     = w2[31:16];
    assign f_lda   = w2[15:0];
    assign f_ldb   = w3[31:16];
    assign f_ldc   = w3[15:0];
    assign f_relu  = w0[27];
    assign f_shift = w0[26:21];
    assign f_mant  = w2[23:0];

    reg [2:0] length;                     // words of the instruction
    always @(*) begin
        case (op)
            OP_MM:   length = 3'd4;
            OP_RQ:   length = 3'd3;
            OP_HALT: length = 3'd1;
            default: length = 3'd2;
        endcase
    end

    wire unit_done = dma_done | mm_done | vec_done;

    assign halted = state == S_HALTED;
    assign fault  = state == S_FAULT;

    always @(posedge clk) begin
        if (rst) begin
            state      <= S_FETCH;
            pc         <= {IMEM_AW{1'b0}};
            unit       <= U_DMA;
            cnt_total  <= 32'd0;
            cnt_matrix <= 32'd0;
            cnt_dma    <= 32'd0;
            cnt_vector <= 32'd0;
            cnt_instr  <= 32'd0;
        end else begin
            case (state)
                S_FETCH: begin
                    cnt_total <= cnt_total + 32'd1;
                    state     <= S_DECODE;
                end
                S_DECODE: begin
                    cnt_total <= cnt_total + 32'd1;
                    case (op)
                        OP_HALT: state <= S_HALTED;
                        OP_LD, OP_ST, OP_MM, OP_RQ, OP_SM: begin
                            cnt_instr <= cnt_instr + 32'd1;
                            pc        <= pc + {{(IMEM_AW-3){1'b0}}, length};
                            unit      <= op == OP_MM ? U_MATRIX : (op == OP_RQ || op == OP_SM) ? U_VECTOR : U_DMA;
                            state     <= S_EXEC;
                        end
                        default: state <= S_FAULT;
                    endcase
                end
                S_EXEC: begin
                    cnt_total <= cnt_total + 32'd1;
                    case (unit)
                        U_MATRIX: cnt_matrix <= cnt_matrix + 32'd1;
                        U_VECTOR: cnt_vector <= cnt_vector + 32'd1;
                        default:  cnt_dma    <= cnt_dma + 32'd1;
                    endcase
                    if (unit_done) state <= S_FETCH;
                end
                default: ;                // HALTED, FAULT: stay until reset
            endcase
        end
    end
endmodule

`default_nettype wire
