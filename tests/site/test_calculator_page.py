"""Chapter 3's cache calculator on the built site, used as a reader uses it, against lessons.memory.

The page has no kernel: what it shows after each change is computed by the widget's module in
the browser (coursebook/widgets/calculator.js).  These tests type into the page and compare what it shows
with the engine's arithmetic in Python (``lessons.memory``) and with the widget's Python side
driven the same way (``CacheCalculator``, as a notebook would drive it); they call the module's
own functions on thousands of inputs, past 2**53 where JavaScript Numbers round; and they check
that bad input gets a message in the widget, never NaN, and that the widget keeps working.
"""
from __future__ import annotations

import json
import random

import pytest

from coursebook.widgets.calculator import BYTES_PER_VALUE, FIELDS, UNITS, CacheCalculator, preset_amount, summary_rows
from lessons.memory import GB, GIB, MODELS, format_bytes, kv_cache_bytes, max_batch, max_tokens
from lessons.roofline import GPUS
from watched import settle, watched_page

PAGE = "book/chapters/03_cache_memory.html"
WIDGET = ".kv-calculator-widget"

READ_JS = r"""
() => {
  const w = document.querySelector('.kv-calculator-widget');
  const msg = w.querySelector('.cw-message');
  return {
    rows: Array.from(w.querySelectorAll('tr[data-row]')).map(tr => Array.from(tr.cells).map(td => td.textContent)),
    fields: Object.fromEntries(Array.from(w.querySelectorAll('input[data-control], select[data-control]'))
                               .map(e => [e.dataset.control, e.value])),
    invalid: Array.from(w.querySelectorAll('[aria-invalid="true"]')).map(e => e.dataset.control),
    unit: (w.querySelector('button[data-control="unit"][aria-pressed="true"]') || {}).textContent,
    units: Array.from(w.querySelectorAll('.cw-unit')).map(e => e.textContent).filter(Boolean),
    message: msg.hidden ? '' : msg.textContent,
    stale: w.querySelector('.cw-figures').classList.contains('cw-stale'),
    sequences: w.querySelectorAll('rect[data-part="sequence"]').length,
    caches: w.querySelectorAll('rect[data-part="caches"]').length,
    weightsBar: w.querySelectorAll('rect[data-part="weights"]').length,
    marker: w.querySelectorAll('.cw-marker').length,
    text: w.innerText,
  };
}
"""

# The widget's module, imported from the page's own saved state (the same text the page runs).
MODULE_JS = r"""
async () => {
  const state = JSON.parse(document.querySelector('script[type="application/vnd.jupyter.widget-state+json"]').textContent).state;
  const entry = Object.values(state).find(e => e.model_name === 'AnyModel' && (e.state._anywidget_id || '').endsWith('CacheCalculator'));
  const url = URL.createObjectURL(new Blob([entry.state._esm], {type: 'text/javascript'}));
  window.__calc = await import(url);
  return Object.keys(window.__calc).sort();
}
"""

CALL_JS = r"""
(cases) => cases.map(c => {
  const m = window.__calc;
  const unitBytes = c.unitBytes;
  const gpuBytes = m.toBytes(c.gpu, unitBytes);
  const weightBytes = m.toBytes(c.weights, unitBytes);
  const r = m.calculate({layers: BigInt(c.L), kvHeads: BigInt(c.G), headDim: BigInt(c.d), tokens: BigInt(c.T),
                         bytesPerValue: BigInt(c.b), gpuBytes, weightBytes});
  const out = {};
  for (const [k, v] of Object.entries(r)) out[k] = typeof v === 'bigint' ? v.toString() : v;
  return {result: out, rows: m.summaryRows(r, c.T, c.unit, unitBytes), perSequenceText: m.formatBytes(r.bytes_per_sequence)};
})
"""


def read(page) -> dict:
    return page.evaluate(READ_JS)


def control(page, name: str):
    return page.locator(f'{WIDGET} [data-control="{name}"]')


def type_into(page, name: str, text: str) -> None:
    control(page, name).fill(str(text))
    settle(page)


def press_unit(page, unit: str) -> None:
    page.locator(f'{WIDGET} button[data-control="unit"][data-value="{unit}"]').click()
    settle(page)


def choose(page, name: str, value) -> None:
    control(page, name).select_option(str(value))
    settle(page)


