"""The hidden tests of the GA-2 exercises, requant and attention_tail: references of their own
that agree with the machine (two implementations written apart), feedback that names the mistake,
and answers that come back as data (instructions) validated before they run.

The graders import nothing of ``ga2.quant`` or ``ga2.attn``; ``ga2`` is used here, in the tests,
to cross-check them.
"""
import math
import textwrap
import types

import numpy as np
import pytest

from graders import registry
from graders.exercises import attention_tail as G_tail
from graders.exercises import requant as G_rq
from graders.notebook import extract

from grader_helpers import by_name, grade_text


# ---------------------------------------------------------------- requant: the reference


def test_the_requant_reference_agrees_with_the_machine():
    from ga2.quant import requant
    rng = np.random.default_rng(5)
    for _ in range(3000):
        acc = int(rng.integers(-2 ** 31, 2 ** 31))
        m, s = int(rng.integers(0, 2 ** 24)), int(rng.integers(0, 64))
        assert G_rq.reference(acc, m, s) == requant(acc, m, s), (acc, m, s)
    for test in registry.tests("requant"):
        for call in test.calls:
            acc, m, s = call.args
            got = requant(acc if np.ndim(acc) else int(acc), m, s)
            want = ([G_rq.reference(int(a), m, s) for a in np.ravel(acc)] if np.ndim(acc)
                    else G_rq.reference(acc, m, s))
            assert np.array_equal(np.ravel(got), np.ravel(want)), test.name


def test_the_near_ties_defeat_float64():
    """The cases the grader keeps for "beyond 2^53": exact integers give one level, a float64
    product the next one."""
    for acc, m, s in G_rq.NEAR_TIES:
        assert abs(acc * m) > 2 ** 53
        exact = G_rq.reference(acc, m, s)
        as_float = float(acc) * float(m) / 2.0 ** s
        assert abs(as_float) % 1 == 0.5                       # the float lands on the tie
        assert math.copysign(math.floor(abs(as_float) + 0.5), as_float) == exact + (1 if exact > 0 else -1)


REQUANT_SUBMISSIONS = {
    "half_even": ("""
        import numpy as np
        def requant(acc, m, s):
            x = np.asarray(acc, dtype=np.int64) * m / 2 ** s
            q = np.clip(np.round(x), -127, 127).astype(np.int64)
            return int(q) if np.ndim(acc) == 0 else q
        """, "rounded to the nearest even number"),
    "half_up": ("""
        import math
        import numpy as np
        def requant(acc, m, s):
            if np.ndim(acc) == 0:
                return max(-127, min(127, (int(acc) * m + (1 << s >> 1)) >> s))
            p = np.asarray(acc, dtype=np.int64) * m
            return np.clip((p + (1 << s >> 1)) >> s, -127, 127)
        """, "negative halves are rounded up"),
    "minus_128": ("""
        import numpy as np
        def requant(acc, m, s):
            def one(a):
                p = int(a) * m
                q = (abs(p) + (1 << s >> 1)) >> s
                return max(-128, min(127, q if p >= 0 else -q))
            if np.ndim(acc) == 0:
                return one(acc)
            return np.array([one(a) for a in np.ravel(acc)], dtype=np.int64).reshape(np.shape(acc))
        """, "saturates at -128"),
    "int32": ("""
        import numpy as np
        def requant(acc, m, s):
            if np.ndim(acc) == 0:
                p = int(acc) * m
                q = (abs(p) + (1 << s >> 1)) >> s
                return max(-127, min(127, q if p >= 0 else -q))
            p = np.asarray(acc) * m
            q = (np.abs(p) + (1 << s >> 1)) >> s
            return np.clip(np.where(p < 0, -q, q), -127, 127)
        """, "overflows 32 bits"),
}


@pytest.mark.parametrize("name", sorted(REQUANT_SUBMISSIONS))
def test_a_wrong_requant_is_told_its_mistake(name):
    source, words = REQUANT_SUBMISSIONS[name]
    result = grade_text(source, "requant")
    assert result["status"] == "ok" and 0 < result["score"] < result["max_score"]
    feedback = "\n".join(t["output"] for t in result["tests"])
    assert words in feedback, feedback


