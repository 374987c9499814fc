"""course-widgets (coursebook/widgets/library.js) in Chromium, against Python.

The library's numbers must read exactly as Python writes them: the calculator's page is
compared with lessons.memory text for text.  Its functions are called in the browser on
thousands of values (random doubles, exact ties, integers past 2**53) and compared with
Python's own format(), round() and int formatting; the parsers get what readers type.
"""
from __future__ import annotations

import random
import struct

import pytest

from coursebook.widgets import bundle, library_exports
from watched import watched_page

_module_text = None


def library_module(folder) -> str:
    """A module exporting every name of the library, as a widget's module would import them."""
    names = library_exports()
    probe = folder / "probe.js"
    probe.write_text(f'import {{ {", ".join(names)} }} from "course-widgets";\nexport {{ {", ".join(names)} }};\n')
    return bundle(probe)


LOAD_JS = r"""
async (esm) => {
  const url = URL.createObjectURL(new Blob([esm], {type: 'text/javascript'}));
  window.__lib = await import(url);
  return Object.keys(window.__lib);
}
"""


@pytest.fixture(scope="module")
def lib(scratch_site, browser):
    folder, url = scratch_site
    (folder / "blank.html").write_text("<!DOCTYPE html><title>library</title><p>library</p>")
    with watched_page(browser, url, "blank.html", wait_for_widgets=False) as (page, problems):
        names = page.evaluate(LOAD_JS, library_module(folder))
        assert sorted(names) == sorted(library_exports())
        yield page
        assert not problems, problems


def call(page, js, args):
    return page.evaluate(f"(args) => args.map(a => {{ const L = window.__lib; return ({js})(a); }})", args)


def random_doubles(n, seed):
    rng = random.Random(seed)
    out = []
    while len(out) < n:
        bits = rng.getrandbits(64)
        x = struct.unpack("<d", struct.pack("<Q", bits))[0]
        exponent = (bits >> 52) & 0x7FF
        if exponent == 0x7FF or not 1023 - 80 < exponent < 1023 + 80:   # finite, |x| in 2**-80 .. 2**80
            continue
        out.append(x)
    return out


def tie_doubles():
    """Values whose decimal rounding is an exact tie (k/8, k/2), and the usual suspects."""
    values = [k / 8 for k in range(-200, 201)] + [k / 2 for k in range(-50, 51)]
    values += [2.675, 1.005, 0.125, 0.375, 1.125, 2.5, 1e22, 123456789.125, 2**53 + 2.0, 5e-324, -0.0, 0.0,
               9.995, 0.045, 1e15 + 0.5, 4503599627370496.5, 22.351741790771484, 13.0385160446167]
    return values


def test_fixed_is_pythons_format(lib):
    values = random_doubles(1500, seed=1) + tie_doubles()
    args = [[x, d, g] for x in values for d, g in ((2, True), (0, True), (3, False), (1, True))]
    got = call(lib, "([x, d, g]) => L.fixed(x, d, g)", args)
    want = [format(x, f"{',' if g else ''}.{d}f") for x, d, g in args]
    wrong = [(a, g_, w) for a, g_, w in zip(args, got, want) if g_ != w]
    assert not wrong, wrong[:10]
    # and where JavaScript's own toFixed is not Python's (ties rounded up), fixed follows Python
    assert call(lib, "(x) => [x.toFixed(2), L.fixed(x, 2)]", [1.125]) == [["1.13", "1.12"]]


def test_round_half_even_is_pythons_round(lib):
    values = random_doubles(1500, seed=2) + tie_doubles() + [2.0**60 + 2**8, -(2.0**70), 0.49999999999999994]
    got = call(lib, "(x) => L.roundHalfEven(x).toString()", values)
    assert [int(g) for g in got] == [round(x) for x in values]


