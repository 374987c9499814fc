"""Hidden tests of the class ``BlockAllocator(num_blocks)`` (chapter 6).

The learner writes the block allocator of a paged KV cache: blocks 0 .. num_blocks - 1, each
free or live with a reference count.  ``allocate()`` hands out a free block with one reference
(``OutOfBlocks`` when none is free); ``fork(block)`` adds a reference and returns the block;
``free(block)`` removes one, and at zero the block is free again; ``refcount(block)``;
``num_free`` (a property).  Freeing a free block, forking a free block, or naming a block outside
the pool raises ``ValueError``.

Each test is one call ``BlockAllocator(n)`` followed by a script of method calls on the object
(``Call.methods``); a step that needs a block names the step that handed it out (``Step``), so
the tests never depend on which free block an allocator chooses.  The check replays the script
on its own model, a dict of reference counts keyed by the blocks the learner's allocator
actually returned, and stops at the first step whose outcome differs, saying which step, what
it did and what the model expected.  A script only ever names a freed block before any later
``allocate`` (which may hand the same number out again), so every expectation is the same for
every correct allocator.
"""
from __future__ import annotations

import numpy as np

from ..checks import Fail, describe
from ..harness import Opaque
from ..registry import Call, Exercise, Step, Test

FN = "BlockAllocator"


# ------------------------------------------------------------------------------- scripts


class Script:
    """Method calls and, for the check, what each means: ("allocate",), ("fork", k) (the block
    step k returned), ("free", k), ("refcount", k), ("num_free",), or the same with a literal
    block number, ("free", None, n)."""

    def __init__(self, num_blocks: int):
        self.num_blocks = num_blocks
        self.steps: list[tuple] = []
        self.ops: list[tuple] = []

    def _add(self, name, args, op) -> int:
        self.steps.append((name, args))
        self.ops.append(op)
        return len(self.steps) - 1

    def allocate(self) -> int:
        return self._add("allocate", (), ("allocate",))

    def fork(self, k: int) -> int:
        return self._add("fork", (Step(k),), ("fork", k))

    def free(self, k: int) -> int:
        return self._add("free", (Step(k),), ("free", k))

    def refcount(self, k: int) -> int:
        return self._add("refcount", (Step(k),), ("refcount", k))

    def num_free(self) -> int:
        return self._add("num_free", None, ("num_free",))

    def literal(self, name: str, block: int) -> int:
        return self._add(name, (block,), (name, None, block))

    def call(self) -> Call:
        return Call(FN, (self.num_blocks,), methods=tuple(self.steps))


def random_script(rng, num_blocks: int, n_ops: int) -> Script:
    """A random sequence of operations; blocks named by the step that allocated them.  It ends by
    freeing every reference still held, checking that every block is free again, allocating the
    whole pool once more and asking for one block too many."""
    s = Script(num_blocks)
    live: dict[int, int] = {}          # allocate step -> references the script holds
    dead: list[int] = []               # freed blocks, no allocate since (their number is not reused)
    for _ in range(n_ops):
        r = rng.random()
        if r < 0.34 or not live:
            k = s.allocate()
            dead = []
            if len(live) < num_blocks:
                live[k] = 1
        elif r < 0.52:
            k = int(rng.choice(list(live)))
            s.fork(k)
            live[k] += 1
        elif r < 0.82:
            k = int(rng.choice(list(live)))
            s.free(k)
            live[k] -= 1
            if not live[k]:
                del live[k]
                dead.append(k)
        elif r < 0.88 and dead:
            s.free(int(rng.choice(dead)))                  # a double free
        elif r < 0.91 and dead:
            s.fork(int(rng.choice(dead)))                  # a fork of a free block
        elif r < 0.96:
            s.refcount(int(rng.choice(list(live) + dead)))
        else:
            s.num_free()
    for k, n in list(live.items()):
        for _ in range(n):
            s.free(k)
    s.num_free()
    for _ in range(num_blocks + 1):
        s.allocate()
    s.num_free()
    return s


# ------------------------------------------------------------------------------ checking


def _is_int(value) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _shown(value) -> str:
    """A returned value as the feedback names it: an int as itself, anything else by its type."""
    return str(int(value)) if _is_int(value) else describe(value)


# The exceptions a step may have to raise, by identity as the harness names classes: Python's own
# ValueError is "ValueError"; OutOfBlocks is the starter's class, at the top of the submission's
# module ("submission.OutOfBlocks"; the engine's allocator, which the tests also run, raises its
# own, "kvcache.paged.OutOfBlocks").  A look-alike class of the same short name is neither.
EXPECTED = {"ValueError": ("ValueError",), "OutOfBlocks": ("submission.OutOfBlocks", "kvcache.paged.OutOfBlocks")}


def _raised(outcome) -> tuple[str, list[str]]:
    """(type name, the short names of the expected exceptions it is an instance of) of a step
    that raised."""
    error = outcome.get("error") or {}
    kind = str(error.get("type", "an exception"))
    classes = [str(b) for b in error.get("bases", []) if isinstance(b, str)] or [kind]
    return kind, [short for short, exact in EXPECTED.items() if set(exact) & set(classes)]


