// ga2_tb: runs GA-2 programs on the circuit (ga2.v), one after another, and dumps what they
// leave behind.  Driven by ga2/rtl/simulators.py; the same file runs in Icarus and Verilator.
//
// Plusargs:
//   +dir=PATH          the run folder
//   +programs=N        programs 0 .. N-1
//   +max_cycles=C      give up on a program after C cycles (status TIMEOUT)
//   +host              load and dump EXT and SPAD through the host port, a word per cycle
//                      (otherwise the testbench reads and writes the memory arrays directly)
//
// Files, for program k:
//   prog_k.hex         the program's words (ga2/encoding.py), one hex word per line
//   ext_k.hex          EXT before the program, one word per line, all of EXT
//   spad_k.hex         SPAD before the program, likewise
//   ext_out_k.hex      EXT after HALT (written by the testbench)
//   spad_out_k.hex     SPAD after HALT
// and one line on stdout:
//   RESULT k STATUS total matrix dma vector instructions        STATUS: HALT, FAULT or TIMEOUT
module ga2_tb;
    localparam integer EXT_WORDS = 8192, SPAD_WORDS = 4096, IMEM_WORDS = 4096;
    localparam integer EXT_LATENCY = 8, SPAD_LATENCY = 1;

    reg         clk = 1'b0;
    reg         rst = 1'b1;
    reg         host_en = 1'b0;
    reg         host_we = 1'b0;
    reg  [1:0]  host_mem = 2'd0;
    reg  [15:0] host_addr = 16'd0;
    reg  [31:0] host_wdata = 32'd0;
    wire [31:0] host_rdata;
    wire        halted, fault;
    wire [31:0] total, matrix, dma, vector, instructions;

    always #5 clk = ~clk;

    ga2 dut (
        .clk(clk), .rst(rst), .host_en(host_en), .host_we(host_we), .host_mem(host_mem),
        .host_addr(host_addr), .host_wdata(host_wdata), .host_rdata(host_rdata),
        .halted(halted), .fault(fault), .cycles_total(total), .cycles_matrix(matrix),
        .cycles_dma(dma), .cycles_vector(vector), .instructions(instructions)
    );

    reg [31:0] image [0:EXT_WORDS-1];    // a memory image on its way through the host port
    string     dir;
    integer    programs, max_cycles, k, i, cycles, fd, got, n_words;
    reg        use_host;
    reg [31:0] word;

    // one host write per cycle: the inputs change at the falling edge, the memory takes them
    // at the rising one
    task automatic host_write(input [1:0] mem, input integer addr, input [31:0] data);
        @(negedge clk);
        host_en = 1'b1; host_we = 1'b1; host_mem = mem; host_addr = addr[15:0]; host_wdata = data;
    endtask

    task automatic host_idle;
        @(negedge clk);
        host_en = 1'b0; host_we = 1'b0;
    endtask

    // reads words 0 .. n-1 of a memory into image, one address per cycle, the data arriving
    // `latency` cycles after its address
    task automatic host_read_all(input [1:0] mem, input integer n, input integer latency);
        integer a;
        for (a = 0; a < n + latency; a = a + 1) begin
            @(negedge clk);
            if (a >= latency) image[a - latency] = host_rdata;
            host_en = 1'b1; host_we = 1'b0; host_mem = mem; host_addr = a < n ? a[15:0] : 16'd0;
        end
        host_idle();
    endtask

    task automatic load_memory(input [1:0] mem, input string file, input integer n);
        integer a;
        $readmemh(file, image, 0, n - 1);
        for (a = 0; a < n; a = a + 1) host_write(mem, a, image[a]);
        host_idle();
    endtask

    initial begin
        if (!$value$plusargs("dir=%s", dir)) dir = ".";
        if (!$value$plusargs("programs=%d", programs)) programs = 1;
        if (!$value$plusargs("max_cycles=%d", max_cycles)) max_cycles = 1000000;
        use_host = $test$plusargs("host") != 0;
        repeat (4) @(negedge clk);
        for (k = 0; k < programs; k = k + 1) begin
            rst = 1'b1;
            // the program, through the host port, and four zero words after it
            fd = $fopen($sformatf("%s/prog_%0d.hex", dir, k), "r");
            if (fd == 0) begin
                $display("ERROR cannot open %s/prog_%0d.hex", dir, k);
                $finish;
            end
            n_words = 0;
            got = $fscanf(fd, "%h", word);
            while (got == 1) begin
                if (n_words + 4 > IMEM_WORDS) begin
                    $display("ERROR program %0d does not fit the %0d-word program memory", k, IMEM_WORDS);
                    $finish;
                end
                host_write(2'd0, n_words, word);
                n_words = n_words + 1;
                got = $fscanf(fd, "%h", word);
            end
            $fclose(fd);
            for (i = 0; i < 4; i = i + 1) host_write(2'd0, n_words + i, 32'd0);
            host_idle();
            if (use_host) begin
                load_memory(2'd1, $sformatf("%s/ext_%0d.hex", dir, k), EXT_WORDS);
                load_memory(2'd2, $sformatf("%s/spad_%0d.hex", dir, k), SPAD_WORDS);
            end else begin
                $readmemh($sformatf("%s/ext_%0d.hex", dir, k), dut.u_ext.mem);
                $readmemh($sformatf("%s/spad_%0d.hex", dir, k), dut.u_spad.mem);
            end
            // flush the pipelines' valid bits (the divider's is 33 deep) before the start
            repeat (40) @(negedge clk);
            rst = 1'b0;
            cycles = 0;
            while (!halted && !fault && cycles < max_cycles) begin
                @(negedge clk);
                cycles = cycles + 1;
            end
            $display("RESULT %0d %s %0d %0d %0d %0d %0d", k, halted ? "HALT" : fault ? "FAULT" : "TIMEOUT",
                     total, matrix, dma, vector, instructions);
            rst = 1'b1;
            if (use_host) begin
                @(negedge clk);
                host_read_all(2'd1, EXT_WORDS, EXT_LATENCY);
                $writememh($sformatf("%s/ext_out_%0d.hex", dir, k), image);
                host_read_all(2'd2, SPAD_WORDS, SPAD_LATENCY);
                $writememh($sformatf("%s/spad_out_%0d.hex", dir, k), image, 0, SPAD_WORDS - 1);
            end else begin
                $writememh($sformatf("%s/ext_out_%0d.hex", dir, k), dut.u_ext.mem);
                $writememh($sformatf("%s/spad_out_%0d.hex", dir, k), dut.u_spad.mem);
            end
        end
        $display("DONE %0d", programs);
        $finish;
    end
endmodule