def test_format_int_writes_every_digit(lib):
    rng = random.Random(3)
    ints = [0, 7, -7, 999, 1000, -1000, 2**53 + 1, -(2**63) - 1, 10**30 + 1] + \
        [rng.randint(-(10**40), 10**40) for _ in range(500)]
    got = call(lib, "(s) => L.formatInt(BigInt(s))", [str(n) for n in ints])
    assert got == [f"{n:,}" for n in ints]
    assert call(lib, "(n) => L.formatInt(n)", [0, 4096, 123456789]) == ["0", "4,096", "123,456,789"]


def test_ratio_text_is_pythons_true_division(lib):
    rng = random.Random(4)
    pairs = [[rng.randint(0, 2**52), rng.randint(1, 2**52)] for _ in range(800)] + \
        [[1, 3], [2, 3], [9, 8], [17, 8], [12345, 1000], [2**53 - 1, 7]]
    got = call(lib, "([a, b]) => L.ratioText(BigInt(a), BigInt(b))", pairs)
    assert got == [f"{a / b:,.2f}" for a, b in pairs]


WHOLE_CASES = [
    ("4096", 4096), ("4,096", 4096), ("4 096", 4096), ("4_096", 4096), ("+12", 12), ("0012", 12), (" 7 ", 7),
    ("1,000", 1_000), ("10000", 10_000), ("1,000,000", "at most 10,000"),
    ("", "empty"), ("   ", "empty"), ("-5", "negative"), ("1,23", "not a whole number"), ("12.0", "not a whole number"),
    ("1e3", "not a whole number"), ("0x10", "not a whole number"), ("abc", "not a whole number"),
    ("\u0663", "not a whole number"), ("0", "at least 1"), ("10001", "at most 10,000"),
    ("9" * 400, "at most 10,000"),
]


@pytest.mark.parametrize("text, want", WHOLE_CASES, ids=[repr(t)[:20] for t, _ in WHOLE_CASES])
def test_parse_whole(lib, text, want):
    got = call(lib, "(t) => { const r = L.parseWhole(t, {label: 'layers L', min: 1, max: 10000});"
                    " return r.error ? {error: r.error} : {value: r.value.toString()}; }", [text])[0]
    if isinstance(want, int):
        assert got == {"value": str(want)}
    else:
        assert "error" in got and want in got["error"] and got["error"].startswith("layers L")
        assert len(got["error"]) < 200, "a long input is shortened in the message"


AMOUNT_CASES = [
    ("24", 24.0), ("22.5", 22.5), (".5", 0.5), ("5.", 5.0), ("1e3", 1000.0), ("2.5E-1", 0.25), ("1,000.5", 1000.5),
    ("0", 0.0), ("22.351741790771484", 22.351741790771484),
    ("", "empty"), ("24,5", "point"), ("-1", "negative"), ("-0.5", "negative"), ("inf", "not a number"),
    ("NaN", "not a number"), ("0x10", "not a number"), ("1e400", "at most"), ("2000000", "at most"),
    ("1.2.3", "not a number"),
]


@pytest.mark.parametrize("text, want", AMOUNT_CASES, ids=[repr(t) for t, _ in AMOUNT_CASES])
def test_parse_amount(lib, text, want):
    got = call(lib, "(t) => L.parseAmount(t, {label: 'GPU memory', min: 0, max: 1000000, unit: 'GB'})", [text])[0]
    if isinstance(want, float):
        assert got == {"value": want}
    else:
        assert "error" in got and want in got["error"] and got["error"].startswith("GPU memory")


def test_nice_ticks_cover_the_range(lib):
    tops = [1, 7, 10, 99, 1000, 2500, 123456, 0.3]
    for top, ticks in zip(tops, call(lib, "(t) => L.niceTicks(t)", tops)):
        assert ticks[0] == 0 and ticks[-1] >= top and len(ticks) <= 12
        steps = {round(b - a, 9) for a, b in zip(ticks, ticks[1:])}
        assert len(steps) == 1
