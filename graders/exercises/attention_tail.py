"""Hidden tests of ``attention_tail(L, P)`` (chapter 10): the attention tail of the decode step as
GA-2 instructions, for the course's memory plan.

The learner's function returns a list of instructions as plain dicts (``{"op": "MM", "dst": ...}``).
They come back from the sandbox as data and are checked here, in the grader's own process, before
anything runs: the list's length and every instruction's form (a dict, a known op, exactly its
fields, non-negative integers) with its index and field named; then the machine's own limits
(``ga2.limits``, called by the simulator).  GA-2 has no branches, so a program of at most
``MAX_INSTRUCTIONS`` instructions, each touching at most the memory it has, costs a bounded time.

Each test puts the course's head (the cached program's, or the recompute program's) before the
learner's tail and a HALT after it, runs that on the ``ga2`` simulator, and compares the whole
external memory with the grader's reference: the decode step computed here in Python integers
(exact requantizer, the softmax unit's table and divider, integer products), from data and
requantizer parameters made here.  Nothing of ``ga2.attn`` or ``ga2.quant`` is used: the machine
(``ga2.machine``) is the chip the learner programs, not the reference.  The extra points go to a
tail that costs no more cycles than the course's own (written here too) at every length.
"""
from __future__ import annotations

import functools
import math
from fractions import Fraction

import numpy as np

from ga2.limits import ProgramError      # the machine the learner programs (its limits and its simulator)
from ga2.machine import Machine

from ..checks import Fail, describe, unchanged, with_right_answer
from ..harness import Opaque
from ..registry import Call, Exercise, Lib, Test, case

FN = "attention_tail"
D = DM = 16
EXT_WORDS, SPAD_WORDS = 8192, 4096
MAX_INSTRUCTIONS = 256          # the course's tail has at most 17; a bound on what is run

# The course's memory plan (words).
EX = {"X": 0, "WQ": 512, "WK": 768, "WV": 1024, "KC": 2048, "VC": 2560, "OUT": 3072}
SP = {"X": 0, "WQ": 512, "WK": 768, "WV": 1024, "ACC": 1280, "KC": 1792, "VC": 2304, "Q": 2816, "Q8": 2832,
      "S": 2848, "S8": 2880, "P": 2912, "W": 2944, "O": 2976, "O8": 2992, "KN": 3008, "VN": 3024}

# The instruction set, as the machine's contract lists it.
FIELDS = {"LD": ("dst", "src", "len"), "ST": ("src", "dst", "len"),
          "MM": ("dst", "A", "B", "M", "K", "N", "tb", "lda", "ldb", "ldc"),
          "RQ": ("dst", "src", "len", "m", "s", "relu"), "SM": ("dst", "src", "len"), "HALT": ()}
OPTIONAL = {"MM": {"tb": 0}, "RQ": {"relu": 0}}


# ------------------------------------------------------------------------------- reference arithmetic


def _round_half_away(x: Fraction) -> int:
    magnitude = math.floor(abs(x) + Fraction(1, 2))
    return magnitude if x >= 0 else -magnitude


def rq(acc: int, m: int, s: int) -> int:
    """The requantizer, exactly: sat127(round_half_away(acc * m / 2^s))."""
    return max(-127, min(127, _round_half_away(Fraction(acc * m, 2 ** s))))


def mantissa_shift(x: float) -> tuple[int, int]:
    """(m, s) with 2^23 <= m < 2^24 and m / 2^s the nearest such fraction to x > 0."""
    f = Fraction(x)
    s = 0
    while f * 2 ** s >= 2 ** 24:
        s -= 1
    while f * 2 ** s < 2 ** 23:
        s += 1
    m = math.floor(f * 2 ** s + Fraction(1, 2))
    if m == 2 ** 24:
        m, s = 2 ** 23, s - 1
    return m, s


EXP = [math.floor(65536 * math.exp(-d / 16)) for d in range(256)]


