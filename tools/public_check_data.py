"""Write the expected values of the public checks: ``public_checks/data/NAME.json``.

    .venv/bin/python tools/public_check_data.py          # rewrite the data files
    .venv/bin/python tools/public_check_data.py --check  # exit 1 when a file is out of date

The public checks a learner runs compare an answer with values stored in those files, so that
the learner's copy of the course ships no implementation of a function an exercise grades.  The
values are computed here, outside the learner's copy, by references written for this script
alone: plain loops over Python floats and exact fractions, sharing no code with the engine
(``kvcache``), the worked solutions (``solutions/``) or the grader's hidden tests.  The same
script stores, for the common mistakes a check recognises (scores not divided by sqrt(d), a
missing causal mask, a forgotten factor 2...), what such a mistaken answer returns, so a check
can name the mistake without computing it.

The inputs are drawn here with fixed seeds and stored beside their expected values.
``tests/tools/test_public_check_data.py`` regenerates every file in memory and compares: the files
are up to date, and the references agree with the engine on every stored case.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "public_checks" / "data"
FORMAT = 1

# ---------------------------------------------------------------- references (this script's own)


def ref_softmax_row(scores) -> list[float]:
    """exp(s_j - m) / sum_i exp(s_i - m) over Python floats, with an exactly rounded sum."""
    scores = [float(s) for s in scores]
    m = max(scores)
    e = [math.exp(s - m) for s in scores]
    total = math.fsum(e)
    return [x / total for x in e]


def ref_softmax(scores) -> list:
    """Softmax of a vector, or of each row of a table."""
    if scores and isinstance(scores[0], (list, tuple)):
        return [ref_softmax_row(row) for row in scores]
    return ref_softmax_row(scores)


def _dot(a, b) -> float:
    return math.fsum(float(x) * float(y) for x, y in zip(a, b))


def ref_causal(Q, K, V, *, scale=True, mask=True) -> list[list[float]]:
    """Row i: the softmax of q_i . k_j (over sqrt(d) unless ``scale`` is false) for j <= i
    (for every j when ``mask`` is false), times the values."""
    d = len(Q[0])
    rows = []
    for i, q in enumerate(Q):
        last = i + 1 if mask else len(K)
        s = [_dot(q, K[j]) / (math.sqrt(d) if scale else 1.0) for j in range(last)]
        w = ref_softmax_row(s)
        rows.append([math.fsum(w[j] * float(V[j][c]) for j in range(last)) for c in range(len(V[0]))])
    return rows


def _project(X, W) -> list[list[float]]:
    return [[_dot(x, [row[c] for row in W]) for c in range(len(W[0]))] for x in X]


def ref_decode_rows(X, p, *, scale=True) -> list[list[float]]:
    """What decoding the tokens X one by one from an empty cache returns: row t of causal
    attention over the projected tokens."""
    return ref_causal(_project(X, p["Wq"]), _project(X, p["Wk"]), _project(X, p["Wv"]), scale=scale)


def ref_buffer_attention(q, K_rows, V_rows, *, scale=True) -> list[float]:
    """One query over the given key and value rows (the sequence's, never a buffer's tail):
    the softmax of q . k_j (over sqrt(d) unless ``scale`` is false), times the values."""
    d = len(q)
    s = [_dot(q, k) / (math.sqrt(d) if scale else 1.0) for k in K_rows]
    w = ref_softmax_row(s)
    return [math.fsum(w[j] * float(V_rows[j][c]) for j in range(len(V_rows))) for c in range(len(V_rows[0]))]


def ref_blocks(seq_len, block) -> int:
    """Blocks of ``block`` rows that cover ``seq_len`` rows, in integers."""
    return (seq_len + block - 1) // block


def ref_kv_cache_bytes(L, G, d, T, b) -> int:
    return 2 * L * G * d * T * b


def ref_max_batch(gpu, weights, L, G, d, T, b, *, spare_in_gib=False, one_factor=False) -> int:
    """Whole sequences in what the weights leave.  ``spare_in_gib``: the spare bytes read as GB
    and converted to GiB (10 GB taken for 10 GiB); ``one_factor``: the factor 2 forgotten."""
    spare = gpu - weights
    if spare <= 0:
        return 0
    if spare_in_gib:
        spare = int(Fraction(spare, 10**9) * 2**30)
    per_sequence = (1 if one_factor else 2) * L * G * d * T * b
    return spare // per_sequence


def ref_arithmetic_intensity(n, d, b, *, softmax=True, bytes_per_value=True) -> float:
    """Operations over bytes moved by the three lines S = QK^T, P = softmax(S), O = PV, each
    loading its inputs and storing its result; the keywords leave out what a mistake leaves out."""
    unit = b if bytes_per_value else 1
    lines = [  # (numbers loaded, operations, numbers stored)
        (2 * n * d, n * n * 2 * d, n * n),
        (n * n, 3 * n * n if softmax else 0, n * n),
        (n * n + n * d, n * d * 2 * n, n * d),
    ]
    ops = sum(op for _, op, _ in lines)
    moved = sum(load + store for load, _, store in lines) * unit
    return float(Fraction(ops, moved))


def ref_time_per_token(n_params, bytes_per_param, bandwidth) -> float:
    return float(Fraction(n_params) * Fraction(bytes_per_param) / Fraction(bandwidth))


def ref_prefill_time(n_tokens, n_params, flops) -> float:
    return float(Fraction(n_tokens) * 2 * Fraction(n_params) / Fraction(flops))


def ref_batched_decode(q, K, V, lengths, *, kv_head=None, scale=True, all_positions=False) -> list:
    """out[b][h]: sequence b's query head h over the first lengths[b] positions of its key/value
    head h // (H / G) (``kv_head(h, H, G)`` for a mistake), scores over sqrt(d) unless ``scale`` is
    false, every position when ``all_positions``."""
    B, H, d = len(q), len(q[0]), len(q[0][0])
    G, L = len(K[0]), len(K[0][0])
    pick = kv_head or (lambda h, H, G: h // (H // G))
    out = []
    for b in range(B):
        n = L if all_positions else int(lengths[b])
        rows = []
        for h in range(H):
            g = pick(h, H, G)
            s = [_dot(q[b][h], K[b][g][j]) / (math.sqrt(d) if scale else 1.0) for j in range(n)]
            w = ref_softmax_row(s)
            rows.append([math.fsum(w[j] * float(V[b][g][j][c]) for j in range(n)) for c in range(d)])
        out.append(rows)
    return out


def ref_reorder(cache, beam_idx) -> list:
    """new[layer][name][i] = old[layer][name][beam_idx[i]], as nested lists."""
    return [{name: [layer[name][int(i)] for i in beam_idx] for name in ("k", "v")} for layer in cache]


# ---------------------------------------------------------------- the stored cases


def _normal(rng, shape) -> list:
    return rng.normal(size=shape).tolist()


def softmax_data() -> dict:
    ln3 = math.log(3.0)
    table = [[0.0, ln3], [ln3, 0.0], [5.0, 5.0]]
    return {
        "hand_values": [
            {"what": "softmax([0, ln 3])", "scores": [0.0, ln3], "expected": ref_softmax([0.0, ln3])},
            {"what": "softmax([1, 2, 3])", "scores": [1.0, 2.0, 3.0], "expected": ref_softmax([1.0, 2.0, 3.0])},
        ],
        "table": {"scores": table, "expected": ref_softmax(table)},
        "huge": {"scores": [1e4, 1e4 - 1], "expected": ref_softmax([1e4, 1e4 - 1])},
        "very_negative": {"scores": [-1e4, -1e4 - 1], "expected": ref_softmax([-1e4, -1e4 - 1])},
    }


def _attention_case(Q, K, V) -> dict:
    return {"Q": Q, "K": K, "V": V, "expected": ref_causal(Q, K, V),
            "mistakes": {"no_scale": ref_causal(Q, K, V, scale=False),
                         "no_mask": ref_causal(Q, K, V, mask=False)}}


def causal_attention_data() -> dict:
    rng = np.random.default_rng(1)
    shape_case = {"Q": _normal(rng, (4, 2)), "K": _normal(rng, (4, 2)), "V": _normal(rng, (4, 3))}
    rng = np.random.default_rng(2)
    first_row = {name: _normal(rng, (3, 2)) for name in "QKV"}
    X = [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]
    rng = np.random.default_rng(3)
    leak = {name: _normal(rng, (5, 3)) for name in "QKV"}
    rng = np.random.default_rng(4)
    random = {name: _normal(rng, (6, 4)) for name in "QKV"}
    return {
        "shape": shape_case,
        "first_row": first_row,
        "three_tokens": _attention_case(X, X, [[1.0, 0.0], [0.0, 2.0], [1.0, 2.0]]),
        "future": leak,
        "random": _attention_case(random["Q"], random["K"], random["V"]),
        # scores of about 10^4 (queries and keys of length about 100): exp overflows unless the
        # largest score is subtracted first
        "large_scores": _attention_case([[100.0, 0.0], [90.0, 10.0], [100.0, 20.0]],
                                        [[100.0, 0.0], [90.0, 10.0], [100.0, 20.0]],
                                        [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]),
    }


def _weights(rng, D, d) -> dict:
    return {name: _normal(rng, (D, d)) for name in ("Wq", "Wk", "Wv")}


def _decode_case(X, p) -> dict:
    return {"X": X, "p": p, "expected": ref_decode_rows(X, p),
            "mistakes": {"no_scale": ref_decode_rows(X, p, scale=False)}}


def attend_step_data() -> dict:
    rng = np.random.default_rng(1)
    shapes = {"p": _weights(rng, 3, 2), "x": _normal(rng, 3)}
    rng = np.random.default_rng(2)
    p, x = _weights(rng, 4, 3), _normal(rng, 4)
    own_value = {"p": p, "x": x, "expected": ref_decode_rows([x], p)[0]}
    three = _decode_case([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]],
                         {"Wq": [[1.0, 0.0], [0.0, 1.0]], "Wk": [[1.0, 0.0], [0.0, 1.0]],
                          "Wv": [[1.0, 0.0], [0.0, 2.0]]})
    # the cache's rows, oldest first, and in the order an answer that puts the new row first keeps
    keys, values = _project(three["X"], three["p"]["Wk"]), _project(three["X"], three["p"]["Wv"])
    three["cache"] = {"k": keys, "v": values}
    three["cache_new_row_first"] = {"k": keys[::-1], "v": values[::-1]}
    # scores of about 10^4: exp overflows unless the maximum is subtracted first
    big = 100.0
    large = _decode_case([[1.0, 0.0], [0.9, 0.1], [1.0, 0.2]],
                         {"Wq": [[big, 0.0], [0.0, big]], "Wk": [[big, 0.0], [0.0, big]],
                          "Wv": [[1.0, 0.0], [0.0, 1.0]]})
    rng = np.random.default_rng(5)
    p = _weights(rng, 4, 3)
    random = _decode_case(_normal(rng, (5, 4)), p)
    return {"first_step_shapes": shapes, "own_value": own_value, "three_tokens": three, "random": random,
            "large_scores": large}


def _buffer_case(rng, max_seq_len, d, seq_len, block, *, tail, d_v=None, scale=1.0) -> dict:
    """A buffer of ``max_seq_len`` rows of which the first ``seq_len`` are stored; the check
    fills the rest as ``tail`` says ("nan", "zero", or "rows": the stored K_tail and V_tail)."""
    d_v = d if d_v is None else d_v
    q = (rng.normal(size=d) * scale).tolist()
    K = (rng.normal(size=(seq_len, d)) * scale).tolist()
    V = rng.normal(size=(seq_len, d_v)).tolist()
    case = {"q": q, "K_rows": K, "V_rows": V, "max_seq_len": max_seq_len, "seq_len": seq_len,
            "block": block, "tail": tail, "expected": ref_buffer_attention(q, K, V),
            "visited": ref_blocks(seq_len, block), "mistakes": {"no_scale": ref_buffer_attention(q, K, V, scale=False)}}
    if tail == "rows":
        case["K_tail"] = (rng.normal(size=(max_seq_len - seq_len, d)) * 30.0).tolist()
        case["V_tail"] = (rng.normal(size=(max_seq_len - seq_len, d_v)) + 50.0).tolist()
        case["mistakes"]["no_length_mask"] = ref_buffer_attention(q, K + case["K_tail"], V + case["V_tail"])
    return case


def blocked_decode_data() -> dict:
    rng = np.random.default_rng(8)
    note = _buffer_case(rng, 4096, 8, 33, 32, tail="zero")
    one_row = _buffer_case(rng, 12, 3, 1, 4, tail="nan")
    nan_tail = _buffer_case(rng, 16, 4, 10, 4, tail="nan")
    counts = [{"max_seq_len": n, "seq_len": t, "block": b, "visited": ref_blocks(t, b),
               "mistakes": {"floor": t // b, "plus_one": t // b + 1, "buffer": ref_blocks(n, b)}}
              for n, t, b in [(64, 15, 16), (64, 16, 16), (64, 17, 16), (64, 1, 64), (64, 64, 8), (20, 13, 100)]]
    garbage = _buffer_case(rng, 24, 4, 19, 8, tail="rows", scale=20.0)
    return {"note": note, "one_row": one_row, "nan_tail": nan_tail, "counts": counts, "garbage": garbage}


def _scalar_cases(reference, cases, **mistakes) -> list[dict]:
    out = []
    for what, args in cases:
        case = {"what": what, "args": list(args), "expected": reference(*args)}
        if mistakes:
            case["mistakes"] = {name: fn(*args) for name, fn in mistakes.items()}
        out.append(case)
    return out


def kv_cache_bytes_data() -> dict:
    return {"cases": _scalar_cases(ref_kv_cache_bytes, [
        ("one token of a 7B-class model in fp16", (32, 32, 128, 1, 2)),
        ("the example of the chapter (4 GiB)", (32, 32, 128, 8192, 2)),
        ("70B-class model, 8 KV heads, 2,048 tokens, fp16", (80, 8, 128, 2048, 2)),
        ("a value beyond 2**31 must be exact", (80, 64, 128, 131072, 4)),
        ("an empty cache (0 tokens)", (32, 32, 128, 0, 2)),
    ])}


GB, GIB = 10**9, 2**30


def max_batch_data() -> dict:
    seven_b = (32, 32, 128)
    return {"cases": _scalar_cases(
        ref_max_batch,
        [("A10 (24 GB), 7B weights (14 GB), 4,096-token fp16 sequences", (24 * GB, 14 * GB, *seven_b, 4096, 2)),
         ("10 GiB left: exactly 5 sequences of 2 GiB", (24 * GIB, 14 * GIB, *seven_b, 4096, 2)),
         ("one byte less than 5 sequences", (24 * GIB - 1, 14 * GIB, *seven_b, 4096, 2)),
         ("a 70B model in fp16 (140 GB) on an 80 GB GPU", (80 * GB, 140 * GB, 80, 8, 128, 4096, 2)),
         ("the weights exactly fill the GPU", (16 * GB, 16 * GB, *seven_b, 4096, 2)),
         ("16 GiB of caches, 640 MiB per sequence", (16 * GIB, 0, 80, 8, 128, 2048, 2))],
        spare_in_gib=lambda *a: ref_max_batch(*a, spare_in_gib=True),
        one_factor=lambda *a: ref_max_batch(*a, one_factor=True))}


def arithmetic_intensity_data() -> dict:
    return {"cases": _scalar_cases(
        ref_arithmetic_intensity,
        [("Llama 2 7B's attention in fp16 (N = 4096, d = 128)", (4096, 128, 2)),
         ("N = 4, d = 2, fp16", (4, 2, 2)),
         ("N = 1, d = 1, one byte per number", (1, 1, 1)),
         ("the same attention in fp32 (4 bytes)", (4096, 128, 4))],
        numbers=lambda n, d, b: ref_arithmetic_intensity(n, d, b, bytes_per_value=False),
        bytes_twice=lambda n, d, b: ref_arithmetic_intensity(n, d, b) / b,
        no_softmax=lambda n, d, b: ref_arithmetic_intensity(n, d, b, softmax=False),
        # half the traffic: the loads or the stores of each line counted, not both
        half_traffic=lambda n, d, b: 2 * ref_arithmetic_intensity(n, d, b))}


def time_per_token_data() -> dict:
    return {"cases": _scalar_cases(ref_time_per_token, [
        ("7B in fp16 on an A10", (7e9, 2, 600e9)),
        ("7B in fp16 on a T4", (7e9, 2, 300e9)),
        ("7B in int8 on an A100", (7e9, 1, 2039e9)),
        ("1,000 parameters of 4 bytes at 2,000 bytes/s", (1000, 4, 2000)),
    ])}


def prefill_time_data() -> dict:
    return {"cases": _scalar_cases(ref_prefill_time, [
        ("350 tokens, 7B, A10", (350, 7e9, 125e12)),
        ("350 tokens, 7B, T4", (350, 7e9, 65e12)),
        ("350 tokens, 7B, A100", (350, 7e9, 312e12)),
        ("one token of a 1B model at 2 GFLOP/s", (1, 1e9, 2e9)),
        ("an empty prompt", (0, 7e9, 125e12)),
    ])}


# ---------------------------------------------------------------- GA-2: the requantizer and the attention tail


def ref_requant(acc, m, s, *, rounding="away", low=-127, exact=True) -> int:
    """sat(round(acc * m / 2^s)) as an exact fraction; the keywords give the common mistakes:
    ``rounding`` "even" (Python's round) or "up" (floor(x + 1/2)), ``low`` -128, ``exact=False``
    for a float64 product."""
    x = Fraction(acc * m, 2 ** s) if exact else Fraction(float(acc) * float(m) / 2.0 ** s)
    if rounding == "even":
        q = round(x)
    elif rounding == "up":
        q = math.floor(x + Fraction(1, 2))
    else:
        q = int(math.copysign(math.floor(abs(x) + Fraction(1, 2)), x))
    return max(low, min(127, q))


def requant_data() -> dict:
    cases = {"weights": [(p, 16646144, 33) for p in (19054, 13940, 27724, 4818, 65536)],
             "ties": [(5, 1 << 23, 24), (-5, 1 << 23, 24), (3, 1 << 23, 24), (-3, 1 << 23, 24)],
             "saturation": [(1000, 1 << 23, 23), (-1000, 1 << 23, 23), (-128, 1 << 23, 23)],
             # acc * m = (2q + 1) 2^47 - 1, one below a half and past 2^53: exactly it rounds to q,
             # in float64 the product rounds to the half and then away, to q + 1 (rule 1)
             "exact": [(815191603, 14674693, 48), (-899697233, 14860623, 48), (2140355085, 7035707, 48)]}
    out = {}
    for key, args in cases.items():
        out[key] = {"args": [list(a) for a in args], "expected": [ref_requant(*a) for a in args],
                    "mistakes": {"even": [ref_requant(*a, rounding="even") for a in args],
                                 "up": [ref_requant(*a, rounding="up") for a in args],
                                 "low128": [ref_requant(*a, low=-128) for a in args],
                                 "float64": [ref_requant(*a, exact=False) for a in args]}}
    acc = [-2 ** 31, 2 ** 31 - 1, 12000, -12000, 30000, -30000, 0, 255, -4242, 65000]
    m, s = 14805262, 34
    out["array"] = {"acc": acc, "m": m, "s": s, "expected": [ref_requant(a, m, s) for a in acc],
                    "mistakes": {"int32": [ref_requant(_wrap32(a * m), 1, s) for a in acc],
                                 "even": [ref_requant(a, m, s, rounding="even") for a in acc],
                                 "up": [ref_requant(a, m, s, rounding="up") for a in acc],
                                 "low128": [ref_requant(a, m, s, low=-128) for a in acc]}}
    return out


def _wrap32(p: int) -> int:
    """``p`` as an int32 product holds it: wrapped around modulo 2^32."""
    return (p + 2 ** 31) % 2 ** 32 - 2 ** 31


# The course's memory plan for the attention programs (words), and the step in integers.
GA2_EXT = {"X": 0, "WQ": 512, "WK": 768, "WV": 1024, "KC": 2048, "VC": 2560, "OUT": 3072}
GA2_SPAD = {"X": 0, "WQ": 512, "WK": 768, "WV": 1024, "KC": 1792, "VC": 2304, "Q": 2816, "Q8": 2832,
            "S": 2848, "S8": 2880, "P": 2912, "W": 2944, "O": 2976, "O8": 2992, "KN": 3008, "VN": 3024}


def _ga2_int8(v: float, scale: float) -> int:
    x = v / scale
    return max(-127, min(127, int(math.copysign(math.floor(abs(x) + 0.5), x))))


def _ga2_params(x: float) -> tuple[int, int]:
    """The requantizer's (m, s): 2^23 <= m < 2^24, m / 2^s nearest to x."""
    s = 23 - math.floor(math.log2(x))
    while Fraction(x) * 2 ** s >= 2 ** 24:
        s -= 1
    while Fraction(x) * 2 ** s < 2 ** 23:
        s += 1
    m = math.floor(Fraction(x) * 2 ** s + Fraction(1, 2))
    return (2 ** 23, s - 1) if m == 2 ** 24 else (m, s)


def _ga2_softmax(scores: list[int]) -> list[int]:
    e = [math.floor(65536 * math.exp(-(max(scores) - x) / 16)) for x in scores]
    return [(v * 65536 + sum(e) // 2) // sum(e) for v in e]


def _matmul(A, B):
    """A B of lists of floats, each sum exact (``math.fsum``)."""
    return [[math.fsum(a * B[k][j] for k, a in enumerate(row)) for j in range(len(B[0]))] for row in A]


def _peak(rows) -> float:
    """The scale that maps the largest magnitude in ``rows`` to 127."""
    return max(abs(v) for r in rows for v in r) / 127


def _mm_cycles(M: int, K: int, N: int) -> int:
    """An MM's cycles as the spec counts them: issue, then the wait."""
    return 2 + M * K + K * N + M * N + M + K + N + 5


def _float_step(X, W, L: int):
    """The step in floats: q (the newest token's query), K, V, and the output."""
    Q, K, V = _matmul(X, W[0]), _matmul(X, W[1]), _matmul(X, W[2])
    q = Q[-1]
    sc = [math.fsum(a * b for a, b in zip(q, k)) / 4.0 for k in K]
    e = [math.exp(v - max(sc)) for v in sc]
    out = [math.fsum(e[t] / math.fsum(e) * V[t][c] for t in range(L)) for c in range(16)]
    return q, K, V, out


def _requantizers(X, W, q, K, V, out) -> tuple[dict, float, tuple]:
    """The requantizer parameters of the step (calibrated on its float values), with the scales
    of X and of the three weight matrices."""
    sx, swq, swk, swv, sq, sk, sv, so = (_peak(X), _peak(W[0]), _peak(W[1]), _peak(W[2]), _peak([q]), _peak(K),
                                         _peak(V), _peak([out]))
    P = {"q": _ga2_params(sx * swq / sq), "k": _ga2_params(sx * swk / sk), "v": _ga2_params(sx * swv / sv),
         "scores": _ga2_params(sq * sk / 4.0 * 16), "weights": _ga2_params(127 / 65536),
         "out": _ga2_params(sv / (127 * so))}
    return P, sx, (swq, swk, swv)


def _int8_step(X, W, P: dict, sx: float, sw: tuple, L: int):
    """The step as GA-2 computes it: int8 inputs and weights, the keys, values and output."""
    x8 = [[_ga2_int8(v, sx) for v in r] for r in X]
    w8 = [[[_ga2_int8(v, s) for v in r] for r in Wm] for Wm, s in zip(W, sw)]

    def project(x, Wm, key):
        return [ref_requant(sum(a * Wm[i][j] for i, a in enumerate(x)), *P[key]) for j in range(16)]
    q8 = project(x8[-1], w8[0], "q")
    K8, V8 = [project(x, w8[1], "k") for x in x8], [project(x, w8[2], "v") for x in x8]
    s8 = [ref_requant(sum(a * b for a, b in zip(q8, k)), *P["scores"]) for k in K8]
    wts = [ref_requant(p, *P["weights"]) for p in _ga2_softmax(s8)]
    out8 = [ref_requant(sum(wts[t] * V8[t][c] for t in range(L)), *P["out"]) for c in range(16)]
    return x8, w8, K8, V8, out8


def _cached_head(L: int, P: dict) -> list[dict]:
    """The course's cached head: load the newest token, the weights and the cache; project;
    requantize q, the new key and value; store the key and value to the cache."""
    E, S, row = GA2_EXT, GA2_SPAD, (L - 1) * 16
    head = [{"op": "LD", "dst": S["X"], "src": E["X"] + row, "len": 16},
            {"op": "LD", "dst": S["WQ"], "src": E["WQ"], "len": 768}]
    if L > 1:
        head += [{"op": "LD", "dst": S["KC"], "src": E["KC"], "len": row},
                 {"op": "LD", "dst": S["VC"], "src": E["VC"], "len": row}]
    for w, acc in (("WQ", "Q"), ("WK", "KN"), ("WV", "VN")):
        head += [{"op": "MM", "dst": S[acc] + 4 * c, "A": S["X"], "B": S[w] + 4 * c, "M": 1, "K": 16, "N": 4,
                  "tb": 0, "lda": 16, "ldb": 16, "ldc": 4} for c in range(4)]
    for dst, src, key in ((S["Q8"], S["Q"], "q"), (S["KC"] + row, S["KN"], "k"), (S["VC"] + row, S["VN"], "v")):
        head.append({"op": "RQ", "dst": dst, "src": src, "len": 16, "m": P[key][0], "s": P[key][1], "relu": 0})
    head += [{"op": "ST", "src": S["KC"] + row, "dst": E["KC"] + row, "len": 16},
             {"op": "ST", "src": S["VC"] + row, "dst": E["VC"] + row, "len": 16}]
    return head


def _tail_cycles(L: int) -> int:
    """The cycles of the course's tail at length L."""
    tiles = [min(4, L - 4 * j) for j in range((L + 3) // 4)]
    return (sum(_mm_cycles(1, 16, n) for n in tiles)      # the scores, up to 4 positions a tile
            + 2 * (2 + L + 2) + (2 + 16 + 2)              # RQ of the scores, the weights, the output
            + 2 + 3 * L + 47                              # SM
            + 4 * _mm_cycles(1, L, 4)                     # weights times V, 4 columns a tile
            + 2 + 16 + 2)                                 # ST of the output


def attention_case(L: int, rng_number: int) -> dict:
    """One decode step of L tokens for the public checks: EXT before and after (as segments), the
    course's cached head, the requantizer parameters and the course's tail's cycles."""
    rng = np.random.default_rng(rng_number)
    X = rng.normal(size=(L, 16)).tolist()
    W = [rng.normal(scale=0.25, size=(16, 16)).tolist() for _ in range(3)]
    q, K, V, out = _float_step(X, W, L)
    P, sx, sw = _requantizers(X, W, q, K, V, out)
    x8, w8, K8, V8, out8 = _int8_step(X, W, P, sx, sw, L)
    before = {"0": [v for r in x8 for v in r], "512": [v for Wm in w8 for r in Wm for v in r],
              "2048": [v for r in K8[:-1] for v in r], "2560": [v for r in V8[:-1] for v in r]}
    after = {**before, "2048": [v for r in K8 for v in r], "2560": [v for r in V8 for v in r], "3072": out8}
    return {"L": L, "P": {k: list(v) for k, v in P.items()}, "ext_before": before, "ext_after": after,
            "head": _cached_head(L, P), "tail_cycles": _tail_cycles(L)}


def attention_tail_data() -> dict:
    return {"three": attention_case(3, 11), "one": attention_case(1, 12), "six": attention_case(6, 13),
            "eight": attention_case(8, 14)}


# mutants: the labels part 1 lists, and, for the three of them that come from chapter 11's table,
# what that table says catches them: the verdicts published with the mutation table of the
# course on the GA-2 accelerator (transcribed here, not computed: the engine is not asked).
MUTANTS_LABELS = [
    "scores: the 1/sqrt(d) factor is left out",
    "q requantization scale is 3% too large",
    "the output is stored from the int32 accumulators",
    "the scores are multiplied by sqrt(d) instead of divided",
    "the weights are requantized as if 1.0 were 128",
    "the score loop stops after 6 tiles (24 positions)",
    "the value scale is calibrated on the newest token only",
    "the output is stored one word short (15 of 16 values)",
    "the new value is requantized with the key's parameters",
]
MUTANTS_TABLE = {
    "scores: the 1/sqrt(d) factor is left out": ["b", "d"],
    "q requantization scale is 3% too large": ["d"],
    "the output is stored from the int32 accumulators": ["b", "c"],
}


def mutants_data() -> dict:
    """The listed labels, the chapter's verdicts for three of them, and the names of the public
    builders: chapter 11's two equivalent changes and three of its mutants."""
    return {
        "labels": MUTANTS_LABELS,
        "table": MUTANTS_TABLE,
        "equivalent": ["the last score tile always computes 4 positions (extra scores are never read)",
                       "the last projection block always computes 4 rows (extra rows are never read)"],
        "mutants": ["keys are read without the transpose", "the new key is never appended to the cache",
                    "scores: the 1/sqrt(d) factor is left out"],
    }


def _allocator_case(what: str, num_blocks: int, calls: list) -> dict:
    """A script of calls on BlockAllocator(num_blocks), each with what it must do, worked out by
    this script's own model: a list of reference counts over symbolic blocks (the step that
    handed each out), so the expectations hold whichever free block an allocator picks.

    ``calls``: ("allocate",), ("fork", k), ("free", k), ("refcount", k) with k the step that
    returned the block, ("free", None, n) / ("fork", None, n) for a literal block n, ("num_free",).
    """
    refs: dict[int, int] = {}                 # allocate step -> references
    steps = []
    for i, call in enumerate(calls):
        name = call[0]
        live = [k for k, n in refs.items() if n > 0]
        if name == "num_free":
            steps.append({"call": name, "args": None, "expect": {"returns": num_blocks - len(live)}})
            continue
        if name == "allocate":
            if len(live) == num_blocks:
                expect = {"raises": "OutOfBlocks"}
            else:
                expect = {"returns": "a free block", "not_any_of": live}
                refs[i] = 1
            steps.append({"call": name, "args": [], "expect": expect})
            continue
        k = call[1]
        args = [{"step": k}] if k is not None else [call[2]]
        count = refs.get(k, 0) if k is not None else 0
        if name == "refcount":
            expect = {"returns": count}
        elif k is None and not 0 <= call[2] < num_blocks:
            expect = {"raises": "ValueError", "why": f"block {call[2]} is not in the pool"}
        elif count == 0:
            expect = {"raises": "ValueError", "why": "the block is free"}
        elif name == "fork":
            expect = {"returns": "the same block", "as": k}
            refs[k] += 1
        else:
            expect = {"returns": None}
            refs[k] -= 1
        steps.append({"call": name, "args": args, "expect": expect})
    return {"what": what, "num_blocks": num_blocks, "steps": steps}


def block_allocator_data() -> dict:
    a = ("allocate",)
    return {"cases": [
        _allocator_case("a new allocator of 4 blocks", 4,
                        [("num_free",), ("refcount", None, 0), ("refcount", None, 3)]),
        _allocator_case("4 blocks handed out, then one more asked for", 4,
                        [a, a, a, a, ("num_free",), a, ("num_free",)]),
        _allocator_case("fork and free: reference counts", 3,
                        [a, ("fork", 0), ("refcount", 0), ("num_free",), ("free", 0), ("refcount", 0),
                         ("num_free",), ("free", 0), ("num_free",), ("refcount", 0)]),
        _allocator_case("a double free", 2, [a, ("free", 0), ("free", 0), ("num_free",)]),
        _allocator_case("a freed block comes back", 2,
                        [a, a, ("free", 0), a, a, ("free", 1), ("free", 3), ("num_free",)]),
        _allocator_case("a fork of a free block", 2,
                        [a, ("free", 0), ("fork", 0), ("num_free",), ("fork", None, 1), ("num_free",), a, a,
                         ("num_free",)]),
    ]}


def _batched_case(q, K, V, lengths, mistakes=True) -> dict:
    case = {"q": q, "K": K, "V": V, "lengths": lengths, "expected": ref_batched_decode(q, K, V, lengths)}
    if mistakes:
        case["mistakes"] = {
            "all_positions": ref_batched_decode(q, K, V, lengths, all_positions=True),
            "h_mod_G": ref_batched_decode(q, K, V, lengths, kv_head=lambda h, H, G: h % G),
            "no_scale": ref_batched_decode(q, K, V, lengths, scale=False)}
    return case


def batched_decode_step_data() -> dict:
    rng = np.random.default_rng(51)
    shapes = {"q": _normal(rng, (2, 4, 3)), "K": _normal(rng, (2, 2, 5, 3)), "V": _normal(rng, (2, 2, 5, 3)),
              "lengths": [3, 5]}
    # one key/value head shared by two query heads; sequence 0 holds one position, sequence 1 three
    by_hand = _batched_case(
        q=[[[1.0, 0.0], [0.0, 1.0]], [[1.0, 1.0], [0.0, 2.0]]],
        K=[[[[1.0, 0.0], [0.0, 0.0], [0.0, 0.0]]], [[[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]]],
        V=[[[[1.0, 2.0], [0.0, 0.0], [0.0, 0.0]]], [[[1.0, 0.0], [0.0, 2.0], [1.0, 2.0]]]],
        lengths=[1, 3])
    rng = np.random.default_rng(52)
    grouped = _batched_case(_normal(rng, (3, 6, 4)), _normal(rng, (3, 2, 7, 4)), _normal(rng, (3, 2, 7, 4)),
                            [2, 7, 4])
    # scores of about 10^4: the by-hand case with queries and keys 100 times longer
    large = _batched_case(q=[[[100.0 * x for x in head] for head in seq] for seq in by_hand["q"]],
                          K=[[[[100.0 * x for x in row] for row in g] for g in seq] for seq in by_hand["K"]],
                          V=by_hand["V"], lengths=[1, 3])
    return {"shapes": shapes, "by_hand": by_hand, "grouped": grouped, "large_scores": large}


def _integer_cache(rng, n_layers, B, G, T, d) -> list:
    """Small whole numbers, so that a printed row says which old row it came from."""
    return [{name: rng.integers(-9, 10, size=(B, G, T, d)).astype(float).tolist() for name in ("k", "v")}
            for _ in range(n_layers)]


def reorder_cache_data() -> dict:
    rng = np.random.default_rng(71)
    small = _integer_cache(rng, 2, 3, 1, 2, 2)
    rng = np.random.default_rng(72)
    perm = _integer_cache(rng, 2, 4, 2, 3, 2)
    perm_idx = [1, 3, 0, 2]
    inverse = [perm_idx.index(i) for i in range(len(perm_idx))]
    rng = np.random.default_rng(73)
    one = _integer_cache(rng, 3, 1, 2, 4, 2)
    return {
        "repeats": {"cache": small, "beam_idx": [2, 0, 0], "expected": ref_reorder(small, [2, 0, 0])},
        "permutation": {"cache": perm, "beam_idx": perm_idx, "expected": ref_reorder(perm, perm_idx),
                        "mistakes": {"inverse": ref_reorder(perm, inverse)}},
        "expand": {"cache": one, "beam_idx": [0, 0, 0, 0], "expected": ref_reorder(one, [0, 0, 0, 0])},
    }


def ref_latent_rows(X, p, n_heads, *, scale=None) -> list[list[float]]:
    """Decoding X token by token with a cache of latents c = x Wdkv: row t is full causal
    attention of every head h over the keys c_j Wuk[:, h] and values c_j Wuv[:, h] of tokens
    0 .. t, heads side by side (``scale`` replaces sqrt(d), for the common mistakes)."""
    Hd = len(p["Wq"][0])
    d = Hd // n_heads
    C = _project(X, p["Wdkv"])
    Q, K, V = _project(X, p["Wq"]), _project(C, p["Wuk"]), _project(C, p["Wuv"])
    rows = []
    for t in range(len(X)):
        row = []
        for h in range(n_heads):
            cols = range(h * d, (h + 1) * d)
            s = [_dot([Q[t][c] for c in cols], [K[j][c] for c in cols]) / (math.sqrt(d) if scale is None else scale)
                 for j in range(t + 1)]
            w = ref_softmax_row(s)
            row += [math.fsum(w[j] * V[j][c] for j in range(t + 1)) for c in cols]
        rows.append(row)
    return rows


def _latent_weights(rng, D, H, d, r) -> dict:
    return {"Wq": _normal(rng, (D, H * d)), "Wdkv": _normal(rng, (D, r)),
            "Wuk": _normal(rng, (r, H * d)), "Wuv": _normal(rng, (r, H * d))}


def _latent_case(X, p, n_heads) -> dict:
    r = len(p["Wdkv"][0])
    return {"X": X, "p": p, "n_heads": n_heads, "expected": ref_latent_rows(X, p, n_heads),
            "latents": _project(X, p["Wdkv"]),
            "mistakes": {"no_scale": ref_latent_rows(X, p, n_heads, scale=1.0),
                         "latent_scale": ref_latent_rows(X, p, n_heads, scale=math.sqrt(r))}}


def latent_attend_step_data() -> dict:
    example = _latent_case([[1.0, 0.0], [1.0, 1.0], [0.0, 2.0]],
                           {"Wq": [[1.0, 0.0], [0.0, 1.0]], "Wdkv": [[1.0], [1.0]],
                            "Wuk": [[1.0, -1.0]], "Wuv": [[1.0, 2.0]]}, 2)
    rng = np.random.default_rng(12)
    shapes = {"x": _normal(rng, 5), "p": _latent_weights(rng, 5, 3, 2, 4), "n_heads": 3}
    rng = np.random.default_rng(13)
    random = _latent_case(_normal(rng, (6, 5)), _latent_weights(rng, 5, 3, 2, 4), 3)
    rng = np.random.default_rng(14)
    one_head = _latent_case(_normal(rng, (4, 3)), _latent_weights(rng, 3, 1, 3, 2), 1)
    # scores of about 10^4: the worked example with Wq and Wuk 100 times larger
    large = _latent_case(example["X"], dict(example["p"], Wq=[[100.0, 0.0], [0.0, 100.0]], Wuk=[[100.0, -100.0]]), 2)
    return {"first_step_shapes": shapes, "worked_example": example, "random": random, "one_head": one_head,
            "large_scores": large}


def ref_speculative_accept(draft, q, p, u, *, residual="clamped", which_u="k", bonus=True) -> list[int]:
    """The acceptance rule over exact fractions of the stored floats: x_i kept while u_i q_i(x)
    < p_i(x); at the first rejection (or after all k) the smallest j with r_0 + .. + r_j >
    u_k (r_0 + .. + r_{V-1}), r = max(0, p_i - q_i) (or p_k).  ``residual="p"``, ``which_u="i"``
    and ``bonus=False`` are the mistakes the checks name."""
    F = Fraction
    k = len(draft)

    def draw(weights, v):
        total, running = sum(weights, F(0)), F(0)
        for j, w in enumerate(weights):
            running += w
            if running > F(v) * total:
                return j
        return len(weights) - 1

    for i in range(k):
        x = draft[i]
        if F(u[i]) * F(q[i][x]) < F(p[i][x]):
            continue
        if residual == "p":
            weights = [F(a) for a in p[i]]
        else:
            weights = [max(F(0), F(a) - F(b)) for a, b in zip(p[i], q[i])]
        return list(draft[:i]) + [draw(weights, u[i] if which_u == "i" else u[k])]
    return list(draft) + ([draw([F(a) for a in p[k]], u[k])] if bonus else [])


def _speculative_case(draft, q, p, u) -> dict:
    return {"draft_tokens": draft, "q_probs": q, "p_probs": p, "uniforms": u,
            "expected": ref_speculative_accept(draft, q, p, u),
            "mistakes": {"from_p": ref_speculative_accept(draft, q, p, u, residual="p"),
                         "rejecting_uniform": ref_speculative_accept(draft, q, p, u, which_u="i"),
                         "no_bonus": ref_speculative_accept(draft, q, p, u, bonus=False)}}


def speculative_accept_data() -> dict:
    q = [[0.2, 0.5, 0.3], [0.1, 0.2, 0.7]]
    p = [[0.1, 0.6, 0.3], [0.3, 0.3, 0.4], [0.5, 0.25, 0.25]]
    rng = np.random.default_rng(15)
    V, k = 6, 4
    rq = [list(row / row.sum()) for row in rng.random((k, V)) + 0.05]
    rp = [list(row / row.sum()) for row in rng.random((k + 1, V)) + 0.05]
    rdraft = [int(rng.choice(V, p=row)) for row in rq]
    return {
        "worked_example": _speculative_case([1, 2], q, p, [0.9, 0.7, 0.5]),
        "worked_example_all_accepted": _speculative_case([1, 2], q, p, [0.9, 0.5, 0.5]),
        "first_rejected": _speculative_case([0, 3], [[0.5, 0.25, 0.125, 0.125], [0.25] * 4],
                                            [[0.125, 0.25, 0.375, 0.25], [0.25] * 4, [0.25] * 4], [0.5, 0.0, 0.7]),
        "no_draft": _speculative_case([], [], [[0.125, 0.5, 0.125, 0.25]], [0.6]),
        "greedy": _speculative_case([3, 1, 4], [[0.0, 0.0, 0.0, 1.0, 0.0], [0.0, 1.0, 0.0, 0.0, 0.0],
                                                [0.0, 0.0, 0.0, 0.0, 1.0]],
                                    [[0.0, 0.0, 0.0, 1.0, 0.0], [0.0, 1.0, 0.0, 0.0, 0.0],
                                     [0.0, 0.0, 1.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0, 0.0]], [0.3, 0.8, 0.1, 0.6]),
        "random": _speculative_case(rdraft, rq, rp, [float(v) for v in (0.31, 0.83, 0.62, 0.08, 0.55)]),
    }


def ref_quantize(x, bits, axis, how="round") -> dict:
    """Codes, scale and offset of x (a list of rows) per channel (axis 0) or per token (axis 1),
    slice by slice over Python floats; ``how``: "round" (halves to even), "floor"."""
    T, d = len(x), len(x[0])
    slices = [[x[t][j] for t in range(T)] for j in range(d)] if axis == 0 else [list(row) for row in x]
    top = 2 ** bits - 1
    codes_by_slice, scales, offsets = [], [], []
    for values in slices:
        low = min(values)
        scale = (max(values) - low) / top
        if scale == 0:
            codes_by_slice.append([0] * len(values))
        else:
            step = [(v - low) / scale for v in values]
            codes_by_slice.append([max(0, min(top, math.floor(q) if how == "floor" else round(q))) for q in step])
        scales.append(scale)
        offsets.append(low)
    if axis == 0:
        codes = [[codes_by_slice[j][t] for j in range(d)] for t in range(T)]
        return {"codes": codes, "scale": [scales], "offset": [offsets]}
    return {"codes": codes_by_slice, "scale": [[s] for s in scales], "offset": [[o] for o in offsets]}


def ref_dequantize(q: dict) -> list:
    """codes * scale + offset, broadcast, over Python floats."""
    one_row = len(q["scale"]) == 1
    out = []
    for t, row in enumerate(q["codes"]):
        s, o = (q["scale"][0], q["offset"][0]) if one_row else ([q["scale"][t][0]] * len(row), [q["offset"][t][0]] * len(row))
        out.append([c * s[j] + o[j] for j, c in enumerate(row)])
    return out


def _quantize_case(x, bits, axis) -> dict:
    return {"x": x, "bits": bits, "axis": axis, "expected": ref_quantize(x, bits, axis),
            "decoded": ref_dequantize(ref_quantize(x, bits, axis)),
            "mistakes": {"floor": ref_quantize(x, bits, axis, "floor")["codes"],
                         "other_axis": ref_quantize(x, bits, 1 - axis)["codes"]}}


def quantize_kv_data() -> dict:
    example = [[0.0, -0.5, 8.0, 1.0], [1.0, 0.5, 2.0, 1.0], [-0.5, 1.0, 6.0, 1.0]]
    rng = np.random.default_rng(13)
    keys = [[round(float(v), 6) for v in row] for row in rng.standard_normal((6, 5)) * [1, 1, 12, 1, 1]]
    values = [[round(float(v), 6) for v in row] for row in rng.standard_normal((4, 8))]
    return {
        "worked_example_per_channel": _quantize_case(example, 2, 0),
        "worked_example_per_token": _quantize_case(example, 2, 1),
        "constant": _quantize_case([[2.0, -1.0], [2.0, 0.5], [2.0, 3.0]], 3, 0),
        "random_keys": _quantize_case(keys, 4, 0),
        "random_values": _quantize_case(values, 2, 1),
    }


def ref_keep_positions(scores, budget, n_sink, n_recent, *, later_ties=False, smallest=False,
                       recent_compete=False) -> list[int]:
    """The positions kept, by a selection loop over exact fractions of the stored floats: every
    position when t <= budget; else the sinks, the recent ones, and, budget - n_sink - n_recent
    times, the not yet chosen middle position of largest score (the first found among equal
    ones).  The keyword arguments are the mistakes the checks name."""
    t = len(scores)
    if t <= budget:
        return list(range(t))
    heavy: set[int] = set()
    pool = list(range(n_sink, t if recent_compete else t - n_recent))
    if later_ties:
        pool.reverse()
    for _ in range(budget - n_sink - n_recent):
        best = None
        for j in pool:
            if j in heavy:
                continue
            if best is None or (Fraction(scores[j]) < Fraction(scores[best]) if smallest
                                else Fraction(scores[j]) > Fraction(scores[best])):
                best = j
        if best is None:
            break
        heavy.add(best)
    return sorted(set(range(n_sink)) | heavy | set(range(t - n_recent, t)))


def _keep_case(scores, budget, n_sink, n_recent) -> dict:
    scores = [float(s) for s in scores]
    return {"acc_scores": scores, "budget": budget, "n_sink": n_sink, "n_recent": n_recent,
            "expected": ref_keep_positions(scores, budget, n_sink, n_recent),
            "mistakes": {"later_ties": ref_keep_positions(scores, budget, n_sink, n_recent, later_ties=True),
                         "smallest": ref_keep_positions(scores, budget, n_sink, n_recent, smallest=True),
                         "recent_compete": ref_keep_positions(scores, budget, n_sink, n_recent,
                                                              recent_compete=True)}}


def keep_positions_data() -> dict:
    rng = np.random.default_rng(14)
    random = [round(float(v), 3) for v in rng.gamma(0.5, size=24)]
    return {
        "worked_example": _keep_case([5.0, 0.5, 3.0, 0.2, 4.0, 1.0, 6.0, 2.0], 5, 1, 2),
        "short": _keep_case([0.25, 3.0, 1.0, 0.5], 6, 2, 3),
        "ties": _keep_case([1.0, 2.0, 2.0, 2.0, 2.0, 1.0, 1.0, 3.0], 4, 1, 1),
        "streaming": _keep_case([float(v) for v in range(12, 0, -1)], 6, 2, 4),
        "random": _keep_case(random, 10, 2, 3),
    }


BUILDERS = {
    "softmax": softmax_data, "causal_attention": causal_attention_data, "attend_step": attend_step_data,
    "kv_cache_bytes": kv_cache_bytes_data, "max_batch": max_batch_data,
    "arithmetic_intensity": arithmetic_intensity_data, "time_per_token": time_per_token_data,
    "prefill_time": prefill_time_data, "batched_decode_step": batched_decode_step_data,
    "BlockAllocator": block_allocator_data, "reorder_cache": reorder_cache_data,
    "blocked_decode": blocked_decode_data, "requant": requant_data,
    "attention_tail": attention_tail_data, "mutants": mutants_data,
    "latent_attend_step": latent_attend_step_data, "speculative_accept": speculative_accept_data,
    "quantize_kv": quantize_kv_data,
    "keep_positions": keep_positions_data,
}


def render(name: str) -> str:
    """The text of ``public_checks/data/NAME.json``."""
    body = {"exercise": name, "format": FORMAT,
            "written_by": "tools/public_check_data.py: do not edit, rerun it", **BUILDERS[name]()}
    return json.dumps(body, indent=1, allow_nan=False) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only say whether the files are up to date")
    args = parser.parse_args(argv)
    stale = []
    DATA.mkdir(parents=True, exist_ok=True)
    for name in BUILDERS:
        path = DATA / f"{name}.json"
        text = render(name)
        if path.exists() and path.read_text(encoding="utf-8") == text:
            continue
        stale.append(path.relative_to(ROOT))
        if not args.check:
            path.write_text(text, encoding="utf-8")
    if args.check:
        for path in stale:
            print(f"out of date: {path} (run tools/public_check_data.py)")
        return 1 if stale else 0
    print(f"public check data: {len(BUILDERS)} files, {len(stale)} rewritten")
    return 0


if __name__ == "__main__":
    sys.exit(main())
