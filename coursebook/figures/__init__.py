"""coursebook.figures: the chapters' diagrams of the engine, drawn with matplotlib from the
engine's own numbers (the chapter passes the data and says what it shows).

    engine   a batch's cache rows, padding, the tree of a beam search (chapters 5 and 7)
    paged    a paged cache's pool, block tables, free queue and counts, step by step (chapter 6)
    ga2      the cycles of a decode step on GA-2, unit by unit, as stacked bars (chapter 10)
    outliers  the magnitude of every key and value channel of a real model, per layer (chapter 13)
    quantized_grid  quantized caches' mean KL and added perplexity against their bytes a token (chapter 13)
    fewer_tokens  the attention SmolLM2's heads give position 0, perplexity against a cache's budget (chapter 14)

Like the rest of ``coursebook``, importing these modules imports neither numpy nor matplotlib:
each drawing function imports matplotlib when it draws.
"""