def test_requant_types_and_the_input():
    right = """
        import numpy as np
        def exact(acc, m, s):
            p = np.asarray(acc, dtype=np.int64) * m
            q = (np.abs(p) + (1 << s >> 1)) >> s
            return np.clip(np.where(p < 0, -q, q), -127, 127)
        """
    numpy_scalar = grade_text(right + """
        def requant(acc, m, s):
            out = exact(acc, m, s)
            return out if np.ndim(acc) else np.int64(out)
        """, "requant")
    tests = by_name(numpy_scalar)
    assert "use int(...)" in tests["probabilities to int8 weights (m = 16646144, s = 33, the chapter's example)"]["output"]
    in_place = grade_text(right + """
        def requant(acc, m, s):
            if np.ndim(acc) == 0:
                return int(exact(acc, m, s))
            acc[...] = exact(acc, m, s)
            return acc
        """, "requant")
    tests = by_name(in_place)
    assert "modified in place" in tests["the input array is left unmodified"]["output"]
    assert tests["24 random arrays: accumulators of every size, every shift, random mantissas"]["status"] == "passed"


# ---------------------------------------------------------------- attention_tail: the reference


def test_the_tail_reference_is_the_course_s_programs():
    """The grader's head, tail, cycle model and integer step against ga2's: every L, both heads."""
    from ga2 import attn, cycles
    from ga2.machine import Machine
    for L in range(1, 33):
        ex = G_tail.Example(L, 300 + L, query_gain=1 + L % 4)
        as_dicts = lambda prog: [{"op": i.op, **i.fields} for i in prog]  # noqa: E731
        with_defaults = lambda prog: [{**G_tail.OPTIONAL.get(d["op"], {}), **d} for d in prog]  # noqa: E731
        assert as_dicts(attn.attention_tail(L, ex.P)) == with_defaults(G_tail.course_tail(L, ex.P))
        for variant in attn.VARIANTS:
            assert as_dicts(attn.head(L, variant, ex.P)) == with_defaults(G_tail.course_head(L, variant, ex.P))
            program = attn.program(L, variant, ex.P)
            machine = Machine(ex.ext_before(variant)).run(program)
            assert machine.ext.tolist() == ex.ext_after(variant), (L, variant)
            assert G_tail.cycles(with_defaults(G_tail.course_head(L, variant, ex.P) + G_tail.course_tail(L, ex.P))
                                 + [{"op": "HALT"}]) == cycles.cycle_counts(program).total


def test_the_grader_s_mantissas_are_the_machine_s():
    from ga2.quant import mantissa_shift
    rng = np.random.default_rng(8)
    for x in np.exp(rng.uniform(-30, 8, size=500)):
        assert G_tail.mantissa_shift(float(x)) == mantissa_shift(float(x))
    assert G_tail.mantissa_shift(127 / 65536) == (16646144, 33)


def test_hidden_examples_exercise_the_saturation_of_the_scores():
    saturated = [ex for ex in registry.tests("attention_tail")[3].calls]
    assert len(saturated) == 12
    examples = [G_tail.Example(L, 7200 + k, query_gain=g, weight_sd=sd) for k, (L, g, sd) in
                enumerate([(16, 8.0, 0.25), (32, 6.0, 0.3)], start=4)]
    assert any(max(abs(v) for v in ex.s8) == 127 or 127 in ex.q8 or -127 in ex.q8 for ex in examples)


TAIL = '''
D = 16
SP_KC, SP_VC, SP_Q8, SP_S, SP_S8, SP_P, SP_W, SP_O, SP_O8 = 1792, 2304, 2832, 2848, 2880, 2912, 2944, 2976, 2992
EX_OUT = 3072


def rq(dst, src, n, p):
    return {"op": "RQ", "dst": dst, "src": src, "len": n, "m": p[0], "s": p[1]}


def attention_tail(L, P):
    tail = [{"op": "MM", "dst": SP_S + 4 * j, "A": SP_Q8, "B": SP_KC + 4 * j * D, "M": 1, "K": D,
             "N": TILE, "tb": TB, "lda": D, "ldb": D, "ldc": 4} for j in range((L + 3) // 4)]
    tail += [rq(SP_S8, SP_S, L, P[SCORES]), {"op": "SM", "dst": SP_P, "src": SP_S8, "len": L},
             rq(SP_W, SP_P, L, P["weights"])]
    tail += [{"op": "MM", "dst": SP_O + 4 * c, "A": SP_W, "B": SP_VC + 4 * c, "M": 1, "K": L, "N": 4,
              "lda": L, "ldb": D, "ldc": 4} for c in range(D // 4)]
    return tail + [rq(SP_O8, SP_O, D, P["out"]), {"op": "ST", "src": SP_O8, "dst": EX_OUT, "len": D}] + EXTRA
'''


