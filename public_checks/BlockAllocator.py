"""Public checks for the exercise ``BlockAllocator(num_blocks)`` (chapter 6).

Each case is a short script of calls on a new allocator, stored with what each call must do in
``data/BlockAllocator.json``: return a block that is not one of the blocks still live, return
the same block it was given, return a given count, or raise ``OutOfBlocks`` or ``ValueError``.
A call that needs a block names the earlier call that returned it, so the checks hold whichever
free block your allocator picks.  The statement stresses the errors these check: a double free,
and a fork of a free block, each a ``ValueError`` that changes nothing.  The hidden tests check more.
"""
from ._data import load

CASES = {case["what"]: case for case in load("BlockAllocator")["cases"]}


def _describe(call: str, args, values) -> str:
    if args is None:
        return call
    shown = []
    for a in args:
        if isinstance(a, dict):
            shown.append(f"the block of call {a['step'] + 1}")
        else:
            shown.append(repr(a))
    return f"{call}({', '.join(shown)})"


def _run(cls, what: str) -> None:
    case = CASES[what]
    allocator = cls(case["num_blocks"])
    values = []
    for i, step in enumerate(case["steps"]):
        args = None if step["args"] is None else [values[a["step"]] if isinstance(a, dict) else a
                                                  for a in step["args"]]
        where = f"{what}, call {i + 1}, {_describe(step['call'], step['args'], values)}"
        expect = step["expect"]
        try:
            attr = getattr(allocator, step["call"])
            got = attr if args is None else attr(*args)
        except NotImplementedError:
            raise
        except Exception as err:  # noqa: BLE001 - the exception is what the step is checked on
            _check_raised(where, expect, err)
            values.append(None)
            continue
        if "raises" in expect:
            why = f" ({expect['why']})" if "why" in expect else " (no block is free)"
            raise AssertionError(f"{where}: should raise {expect['raises']}{why}; it returned {got!r}")
        _check_returned(where, step["call"], expect, got, values, case["num_blocks"])
        values.append(got)


def _check_raised(where: str, expect: dict, err: Exception) -> None:
    """The step raised ``err``: it had to raise, and this class of exception."""
    wanted = expect.get("raises")
    names = [c.__name__ for c in type(err).__mro__]
    if wanted is None:
        raise AssertionError(f"{where}: raised {type(err).__name__}: {err}") from None
    if wanted not in names:
        raise AssertionError(f"{where}: should raise {wanted}, raised {type(err).__name__}: {err}") from None
    if wanted == "ValueError" and "OutOfBlocks" in names:
        raise AssertionError(f"{where}: should raise ValueError ({expect['why']}), not OutOfBlocks "
                             "(which says the pool is exhausted)") from None


def _check_returned(where: str, call: str, expect: dict, got, values: list, num_blocks: int) -> None:
    """The step returned ``got``: what it had to (a free block, the same block, a number)."""
    want = expect["returns"]
    if call == "num_free" and callable(got):
        raise AssertionError(f"{where}: num_free should be a property (or an attribute), read without "
                             "parentheses; here it is a method")
    if want == "a free block":
        live = [values[k] for k in expect["not_any_of"]]
        assert isinstance(got, int) and not isinstance(got, bool), (
            f"{where}: should return a block number (an int), returned {got!r}")
        assert 0 <= got < num_blocks, (
            f"{where}: returned {got}, not a block of the pool (0 to {num_blocks - 1})")
        assert got not in live, (
            f"{where}: returned block {got}, which is still live (the blocks live now are {sorted(live)})")
    elif want == "the same block":
        assert got == values[expect["as"]], (
            f"{where}: should return the block it was given, {values[expect['as']]} (one more reference "
            f"to it); returned {got!r}")
    elif want is not None:
        assert got == want and not isinstance(got, bool), f"{where}: should be {want}, got {got!r}"


def check_new(cls):
    _run(cls, "a new allocator of 4 blocks")


def check_exhaustion(cls):
    _run(cls, "4 blocks handed out, then one more asked for")


def check_fork_and_free(cls):
    _run(cls, "fork and free: reference counts")


def check_double_free(cls):
    _run(cls, "a double free")


def check_freed_block_comes_back(cls):
    _run(cls, "a freed block comes back")


def check_fork_of_free_block(cls):
    _run(cls, "a fork of a free block")


CHECKS = [
    ("a new allocator: every block free", check_new),
    ("distinct blocks, then OutOfBlocks when none is free", check_exhaustion),
    ("fork adds a reference; free removes one", check_fork_and_free),
    ("a double free raises ValueError", check_double_free),
    ("a freed block comes back", check_freed_block_comes_back),
    ("a fork of a free block raises ValueError and changes nothing", check_fork_of_free_block),
]
