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
from ..registry import Call, Exercise, Step, Test, case

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


class _Replay:
    """A model of reference counts, keyed by the blocks the learner's allocator actually returned,
    replaying a script's outcomes step by step."""

    def __init__(self, script: Script):
        self.script, self.n = script, script.num_blocks
        self.refs: dict[int, int] = {}
        self.values: list = []             # what each step returned (None for a step that raised)
        self.origin: dict[int, int] = {}   # block -> the step that last handed it out

    def label(self, i: int, op) -> str:
        if op[0] in ("allocate", "num_free"):
            call = "allocate()" if op[0] == "allocate" else "num_free"
        elif op[1] is None:
            call = f"{op[0]}({op[2]})"
        else:
            block = self.values[op[1]]
            call = f"{op[0]}({block}) (block {block}: from step {op[1] + 1})"
        return f"step {i + 1} of {len(self.script.ops)}, {call}"

    def expect_error(self, i, op, outcome, kind: str, why: str) -> None:
        """The step must have raised ``kind``; it then returned nothing."""
        where = self.label(i, op)
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
        self.values.append(None)

    def returned(self, i, op, outcome):
        if not outcome.get("ok"):
            raise Fail(f"{self.label(i, op)}: {_error_text(outcome)}")
        return outcome.get("value")

    def step(self, i: int, op, outcome) -> None:
        if not isinstance(outcome, dict):
            raise Fail(f"step {i + 1}: its outcome could not be read")
        free_now = self.n - sum(1 for c in self.refs.values() if c > 0)
        if op[0] == "allocate":
            return self.allocate(i, op, outcome, free_now)
        if op[0] == "num_free":
            return self.num_free(i, op, outcome, free_now)
        block = self.values[op[1]] if op[1] is not None else op[2]
        count = self.refs.get(block, 0) if _is_int(block) else 0
        if op[0] == "refcount":
            return self.refcount(i, op, outcome, block, count)
        if not 0 <= block < self.n:
            return self.expect_error(i, op, outcome, "ValueError", f"block {block} is not in the pool, whose "
                                                                  f"blocks are 0 to {self.n - 1}")
        if op[0] == "fork":
            return self.fork(i, op, outcome, block, count)
        return self.free(i, op, outcome, block, count)

    def allocate(self, i, op, outcome, free_now: int) -> None:
        n = self.n
        if free_now == 0:
            return self.expect_error(i, op, outcome, "OutOfBlocks",
                                     "the only block is live" if n == 1 else f"all {n} blocks are live")
        b = self.returned(i, op, outcome)
        if not _is_int(b):
            raise Fail(f"{self.label(i, op)}: should return a block number (an int), returned {describe(b)}")
        b = int(b)
        if not 0 <= b < n:
            raise Fail(f"{self.label(i, op)}: returned {b}, which is not a block of the pool (0 to {n - 1})")
        if self.refs.get(b, 0) > 0:
            refs = self.refs[b]
            raise Fail(f"{self.label(i, op)}: returned block {b}, which is still live ({refs} reference"
                       f"{'s' * (refs != 1)}, handed out at step {self.origin[b] + 1}): a block may be "
                       "handed out only while it is free")
        self.refs[b] = 1
        self.origin[b] = i
        self.values.append(b)

    def num_free(self, i, op, outcome, free_now: int) -> None:
        got = self.returned(i, op, outcome)
        if isinstance(got, Opaque) and got.type_name == "method":
            raise Fail(f"{self.label(i, op)}: num_free is a method here; make it a property (@property) "
                       "or an attribute, read without parentheses")
        if not _is_int(got) or int(got) != free_now:
            raise Fail(f"{self.label(i, op)}: returned {_shown(got)}; {free_now} of the {self.n} blocks are free "
                       "at this point")
        self.values.append(got)

    def refcount(self, i, op, outcome, block, count: int) -> None:
        got = self.returned(i, op, outcome)
        if not _is_int(got) or int(got) != count:
            raise Fail(f"{self.label(i, op)}: returned {_shown(got)}; block {block} has {count} "
                       f"reference{'s' * (count != 1)} at this point")
        self.values.append(got)

    def fork(self, i, op, outcome, block: int, count: int) -> None:
        if count == 0:
            return self.expect_error(i, op, outcome, "ValueError",
                                     f"block {block} is free: only a live block can be shared")
        got = self.returned(i, op, outcome)
        if not _is_int(got) or int(got) != block:
            raise Fail(f"{self.label(i, op)}: should return the same block, {block} (one more reference to it), "
                       f"returned {_shown(got)}")
        self.refs[block] = count + 1
        self.values.append(block)

    def free(self, i, op, outcome, block: int, count: int) -> None:
        if count == 0:
            return self.expect_error(i, op, outcome, "ValueError", f"block {block} is already free: a double free")
        self.returned(i, op, outcome)
        self.refs[block] = count - 1
        self.values.append(None)


