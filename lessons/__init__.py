"""lessons: what the chapters compute beside the engine, their reference implementations and
their measurements.

The engine a reader could use is ``kvcache``; these modules teach and measure it.  Reference
implementations (plain float64 numpy, one head, written to be read):

    attention      attention computed by hand: scores, softmax, the causal prefill, the decode step
                   with its cache (chapters 1 and 2); the reference the engine's tests compare with
    transformer    a tiny decoder-only transformer around that decode step (the appendix)
    examples       the small worked examples of chapters 1 and 2, as data

The real model (SmolLM2-135M-Instruct from its GGUF file), for the chapters that show text:

    chat           the model read once per process, its file's metadata and tensor types, chat
                   prompts, replies as text and the rows alive per step (chapters 5 and 6)

A measured figure said in words, true whatever the machine measured (chapters 5 and 6):

    padding        a padded prefill's time against the packed one's, against their token count
    shrinking_batch  a decode step's time as sequences leave the batch, against its FLOPs
    batching_wait  what waiting to fill a batch bought in tokens per second, against the fill
    prefix_sharing  the prefix every chat prompt shares, and the requests that found more cached

Formulas (pure arithmetic, pinned to published figures by the tests):

    memory         the bytes of a KV cache, and how many sequences fit beside the weights (chapter 3)
    roofline       arithmetic intensity, the roofline and time per token (chapter 4)

Measurements, each planned by a pure function of the machine's facts and bounded in memory and
time whatever the machine:

    machine_facts  what the machine running a chapter is: caches, free memory, usable cores
    decode_timing  one decode step with and without the cache, counted and timed (chapter 2)
    bandwidth      memory bandwidth and the decode step's reads (chapter 4)
    engine_timing  the engine timed for chapters 5 and 7, from a calibration of the machine
    kernel_timing  ``kvcache.kernel`` timed: the early exit and split-K (chapter 8)
    precision      float32, bfloat16, float16 and int8 on the real model: bits, bytes, error
                   (KL divergence, top-1 agreement, perplexity) and decode time (chapter 4)

The accelerator GA-2 (Part IV):

    circuit_check  GA-2's attention programs run on the Verilog circuit (when Icarus Verilog is
                   installed) and on its model, their counters and memories compared (chapter 10)

Making the cache smaller (Part V), on the real model:

    reference_text  the fixed English text every chapter of the part measures on (three sections
                   of the Python Language Reference, PSF license), its source and license
    harness        a smaller cache judged against the full float32 cache on that text: mean KL,
                   top-1 agreement, perplexity, and the bytes per token it keeps
    model_cards    the cache per token of published models, from their configurations (chapter 12)
    latent_attention  multi-head latent attention in float64 numpy: naive and absorbed steps,
                   their costs, RoPE against absorption, the decoupled RoPE key (chapter 12)
    head_conversion   a trained model's key/value heads pooled, or its key/value projections
                   truncated by SVD to a latent cache, without retraining (chapter 12)
    kv_quantization  chapter 13: where a real model's key outliers are, and quantized caches (keys per
                   token or per channel, before or after RoPE, a full-precision window and sink)
                   judged on it, decoding as the cache would, several caches to a pass
    quantized_timing  chapter 13: a decode step's attention in every layer with a float32, int4 or
                   int2 cache, and the unpacking alone
    fewer_tokens   which positions a query sees: window and sink masks over a real model's pass,
                   the attention on the first positions, the evicting caches' logits (chapter 14)
    shared_prefix  every eviction policy at a budget from one full pass and the rows past the
                   budget: masks, H2O and TOVA replayed exactly, SnapKV's one-time choice (chapter 14)
    speculative_sampling  the acceptance rule of speculative sampling (keep x ~ q with probability
                   min(1, p/q), else draw from max(0, p - q)) and its first token's frequencies
                   over many draws (chapter 15)
    fewer_steps    speculative decoding measured beside the engine: passes of 1 to 16 tokens timed
                   over one cache, prompt-lookup raced against plain greedy, the rollback (chapter 15)

Nothing is imported here: a chapter imports ``lessons.machine_facts`` before numpy is loaded.
"""