def softmax_unit(scores: list[int]) -> list[int]:
    """The unit's Q0.16 probabilities of int8 Q4.4 scores: table e = EXP[max - x], then a rounded divide."""
    top = max(scores)
    e = [EXP[top - x] for x in scores]
    z = sum(e)
    return [(v * 65536 + z // 2) // z for v in e]


def _dot(a, b) -> int:
    return sum(x * y for x, y in zip(a, b))


def _column(W, j):
    return [row[j] for row in W]


# ------------------------------------------------------------------------------- the examples


def _codes(values: np.ndarray, scale: float) -> list:
    """int8 codes of real values at a scale: sat127(round_half_away(v / scale)), as Python ints."""
    x = np.asarray(values, dtype=np.float64) / scale
    q = np.clip(np.sign(x) * np.floor(np.abs(x) + 0.5), -127, 127)
    return q.astype(np.int64).tolist()


class Example:
    """A decode step of L tokens: int8 data, requantizer parameters, and the exact int8 results.

    ``query_gain`` scales the query's projection after its scale is chosen, so that its codes
    saturate and the scores pile up at the ends of their range.
    """

    def __init__(self, L: int, number: int, query_gain: float = 1.0, weight_sd: float = 0.25):
        rng = np.random.default_rng(number)
        X = rng.normal(0.0, 1.0, size=(L, DM))
        Wq, Wk, Wv = (rng.normal(0.0, weight_sd, size=(DM, D)) for _ in range(3))
        K, V, q = X @ Wk, X @ Wv, X[-1] @ Wq
        scores = K @ q / math.sqrt(D)
        w = np.exp(scores - scores.max())
        out = (w / w.sum()) @ V
        peak = lambda a: float(np.max(np.abs(a))) / 127 or 1.0  # noqa: E731
        sx, swq, swk, swv = peak(X), peak(Wq), peak(Wk), peak(Wv)
        sq, sk, sv, so = peak(q) / query_gain, peak(K), peak(V), peak(out)
        self.L = L
        self.P = {"q": mantissa_shift(sx * swq / sq), "k": mantissa_shift(sx * swk / sk),
                  "v": mantissa_shift(sx * swv / sv),
                  "scores": mantissa_shift(sq * sk / math.sqrt(D) * 16),
                  "weights": mantissa_shift(127 / 65536),
                  "out": mantissa_shift(sv / (127 * so))}
        self.x8, self.wq8, self.wk8, self.wv8 = _codes(X, sx), _codes(Wq, swq), _codes(Wk, swk), _codes(Wv, swv)
        self._compute()

    def _compute(self):
        P, L = self.P, self.L
        project = lambda x, W, key: [rq(_dot(x, _column(W, j)), *P[key]) for j in range(D)]  # noqa: E731
        self.q8 = project(self.x8[L - 1], self.wq8, "q")
        self.K8 = [project(x, self.wk8, "k") for x in self.x8]
        self.V8 = [project(x, self.wv8, "v") for x in self.x8]
        self.s8 = [rq(_dot(self.q8, k), *P["scores"]) for k in self.K8]
        self.w8 = [rq(p, *P["weights"]) for p in softmax_unit(self.s8)]
        self.out8 = [rq(_dot(self.w8, _column(self.V8, c)), *P["out"]) for c in range(D)]

    def ext_before(self, variant: str) -> list[int]:
        """EXT when the step starts: X, the weights, and (cached) the L-1 earlier rows of both caches."""
        ext = [0] * EXT_WORDS
        for t, row in enumerate(self.x8):
            ext[EX["X"] + t * DM:EX["X"] + (t + 1) * DM] = row
        for base, W in ((EX["WQ"], self.wq8), (EX["WK"], self.wk8), (EX["WV"], self.wv8)):
            ext[base:base + DM * D] = [v for row in W for v in row]
        if variant == "cached":
            for t in range(self.L - 1):
                ext[EX["KC"] + t * D:EX["KC"] + (t + 1) * D] = self.K8[t]
                ext[EX["VC"] + t * D:EX["VC"] + (t + 1) * D] = self.V8[t]
        return ext

    def ext_after(self, variant: str) -> list[int]:
        """EXT after the whole step: the new key and value appended (cached) and the output."""
        ext = self.ext_before(variant)
        if variant == "cached":
            t = self.L - 1
            ext[EX["KC"] + t * D:EX["KC"] + (t + 1) * D] = self.K8[t]
            ext[EX["VC"] + t * D:EX["VC"] + (t + 1) * D] = self.V8[t]
        ext[EX["OUT"]:EX["OUT"] + D] = self.out8
        return ext

    def args(self):
        return (self.L, {k: tuple(v) for k, v in self.P.items()})


# ------------------------------------------------------------------------------- the course's programs


def _i(op, **fields):
    return {"op": op, **fields}


def _projection(x, w, acc, rows, stride):
    return [_i("MM", dst=acc + 4 * b * stride + 4 * c, A=x + 4 * b * DM, B=w + 4 * c, M=min(4, rows - 4 * b),
               K=DM, N=4, tb=0, lda=DM, ldb=D, ldc=stride)
            for b in range((rows + 3) // 4) for c in range(D // 4)]


def _rq(dst, src, n, params):
    return _i("RQ", dst=dst, src=src, len=n, m=params[0], s=params[1], relu=0)


def course_head(L: int, variant: str, P: dict) -> list[dict]:
    """The part of the course's program before the tail (the chapter's listing, written anew)."""
    if variant == "cached":
        row = (L - 1) * D
        head = [_i("LD", dst=SP["X"], src=EX["X"] + (L - 1) * DM, len=DM),
                _i("LD", dst=SP["WQ"], src=EX["WQ"], len=3 * DM * D)]
        if L > 1:
            head += [_i("LD", dst=SP["KC"], src=EX["KC"], len=row), _i("LD", dst=SP["VC"], src=EX["VC"], len=row)]
        for w, acc in ((SP["WQ"], SP["Q"]), (SP["WK"], SP["KN"]), (SP["WV"], SP["VN"])):
            head += _projection(SP["X"], w, acc, 1, 4)
        return head + [_rq(SP["Q8"], SP["Q"], D, P["q"]), _rq(SP["KC"] + row, SP["KN"], D, P["k"]),
                       _rq(SP["VC"] + row, SP["VN"], D, P["v"]),
                       _i("ST", src=SP["KC"] + row, dst=EX["KC"] + row, len=D),
                       _i("ST", src=SP["VC"] + row, dst=EX["VC"] + row, len=D)]
    head = [_i("LD", dst=SP["X"], src=EX["X"], len=L * DM), _i("LD", dst=SP["WQ"], src=EX["WQ"], len=3 * DM * D)]
    head += _projection(SP["X"], SP["WK"], SP["ACC"], L, D) + [_rq(SP["KC"], SP["ACC"], L * D, P["k"])]
    head += _projection(SP["X"], SP["WV"], SP["ACC"], L, D) + [_rq(SP["VC"], SP["ACC"], L * D, P["v"])]
    return head + _projection(SP["X"] + (L - 1) * DM, SP["WQ"], SP["Q"], 1, 4) + [_rq(SP["Q8"], SP["Q"], D, P["q"])]


def course_tail(L: int, P: dict) -> list[dict]:
    """The course's tail, the one the extra points measure against."""
    tail = [_i("MM", dst=SP["S"] + 4 * j, A=SP["Q8"], B=SP["KC"] + 4 * j * D, M=1, K=D, N=min(4, L - 4 * j),
               tb=1, lda=D, ldb=D, ldc=4) for j in range((L + 3) // 4)]
    tail += [_rq(SP["S8"], SP["S"], L, P["scores"]), _i("SM", dst=SP["P"], src=SP["S8"], len=L),
             _rq(SP["W"], SP["P"], L, P["weights"])]
    tail += [_i("MM", dst=SP["O"] + 4 * c, A=SP["W"], B=SP["VC"] + 4 * c, M=1, K=L, N=4, tb=0, lda=L, ldb=D, ldc=4)
             for c in range(D // 4)]
    return tail + [_rq(SP["O8"], SP["O"], D, P["out"]), _i("ST", src=SP["O8"], dst=EX["OUT"], len=D)]


def cycles(program: list[dict]) -> int:
    """The cycle model: 2 issue cycles per instruction plus its wait."""
    total = 0
    for ins in program:
        f = {**OPTIONAL.get(ins["op"], {}), **ins}
        op = f["op"]
        wait = {"LD": lambda: f["len"] + 9, "ST": lambda: f["len"] + 2, "RQ": lambda: f["len"] + 2,
                "SM": lambda: 3 * f["len"] + 47, "HALT": lambda: 0,
                "MM": lambda: f["M"] * f["K"] + f["K"] * f["N"] + f["M"] * f["N"] + f["M"] + f["K"] + f["N"] + 5}[op]()
        total += 2 + wait
    return total


# ------------------------------------------------------------------------------- reading what came back


def validate(value, L: int) -> list[dict]:
    """The learner's tail as a list of instruction dicts with int fields, or a ``Fail`` naming the
    instruction's index and field.  The machine's own limits are checked when it runs."""
    where = f"attention_tail({L}, P)"
    if isinstance(value, Opaque):
        raise Fail(f"{where} returned {describe(value)}; expected a list of instructions (dicts)")
    if not isinstance(value, (list, tuple)):
        raise Fail(f"{where} returned {describe(value)}; expected a list of instructions, each a dict like "
                   "{'op': 'SM', 'dst': 2912, 'src': 2880, 'len': L}")
    if len(value) > MAX_INSTRUCTIONS:
        raise Fail(f"{where} returned {len(value)} instructions; the grader runs tails of at most "
                   f"{MAX_INSTRUCTIONS} (the course's has {len(course_tail(L, _ANY_P))})")
    return [_instruction(item, f"{where}: instruction {index} of the tail") for index, item in enumerate(value)]


def _instruction(item, at: str) -> dict:
    """One instruction of the tail as a dict of its op and int fields, or a ``Fail`` saying what
    is wrong with it (``at`` names it)."""
    if isinstance(item, Opaque) and item.type_name.endswith("Instr"):
        raise Fail(f"{at} is {describe(item)}, which does not travel to the grader: return plain dicts, "
                   "such as {'op': ins.op, **ins.fields}")
    if not isinstance(item, dict):
        raise Fail(f"{at} is {describe(item)}; each instruction is a dict with 'op' and its fields")
    op = item.get("op")
    if op not in FIELDS:
        shown = repr(op) if isinstance(op, str) and len(op) < 20 else describe(op)
        raise Fail(f"{at}: field 'op' is {shown}, not one of {', '.join(FIELDS)}")
    if op == "HALT":
        raise Fail(f"{at} is a HALT: leave it out, the grader puts the HALT after your tail")
    names = FIELDS[op]
    for key in item:
        if key != "op" and key not in names:
            shown = repr(key) if isinstance(key, str) and len(key) < 20 else describe(key)
            raise Fail(f"{at} ({op}): {shown} is not a field of {op} (its fields: {', '.join(names)})")
    return {"op": op, **{name: _field(item, op, name, at) for name in names}}


def _field(item: dict, op: str, name: str, at: str) -> int:
    """Field ``name`` of an instruction (its default when optional and left out): an int that is an
    address or a count."""
    if name not in item and name not in OPTIONAL.get(op, {}):
        raise Fail(f"{at} ({op}): field '{name}' is missing")
    v = item.get(name, OPTIONAL.get(op, {}).get(name))
    if isinstance(v, np.generic) and np.issubdtype(v.dtype, np.integer):
        v = int(v)
    if type(v) is not int:
        raise Fail(f"{at} ({op}): field '{name}' is {describe(v)}; fields are integers")
    if not 0 <= v < 2 ** 32:
        shown = str(v) if abs(v) < 10 ** 12 else f"a number of {len(str(abs(v)))} digits"
        raise Fail(f"{at} ({op}): field '{name}' = {shown} is not an address or a count "
                   "(a non-negative integer below 2^32)")
    return v


def _hint(tail: list[dict], L: int, P: dict) -> str:
    """A pointer to a likely mistake, read from the instructions alone."""
    if not tail:
        return "the tail is empty"
    sm = [ins for ins in tail if ins["op"] == "SM"]
    if not sm:
        return "the tail has no SM: the weights come from the softmax unit"
    if any(ins["len"] != L for ins in sm):
        return "the SM does not cover the L scores (its len should be L)"
    stores = [ins for ins in tail if ins["op"] == "ST"]
    if not any(ins["dst"] == EX["OUT"] and ins["len"] == D for ins in stores):
        return f"no ST writes the {D} output values to EXT at {EX['OUT']}"
    return _requantizer_hint(tail, P) or _product_hint(tail, L)


def _requantizer_hint(tail: list[dict], P: dict) -> str:
    """A requantizer of ``P`` that no RQ of the tail uses."""
    params = {(ins["m"], ins["s"]) for ins in tail if ins["op"] == "RQ"}
    needed = {"scores": tuple(P["scores"]), "weights": tuple(P["weights"]), "out": tuple(P["out"])}
    unused = [key for key, value in needed.items() if value not in params]
    if unused:
        return f"no RQ uses P[{unused[0]!r}]: the scores, the weights and the output each have their requantizer"
    return ""


def _product_hint(tail: list[dict], L: int) -> str:
    """A product before the softmax that reads keys as rows, or one after it that does not sum
    over the L positions."""
    ops = [ins["op"] for ins in tail]
    before_sm = [ins for ins in tail[:ops.index("SM")] if ins["op"] == "MM"]
    if before_sm and all(ins["tb"] == 0 for ins in before_sm):
        return ("the scores' MM read the key cache with tb = 0; one key per row means the product needs the "
                "rows read as columns (tb = 1)")
    after = [ins for ins in tail[ops.index("SM"):] if ins["op"] == "MM"]
    if after and any(ins["K"] != L for ins in after):
        return "a product after the softmax does not sum over the L positions (K should be L)"
    return ""


_ANY_P = {"scores": (1 << 23, 24), "weights": (16646144, 33), "out": (1 << 23, 24)}


def _run(example: Example, variant: str, tail: list[dict], L: int):
    """The machine after the course's head, the learner's tail and a HALT."""
    head = course_head(L, variant, example.P)
    try:
        return Machine(example.ext_before(variant)).run(head + tail + [{"op": "HALT"}]), len(head)
    except ProgramError as err:
        index = err.index - len(head)
        raise Fail(f"attention_tail({L}, P): instruction {index} of the tail ({err.op}): field '{err.field}': "
                   f"{err.reason}") from None


def _check_outputs(examples, expected, variant: str, label, results):
    """Each example's tail, run after the course's head (``variant``), writes the reference's
    output to EXT and nothing else.  ``label``: how a message names the example (None: "example
    k of n")."""
    for k, (ex, want) in enumerate(zip(examples, expected)):
        tail = validate(results[k].value, ex.L)
        machine, _ = _run(ex, variant, tail, ex.L)
        got = machine.ext.astype(np.int64)
        out = slice(EX["OUT"], EX["OUT"] + D)
        bad = int(np.count_nonzero(got[out] != want[out]))
        what = f"L = {ex.L} ({label or f'example {k + 1} of {len(examples)}'})"
        if bad:
            hint = _hint(tail, ex.L, ex.P)
            raise Fail(f"{what}: {bad} of the {D} output values in EXT differ from the reference program's"
                       + (f"; {hint}" if hint else ""))
        changed = np.flatnonzero(got != want)
        if changed.size:
            raise Fail(f"{what}: the output is right, but the tail changed EXT elsewhere too (words "
                       f"{int(changed[0])}...{int(changed[-1])}): its one store is the output")


def _expected_ext(examples, variant: str) -> list[np.ndarray]:
    return [np.array(ex.ext_after(variant), dtype=np.int64) for ex in examples]


def _check_cycles(examples, expected, results):
    """Right outputs first; then at every length the tail costs no more cycles than the course's."""
    _check_outputs(examples, expected, "cached", "the cycles count once the output is right", results)
    over = []
    for k, ex in enumerate(examples):
        tail = validate(results[k].value, ex.L)
        machine, _ = _run(ex, "cached", tail, ex.L)
        yours = machine.counters.total - cycles(course_head(ex.L, "cached", ex.P)) - 2
        course = cycles(course_tail(ex.L, ex.P))
        if yours > course:
            over.append((ex.L, yours - course))
    if over:
        L, extra = over[0]
        raise Fail(f"at {len(over)} of {len(examples)} lengths the tail takes more cycles than the course's "
                   f"(at L = {L}, {extra} more)")


def _p_unchanged(P, results):
    unchanged(P, results[0].originals_after[1], "P")


def _p_unchanged_with_right_answer(ex: Example, P, results):
    """P left as it was, counting only together with the right output."""
    right = functools.partial(_check_outputs, [ex], _expected_ext([ex], "cached"), "cached", None)
    return with_right_answer(functools.partial(_p_unchanged, P), right)(results)


def output_test(name, points, examples, variant="cached", label=None) -> Test:
    return case(name, points, [Call(FN, ex.args()) for ex in examples], _check_outputs, examples,
                _expected_ext(examples, variant), variant, label, step="call")


def cycles_test(name, points, examples) -> Test:
    return case(name, points, [Call(FN, ex.args()) for ex in examples], _check_cycles, examples,
                _expected_ext(examples, "cached"), step="call")


def unchanged_test(name, points, ex: Example) -> Test:
    L, P = ex.args()
    return case(name, points, [Call(FN, (L, P), capture_args=True)], _p_unchanged_with_right_answer, ex, P)


# The hidden examples: (L, query gain, weights' standard deviation), seeded 7200, 7201, ...
HIDDEN = [(2, 1.0, 0.1), (5, 1.0, 0.5), (9, 3.0, 0.25), (13, 1.0, 1.0), (16, 8.0, 0.25), (20, 1.0, 0.05),
          (27, 2.0, 0.4), (31, 1.0, 0.25), (32, 6.0, 0.3), (32, 1.0, 0.7), (11, 1.5, 0.25), (24, 1.0, 0.15)]


def make_tests() -> list[Test]:
    every_length = [Example(L, 7000 + L) for L in range(1, 33)]
    hidden = [Example(L, 7200 + k, query_gain=g, weight_sd=sd) for k, (L, g, sd) in enumerate(HIDDEN)]
    return [
        output_test("the step at L = 3 after the course's cached head (the chapter's listing)", 2,
                    [Example(3, 7003)], label="the chapter's length"),
        output_test("one token (L = 1): one score, a softmax over one position", 1, [Example(1, 7301)]),
        output_test("every L from 1 to 32 (full and partial tiles of 4 positions)", 3, every_length,
                    label="one example per length"),
        output_test("hidden examples: other data and requantizer parameters, saturated scores", 2, hidden),
        output_test("after the recompute head (no cache in EXT), L from 1 to 32", 1,
                    [Example(L, 7400 + L) for L in (1, 2, 4, 7, 8, 15, 17, 25, 32)], variant="recompute"),
        unchanged_test("P is left as it was", 1, Example(6, 7100)),
        cycles_test("extra: no more cycles than the course's tail, at every L from 1 to 32", 2, every_length),
    ]


EXERCISE = Exercise(name="attention_tail", make_tests=make_tests,
                    # the public checks run the learner's tail on the simulator, so the sandbox's
                    # ga2 has the machine; never the course's tail (attn) or what is built on it
                    libs=(Lib("ga2", hide=("attn", "mutants", "study", "report", "rtl", "__main__")),))