def tail_source(tile="min(4, L - 4 * j)", tb=1, scores='"scores"', extra="[]"):
    return (TAIL.replace("TILE", tile).replace("TB", str(tb)).replace("SCORES", scores)
            .replace("EXTRA", extra))


def grade_tail(**changes):
    return grade_text(tail_source(**changes), "attention_tail")


def test_a_right_tail_gets_full_marks_with_defaults_left_out():
    result = grade_tail()
    assert result["status"] == "ok" and result["score"] == result["max_score"] == 12, \
        [t["output"] for t in result["tests"] if t["status"] != "passed"]


def test_an_equivalent_but_slower_tail_loses_only_the_extra_points():
    result = grade_tail(tile="4")
    tests = by_name(result)
    extra = tests["extra: no more cycles than the course's tail, at every L from 1 to 32"]
    assert extra["status"] == "failed" and "takes more cycles than the course's" in extra["output"]
    assert result["score"] == result["max_score"] - 2


def test_wrong_tails_are_told_what_looks_wrong():
    tb0 = grade_tail(tb=0)
    assert "read the key cache with tb = 0" in "\n".join(t["output"] for t in tb0["tests"])
    swapped = grade_tail(scores='"weights"')
    assert "no RQ uses P['scores']" in "\n".join(t["output"] for t in swapped["tests"])
    halt = grade_tail(extra='[{"op": "HALT"}]')
    assert all(t["status"] == "failed" for t in halt["tests"][:5])
    assert "is a HALT: leave it out" in halt["tests"][0]["output"]
    stray = grade_tail(extra='[{"op": "ST", "src": SP_O8, "dst": 4000, "len": 16}]')
    assert "changed EXT elsewhere too" in stray["tests"][0]["output"]
    for result in (tb0, swapped, halt, stray):
        assert result["status"] == "ok" and result["score"] < result["max_score"]


@pytest.mark.parametrize("value,words", [
    ("None", "returned None; expected a list of instructions"),
    ("'MM dst=2848'", "returned a Python str"),
    ("[{'op': 'MM'}]", "field 'dst' is missing"),
    ("[{'op': 'mm', 'dst': 1}]", "field 'op' is 'mm', not one of LD, ST, MM, RQ, SM, HALT"),
    ("[{'op': 'ST', 'src': 2992, 'dst': 3072, 'len': 16.0}]", "field 'len' is a Python float"),
    ("[{'op': 'ST', 'src': 2992, 'dst': 3072, 'len': True}]", "field 'len' is a bool"),
    ("[{'op': 'ST', 'src': 2992, 'dst': 3072, 'len': 10 ** 40}]", "is not an address or a count"),
    ("[{'op': 'ST', 'src': 2992, 'dst': 3072, 'len': 16, 'note': 1}]", "'note' is not a field of ST"),
    ("[{'op': 'ST', 'src': 2992, 'dst': 3072, 'len': 16, 7: 1}]", "a Python int is not a field of ST"),
    ("[{'op': 'SM', 'dst': 2912, 'src': 2880, 'len': 5000}]", "instruction 0 of the tail (SM): field 'src'"),
    ("[{'op': 'MM', 'dst': 0, 'A': 0, 'B': 0, 'M': 5, 'K': 1, 'N': 1, 'lda': 1, 'ldb': 1, 'ldc': 1}]",
     "instruction 0 of the tail (MM): field 'M': must be in 1..4, got 5"),
    ("[{'op': 'LD', 'dst': 0, 'src': 0, 'len': 1}] * 300", "returned 300 instructions; the grader runs tails of at "
                                                          "most 256"),
    ("[{'op': 'LD', 'dst': 0, 'src': 0, 'len': 1}] * 150_000", "too large"),
    ("[Fake()]", "instruction 0 of the tail is a submission.Fake"),
    ("[Instr()]", "does not travel to the grader: return plain dicts"),
])
def test_instructions_are_validated_before_anything_runs(value, words):
    """Every form of wrong return is a clear failure with the index and the field, never a grader
    error; nothing past the grader's bound is run."""
    result = grade_text(f"""
        class Fake(dict):
            pass
        class Instr:
            pass
        def attention_tail(L, P):
            return {value}
        """, "attention_tail")
    assert result["status"] == "ok", result["output"]
    assert result["score"] <= 1                   # at most "P is left as it was"
    feedback = "\n".join(t["output"] for t in result["tests"])
    assert words in feedback, feedback
    assert "could not be checked" not in feedback and "grader itself failed" not in feedback