def expected_rows(L, G, d, T, b, gpu_bytes, weight_bytes, unit) -> list[list[str]]:
    """The table the calculator should show, from lessons.memory (written out here, not taken
    from coursebook.widgets.calculator)."""
    u = UNITS[unit]
    per_token = kv_cache_bytes(L, G, d, 1, b)
    per_sequence = kv_cache_bytes(L, G, d, T, b)
    rows = [
        ["cache per token", f"{per_token:,} bytes ({format_bytes(per_token)})"],
        [f"cache per sequence of {T:,} tokens", f"{per_sequence:,} bytes ({format_bytes(per_sequence)})"],
        ["GPU memory", f"{gpu_bytes:,} bytes ({gpu_bytes / u:,.2f} {unit})"],
        ["weights", f"{weight_bytes:,} bytes ({weight_bytes / u:,.2f} {unit})"],
    ]
    if weight_bytes < gpu_bytes:
        spare = gpu_bytes - weight_bytes
        rows += [
            ["left for caches", f"{spare:,} bytes ({spare / u:,.2f} {unit})"],
            ["tokens that fit", f"{max_tokens(gpu_bytes, weight_bytes, L, G, d, b):,}"],
            ["sequences that fit (batch)", f"{max_batch(gpu_bytes, weight_bytes, L, G, d, T, b):,}"],
        ]
    else:
        rows += [["sequences that fit (batch)", "0: the weights alone do not fit in this GPU"]]
    return rows


def assert_clean(problems):
    assert not problems, "\n".join(problems)


# ---------------------------------------------------------------------------------------------


def test_the_page_shows_the_chapters_example(site, base_url, browser):
    with watched_page(browser, base_url, PAGE) as (page, problems):
        shown = read(page)
        assert shown["fields"] == {"model_preset": "7B", "layers": "32", "kv_heads": "32", "head_dim": "128",
                                   "weights": "14", "tokens": "4096", "bytes_per_value": "2", "gpu_preset": "A10",
                                   "gpu_memory": "24"}
        assert shown["unit"] == "GB" and not shown["message"] and not shown["stale"]
        assert shown["rows"] == expected_rows(32, 32, 128, 4096, 2, 24 * GB, 14 * GB, "GB")
        assert dict(shown["rows"])["sequences that fit (batch)"] == "4"
        assert shown["sequences"] == 4 and shown["weightsBar"] == 1 and shown["marker"] == 0
    assert_clean(problems)