def _error_text(outcome) -> str:
    error = outcome.get("error") or {}
    kind, _ = _raised(outcome)
    message = str(error.get("message", ""))[:200]
    function = error.get("function")
    where = f" (in {function})" if isinstance(function, str) and function not in ("", "<module>") else ""
    if kind.endswith("NotImplementedError"):
        return f"is not implemented yet: it raises NotImplementedError{where}"
    shown = kind if "." not in kind else f"{kind.rsplit('.', 1)[-1]} (a class of its own, not Python's)"
    if kind in EXPECTED["OutOfBlocks"]:
        shown = "OutOfBlocks"
    return f"raised {shown}{': ' + message if message else ''}{where}"


def replay(script: Script, outcomes) -> None:
    """Check the learner's outcomes of ``script`` against a model of reference counts; raise
    ``Fail`` at the first step that differs."""
    n = script.num_blocks
    if not isinstance(outcomes, list) or len(outcomes) != len(script.ops):
        raise Fail(f"the allocator's steps did not all come back ({describe(outcomes)})")
    refs: dict[int, int] = {}
    values: list = []
    origin: dict[int, int] = {}        # block -> the step that last handed it out

    def label(i: int, op) -> str:
        if op[0] in ("allocate", "num_free"):
            call = "allocate()" if op[0] == "allocate" else "num_free"
        elif op[1] is None:
            call = f"{op[0]}({op[2]})"
        else:
            block = values[op[1]]
            call = f"{op[0]}({block}) (block {block}: from step {op[1] + 1})"
        return f"step {i + 1} of {len(script.ops)}, {call}"

    def expect_error(i, op, outcome, kind: str, why: str):
        where = label(i, op)
        if outcome.get("ok"):
            got = outcome.get("value")
            shown = "None" if got is None else (f"block {_shown(got)}" if _is_int(got) else describe(got))
            raise Fail(f"{where}: should raise {kind} ({why}); it returned {shown}")
        name, bases = _raised(outcome)
        if name.endswith("NotImplementedError"):
            raise Fail(f"{where}: {_error_text(outcome)}")
        if kind not in bases:
            raise Fail(f"{where}: should raise {kind} ({why}); it {_error_text(outcome)}")
        if kind == "ValueError" and "OutOfBlocks" in bases:
            raise Fail(f"{where}: should raise ValueError ({why}), not OutOfBlocks, which means the pool is "
                       "exhausted")

    def returned(i, op, outcome):
        if not outcome.get("ok"):
            raise Fail(f"{label(i, op)}: {_error_text(outcome)}")
        return outcome.get("value")

    for i, (op, outcome) in enumerate(zip(script.ops, outcomes)):
        if not isinstance(outcome, dict):
            raise Fail(f"step {i + 1}: its outcome could not be read")
        kind = op[0]
        free_now = n - sum(1 for c in refs.values() if c > 0)
        if kind == "allocate":
            if free_now == 0:
                expect_error(i, op, outcome, "OutOfBlocks",
                             "the only block is live" if n == 1 else f"all {n} blocks are live")
                values.append(None)
                continue
            b = returned(i, op, outcome)
            if not _is_int(b):
                raise Fail(f"{label(i, op)}: should return a block number (an int), returned {describe(b)}")
            b = int(b)
            if not 0 <= b < n:
                raise Fail(f"{label(i, op)}: returned {b}, which is not a block of the pool (0 to {n - 1})")
            if refs.get(b, 0) > 0:
                raise Fail(f"{label(i, op)}: returned block {b}, which is still live ({refs[b]} reference"
                           f"{'s' * (refs[b] != 1)}, handed out at step {origin[b] + 1}): a block may be "
                           "handed out only while it is free")
            refs[b] = 1
            origin[b] = i
            values.append(b)
            continue
        if kind == "num_free":
            got = returned(i, op, outcome)
            if isinstance(got, Opaque) and got.type_name == "method":
                raise Fail(f"{label(i, op)}: num_free is a method here; make it a property (@property) "
                           "or an attribute, read without parentheses")
            if not _is_int(got) or int(got) != free_now:
                raise Fail(f"{label(i, op)}: returned {_shown(got)}; {free_now} of the {n} blocks are free at "
                           "this point")
            values.append(got)
            continue
        block = values[op[1]] if op[1] is not None else op[2]
        count = refs.get(block, 0) if _is_int(block) else 0
        if kind == "refcount":
            got = returned(i, op, outcome)
            if not _is_int(got) or int(got) != count:
                raise Fail(f"{label(i, op)}: returned {_shown(got)}; block {block} has {count} "
                           f"reference{'s' * (count != 1)} at this point")
            values.append(got)
        elif not 0 <= block < n:
            expect_error(i, op, outcome, "ValueError", f"block {block} is not in the pool, whose blocks are "
                                                       f"0 to {n - 1}")
            values.append(None)
        elif kind == "fork":
            if count == 0:
                expect_error(i, op, outcome, "ValueError", f"block {block} is free: only a live block can be shared")
                values.append(None)
                continue
            got = returned(i, op, outcome)
            if not _is_int(got) or int(got) != block:
                raise Fail(f"{label(i, op)}: should return the same block, {block} (one more reference to it), "
                           f"returned {_shown(got)}")
            refs[block] = count + 1
            values.append(block)
        elif kind == "free":
            if count == 0:
                expect_error(i, op, outcome, "ValueError", f"block {block} is already free: a double free")
                values.append(None)
                continue
            returned(i, op, outcome)
            refs[block] = count - 1
            values.append(None)


