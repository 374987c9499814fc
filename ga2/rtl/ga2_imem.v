// ga2_imem: the program memory.  An instruction is 1 to 4 words long (ga2/encoding.py), and
// the control decodes one in its second issue cycle, so the memory reads the four words
// pc .. pc+3 in one cycle: it is four banks, word w in bank w mod 4 at row w / 4.
//
//   pc, fetch in cycle t  ->  words = {word pc+3, word pc+2, word pc+1, word pc} from cycle t+1
//                             until the next fetch
//
// The host writes the program one word per cycle (we, waddr, wdata) while the core is held in
// reset.  Words past the end of the memory wrap to its start.
`default_nettype none

module ga2_imem #(
    parameter integer WORDS = 4096,   // a multiple of 4
    parameter integer AW    = 12      // 2^AW == WORDS
) (
    input  wire          clk,
    input  wire          we,
    input  wire [AW-1:0] waddr,
    input  wire [31:0]   wdata,
    input  wire [AW-1:0] pc,
    input  wire          fetch,
    output reg  [127:0]  words
);
    localparam integer ROWS = WORDS / 4;

    reg [31:0] bank0 [0:ROWS-1];
    reg [31:0] bank1 [0:ROWS-1];
    reg [31:0] bank2 [0:ROWS-1];
    reg [31:0] bank3 [0:ROWS-1];
    reg [31:0] q0, q1, q2, q3;
    reg [1:0]  offset;                   // pc mod 4 of the words in q0..q3

    wire [AW-3:0] row  = pc[AW-1:2];
    wire [AW-3:0] next = row + 1'b1;     // banks before pc's own bank hold the later words

    always @(posedge clk) begin
        if (we && waddr[1:0] == 2'd0) bank0[waddr[AW-1:2]] <= wdata;
        if (we && waddr[1:0] == 2'd1) bank1[waddr[AW-1:2]] <= wdata;
        if (we && waddr[1:0] == 2'd2) bank2[waddr[AW-1:2]] <= wdata;
        if (we && waddr[1:0] == 2'd3) bank3[waddr[AW-1:2]] <= wdata;
        if (fetch) begin                  // the words stay while the control decodes them
            q0 <= bank0[pc[1:0] > 2'd0 ? next : row];
            q1 <= bank1[pc[1:0] > 2'd1 ? next : row];
            q2 <= bank2[pc[1:0] > 2'd2 ? next : row];
            q3 <= bank3[row];
            offset <= pc[1:0];
        end
    end

    // word k of the instruction is in bank (offset + k) mod 4
    always @(*) begin
        case (offset)
            2'd0:    words = {q3, q2, q1, q0};
            2'd1:    words = {q0, q3, q2, q1};
            2'd2:    words = {q1, q0, q3, q2};
            default: words = {q2, q1, q0, q3};
        endcase
    end
endmodule

`default_nettype wire
