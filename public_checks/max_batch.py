"""Public checks for the exercise ``max_batch(gpu_bytes, weight_bytes, n_layers, n_kv_heads,
head_dim, seq_len, bytes_per_value)`` (chapter 3).

The expected batches, and what two common mistakes give, are stored in ``data/max_batch.json``.
The hidden tests check more.
"""
from ._data import load

CASES = load("max_batch")["cases"]
HINTS = {"spare_in_gib": "{got} would fit if the {spare:g} GB left were {spare:g} GiB (2**30 bytes each); "
                         "here a GB is 10**9 bytes.",
         "one_factor": "That is the count for half-size sequences: is the factor 2 (keys and values) missing?"}


def _check(fn, index, extra=""):
    case = CASES[index]
    args, want = tuple(case["args"]), case["expected"]
    got = fn(*args)
    if got != want:
        spare = (args[0] - args[1]) / 10**9
        hints = [text.format(got=got, spare=spare) for name, text in HINTS.items()
                 if case["mistakes"][name] != want and got == case["mistakes"][name]]
        if isinstance(got, (int, float)) and got < 0:
            hints.append("When the weights take all the memory, the batch is 0.")
        elif isinstance(got, (int, float)) and got == want + 1:
            hints.append("Only whole sequences count: round down (floor division).")
        elif isinstance(got, (int, float)) and got == want - 1:
            hints.append("A sequence that fits exactly counts: use floor division.")
        raise AssertionError(f"{case['what']}: expected {want}, got {got!r}.{extra}" + "".join(" " + h for h in hints))
    assert type(got) is int, f"max_batch should return a Python int (whole sequences), got {type(got).__name__} ({got!r})"


def check_a10(fn):
    _check(fn, 0)


def check_exact_fit_counts(fn):
    _check(fn, 1)
    _check(fn, 2)


def check_weights_do_not_fit(fn):
    _check(fn, 3, " When the weights exceed the GPU's memory, the batch is 0.")
    _check(fn, 4, " When the weights exactly fill the GPU, the batch is 0.")


def check_returns_int(fn):
    _check(fn, 5)


CHECKS = [
    ("the A10 example: 10 GB left, 4 sequences of 4,096 tokens", check_a10),
    ("a sequence that fits exactly counts; one byte less does not", check_exact_fit_counts),
    ("the weights alone do not fit: 0", check_weights_do_not_fit),
    ("returns a Python int, rounded down (16 GiB budget, 70B-class)", check_returns_int),
]
