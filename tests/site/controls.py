"""Every control in a page's cell outputs, changed once the way a reader would, and what it redraws.

``exercise_controls(page)`` finds the inputs, selects, buttons and text areas inside
``.cell_output`` elements (so a new widget on any page is covered without naming it; the
"copy to clipboard" buttons sphinx-copybutton puts on printed output are the page's, not a
figure's, and are left out), and for each one, with Playwright's real mouse and keyboard:

* a drop-down list: selects the next option;
* a text or number field: types another number (the one shown plus one; "1" if none is shown);
* a slider: moves it to its other end (End, or Home when it is already there);
* a check box or radio button: clicks it;
* a button: clicks it.  A toggle button already pressed is the current choice: it is tried
  again after the others, once another button of its group has been pressed.

Before and after, it takes a snapshot of the control's cell output without the control itself
(its label, its ``<output>``, the other buttons of its group): the visible text, every SVG
figure's markup, and the values of the other controls.  A control whose snapshot does not change
redrew nothing: it is dead.  Text that says NaN, undefined or Infinity after a change is
reported too.
"""
from __future__ import annotations

import re

# Tags every control in a cell output with data-probe="i" and describes it.
FIND_JS = r"""
() => {
  const found = Array.from(document.querySelectorAll(
      '.cell_output input, .cell_output select, .cell_output textarea, .cell_output button'))
    .filter(el => !el.disabled && el.type !== 'hidden' && el.getClientRects().length > 0
                  && !el.classList.contains('copybtn'));
  return found.map((el, i) => {
    el.setAttribute('data-probe', String(i));
    const label = (el.id && document.querySelector(`label[for="${el.id}"]`)) || el.closest('label');
    return {
      index: i,
      tag: el.tagName.toLowerCase(),
      type: (el.getAttribute('type') || '').toLowerCase(),
      name: el.getAttribute('data-control') || el.getAttribute('name') || '',
      label: (label ? label.textContent : el.textContent || el.getAttribute('aria-label') || '').trim().slice(0, 60),
      pressed: el.getAttribute('aria-pressed'),
      value: 'value' in el ? String(el.value) : '',
      options: el.tagName === 'SELECT' ? el.options.length : 0,
      selected: el.tagName === 'SELECT' ? el.selectedIndex : -1,
      atMax: el.type === 'range' ? Number(el.value) >= Number(el.max) : false,
    };
  });
}
"""

# The state of a control's cell output, leaving out the control itself.
SNAPSHOT_JS = r"""
(index) => {
  const el = document.querySelector(`[data-probe="${index}"]`);
  if (!el) return null;
  const root = el.closest('.cell_output');
  const own = new Set([el]);
  if (el.id) {
    document.querySelectorAll(`label[for="${el.id}"], output[for="${el.id}"]`).forEach(x => own.add(x));
  }
  const group = el.closest('[role="group"]');
  if (group) group.querySelectorAll('button').forEach(x => own.add(x));
  const skip = node => { for (const o of own) { if (o === node || o.contains(node)) return true; } return false; };
  const texts = [];
  const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
  while (walker.nextNode()) {
    const node = walker.currentNode;
    if (!skip(node) && node.parentElement && node.parentElement.getClientRects().length) texts.push(node.textContent);
  }
  const figures = Array.from(root.querySelectorAll('svg')).map(s => s.outerHTML);
  const values = Array.from(root.querySelectorAll('input, select, textarea, button'))
    .filter(x => !own.has(x))
    .map(x => `${x.getAttribute('data-control') || x.name}=${'value' in x ? x.value : ''}|${x.getAttribute('aria-pressed') || ''}|${x.getAttribute('aria-invalid') || ''}`);
  return {text: texts.join(' '), figures: figures.join(''), values: values.join(';'), visibleText: root.innerText};
}
"""

# Two animation frames: a redraw requested by an event handler has happened by then.
SETTLE_JS = "() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(() => r(true))))"

BAD_WORDS = re.compile(r"\b(NaN|undefined|Infinity)\b")


def _another_number(text: str) -> str:
    cleaned = text.replace(",", "").strip()
    try:
        number = float(cleaned)
    except ValueError:
        return "1"
    if number.is_integer():
        return str(int(number) + 1)
    return repr(number + 1)


def _act(page, control: dict) -> str:
    """Change ``control`` once; returns what was done, in words."""
    loc = page.locator(f'[data-probe="{control["index"]}"]')
    tag, kind = control["tag"], control["type"]
    if tag == "select":
        target = (control["selected"] + 1) % max(control["options"], 1)
        loc.select_option(index=target)
        return f"selected option {target}"
    if tag == "input" and kind == "range":
        loc.focus()
        key = "Home" if control["atMax"] else "End"
        loc.press(key)
        return f"pressed {key} on the slider"
    if tag == "input" and kind in ("checkbox", "radio"):
        loc.click()
        return "clicked"
    if tag in ("input", "textarea"):
        new = _another_number(control["value"])
        loc.fill(new)
        return f"typed {new!r} (was {control['value']!r})"
    loc.click()
    return "clicked"


def exercise_controls(page) -> dict:
    """Change every control of the page's cell outputs once.

    Returns {"controls": [description, ...], "dead": [...], "bad_text": [...]}: ``dead`` lists
    the controls whose change redrew nothing, ``bad_text`` the changes after which the output
    said NaN, undefined or Infinity.
    """
    controls = page.evaluate(FIND_JS)
    done, dead, bad = [], [], []
    queue = list(controls)
    retried: set[int] = set()
    while queue:
        control = queue.pop(0)
        fresh = next((c for c in page.evaluate(FIND_JS) if c["index"] == control["index"]), None)
        if fresh is None:
            dead.append(f"control {control['index']} ({control['label'] or control['name']}) disappeared before its turn")
            continue
        if fresh["tag"] == "button" and fresh["pressed"] == "true":
            if fresh["index"] not in retried:
                retried.add(fresh["index"])
                queue.append(fresh)
            continue
        before = page.evaluate(SNAPSHOT_JS, fresh["index"])
        action = _act(page, fresh)
        page.evaluate(SETTLE_JS)
        after = page.evaluate(SNAPSHOT_JS, fresh["index"])
        what = f"{fresh['tag']}{'[' + fresh['type'] + ']' if fresh['type'] else ''} " \
               f"{fresh['label'] or fresh['name']!r}: {action}"
        done.append(what)
        if after is None or before is None:
            dead.append(f"{what}: the control vanished")
            continue
        if (before["text"], before["figures"], before["values"]) == (after["text"], after["figures"], after["values"]):
            dead.append(f"{what}: nothing else in its output changed")
        words = sorted(set(BAD_WORDS.findall(after["visibleText"])))
        if words:
            bad.append(f"{what}: the output then says {words}")
    return {"controls": done, "dead": dead, "bad_text": bad}
