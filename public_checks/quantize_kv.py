"""Public checks for the exercise ``quantize_kv(x, bits, axis)`` and ``dequantize_kv(codes, scale,
offset)`` (chapter 13).

A few small cases; the expected codes, scales, offsets and decoded values, and what an answer
that rounds down or takes its statistics over the other axis returns, are stored in
``data/quantize_kv.json``.  The hidden tests check more.
"""
import numpy as np

from ._data import array, load

DATA = load("quantize_kv")
HINTS = {"floor": "The codes look rounded down: round to the nearest with np.round.",
         "other_axis": "The codes look computed with the statistics of the other axis: axis=0 takes one "
                       "scale per channel (down each column), axis=1 one per token (along each row)."}


def _quantized(quantize_kv, case, what):
    x = array(case["x"])
    result = quantize_kv(x, case["bits"], case["axis"])
    assert isinstance(result, tuple) and len(result) == 3, (
        f"{what}: quantize_kv should return three arrays (codes, scale, offset)")
    codes, scale, offset = result
    want = case["expected"]
    stat = np.shape(want["scale"])
    assert isinstance(codes, np.ndarray) and codes.dtype == np.uint8, (
        f"{what}: codes should be a numpy array of dtype uint8, got "
        f"{getattr(codes, 'dtype', type(codes).__name__)}")
    assert codes.shape == x.shape, f"{what}: codes should have x's shape {x.shape}, got {codes.shape}"
    for name, got in (("scale", scale), ("offset", offset)):
        assert np.shape(got) == stat, (
            f"{what}: {name} should have shape {stat} (axis={case['axis']}, the reduced axis kept), "
            f"got {np.shape(got)}")
    if codes.tolist() != want["codes"]:
        hint = next((text for key, text in HINTS.items() if codes.tolist() == case["mistakes"][key]), "")
        raise AssertionError(f"{what}: codes should be {want['codes']}, got {codes.tolist()}. {hint}".rstrip())
    for name, got in (("scale", scale), ("offset", offset)):
        gap = float(np.max(np.abs(np.asarray(got, dtype=np.float64) - want[name])))
        assert np.all(np.isfinite(got)) and gap <= 1e-12, (
            f"{what}: {name} should be {np.round(want[name], 6).tolist()}, got {np.round(np.asarray(got, float), 6).tolist()}")
    return codes, scale, offset


def _decoded(dequantize_kv, parts, case, what):
    back = np.asarray(dequantize_kv(*parts), dtype=np.float64)
    want = np.asarray(case["decoded"])
    assert back.shape == want.shape, f"{what}: dequantize_kv should give shape {want.shape}, got {back.shape}"
    gap = float(np.max(np.abs(back - want)))
    assert np.all(np.isfinite(back)) and gap <= 1e-9, (
        f"{what}: dequantize_kv should give codes * scale + offset = {np.round(want, 6).tolist()}, got "
        f"{np.round(back, 6).tolist()}")


def check_worked_example_per_channel(quantize_kv, dequantize_kv):
    case = DATA["worked_example_per_channel"]
    parts = _quantized(quantize_kv, case, "the worked example, axis=0")
    _decoded(dequantize_kv, parts, case, "the worked example, axis=0")


def check_worked_example_per_token(quantize_kv, dequantize_kv):
    case = DATA["worked_example_per_token"]
    parts = _quantized(quantize_kv, case, "the worked example, axis=1")
    _decoded(dequantize_kv, parts, case, "the worked example, axis=1")


def check_constant_channel(quantize_kv, dequantize_kv):
    case = DATA["constant"]
    parts = _quantized(quantize_kv, case, "a constant channel beside two others (3 bits, axis=0)")
    _decoded(dequantize_kv, parts, case, "a constant channel beside two others")


def check_random(quantize_kv, dequantize_kv):
    for key, what in (("random_keys", "random keys with an outlier channel (4 bits, axis=0)"),
                      ("random_values", "random values (2 bits, axis=1)")):
        parts = _quantized(quantize_kv, DATA[key], what)
        _decoded(dequantize_kv, parts, DATA[key], what)


def check_input_unchanged(quantize_kv, dequantize_kv):
    case = DATA["random_keys"]
    x = array(case["x"])
    x.flags.writeable = False
    try:
        quantize_kv(x, 4, 0)
    except ValueError as err:
        if "read-only" in str(err):
            raise AssertionError("quantize_kv wrote into x (it was read-only here): compute new arrays "
                                 "instead") from None
        raise
    assert np.array_equal(x, case["x"]), "the values of x changed"


CHECKS = [
    ("the worked example per channel (axis=0): codes, scale, offset, and back", check_worked_example_per_channel),
    ("the worked example per token (axis=1)", check_worked_example_per_token),
    ("a constant channel: scale 0, codes 0, decoded exactly", check_constant_channel),
    ("random keys and values", check_random),
    ("x is not modified", check_input_unchanged),
]
