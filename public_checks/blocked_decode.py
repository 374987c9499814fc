"""Public checks for the exercise ``blocked_decode(q, K_buf, V_buf, seq_len, block)`` (chapter 8).

A few small cases.  Each stores the query, the sequence's rows of the buffers and what the rows
past ``seq_len`` hold ("nan", "zero", or stored rows of large numbers); the expected output and
block count (and what two common mistakes return) are stored in ``data/blocked_decode.json``.
The statement stresses what they check: rows past ``seq_len`` never change ``out``, whatever they
hold; scores of about 10^4 do not overflow; and (the last) ``q``, ``K_buf`` and ``V_buf`` are not
modified.  The hidden tests check more.
"""
import numpy as np

from ._data import array, load, mistake

DATA = load("blocked_decode")
HINTS = {"no_length_mask": "It looks like every row of the buffer was used: only the first seq_len rows "
                           "hold the sequence.",
         "no_scale": "The scores seem not to be divided by sqrt(d)."}
COUNT_HINTS = {"floor": "A partial last block is still a block the loop reads: round seq_len / block up.",
               "plus_one": "When block divides seq_len there is no partial block to add.",
               "buffer": "That is the number of blocks of the whole buffer: the loop stops once it passes seq_len."}


def _buffers(case):
    """(q, K_buf, V_buf) of a stored case: the sequence's rows, then the tail it names."""
    q, K, V = array(case["q"]), array(case["K_rows"]), array(case["V_rows"])
    rest = case["max_seq_len"] - case["seq_len"]
    if case["tail"] == "rows":
        K_tail, V_tail = array(case["K_tail"]), array(case["V_tail"])
    else:
        fill = np.nan if case["tail"] == "nan" else 0.0
        K_tail, V_tail = np.full((rest, K.shape[1]), fill), np.full((rest, V.shape[1]), fill)
    return q, np.vstack([K, K_tail]), np.vstack([V, V_tail])


def _call(fn, case):
    q, K_buf, V_buf = _buffers(case)
    result = fn(q, K_buf, V_buf, case["seq_len"], case["block"])
    assert isinstance(result, tuple) and len(result) == 2, (
        "blocked_decode should return a pair (out, visited)")
    return np.asarray(result[0], dtype=np.float64), result[1]


def _expect(case, got, what, tol=1e-9):
    want = np.asarray(case["expected"])
    assert got.shape == want.shape, f"{what}: out should have shape {want.shape} (d_v,), got {got.shape}"
    if not np.all(np.isfinite(got)):
        tail = case["tail"]
        extra = (" The rows past seq_len hold NaN here: set the last block's scores at or past seq_len to -inf "
                 "and replace those value rows by zeros before the weighted sum (0 x NaN is NaN)."
                 if tail == "nan" else " Subtract the running maximum before exp.")
        raise AssertionError(f"{what}: out contains NaN or inf.{extra}")
    gap = float(np.max(np.abs(got - want)))
    assert gap <= tol, (f"{what}: out should be {np.round(want, 6).tolist()}, got {np.round(got, 6).tolist()} "
                        f"(off by up to {gap:.1e}).{mistake(case, got.tolist(), HINTS)}")


def _expect_count(got, want, what, case=None):
    assert isinstance(got, (int, np.integer)) and not isinstance(got, (bool, np.bool_)), (
        f"{what}: visited should be an integer, got {type(got).__name__}")
    if int(got) != want:
        hint = ""
        for name, text in COUNT_HINTS.items():
            if case is not None and case["mistakes"][name] == int(got) != want:
                hint = " " + text
                break
        raise AssertionError(f"{what}: visited should be {want}, got {int(got)}.{hint}")


def check_note_decode_step(fn):
    case = DATA["note"]
    out, visited = _call(fn, case)
    what = "seq_len 33 in a buffer of 4096 rows, head size 8, blocks of 32"
    _expect(case, out, what)
    _expect_count(visited, case["visited"], what + " (one full block and one of a single row)")


def check_one_row(fn):
    case = DATA["one_row"]
    out, visited = _call(fn, case)
    first = np.asarray(case["V_rows"][0])
    assert out.shape == first.shape and np.all(np.isfinite(out)) and float(np.max(np.abs(out - first))) < 1e-12, (
        f"with seq_len 1 the query attends to the first row only (weight 1), so out should be "
        f"V_buf[0] = {np.round(first, 6).tolist()}; got {np.round(out, 6).tolist()}")
    _expect_count(visited, 1, "seq_len 1")


def check_nan_tail(fn):
    case = DATA["nan_tail"]
    out, visited = _call(fn, case)
    _expect(case, out, "NaN in the rows past seq_len")
    _expect_count(visited, case["visited"], "NaN in the rows past seq_len")


def check_counts(fn):
    for case in DATA["counts"]:
        n, t, b = case["max_seq_len"], case["seq_len"], case["block"]
        K_buf, V_buf = np.zeros((n, 2)), np.ones((n, 3))
        K_buf[t:], V_buf[t:] = np.nan, np.nan
        _, visited = fn(np.ones(2), K_buf, V_buf, t, b)
        _expect_count(visited, case["visited"], f"seq_len {t}, block {b}, a buffer of {n} rows", case)


def check_large_numbers(fn):
    case = DATA["garbage"]
    out, visited = _call(fn, case)
    _expect(case, out, "large scores, and large numbers in the rows past seq_len")
    _expect_count(visited, case["visited"], "large scores, and large numbers in the rows past seq_len")


def check_inputs_unchanged(fn):
    case = DATA["nan_tail"]
    q, K_buf, V_buf = _buffers(case)
    before = [a.copy() for a in (q, K_buf, V_buf)]
    for a in (q, K_buf, V_buf):
        a.flags.writeable = False
    try:
        fn(q, K_buf, V_buf, case["seq_len"], case["block"])
    except ValueError as err:
        if "read-only" in str(err):
            raise AssertionError("your function wrote into q, K_buf or V_buf (read-only here): to keep the rows past "
                                 "seq_len out, mask a copy (or the block you read), never the buffers") from None
        raise
    for name, now, then in zip(("q", "K_buf", "V_buf"), (q, K_buf, V_buf), before):
        assert np.array_equal(now, then, equal_nan=True), f"{name} changed"


CHECKS = [
    ("the first decode step after a 32-token prompt (seq_len 33, a 4096-row buffer)", check_note_decode_step),
    ("seq_len 1: the first value row, one block", check_one_row),
    ("NaN in the unused rows does not reach the output", check_nan_tail),
    ("visited: the blocks up to seq_len, for six lengths and blocks", check_counts),
    ("large scores and large numbers in the unused rows", check_large_numbers),
    ("q, K_buf and V_buf are not modified", check_inputs_unchanged),
]
