// ga2: the GA-2 accelerator (ga2/SPEC.md): program memory, control, EXT and SPAD, the DMA,
// the matrix unit (4 x 4 systolic array), the requantizer and the softmax unit.
//
// One instruction runs at a time, so the units share the memories' ports: each drives its
// port signals to zero when idle and the ports take the OR of them.
//
// The host port reads and writes the three memories while the core is held in reset (or has
// halted): host_mem selects IMEM (0), EXT (1) or SPAD (2); a write takes one cycle, a read
// returns the word in host_rdata after the memory's read latency (EXT 8, SPAD 1 cycles).
// Releasing rst starts the program at word 0; halted (or fault) rises when it stops, and the
// five counters hold their final values (ga2_control.v).
`default_nettype none

module ga2 #(
    parameter integer EXT_WORDS  = 8192,
    parameter integer EXT_AW     = 13,
    parameter integer SPAD_WORDS = 4096,
    parameter integer SPAD_AW    = 12,
    parameter integer IMEM_WORDS = 4096,
    parameter integer IMEM_AW    = 12
) (
    input  wire        clk,
    input  wire        rst,
    input  wire        host_en,
    input  wire        host_we,
    input  wire [1:0]  host_mem,
    input  wire [15:0] host_addr,
    input  wire [31:0] host_wdata,
    output wire [31:0] host_rdata,
    output wire        halted,
    output wire        fault,
    output wire [31:0] cycles_total,
    output wire [31:0] cycles_matrix,
    output wire [31:0] cycles_dma,
    output wire [31:0] cycles_vector,
    output wire [31:0] instructions
);
    localparam integer EXT_LATENCY = 8, SPAD_LATENCY = 1;

    // ---------------------------------------------------------------- control and program memory
    wire [IMEM_AW-1:0] pc;
    wire               fetch;
    wire [127:0]       words;
    wire start_ld, start_st, start_mm, start_rq, start_sm;
    wire [15:0] f_dst, f_src, f_len, f_b, f_lda, f_ldb, f_ldc;
    wire [2:0]  f_m, f_n;
    wire [6:0]  f_k;
    wire        f_tb, f_relu;
    wire [23:0] f_mant;
    wire [5:0]  f_shift;
    wire dma_done, mm_done, rq_done, sm_done;

    ga2_imem #(.WORDS(IMEM_WORDS), .AW(IMEM_AW)) u_imem (
        .clk   (clk),
        .we    (host_en && host_we && host_mem == 2'd0),
        .waddr (host_addr[IMEM_AW-1:0]),
        .wdata (host_wdata),
        .pc    (pc),
        .fetch (fetch),
        .words (words)
    );

    ga2_control #(.IMEM_AW(IMEM_AW)) u_control (
        .clk(clk), .rst(rst), .pc(pc), .fetch(fetch), .words(words),
        .start_ld(start_ld), .start_st(start_st), .start_mm(start_mm), .start_rq(start_rq), .start_sm(start_sm),
        .f_dst(f_dst), .f_src(f_src), .f_len(f_len), .f_b(f_b), .f_m(f_m), .f_k(f_k), .f_n(f_n), .f_tb(f_tb),
        .f_lda(f_lda), .f_ldb(f_ldb), .f_ldc(f_ldc), .f_mant(f_mant), .f_shift(f_shift), .f_relu(f_relu),
        .dma_done(dma_done), .mm_done(mm_done), .vec_done(rq_done | sm_done),
        .halted(halted), .fault(fault),
        .cnt_total(cycles_total), .cnt_matrix(cycles_matrix), .cnt_dma(cycles_dma),
        .cnt_vector(cycles_vector), .cnt_instr(instructions)
    );

    // ---------------------------------------------------------------- memories
    wire [EXT_AW-1:0]  ext_raddr, ext_waddr;
    wire [31:0]        ext_rdata, ext_wdata;
    wire               ext_we;
    wire [SPAD_AW-1:0] spad_raddr, spad_waddr;
    wire [31:0]        spad_rdata, spad_wdata;
    wire               spad_we;

    ga2_sram #(.WORDS(EXT_WORDS), .AW(EXT_AW), .READ_LATENCY(EXT_LATENCY)) u_ext (
        .clk(clk), .we(ext_we), .waddr(ext_waddr), .wdata(ext_wdata), .raddr(ext_raddr), .rdata(ext_rdata)
    );

    ga2_sram #(.WORDS(SPAD_WORDS), .AW(SPAD_AW), .READ_LATENCY(SPAD_LATENCY)) u_spad (
        .clk(clk), .we(spad_we), .waddr(spad_waddr), .wdata(spad_wdata), .raddr(spad_raddr), .rdata(spad_rdata)
    );

    // ---------------------------------------------------------------- units
    wire [EXT_AW-1:0]  dma_ext_raddr, dma_ext_waddr;
    wire [31:0]        dma_ext_wdata, dma_spad_wdata, mm_wdata, rq_wdata, sm_wdata;
    wire               dma_ext_we, dma_spad_we, mm_we, rq_we, sm_we;
    wire [SPAD_AW-1:0] dma_spad_raddr, dma_spad_waddr, mm_raddr, mm_waddr, rq_raddr, rq_waddr, sm_raddr, sm_waddr;

    ga2_dma #(.EXT_AW(EXT_AW), .SPAD_AW(SPAD_AW), .EXT_LATENCY(EXT_LATENCY), .SPAD_LATENCY(SPAD_LATENCY)) u_dma (
        .clk(clk), .rst(rst), .start_ld(start_ld), .start_st(start_st), .dst(f_dst), .src(f_src), .len(f_len),
        .ext_raddr(dma_ext_raddr), .ext_rdata(ext_rdata), .ext_we(dma_ext_we), .ext_waddr(dma_ext_waddr),
        .ext_wdata(dma_ext_wdata), .spad_raddr(dma_spad_raddr), .spad_rdata(spad_rdata), .spad_we(dma_spad_we),
        .spad_waddr(dma_spad_waddr), .spad_wdata(dma_spad_wdata), .done(dma_done)
    );

    ga2_mm #(.SPAD_AW(SPAD_AW)) u_mm (
        .clk(clk), .rst(rst), .start(start_mm), .dst(f_dst), .a_addr(f_src), .b_addr(f_b),
        .m(f_m), .k(f_k), .n(f_n), .tb(f_tb), .lda(f_lda), .ldb(f_ldb), .ldc(f_ldc),
        .spad_raddr(mm_raddr), .spad_rdata(spad_rdata), .spad_we(mm_we), .spad_waddr(mm_waddr),
        .spad_wdata(mm_wdata), .done(mm_done)
    );

    ga2_rq #(.SPAD_AW(SPAD_AW)) u_rq (
        .clk(clk), .rst(rst), .start(start_rq), .dst(f_dst), .src(f_src), .len(f_len),
        .mant(f_mant), .shift(f_shift), .relu(f_relu),
        .spad_raddr(rq_raddr), .spad_rdata(spad_rdata), .spad_we(rq_we), .spad_waddr(rq_waddr),
        .spad_wdata(rq_wdata), .done(rq_done)
    );

    ga2_sm #(.SPAD_AW(SPAD_AW)) u_sm (
        .clk(clk), .rst(rst), .start(start_sm), .dst(f_dst), .src(f_src), .len(f_len),
        .spad_raddr(sm_raddr), .spad_rdata(spad_rdata), .spad_we(sm_we), .spad_waddr(sm_waddr),
        .spad_wdata(sm_wdata), .done(sm_done)
    );

    // ---------------------------------------------------------------- the shared ports
    wire host_ext  = host_en && host_mem == 2'd1;
    wire host_spad = host_en && host_mem == 2'd2;
    reg  host_read_spad;                  // which memory the host's last read went to
    always @(posedge clk) if (host_en) host_read_spad <= host_mem == 2'd2;

    assign ext_raddr  = host_ext ? host_addr[EXT_AW-1:0] : dma_ext_raddr;
    assign ext_we     = host_ext ? host_we : dma_ext_we;
    assign ext_waddr  = host_ext ? host_addr[EXT_AW-1:0] : dma_ext_waddr;
    assign ext_wdata  = host_ext ? host_wdata : dma_ext_wdata;
    assign spad_raddr = host_spad ? host_addr[SPAD_AW-1:0] : dma_spad_raddr | mm_raddr | rq_raddr | sm_raddr;
    assign spad_we    = host_spad ? host_we : dma_spad_we | mm_we | rq_we | sm_we;
    assign spad_waddr = host_spad ? host_addr[SPAD_AW-1:0] : dma_spad_waddr | mm_waddr | rq_waddr | sm_waddr;
    assign spad_wdata = host_spad ? host_wdata : dma_spad_wdata | mm_wdata | rq_wdata | sm_wdata;
    assign host_rdata = host_read_spad ? spad_rdata : ext_rdata;

    // host_addr is as wide as the address fields; a memory uses its low EXT_AW or SPAD_AW bits
    wire unused_host_addr = &{1'b0, host_addr};
endmodule

`default_nettype wire
