"""Public checks for the exercise ``attention_tail(L, P)`` (chapter 10): the attention tail as GA-2
instructions.

Each check puts the course's cached head (stored in ``data/attention_tail.json``, with the
external memory the step starts from and the one it must leave) before your tail and a HALT
after it, runs that on GA-2's simulator, and compares the memory.  The simulator's RQ runs the
requantizer of the machine: in the learner's copy of the course that is yours, installed from
the requant exercise (``ga2.install_from("requant.ipynb")``).  The hidden tests check every L from
1 to 32, other data, the recompute head, and the cycles.
"""
import numpy as np

from ._data import load

DATA = load("attention_tail")
OUT, D = 3072, 16


def _memory(segments) -> list:
    words = [0] * 8192
    for address, values in segments.items():
        words[int(address):int(address) + len(values)] = values
    return words


def _tail(fn, case) -> list:
    L, P = case["L"], {k: tuple(v) for k, v in case["P"].items()}
    tail = fn(L, P)
    assert isinstance(tail, list), f"attention_tail({L}, P) should return a list of instructions, got {type(tail).__name__}"
    for i, ins in enumerate(tail):
        assert type(ins) is dict, (f"instruction {i} is a {type(ins).__name__}: return plain dicts such as "
                                   "{'op': 'SM', 'dst': 2912, 'src': 2880, 'len': L} (the grader receives data)")
        assert ins.get("op") != "HALT", f"instruction {i} is a HALT: leave it out, the HALT comes after your tail"
    return tail


def _machine():
    try:
        import ga2
    except ImportError:
        raise AssertionError("GA-2's simulator (the ga2 package) cannot be imported here: run these checks "
                             "in the exercise notebook, in the course's environment") from None
    if "requant" in ga2.missing():
        raise AssertionError("the simulator has no requantizer yet: finish the requant exercise (chapter 9), then "
                             "run ga2.install_from('requant.ipynb') in this notebook and these checks again")
    from ga2.machine import Machine
    from ga2.limits import ProgramError
    return Machine, ProgramError


def _run(fn, key):
    case = DATA[key]
    tail = _tail(fn, case)
    Machine, ProgramError = _machine()
    head = case["head"]
    try:
        machine = Machine(_memory(case["ext_before"])).run(head + tail + [{"op": "HALT"}])
    except ProgramError as err:
        raise AssertionError(f"L = {case['L']}: instruction {err.index - len(head)} of your tail ({err.op}): "
                             f"field '{err.field}': {err.reason}") from None
    got = machine.ext.astype(np.int64)
    want = np.array(_memory(case["ext_after"]), dtype=np.int64)
    out = slice(OUT, OUT + D)
    assert np.array_equal(got[out], want[out]), (
        f"L = {case['L']}: the output in EXT[{OUT}:{OUT + D}] should be {want[out].tolist()}, "
        f"got {got[out].tolist()}")
    changed = np.flatnonzero(got != want)
    assert changed.size == 0, (f"L = {case['L']}: the output is right, but EXT changed elsewhere too (word "
                               f"{int(changed[0])}): the tail's one store is the output")
    return machine, len(tail)


def check_three(fn):
    _run(fn, "three")


def check_one(fn):
    _run(fn, "one")


def check_six(fn):
    _run(fn, "six")


def check_cycles(fn):
    case = DATA["eight"]
    machine, _ = _run(fn, "eight")
    from ga2.cycles import cycle_counts
    yours = machine.counters.total - cycle_counts(case["head"]).total - 2
    assert yours <= case["tail_cycles"], (f"L = 8: your tail takes {yours} cycles, the course's "
                                          f"{case['tail_cycles']}: the extra points need no more than that")


CHECKS = [
    ("L = 3 after the course's cached head: the output in EXT, bit for bit", check_three),
    ("L = 1: one score, a softmax over one position", check_one),
    ("L = 6: a partial tile of scores (4 + 2 positions)", check_six),
    ("L = 8: the output, and no more cycles than the course's tail", check_cycles),
]
