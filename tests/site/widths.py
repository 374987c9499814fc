"""What of a page's cell outputs does not fit the text column, measured in the browser.

A reader sees an output whole or not at all: an output that runs past the column's right edge is
covered by the page's margin, and one that scrolls sideways hides the end of every line (a repr
cut at the edge, a table's last column).  For every element inside a ``div.cell_output`` (the
output column, 688 px wide at 1280 px), ``wide_outputs(page)`` reports

* an element whose right edge is beyond the output column's;
* an element that scrolls or clips sideways (``overflow-x`` auto, scroll, hidden or clip) and
  whose content is wider than its box: a printed line longer than the column, a table or a
  widget drawn wider than its frame;
* a choice (``<select>``) narrower than its own content, whose option text is cut.

Each finding names the cell (its position among the page's code cells), the element and the
widths, with the start of its text.
"""
from __future__ import annotations

# Slack for sub-pixel layout: a box 0.5 px past its container is rounding, not a cut line.
SLACK_PX = 1

WIDE_OUTPUTS_JS = r"""
(slack) => {
  const found = [];
  const cells = Array.from(document.querySelectorAll('div.cell'));
  const describe = (el) => el.tagName.toLowerCase() + (el.classList.length ? '.' + Array.from(el.classList).slice(0, 3).join('.') : '');
  const text = (el) => (el.innerText || el.textContent || '').trim().replace(/\s+/g, ' ').slice(0, 70);
  for (const out of document.querySelectorAll('div.cell_output')) {
    const column = out.getBoundingClientRect();
    const cell = out.closest('div.cell');
    const where = cell ? `code cell ${cells.indexOf(cell) + 1}` : 'an output';
    let reported = null;     // the outermost element reported: its descendants say the same
    for (const el of out.querySelectorAll('*')) {
      if (reported && reported.contains(el)) continue;
      const box = el.getBoundingClientRect();
      if (box.width === 0 && box.height === 0) continue;
      const style = getComputedStyle(el);
      if (style.display === 'none' || style.visibility === 'hidden') continue;
      let problem = null;
      if (box.right > column.right + slack) {
        problem = `${Math.round(box.width)} px wide, ${Math.round(box.right - column.right)} px past the ` +
                  `${Math.round(column.width)} px column`;
      } else if (['auto', 'scroll', 'hidden', 'clip'].includes(style.overflowX) && el.clientWidth > 0 &&
                 el.scrollWidth > el.clientWidth + slack) {
        problem = `content ${el.scrollWidth} px wide in a box of ${el.clientWidth} px (it scrolls or is cut)`;
      } else if (el.tagName === 'SELECT') {
        const probe = el.cloneNode(true);
        probe.style.cssText = 'position: absolute; visibility: hidden; width: max-content; min-width: 0; max-width: none;';
        el.parentElement.appendChild(probe);
        const need = probe.getBoundingClientRect().width;
        probe.remove();
        if (need > box.width + slack) {
          problem = `a choice ${Math.round(box.width)} px wide whose options need ${Math.round(need)} px (their text is cut)`;
        }
      }
      if (problem) {
        found.push(`${where}: ${describe(el)} ${problem}: "${text(el)}"`);
        reported = el;
      }
    }
  }
  return found;
}
"""


def wide_outputs(page) -> list[str]:
    """The outputs of the page open in Playwright's ``page`` that do not fit the text column."""
    return page.evaluate(WIDE_OUTPUTS_JS, SLACK_PX)
