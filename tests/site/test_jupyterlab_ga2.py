"""Chapter 10's widget, cycles against context length, live in JupyterLab: the same module as on
the site, with the kernel behind it.

JupyterLab is started as tests/site/test_jupyterlab.py starts it (its fixture, given chapter 10),
the chapter runs to its end in the kernel, and then: the reader moves the slider and picks a
program, and the kernel's ``explorer`` holds what the page shows; a cell sets the widget's traits,
and the page redraws.
"""
from __future__ import annotations

from pathlib import Path

import pytest

import test_jupyterlab as jl

CH10 = Path(__file__).resolve().parents[2] / "book" / "chapters" / "10_decode_on_ga2.ipynb"
SHOWN_JS = r"""
() => {
  const w = document.querySelector('.cw-series');
  return {value: w.querySelector('output').textContent, choice: w.querySelector('select').value,
          rows: Array.from(w.querySelectorAll('table[data-table="step"] tbody tr')).map(tr => tr.cells[0].textContent),
          total: Array.from(w.querySelectorAll('table[data-table="step"] tbody tr')).map(tr => tr.lastChild.textContent)};
}
"""


def kernel_until(page, code: str, done, attempts: int = 20) -> str:
    """What ``code`` prints in the kernel, run again (half a second apart) until ``done`` says
    so or ``attempts`` are spent; the last output either way."""
    for _ in range(attempts):
        said = page.evaluate(jl.KERNEL_RUN_JS, code)
        if done(said):
            break
        page.wait_for_timeout(500)
    return said


@pytest.fixture
def lab10(tmp_path, monkeypatch):
    monkeypatch.setattr(jl, "CHAPTER", CH10)
    yield from jl.lab.__wrapped__(tmp_path)


def test_the_cycles_widget_works_in_jupyterlab(lab10, browser, screenshots):
    base, log = lab10
    with jl.chapter_in_lab(browser, base, log, CH10.name) as page:
        widget = page.locator(".cw-series")
        widget.wait_for(timeout=jl.TIMEOUT_MS)
        widget.scroll_into_view_if_needed()
        shown = page.evaluate(SHOWN_JS)
        assert shown["value"] == "32" and shown["total"] == ["5,251 cycles", "15,989 cycles"]

        # the reader moves the slider to its end and picks a program: the kernel knows
        slider = widget.locator("input[type=range]")
        slider.focus()
        slider.press("End")
        widget.locator("select").select_option("recompute")
        page.wait_for_function("() => document.querySelector('.cw-series output').textContent === '64'",
                               timeout=10_000)
        # the page's two changes reach the kernel as two messages: ask until both have arrived
        said = kernel_until(page, "print(explorer.value, explorer.choice, explorer.summary()['ratio'])",
                            lambda out: out.split()[:2] == ["64", "recompute"])
        assert said.split()[:2] == ["64", "recompute"], said
        assert page.evaluate(SHOWN_JS)["rows"] == ["recompute"]

        # a cell sets the traits: the widget redraws
        said = page.evaluate(jl.KERNEL_RUN_JS, "explorer.value = 8; explorer.choice = 'all'; "
                                               "print(explorer.summary()['step'][0][-1])")
        assert said.strip() == "3,115 cycles", said
        page.wait_for_function("() => document.querySelector('.cw-series output').textContent === '8'",
                               timeout=10_000)
        assert page.evaluate(SHOWN_JS)["total"] == ["3,115 cycles", "5,069 cycles"]
        page.screenshot(path=str(screenshots / "jupyterlab__10_decode_on_ga2.png"))