def replay(script: Script, outcomes) -> None:
    """Check the learner's outcomes of ``script`` against a model of reference counts; raise
    ``Fail`` at the first step that differs."""
    if not isinstance(outcomes, list) or len(outcomes) != len(script.ops):
        raise Fail(f"the allocator's steps did not all come back ({describe(outcomes)})")
    model = _Replay(script)
    for i, (op, outcome) in enumerate(zip(script.ops, outcomes)):
        model.step(i, op, outcome)


def _replay_all(scripts: list[Script], results) -> None:
    """Each allocator's outcomes replayed against its script, named when there are several."""
    for number, (script, result) in enumerate(zip(scripts, results), start=1):
        try:
            replay(script, result.value)
        except Fail as fail:
            prefix = f"allocator {number} of {len(scripts)} (num_blocks = {script.num_blocks}), " \
                if len(scripts) > 1 else ""
            raise Fail(prefix + str(fail)) from None


def _test(name: str, points: float, scripts: list[Script]) -> Test:
    """The test that runs each script on an allocator of its own."""
    return case(name, points, [s.call() for s in scripts], _replay_all, scripts, step="allocator")


# ------------------------------------------------------------------------------- the scripts


def a_new_allocator() -> Script:
    s = Script(6)
    s.num_free()
    for b in range(6):
        s.literal("refcount", b)
    return s


def every_block_once() -> Script:
    s = Script(7)
    for _ in range(7):
        k = s.allocate()
        s.refcount(k)
        s.num_free()
    return s


def one_allocate_too_many() -> Script:
    s = Script(3)
    for _ in range(3):
        s.allocate()
    s.allocate()
    s.num_free()
    s.allocate()
    return s


def a_freed_block_comes_back() -> Script:
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
    return s


def forks() -> Script:
    s = Script(5)
    a = s.allocate()
    s.fork(a)
    s.refcount(a)
    s.num_free()
    s.fork(a)
    s.refcount(a)
    b = s.allocate()
    s.refcount(b)
    return s


def a_shared_block() -> Script:
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
    return s


def double_frees() -> Script:
    s = Script(4)
    s.literal("free", 0)
    s.num_free()
    a = s.allocate()
    s.free(a)
    s.free(a)                                      # a double free
    s.num_free()
    s.refcount(a)
    return s


def forks_of_free_blocks() -> Script:
    s = Script(3)
    s.literal("fork", 1)
    a = s.allocate()
    s.free(a)
    s.fork(a)
    s.num_free()
    return s


def blocks_outside_the_pool() -> Script:
    s = Script(3)
    for name, block in (("free", 3), ("free", -1), ("fork", 3), ("fork", -2), ("free", 100)):
        s.literal(name, block)
    s.num_free()
    return s


def a_pool_of_one() -> Script:
    s = Script(1)
    a = s.allocate()
    s.allocate()
    s.fork(a)
    s.free(a)
    s.allocate()
    s.free(a)
    s.num_free()
    s.allocate()
    return s


def a_large_pool(n: int) -> Script:
    s = Script(n)
    ks = [s.allocate() for _ in range(n)]
    s.allocate()
    for k in ks[::-1]:
        s.free(k)
    s.num_free()
    for _ in range(n):
        s.allocate()
    s.num_free()
    return s


def random_scripts(seed: int, n_ops: int, *pools: int) -> list[Script]:
    """One random script of ``n_ops`` operations per pool size, drawn in turn from one generator."""
    rng = np.random.default_rng(seed)
    return [random_script(rng, n, n_ops) for n in pools]


# --------------------------------------------------------------------------------- the tests


def make_tests() -> list[Test]:
    return [
        _test("a new allocator: every block free, every reference count 0", 1, [a_new_allocator()]),
        _test("allocate hands out each of the num_blocks blocks once, with one reference", 2, [every_block_once()]),
        _test("allocate with nothing free raises OutOfBlocks, and changes nothing", 2, [one_allocate_too_many()]),
        _test("a freed block comes back: allocate hands it out again", 2, [a_freed_block_comes_back()]),
        _test("fork returns the same block with one more reference, and takes no free block", 2, [forks()]),
        _test("a shared block stays live until its last reference is freed", 2, [a_shared_block()]),
        _test("freeing a free block raises ValueError (a double free) and changes nothing", 2, [double_frees()]),
        _test("fork of a free block raises ValueError", 1, [forks_of_free_blocks()]),
        _test("a block number outside 0 .. num_blocks - 1 raises ValueError", 1, [blocks_outside_the_pool()]),
        _test("a pool of one block", 1, [a_pool_of_one()]),
        _test("no leak, no block handed out twice, after 300 random operations on 8 blocks", 3,
              random_scripts(6001, 300, 8)),
        _test("no leak after random operations on pools of 1, 3 and 33 blocks", 2, random_scripts(6002, 200, 1, 3, 33)),
        _test("a pool of 2,000 blocks: all handed out, all freed, all handed out again", 1, [a_large_pool(2000)]),
    ]


EXERCISE = Exercise(name=FN, make_tests=make_tests)