def random_cases(n: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    cases = []
    for _ in range(n):
        unit = rng.choice(list(UNITS))
        cases.append({
            "L": rng.randint(1, 200), "G": rng.choice([1, 2, 4, 8, 16, 32, 64, rng.randint(1, 96)]),
            "d": rng.choice([32, 64, 80, 128, 256, rng.randint(1, 512)]), "T": rng.choice([1, 512, 4096, rng.randint(1, 10**6)]),
            "b": rng.choice([b for _, b in BYTES_PER_VALUE]), "unit": unit,
            "gpu": rng.choice([16, 24, 40, 80, round(rng.uniform(1, 200), rng.randint(0, 3))]),
            "weights": rng.choice([0, 2, 14, round(rng.uniform(0, 150), rng.randint(0, 2))]),
        })
    # past 2**53: the cache of one sequence at the fields' limits, and odd sizes near them
    cases.append({"L": 10_000, "G": 10_000, "d": 100_000, "T": 100_000_000, "b": 4, "unit": "GiB", "gpu": 1_000_000,
                  "weights": 0})
    cases.append({"L": 9_973, "G": 9_967, "d": 99_991, "T": 99_999_989, "b": 1, "unit": "GB", "gpu": 80, "weights": 14})
    cases.append({"L": 4_099, "G": 1, "d": 1, "T": 2**26 + 1, "b": 2, "unit": "GB", "gpu": 0.5, "weights": 1})
    return cases


def test_typed_values_give_what_kvcache_memory_computes(site, base_url, browser):
    """Type each case into the fields, as a reader would, in the other unit; then press the
    case's unit: the fields keep the typed numbers, and the table reads them in that unit."""
    cases = random_cases(24, seed=3)
    typed = (("layers", "L"), ("kv_heads", "G"), ("head_dim", "d"), ("tokens", "T"), ("gpu_memory", "gpu"),
             ("weights", "weights"))
    with watched_page(browser, base_url, PAGE) as (page, problems):
        for case in cases:
            press_unit(page, "GB" if case["unit"] == "GiB" else "GiB")
            for name, key in typed:
                type_into(page, name, case[key])
            choose(page, "bytes_per_value", case["b"])
            press_unit(page, case["unit"])
            shown = read(page)
            assert shown["unit"] == case["unit"] and shown["units"] == [case["unit"]] * 2
            assert [shown["fields"][name] for name, _ in typed] == [str(case[key]) for _, key in typed], case
            gpu_bytes = round(case["gpu"] * UNITS[case["unit"]])
            weight_bytes = round(case["weights"] * UNITS[case["unit"]])
            want = expected_rows(case["L"], case["G"], case["d"], case["T"], case["b"], gpu_bytes, weight_bytes,
                                 case["unit"])
            assert not shown["message"], (case, shown["message"])
            assert shown["rows"] == want, case
            assert shown["fields"]["model_preset"] == "custom" and shown["fields"]["gpu_preset"] == "custom"
            batch = max_batch(gpu_bytes, weight_bytes, case["L"], case["G"], case["d"], case["T"], case["b"])
            if weight_bytes >= gpu_bytes:
                assert shown["marker"] == 1 and shown["sequences"] == shown["caches"] == 0
            elif batch:     # one block per sequence, or one block for the batch when they are thin
                assert (shown["sequences"], shown["caches"]) in ((batch, 0), (0, 1)), (case, batch)
        # the last cases are past 2**53, and the page wrote them digit for digit
        assert all(kv_cache_bytes(c["L"], c["G"], c["d"], c["T"], c["b"]) > 2**53 for c in cases[-3:-1])
        assert dict(shown["rows"])  # the last case was read back above
    assert_clean(problems)


def test_the_module_agrees_with_kvcache_memory_on_many_inputs(site, base_url, browser):
    """The page's own module (from its saved state), called on 3,000 inputs in the browser."""
    rng = random.Random(11)
    cases = []
    for i in range(3000):
        unit = rng.choice(list(UNITS))
        big = i % 3 == 0
        lo_hi = {name: (lo, hi if big else min(hi, 300)) for name, (_, lo, hi) in FIELDS.items()}
        cases.append({
            "L": rng.randint(*lo_hi["layers"]), "G": rng.randint(*lo_hi["kv_heads"]), "d": rng.randint(*lo_hi["head_dim"]),
            "T": rng.randint(*lo_hi["tokens"]) if big else rng.randint(1, 10**6),
            "b": rng.choice([1, 2, 4]), "unit": unit, "unitBytes": UNITS[unit],
            # amounts as a reader types them, and amounts that are not short decimals
            "gpu": rng.choice([rng.randint(0, 1_000_000), round(rng.uniform(0, 200), rng.randint(0, 4)), rng.uniform(0, 1e6)]),
            "weights": rng.choice([rng.randint(0, 200), round(rng.uniform(0, 200), 2), rng.uniform(0, 1e6)]),
        })
    # exact halves of a byte: round() goes to the even neighbour, on both sides
    for k in range(40):
        cases.append({"L": 1, "G": 1, "d": 1, "T": 1, "b": 1, "unit": "GiB", "unitBytes": GIB,
                      "gpu": (2 * k + 1) / 2 / GIB, "weights": k / GIB})
    with watched_page(browser, base_url, PAGE) as (page, problems):
        names = page.evaluate(MODULE_JS)
        assert {"calculate", "formatBytes", "summaryRows", "toBytes", "default"} <= set(names)
        got = page.evaluate(CALL_JS, cases)
    assert_clean(problems)
    past = 0
    for case, out in zip(cases, got):
        gpu_bytes = round(case["gpu"] * case["unitBytes"])
        weight_bytes = round(case["weights"] * case["unitBytes"])
        L, G, d, T, b = case["L"], case["G"], case["d"], case["T"], case["b"]
        r = out["result"]
        assert int(r["gpu_bytes"]) == gpu_bytes and int(r["weight_bytes"]) == weight_bytes, case
        assert int(r["bytes_per_token"]) == kv_cache_bytes(L, G, d, 1, b), case
        assert int(r["bytes_per_sequence"]) == kv_cache_bytes(L, G, d, T, b), case
        assert int(r["max_tokens"]) == max_tokens(gpu_bytes, weight_bytes, L, G, d, b), case
        assert int(r["max_batch"]) == max_batch(gpu_bytes, weight_bytes, L, G, d, T, b), case
        assert r["weights_fit"] == (weight_bytes < gpu_bytes)
        assert out["perSequenceText"] == format_bytes(kv_cache_bytes(L, G, d, T, b)), case
        assert out["rows"] == expected_rows(L, G, d, T, b, gpu_bytes, weight_bytes, case["unit"]), case
        past += kv_cache_bytes(L, G, d, T, b) > 2**53
    assert past > 500, "the cases should reach past 2**53 often"


PRESET_AMOUNT_JS = r"""
(cases) => cases.map(([bytes, unitBytes]) => window.__calc.presetAmount(bytes, unitBytes))
"""


def test_the_modules_preset_amounts_round_as_python_does(site, base_url, browser):
    """What a preset shows in a memory field: two decimals, the exact value's ties to even."""
    rng = random.Random(5)
    cases = [(rng.randint(0, 2**53 // 2**20), unit) for _ in range(2000) for unit in UNITS]
    cases += [(g.memory_bytes, unit) for g in GPUS.values() for unit in UNITS]
    cases += [(m.weight_bytes(2), unit) for m in MODELS.values() for unit in UNITS]
    cases += [(k * GIB // 8, "GiB") for k in range(1, 200, 2)]        # n.125, n.375, ...: exact ties
    with watched_page(browser, base_url, PAGE) as (page, problems):
        page.evaluate(MODULE_JS)
        got = page.evaluate(PRESET_AMOUNT_JS, [[n, UNITS[unit]] for n, unit in cases])
    assert_clean(problems)
    want = [round(n / UNITS[unit], 2) for n, unit in cases]       # Python's round, written out here
    assert got == want
    assert want[-100:][:4] == [0.12, 0.38, 0.62, 0.88] and preset_amount(24 * GB, "GiB") == 22.35


def test_the_page_and_the_python_widget_agree_step_by_step(site, base_url, browser):
    """The same changes made on the page and to CacheCalculator (a notebook's view of it)."""
    calc = CacheCalculator()
    steps = [
        ("choose", "model_preset", "70B-GQA"), ("choose", "gpu_preset", "A100"), ("unit", "unit", "GiB"),
        ("choose", "model_preset", "7B"), ("type", "kv_heads", "8"), ("choose", "bytes_per_value", "1"),
        ("type", "gpu_memory", "40"), ("unit", "unit", "GB"), ("choose", "gpu_preset", "T4"),
        ("choose", "model_preset", "1B"), ("type", "tokens", "32768"), ("type", "weights", "0"),
        ("choose", "model_preset", "custom"), ("type", "layers", "80"), ("choose", "gpu_preset", "A10"),
        # the unit switch with presets chosen, a preset chosen in GiB, a field typed after it
        ("choose", "model_preset", "7B"), ("unit", "unit", "GiB"), ("choose", "gpu_preset", "A100"),
        ("choose", "model_preset", "70B-GQA"), ("type", "layers", "40"), ("unit", "unit", "GB"),
        ("type", "weights", "22.351"), ("unit", "unit", "GiB"), ("type", "gpu_memory", "130.39"),
    ]
    with watched_page(browser, base_url, PAGE) as (page, problems):
        for kind, name, value in steps:
            if kind == "choose":
                choose(page, name, value)
            elif kind == "unit":
                press_unit(page, value)
            else:
                type_into(page, name, value)
            setattr(calc, name, type(getattr(calc, name))(value))
            shown = read(page)
            assert shown["rows"] == [list(row) for row in calc.summary()], (kind, name, value)
            assert shown["fields"]["model_preset"] == calc.model_preset, (kind, name, value)
            assert shown["fields"]["gpu_preset"] == calc.gpu_preset, (kind, name, value)
            for field in ("layers", "kv_heads", "head_dim", "tokens", "weights", "gpu_memory"):
                assert float(shown["fields"][field]) == float(getattr(calc, field)), (field, kind, name, value)
            assert shown["unit"] == calc.unit and set(shown["units"]) == {calc.unit}
            assert all(len(shown["fields"][f]) <= 8 for f in ("weights", "gpu_memory")), shown["fields"]
    assert_clean(problems)


def test_presets_fill_the_fields_and_editing_makes_them_custom(site, base_url, browser):
    with watched_page(browser, base_url, PAGE) as (page, problems):
        choose(page, "model_preset", "70B-GQA")
        shown = read(page)
        m = MODELS["70B-GQA"]
        assert (shown["fields"]["layers"], shown["fields"]["kv_heads"], shown["fields"]["head_dim"]) == \
            (str(m.n_layers), str(m.n_kv_heads), str(m.head_dim))
        assert shown["fields"]["weights"] == "140"
        assert dict(shown["rows"])["sequences that fit (batch)"] == "0: the weights alone do not fit in this GPU"
        assert shown["marker"] == 1 and shown["sequences"] == 0
        choose(page, "model_preset", "7B")
        choose(page, "gpu_preset", "A100")
        shown = read(page)
        assert shown["fields"]["gpu_memory"] == "80" and dict(shown["rows"])["sequences that fit (batch)"] == "30"
        assert shown["sequences"] == 30
        press_unit(page, "GiB")                 # the same numbers, read as GiB: no preset any more
        shown = read(page)
        assert (shown["fields"]["gpu_memory"], shown["fields"]["weights"]) == ("80", "14")
        assert shown["fields"]["gpu_preset"] == "custom" and shown["fields"]["model_preset"] == "custom"
        assert dict(shown["rows"])["sequences that fit (batch)"] == str((80 - 14) * GIB // (2 * GIB)) == "33"
        assert shown["units"] == ["GiB", "GiB"]
        choose(page, "gpu_preset", "A100")      # a preset in GiB: two decimals shown, its exact bytes counted
        choose(page, "model_preset", "7B")
        shown = read(page)
        assert (shown["fields"]["gpu_memory"], shown["fields"]["weights"]) == ("74.51", "13.04")
        assert dict(shown["rows"])["GPU memory"] == f"{80 * GB:,} bytes (74.51 GiB)"
        assert dict(shown["rows"])["weights"] == f"{14 * GB:,} bytes (13.04 GiB)"
        assert dict(shown["rows"])["sequences that fit (batch)"] == "30"
        type_into(page, "head_dim", "64")       # a field that differs from the preset
        shown = read(page)
        assert shown["fields"]["model_preset"] == "custom"
        assert dict(shown["rows"])["weights"] == f"{round(13.04 * GIB):,} bytes (13.04 GiB)", "now the field's number"
        type_into(page, "gpu_memory", "10")
        shown = read(page)
        assert shown["fields"]["gpu_preset"] == "custom"
        assert dict(shown["rows"])["GPU memory"] == f"{10 * GIB:,} bytes (10.00 GiB)"
        press_unit(page, "GB")                  # a custom amount keeps its number
        shown = read(page)
        assert shown["fields"]["gpu_memory"] == "10" and shown["fields"]["weights"] == "13.04"
        assert dict(shown["rows"])["GPU memory"] == f"{10 * GB:,} bytes (10.00 GB)"
    assert_clean(problems)


def test_the_unit_switch_shows_the_chapters_10_gb_or_10_gib(site, base_url, browser):
    """The chapter's point: 24 - 14 = 10 GB leaves a batch of 4 sequences of 4,096 tokens;
    press GiB and the same two numbers leave 10 GiB, exactly 5 of them; press GB and it is 4."""
    per_sequence = kv_cache_bytes(32, 32, 128, 4096, 2)
    with watched_page(browser, base_url, PAGE) as (page, problems):
        before = read(page)
        assert dict(before["rows"])["left for caches"] == f"{10 * GB:,} bytes (10.00 GB)"
        assert dict(before["rows"])["sequences that fit (batch)"] == str(10 * GB // per_sequence) == "4"
        press_unit(page, "GiB")
        shown = read(page)
        assert (shown["fields"]["gpu_memory"], shown["fields"]["weights"]) == ("24", "14")
        assert shown["unit"] == "GiB" and shown["units"] == ["GiB", "GiB"]
        assert shown["rows"] == expected_rows(32, 32, 128, 4096, 2, 24 * GIB, 14 * GIB, "GiB")
        assert dict(shown["rows"])["left for caches"] == f"{10 * GIB:,} bytes (10.00 GiB)"
        assert dict(shown["rows"])["sequences that fit (batch)"] == str(10 * GIB // per_sequence) == "5"
        assert shown["sequences"] == 5
        assert (shown["fields"]["model_preset"], shown["fields"]["gpu_preset"]) == ("custom", "custom")
        press_unit(page, "GB")
        shown = read(page)
        assert (shown["fields"]["gpu_memory"], shown["fields"]["weights"]) == ("24", "14")
        assert shown["rows"] == before["rows"] and shown["sequences"] == 4
    assert_clean(problems)


BAD_INPUTS = [
    # (field, text, words the message must contain)
    ("layers", "", ["layers L", "empty"]),
    ("layers", "-3", ["layers L", "negative"]),
    ("layers", "abc", ["layers L", "not a whole number"]),
    ("layers", "0", ["layers L", "at least 1"]),
    ("layers", "12.5", ["layers L", "not a whole number"]),
    ("kv_heads", "99999999999999999999999999", ["KV heads G", "at most 10,000"]),
    ("head_dim", "1e3", ["head size d", "not a whole number"]),
    ("tokens", "100000001", ["tokens T", "at most 100,000,000"]),
    ("tokens", " ", ["tokens T", "empty"]),
    ("gpu_memory", "", ["GPU memory", "empty"]),
    ("gpu_memory", "-24", ["GPU memory", "negative"]),
    ("gpu_memory", "lots", ["GPU memory", "not a number"]),
    ("gpu_memory", "1e400", ["GPU memory", "at most 1,000,000"]),
    ("weights", "24,5", ["weights (fp16)", "point"]),
    ("weights", "2000000", ["weights (fp16)", "at most 1,000,000"]),
]


@pytest.mark.parametrize("name, text, words", BAD_INPUTS, ids=[f"{n}={t!r}" for n, t, _ in BAD_INPUTS])
def test_bad_input_gets_a_message_and_the_widget_keeps_working(site, base_url, browser, name, text, words):
    with watched_page(browser, base_url, PAGE) as (page, problems):
        before = read(page)
        type_into(page, name, text)
        shown = read(page)
        for word in words:
            assert word in shown["message"], (word, shown["message"])
        assert "last values that were valid" in shown["message"]
        assert shown["invalid"] == [name] and shown["stale"]
        assert shown["rows"] == before["rows"], "the figures stay those of the last valid values"
        for bad in ("NaN", "undefined", "Infinity"):
            assert bad not in shown["text"]
        # not frozen: another field still recomputes, with the last valid value of this one
        other = "tokens" if name != "tokens" else "layers"
        type_into(page, other, "2048" if other == "tokens" else "16")
        again = read(page)
        assert again["rows"] != shown["rows"] and name in again["invalid"]
        assert again["fields"][name] == text, "the reader's text stays until they change it"
        # and correcting the field clears the message
        type_into(page, name, before["fields"][name])
        fixed = read(page)
        assert not fixed["message"] and not fixed["invalid"] and not fixed["stale"]
    assert_clean(problems)


def test_thousands_separators_are_read(site, base_url, browser):
    with watched_page(browser, base_url, PAGE) as (page, problems):
        type_into(page, "tokens", "32,768")
        shown = read(page)
        assert not shown["message"]
        assert shown["rows"][1][0] == "cache per sequence of 32,768 tokens"
        type_into(page, "tokens", "4 096")
        assert read(page)["rows"][1][0] == "cache per sequence of 4,096 tokens"
    assert_clean(problems)


def test_the_saved_state_carries_the_module_and_nothing_to_fetch(site):
    html = (site / PAGE).read_text(encoding="utf-8")
    start = html.index('<script type="application/vnd.jupyter.widget-state+json">')
    body = html[html.index(">", start) + 1: html.index("</script>", start)]
    state = json.loads(body)["state"]
    calcs = [e for e in state.values() if e["model_name"] == "AnyModel"]
    assert len(calcs) == 1
    s = calcs[0]["state"]
    assert s["_anywidget_id"] == "coursebook.widgets.calculator.CacheCalculator"
    assert s["_esm"] == CacheCalculator._esm and s["_css"] == CacheCalculator._css
    assert "http://" not in s["_esm"].replace('"http://www.w3.org/2000/svg"', "") and "https://" not in s["_esm"]
    assert s["config"]["fields"]["layers"] == {"label": "layers L", "min": 1, "max": 10_000}
    # the saved values are those the chapter left: its example
    assert (s["model_preset"], s["gpu_preset"], s["layers"], s["kv_heads"], s["bytes_per_value"]) == \
        ("7B", "A10", 32, 32, 2)
    assert summary_rows(CacheCalculator().result, 4096, "GB") == [tuple(r) for r in
                                                                  expected_rows(32, 32, 128, 4096, 2, 24 * GB, 14 * GB, "GB")]
