"""Figures of the published chapter that first ran this decode step on GA-2, copied from its text.

These constants are the independent source the ga2 tests pin the model against: they were
transcribed from that chapter's printed outputs, never produced by this project's code.  The
machine they follow from is ``ga2/SPEC.md``.
"""

# "Below is the cached program for the third token, as assembled" (ch08_run.py, section 1).
PUBLISHED_LISTING_L3 = """\
0 LD dst=0 src=32 len=16
1 LD dst=512 src=512 len=768
2 LD dst=1792 src=2048 len=32
3 LD dst=2304 src=2560 len=32
4 MM dst=2816 A=0 B=512 M=1 K=16 N=4 tb=0 lda=16 ldb=16 ldc=4
5 MM dst=2820 A=0 B=516 M=1 K=16 N=4 tb=0 lda=16 ldb=16 ldc=4
6 MM dst=2824 A=0 B=520 M=1 K=16 N=4 tb=0 lda=16 ldb=16 ldc=4
7 MM dst=2828 A=0 B=524 M=1 K=16 N=4 tb=0 lda=16 ldb=16 ldc=4
8 MM dst=3008 A=0 B=768 M=1 K=16 N=4 tb=0 lda=16 ldb=16 ldc=4
9 MM dst=3012 A=0 B=772 M=1 K=16 N=4 tb=0 lda=16 ldb=16 ldc=4
10 MM dst=3016 A=0 B=776 M=1 K=16 N=4 tb=0 lda=16 ldb=16 ldc=4
11 MM dst=3020 A=0 B=780 M=1 K=16 N=4 tb=0 lda=16 ldb=16 ldc=4
12 MM dst=3024 A=0 B=1024 M=1 K=16 N=4 tb=0 lda=16 ldb=16 ldc=4
13 MM dst=3028 A=0 B=1028 M=1 K=16 N=4 tb=0 lda=16 ldb=16 ldc=4
14 MM dst=3032 A=0 B=1032 M=1 K=16 N=4 tb=0 lda=16 ldb=16 ldc=4
15 MM dst=3036 A=0 B=1036 M=1 K=16 N=4 tb=0 lda=16 ldb=16 ldc=4
16 RQ dst=2832 src=2816 len=16 m=14805262 s=31 relu=0
17 RQ dst=1824 src=3008 len=16 m=14169786 s=31 relu=0
18 RQ dst=2336 src=3024 len=16 m=10052026 s=31 relu=0
19 ST src=1824 dst=2080 len=16
20 ST src=2336 dst=2592 len=16
21 MM dst=2848 A=2832 B=1792 M=1 K=16 N=3 tb=1 lda=16 ldb=16 ldc=4
22 RQ dst=2880 src=2848 len=3 m=8883301 s=33 relu=0
23 SM dst=2912 src=2880 len=3
24 RQ dst=2944 src=2912 len=3 m=16646144 s=33 relu=0
25 MM dst=2976 A=2944 B=2304 M=1 K=3 N=4 tb=0 lda=3 ldb=16 ldc=4
26 MM dst=2980 A=2944 B=2308 M=1 K=3 N=4 tb=0 lda=3 ldb=16 ldc=4
27 MM dst=2984 A=2944 B=2312 M=1 K=3 N=4 tb=0 lda=3 ldb=16 ldc=4
28 MM dst=2988 A=2944 B=2316 M=1 K=3 N=4 tb=0 lda=3 ldb=16 ldc=4
29 RQ dst=2992 src=2976 len=16 m=8670777 s=29 relu=0
30 ST src=2992 dst=3072 len=16
31 HALT
"""

PUBLISHED_INSTRUCTIONS_L3 = {"cached": 32, "recompute": 28}

# "what the KV cache saves" (section 3): L, program -> (instr, total, matrix, DMA, vector).
PUBLISHED_CYCLE_TABLE = {
    (2, "cached"): (31, 2601, 1498, 906, 133),
    (2, "recompute"): (27, 2723, 1666, 836, 165),
    (4, "cached"): (31, 2759, 1582, 970, 143),
    (4, "recompute"): (27, 3249, 2086, 868, 239),
    (8, "cached"): (32, 3115, 1788, 1098, 163),
    (8, "recompute"): (36, 5069, 3676, 932, 387),
    (16, "cached"): (34, 3827, 2200, 1354, 203),
    (16, "recompute"): (54, 8709, 6856, 1060, 683),
    (32, "cached"): (38, 5251, 3024, 1866, 283),
    (32, "recompute"): (90, 15989, 13216, 1316, 1275),
}
PUBLISHED_SPEEDUP = {2: 1.05, 4: 1.18, 8: 1.63, 16: 2.28, 32: 3.04}

