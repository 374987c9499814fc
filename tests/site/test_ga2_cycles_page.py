"""Chapter 10's widget, cycles against context length, on the built site: the page has no kernel,
and what it shows at each context length and for each program must be what the cycle model says.

The expected figures are computed here from ``ga2.attn``'s programs and the cycle model (the
chapter's own numbers are pinned in tests/chapters/test_10_decode_on_ga2.py), split where the scratchpad plan
ends, and read back from the page as a reader sees them: the step's table, the generation's
table, the two ratios, the heading, the marked position on the line chart.
"""
from __future__ import annotations

from ga2 import attn
from ga2.cycles import cycle_counts
from ga2.plan import MAX_TOKENS
from watched import settle, watched_page

PAGE = "book/chapters/10_decode_on_ga2.html"
UNITS = ("matrix", "DMA", "vector")

READ_JS = r"""
() => {
  const w = document.querySelector('.cw-series');
  const table = name => Array.from(w.querySelectorAll(`table[data-table="${name}"] tbody tr`))
    .map(tr => Array.from(tr.cells).map(td => td.textContent));
  const ratio = name => { const p = w.querySelector(`[data-ratio="${name}"] b`); return p ? p.textContent : null; };
  return {
    step: table('step'), generation: table('generation'),
    ratio: {step: ratio('step'), generation: ratio('generation')},
    headers: Array.from(w.querySelectorAll('table[data-table="step"] thead th')).map(th => th.textContent),
    headings: Array.from(w.querySelectorAll('.cw-heading')).map(e => e.textContent),
    shownValue: w.querySelector('output').textContent,
    text: w.innerText,
  };
}
"""


def expected(L: int, shown=attn.VARIANTS) -> dict:
    """The step's and the generation's rows at L: by unit within the plan, the issue cycles, by unit
    past the plan."""
    params = attn.default_params()

    def parts(t, variant):
        c = cycle_counts(attn.program(t, variant, params, beyond_plan=True))
        by_unit, zero = [c.matrix, c.dma, c.vector], [0, 0, 0]
        issue = [c.total - c.matrix - c.dma - c.vector]
        return by_unit + issue + zero if t <= MAX_TOKENS else zero + issue + by_unit

    step, generation = [], []
    totals = {}
    for variant in shown:
        at = parts(L, variant)
        summed = [sum(col) for col in zip(*(parts(t, variant) for t in range(1, L + 1)))]
        step.append([variant] + [f"{v:,}" for v in at] + [f"{sum(at):,} cycles"])
        generation.append([variant] + [f"{v:,}" for v in summed] + [f"{sum(summed):,} cycles"])
        totals[variant] = (sum(at), sum(summed))
    ratio = None
    if len(shown) == 2:
        ratio = {"step": f"{totals['recompute'][0] / totals['cached'][0]:.2f}",
                 "generation": f"{totals['recompute'][1] / totals['cached'][1]:.2f}"}
    return {"step": step, "generation": generation, "ratio": ratio}


def check(page, L, shown=attn.VARIANTS):
    got = page.evaluate(READ_JS)
    want = expected(L, shown)
    assert got["shownValue"] == f"{L}"
    assert got["step"] == want["step"] and got["generation"] == want["generation"]
    if want["ratio"]:
        assert got["ratio"] == want["ratio"]
    assert got["headings"][0] == f"At context length L = {L}"
    for bad in ("NaN", "undefined", "Infinity"):
        assert bad not in got["text"]
    return got


def test_the_widget_shows_the_cycle_model_at_every_length(site, base_url, browser):
    with watched_page(browser, base_url, PAGE) as (page, problems):
        got = check(page, MAX_TOKENS)
        assert got["headers"] == ["", *UNITS, "issue", *(f"{u}, past 32" for u in UNITS), "total"]
        # the published figures at 32: 5,251 against 15,989 cycles, 124,346 against 295,184 summed
        assert got["step"][0][-1] == "5,251 cycles" and got["step"][1][-1] == "15,989 cycles"
        assert got["generation"][0][-1] == "124,346 cycles" and got["ratio"]["generation"] == "2.37"
        slider = page.locator(".cw-series input[type=range]")
        slider.focus()
        for key, L in (("End", 64), ("Home", 1), ("ArrowRight", 2), ("PageUp", None)):
            slider.press(key)
            settle(page)
            L = int(page.evaluate(READ_JS)["shownValue"]) if L is None else L
            got = check(page, L)
        slider.press("End")
        settle(page)
        got = check(page, 64)
        assert got["ratio"]["step"] == "3.77"                      # it never reaches 5 on this range
        assert all(value == "0" for value in got["step"][0][1:4])   # past the plan: only the light columns
        assert all(value != "0" for value in got["step"][0][4:8])
        for choice in ("cached", "recompute"):
            page.locator(".cw-series select").select_option(choice)
            settle(page)
            check(page, 64, shown=(choice,))
    assert not problems, problems