def _test(name: str, points: float, scripts: list[Script]) -> Test:
    def check(results, scripts=scripts):
        for number, (script, result) in enumerate(zip(scripts, results), start=1):
            try:
                replay(script, result.value)
            except Fail as fail:
                prefix = f"allocator {number} of {len(scripts)} (num_blocks = {script.num_blocks}), " \
                    if len(scripts) > 1 else ""
                raise Fail(prefix + str(fail)) from None
    return Test(name, points, [s.call() for s in scripts], check, step="allocator")


# --------------------------------------------------------------------------------- the tests


def make_tests() -> list[Test]:
    tests = []

    s = Script(6)
    s.num_free()
    for b in range(6):
        s.literal("refcount", b)
    tests.append(_test("a new allocator: every block free, every reference count 0", 1, [s]))

    s = Script(7)
    for _ in range(7):
        k = s.allocate()
        s.refcount(k)
        s.num_free()
    tests.append(_test("allocate hands out each of the num_blocks blocks once, with one reference", 2, [s]))

    s = Script(3)
    for _ in range(3):
        s.allocate()
    s.allocate()
    s.num_free()
    s.allocate()
    tests.append(_test("allocate with nothing free raises OutOfBlocks, and changes nothing", 2, [s]))

    s = Script(4)
    ks = [s.allocate() for _ in range(4)]
    s.free(ks[2])
    s.num_free()
    s.allocate()                                   # the only free block: the one just freed
    s.allocate()
    s.free(ks[0])
    s.free(ks[3])
    s.allocate()
    s.allocate()
    s.num_free()
    tests.append(_test("a freed block comes back: allocate hands it out again", 2, [s]))

    s = Script(5)
    a = s.allocate()
    s.fork(a)
    s.refcount(a)
    s.num_free()
    s.fork(a)
    s.refcount(a)
    b = s.allocate()
    s.refcount(b)
    tests.append(_test("fork returns the same block with one more reference, and takes no free block", 2, [s]))

    s = Script(2)
    a = s.allocate()
    s.fork(a)
    s.fork(a)
    s.free(a)
    s.refcount(a)
    s.num_free()
    s.free(a)
    s.allocate()                                   # the other block: a is still live
    s.allocate()                                   # none free: a has one reference left
    s.free(a)
    s.num_free()
    s.refcount(a)
    tests.append(_test("a shared block stays live until its last reference is freed", 2, [s]))

    s = Script(4)
    s.literal("free", 0)
    s.num_free()
    a = s.allocate()
    s.free(a)
    s.free(a)                                      # a double free
    s.num_free()
    s.refcount(a)
    tests.append(_test("freeing a free block raises ValueError (a double free) and changes nothing", 2, [s]))

    s = Script(3)
    s.literal("fork", 1)
    a = s.allocate()
    s.free(a)
    s.fork(a)
    s.num_free()
    tests.append(_test("fork of a free block raises ValueError", 1, [s]))

    s = Script(3)
    for name, block in (("free", 3), ("free", -1), ("fork", 3), ("fork", -2), ("free", 100)):
        s.literal(name, block)
    s.num_free()
    tests.append(_test("a block number outside 0 .. num_blocks - 1 raises ValueError", 1, [s]))

    s = Script(1)
    a = s.allocate()
    s.allocate()
    s.fork(a)
    s.free(a)
    s.allocate()
    s.free(a)
    s.num_free()
    s.allocate()
    tests.append(_test("a pool of one block", 1, [s]))

    rng = np.random.default_rng(6001)
    tests.append(_test("no leak, no block handed out twice, after 300 random operations on 8 blocks", 3,
                       [random_script(rng, 8, 300)]))
    rng = np.random.default_rng(6002)
    tests.append(_test("no leak after random operations on pools of 1, 3 and 33 blocks", 2,
                       [random_script(rng, n, 200) for n in (1, 3, 33)]))

    s = Script(2000)
    ks = [s.allocate() for _ in range(2000)]
    s.allocate()
    for k in ks[::-1]:
        s.free(k)
    s.num_free()
    for _ in range(2000):
        s.allocate()
    s.num_free()
    tests.append(_test("a pool of 2,000 blocks: all handed out, all freed, all handed out again", 1, [s]))
    return tests


EXERCISE = Exercise(name=FN, make_tests=make_tests)