# "where the cycles go in one cached step at L = 32" (section 4): op -> (instructions, cycles).
PUBLISHED_BREAKDOWN_L32 = {"MM": (24, 3072), "LD": (4, 1820), "RQ": (6, 152), "SM": (1, 145), "ST": (3, 60)}
PUBLISHED_BREAKDOWN_PERCENT = {"MM": 58.5, "LD": 34.7, "RQ": 2.9, "SM": 2.8, "ST": 1.1}
PUBLISHED_BREAKDOWN_TOTAL = 5249  # HALT's 2 cycles are not in it

# Running example B: t -> (cached, recompute, ratio), and the 32-token totals.
PUBLISHED_EXAMPLE_B = {
    1: (2500, 2460, 0.98), 2: (2601, 2723, 1.05), 3: (2680, 2986, 1.11), 4: (2759, 3249, 1.18),
    6: (2957, 4543, 1.54), 8: (3115, 5069, 1.63), 12: (3471, 6889, 1.98), 16: (3827, 8709, 2.28),
    24: (4539, 12349, 2.72), 32: (5251, 15989, 3.04),
}
PUBLISHED_TOTAL_CACHED_32 = 124_346
PUBLISHED_TOTAL_RECOMPUTE_32 = 295_184
PUBLISHED_TOTAL_RATIO_32 = 2.37
PUBLISHED_GROWTH_PER_TOKEN = {"cached": 89, "recompute": 436}

# Running example A: the integer softmax of the scores x 16.
PUBLISHED_SOFTMAX_IN = [11, 6, 17, -11]
PUBLISHED_SOFTMAX_OUT = [19054, 13940, 27724, 4818]
PUBLISHED_WEIGHTS_INT8 = [37, 27, 54, 9]

# The weights' requantizer (ga2/SPEC.md).
PUBLISHED_WEIGHTS_RQ = (16646144, 33)

# The accuracy study: stage -> (mean %, worst %), L = 16, 60 examples (seeds 5000 + i).
PUBLISHED_STAGE_ERRORS = [
    ("all floating point", 0.00, 0.00),
    ("+ int8 inputs and weights", 1.69, 4.87),
    ("+ int8 q, k, v", 1.96, 5.74),
    ("+ scores rounded to 1/16 (Q4.4)", 2.43, 6.52),
    ("+ integer softmax (table, divider)", 2.43, 6.52),
    ("+ int8 attention weights", 3.50, 8.25),
    ("+ int8 output", 3.47, 8.52),
]
# ... and by context length: L -> (mean %, worst %), 30 examples each (seeds 9000 + 100 L + i).
PUBLISHED_LENGTH_ERRORS = {1: (1.02, 1.98), 2: (1.68, 3.81), 4: (2.36, 7.24), 8: (2.63, 5.22), 16: (3.30, 6.30),
                      24: (4.68, 11.39), 32: (4.59, 8.04)}

# The mutation table: label -> caught by (b) accuracy, (c) exact, (d) stage-wise.
PUBLISHED_MUTATION_TABLE = {
    "scores: the 1/sqrt(d) factor is left out": (True, False, True),
    "scores: the factor 16 (Q4.4 input of the softmax) is left out": (True, False, True),
    "weights: the factor 127 is left out": (True, False, True),
    "output: the scale leaves out the 127": (True, False, True),
    "output: uses the key scale instead of the value scale": (True, False, True),
    "q projection is requantized with the key weights' scale": (True, False, True),
    "q requantization scale is 3% too large": (False, False, True),
    "output requantization scale is 2% too large": (False, False, True),
    "keys are read without the transpose": (True, True, True),
    "values are read transposed": (True, True, True),
    "the value matrix stride is 4 instead of d": (True, True, True),
    "score tiles step through the keys by 4 words, not 4 rows": (True, True, True),
    "the new key is written one row past the cache end": (True, True, True),
    "the new key is never appended to the cache": (True, True, True),
    "the new value is appended to the key cache": (True, True, True),
    "the key cache load is one row short": (True, True, True),
    "the new token's hidden state is read from row 0": (True, True, True),
    "the softmax covers one position too few": (True, True, True),
    "the weights are requantized with the scores' parameters": (True, True, True),
    "the q projection uses the K weights": (True, True, True),
    "recompute: V is projected with the K weights": (True, True, True),
    "the output requantization covers 8 of 16 values": (True, True, True),
    "the output is stored from the int32 accumulators": (True, True, False),
}
PUBLISHED_MUTATION_TOTALS = {"b": 21, "c": 15, "d": 22, "any": 23, "of": 23}
PUBLISHED_EQUIVALENT = [
    "EQUIVALENT: the last score tile always computes 4 positions (extra scores are never read)",
    "EQUIVALENT: the last projection block always computes 4 rows (extra rows are never read)",
]
