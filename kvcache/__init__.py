"""kvcache: a Llama-architecture model in numpy and the KV cache a serving engine keeps for it.

The engine and only the engine: what a user of it imports to load a model, run it on a batch
and generate.  It imports nothing of the book (the chapters' helpers, figures, page controls or
notebook machinery): the chapters' measurements and reference implementations are ``lessons``,
their figures and controls the book's own helper package.

Modules, one concept each:

    config        ``ModelConfig``: the numbers of a Llama model, read from a ``config.json``
    checkpoint    reading a ``save_pretrained`` folder: its config and safetensors weights
    gguf_file     reading a llama.cpp GGUF file: its config from the metadata, its tensors dequantized
    models        the models installed with the course, by name (``smollm2-135m-instruct``)
    tokenizer     the byte-level BPE tokenizer and chat template of a GGUF file or a folder
    model         ``Model`` (``from_hf``, ``load``, ``random``): prefill, decode, ``logits``
    linear        the one matrix product of every projection, y = x W^T
    half          float16 and bfloat16: 2-byte storage, exact widening, the product over 2-byte weights
    norm          RMSNorm and the SwiGLU feed-forward block
    rope          rotary position embeddings
    gqa           grouped-query attention: a chunk of new tokens, and one decode step over a batch
    validate      the checks at the engine's boundary: token ids, counts, EOS ids, indices
    plan          ``StepPlan``: what one forward step writes and reads, decided once per step
    cache         the contiguous KV cache of a batch, one object per layer behind one interface
    layouts       the cache layouts by name (``cache="contiguous"``, ``"paged"``, ``"window"``, ``"h2o"``) and ``new_cache``
    cache_dtypes  how a cache row is stored: float64, float32, float16, bfloat16, int8 with a scale,
                  int4 and int2 (keys per channel, values per token)
    quantized     b-bit asymmetric quantization (an offset and a scale per slice) and packed codes
    quantized_cache   the contiguous cache in int4 or int2: groups of tokens, a full-precision window
    quantized_blocks  the paged cache in int4 or int2: a block quantized when it fills
    paged         the paged cache: ``BlockAllocator``, block tables, copy-on-write (``cache="paged"``)
    evicting      a cache that keeps fewer tokens than it has seen: slots and the position each holds
    window        a sliding window with attention sinks, as a ring buffer (``cache="window"``)
    h2o           heavy hitters and recent tokens, evicting by attention (``cache="h2o"``)
    prefix        prefix sharing: full blocks named by their tokens and reused
    serving       ``Scheduler`` and ``serve``: requests admitted, run as one batch, finished, preempted
    generate      ``greedy`` and ``beam_search``, as transformers defines them
    speculative   prompt-lookup decoding: drafts verified in one pass, the cache rolled back, greedy's tokens
    kernel        one attention kernel over a fixed buffer (``blocked_decode`` and its companions)
    cost          the FLOPs of a decode step, with the cache and without
    blas          the BLAS numpy calls: which one, how many threads, asking it for fewer
    __main__      ``python -m kvcache generate``

Nothing is imported here: a chapter imports ``kvcache.blas`` to limit the BLAS threads before
numpy is loaded, and ``python -m kvcache`` must not load a second copy of its own module.
"""