def test_the_notebook_keeps_a_constant_that_needs_a_missing_module_undefined():
    """A learner's notebook computes ``P = ga2.attn.rq_params(ex)`` at its top level: in the
    sandbox, where ga2 cannot be imported, the name stays undefined instead of failing the import."""
    source = textwrap.dedent('''
        import ga2
        import numpy as np
        SCALE = np.sqrt(2.0)
        ex = ga2.attn.make_example(3, 1)
        def attention_tail(L, P):
            return []
        ''')
    extracted = extract(source.encode(), "answer.py", ["attention_tail"])
    namespace = {}
    exec(compile(extracted.source.replace("import ga2", "import no_such_module_here"), "s", "exec"), namespace)
    assert "ex" not in namespace and namespace["SCALE"] == pytest.approx(2 ** 0.5)
    assert callable(namespace["attention_tail"])
    # the sandbox's ga2 has the machine but not ga2.attn: the value fails, the rest loads
    namespace = {"__fake__": types.ModuleType("ga2")}
    exec(compile(extracted.source.replace("import ga2", "ga2 = __fake__"), "s", "exec"), namespace)
    assert "ex" not in namespace and callable(namespace["attention_tail"])


def test_the_public_checks_of_attention_tail_run_on_the_sandboxed_machine():
    """``python -m graders check`` runs the public checks in the sandbox, whose ga2 has the
    simulator but neither the course's tail nor what is built on it; the hidden tests of the
    reference solution still load its notebook (which calls ga2.attn at its top level)."""
    import subprocess
    import sys
    from pathlib import Path
    root = Path(__file__).resolve().parents[2]
    run = subprocess.run([sys.executable, "-m", "graders", "check", "solutions/attention_tail.ipynb"],
                         cwd=root, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0 and "4 of 4 public checks passed" in run.stdout, run.stdout + run.stderr
    hide = registry.get("attention_tail").libs[0].hide
    assert {"attn", "mutants"} <= set(hide)
    from graders.grading import grade_bytes
    result = grade_bytes((root / "solutions" / "attention_tail.ipynb").read_bytes(), "attention_tail.ipynb",
                         "attention_tail")
    assert result["score"] == result["max_score"], result["output"]


def test_a_change_to_the_machine_changes_the_fingerprint_of_attention_tail(tmp_path, monkeypatch):
    """The hidden tests run the learner's tail on ``ga2.machine``: a grade stays valid only as
    long as that machine does, so its files are part of the exercise's fingerprint."""
    import shutil
    copy = tmp_path / "ga2"
    shutil.copytree(registry.package_dir("ga2"), copy, ignore=shutil.ignore_patterns("__pycache__", "*.v"))
    real = registry.package_dir
    monkeypatch.setattr(registry, "package_dir", lambda name: copy if name == "ga2" else real(name))
    registry.fingerprint.cache_clear()
    try:
        before = registry.fingerprint("attention_tail")
        (copy / "machine.py").write_text((copy / "machine.py").read_text() + "\n# a change\n")
        registry.fingerprint.cache_clear()
        assert registry.fingerprint("attention_tail") != before
    finally:
        registry.fingerprint.cache_clear()
