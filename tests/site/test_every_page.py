"""The built course site, page by page, in headless Chromium.

For every page of the book (the pages of ``_toc.yml``, plus Sphinx's search and index pages) the
test loads the page from a loopback server and checks what a learner would see:

* math is typeset: every ``.math`` element holds MathJax output (``mjx-container``), MathJax
  reported no TeX error, and no raw ``\\(``, ``\\[``, ``$$`` or TeX command is left in the text;
* every ``<img>`` loaded (``naturalWidth > 0``);
* every local ``href``/``src`` resolves to a file (HTTP 200), and a link's ``#fragment`` names an
  element of the page it points to;
* widget views render where the notebook saved widget state, and every control inside a cell
  output responds: changed once the way a reader would (``controls.exercise_controls``), it
  redraws something else in its output, and nothing then says NaN;
* every cell output fits the text column, before and after the controls were changed
  (``widths.wide_outputs``: nothing past the column's edge, nothing that scrolls sideways or is
  cut, no choice narrower than its options);
* the console shows no errors, no request failed, and no request left the loopback server (each
  is blocked and reported): the site reads offline;
* MathJax is only on pages with math; the widget host (``_static/vendor/widgets/host.js``) only
  on pages with widgets, and it is the only widget script any page loads: pages without a widget
  load zero bytes of widget JavaScript.  The bytes a widget page adds (the host and the modules
  in its saved state) are printed.

A full-page screenshot of each page is kept in ``_build/screenshots/<page>.png`` (and, for a page
with controls, ``<page>__controls.png`` after every control was changed).
"""
from __future__ import annotations

import os
import re
import urllib.error
import urllib.request
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urljoin, urlsplit

import pytest
import yaml

from controls import exercise_controls
from widths import wide_outputs

# The book to test: this repository, or another checkout of it (KVCOURSE_BOOK_ROOT).
ROOT = Path(os.environ.get("KVCOURSE_BOOK_ROOT") or Path(__file__).resolve().parents[2])
EXTRA_PAGES = ["search.html", "genindex.html"]
LOAD_TIMEOUT_MS = 30_000
WIDGET_TIMEOUT_MS = 20_000
WIDGET_HOST = "_static/vendor/widgets/host.js"

# TeX left in the visible text means MathJax did not typeset it.
RAW_TEX = re.compile(r"\\\(|\\\)|\\\[|\\\]|\$\$|\\(?:frac|sqrt|sum|prod|mathrm|mathbf|text|cdot|"
                     r"times|top|left|right|begin|end|alpha|beta|sigma|exp|log|max|min)(?![A-Za-z])")


def toc_docnames(toc_path: Path = ROOT / "_toc.yml") -> list[str]:
    """The documents of the table of contents, in reading order."""
    toc = yaml.safe_load(toc_path.read_text())
    names = [toc["root"]]

    def walk(entries):
        for entry in entries or []:
            if "file" in entry:
                names.append(entry["file"])
            walk(entry.get("sections"))

    for part in toc.get("parts", []):
        walk(part.get("chapters"))
    walk(toc.get("chapters"))
    return [re.sub(r"\.(md|ipynb|rst)$", "", n) for n in names]


def site_pages() -> list[str]:
    return [f"{name}.html" for name in toc_docnames()] + EXTRA_PAGES


def screenshot_name(page: str) -> str:
    return page.removesuffix(".html").replace("/", "__") + ".png"


# ---------------------------------------------------------------------------------------------
# What the built files say (no browser needed)


def test_every_toc_page_is_built(site):
    missing = [p for p in site_pages() if not (site / p).is_file()]
    assert not missing, f"pages of _toc.yml missing from {site}: {missing} (run 'make book')"


def test_no_solutions_on_the_site(site):
    leaked = sorted(str(p.relative_to(site)) for p in site.rglob("*")
                    if "solutions" in p.relative_to(site).parts)
    assert not leaked, f"solutions/ must not be published, but the site has: {leaked[:10]}"
    linking = [p for p in site_pages() if (site / p).is_file()
               and re.search(r'href="[^"]*solutions/', (site / p).read_text(encoding="utf-8"))]
    assert not linking, f"pages linking into solutions/: {linking}"


def test_front_door_redirects_to_the_intro(site):
    html = (site / "index.html").read_text(encoding="utf-8")
    match = re.search(r'http-equiv="Refresh" content="0; url=([^"]+)"', html, re.IGNORECASE)
    assert match, "index.html should redirect to the course's front page"
    target = match.group(1)
    assert (site / target).is_file(), f"index.html redirects to {target}, which does not exist"
    assert target == f"{toc_docnames()[0]}.html"


# ---------------------------------------------------------------------------------------------
# Every page in Chromium


class _Ids(HTMLParser):
    def __init__(self):
        super().__init__()
        self.ids: set[str] = set()

    def handle_starttag(self, tag, attrs):
        for key, value in attrs:
            if key == "id" or (tag == "a" and key == "name"):
                self.ids.add(value or "")


_fetched: dict[str, tuple[int, set[str] | None]] = {}


def fetch(url: str) -> tuple[int, set[str] | None]:
    """HTTP status of a local URL (no fragment), and the element ids when it is an HTML page."""
    if url not in _fetched:
        try:
            with urllib.request.urlopen(url, timeout=10) as response:
                status = response.status
                body = response.read()
                ids = None
                if response.headers.get_content_type() == "text/html":
                    parser = _Ids()
                    parser.feed(body.decode("utf-8", "replace"))
                    ids = parser.ids
        except urllib.error.HTTPError as err:
            status, ids = err.code, None
        _fetched[url] = (status, ids)
    return _fetched[url]


COLLECT_JS = r"""
() => {
  const refs = [];
  const sel = 'a[href], link[href], script[src], img[src], source[src], iframe[src], video[src], audio[src]';
  for (const el of document.querySelectorAll(sel)) {
    const attr = el.hasAttribute('src') ? 'src' : 'href';
    refs.push({tag: el.tagName.toLowerCase(), raw: el.getAttribute(attr),
               url: new URL(el.getAttribute(attr), document.baseURI).href});
  }
  const skip = 'pre, code, script, style, textarea, mjx-container, .highlight, .cell_input, noscript';
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  const texts = [];
  while (walker.nextNode()) {
    const node = walker.currentNode;
    const parent = node.parentElement;
    if (!parent || parent.closest(skip)) continue;
    const style = getComputedStyle(parent);
    if (style.display === 'none' || style.visibility === 'hidden') continue;
    if (node.textContent.trim()) texts.push(node.textContent);
  }
  const mathEls = Array.from(document.querySelectorAll('.math'));
  const stateScripts = document.querySelectorAll('script[type="application/vnd.jupyter.widget-state+json"]');
  return {
    refs,
    text: texts.join(' '),
    math: mathEls.length,
    mathUntypeset: mathEls.filter(el => !el.querySelector('mjx-container')).map(el => el.textContent.slice(0, 80)),
    mjx: document.querySelectorAll('mjx-container').length,
    mjxErrors: Array.from(document.querySelectorAll('mjx-merror, [data-mjx-error]'))
                 .map(el => el.getAttribute('data-mjx-error') || el.textContent.slice(0, 80)),
    widgetState: stateScripts.length,
    scripts: Array.from(document.scripts).map(s => s.getAttribute('src')).filter(Boolean),
    images: Array.from(document.images).map(img => ({src: img.getAttribute('src'), ok: img.complete && img.naturalWidth > 0})),
  };
}
"""

# Widget views and what the host made of them (coursebook/widgets/host.js marks each one ready
# or failed); the bytes of the modules and style sheets the saved state carries.
WIDGETS_JS = r"""
() => {
  const stateEl = document.querySelector('script[type="application/vnd.jupyter.widget-state+json"]');
  const views = Array.from(document.querySelectorAll('script[type="application/vnd.jupyter.widget-view+json"]'));
  const hosts = views.map(s => s.previousElementSibling).filter(el => el && el.classList.contains('cw-host'));
  let esm = 0, css = 0;
  if (stateEl) {
    for (const entry of Object.values(JSON.parse(stateEl.textContent).state || {})) {
      esm += new TextEncoder().encode((entry.state || {})._esm || '').length;
      css += new TextEncoder().encode((entry.state || {})._css || '').length;
    }
  }
  return {
    expected: views.length,
    rendered: hosts.filter(el => el.hasAttribute('data-widget-ready')).length,
    failed: hosts.filter(el => el.hasAttribute('data-widget-error'))
                 .map(el => `${el.getAttribute('data-widget-model')}: ${el.getAttribute('data-widget-error')}`),
    done: document.documentElement.hasAttribute('data-widgets-ready'),
    stateBytes: stateEl ? new TextEncoder().encode(stateEl.textContent).length : 0,
    esmBytes: esm,
    cssBytes: css,
  };
}
"""

IMAGES_JS = r"""
() => Promise.all(Array.from(document.images).map(img => img.complete ? null :
  new Promise(resolve => { img.addEventListener('load', resolve); img.addEventListener('error', resolve); })))
"""


def test_search_works_offline(site, base_url, browser):
    """Sphinx's search runs in the page, from searchindex.js: it must find a chapter."""
    page = browser.new_page()
    try:
        page.goto(base_url + "search.html?q=softmax", wait_until="load", timeout=LOAD_TIMEOUT_MS)
        page.wait_for_function(
            "() => document.querySelectorAll('#search-results ul.search li').length > 0",
            timeout=20_000)
        hits = page.eval_on_selector_all("#search-results ul.search li a", "els => els.map(a => a.href)")
    finally:
        page.close()
    assert any("01_attention_by_hand" in h for h in hits), f"search for 'softmax' found {hits}"


@pytest.mark.parametrize("page_path", site_pages())
def test_page(page_path, site, base_url, browser, screenshots):
    if not (site / page_path).is_file():
        pytest.fail(f"{page_path} was not built (is it in _toc.yml? run 'make book')", pytrace=False)
    origin = base_url.rstrip("/")
    problems: list[str] = []
    offsite: list[str] = []

    page = browser.new_page()

    def route(route_):
        url = route_.request.url
        if url.startswith(base_url) or url.startswith(("data:", "blob:")):
            route_.continue_()
        else:
            offsite.append(url)
            route_.abort("blockedbyclient")

    page.route("**/*", route)
    page.on("console", lambda msg: msg.type == "error" and problems.append(
        f"console error: {msg.text} ({msg.location.get('url', '')})"))
    page.on("pageerror", lambda err: problems.append(f"uncaught error: {err}"))
    page.on("requestfailed", lambda req: req.url.startswith(base_url) and problems.append(
        f"request failed: {req.url} ({req.failure})"))
    page.on("response", lambda resp: resp.status >= 400 and problems.append(
        f"HTTP {resp.status}: {resp.url}"))
    scripts_loaded: list[str] = []
    page.on("request", lambda req: req.resource_type == "script" and scripts_loaded.append(req.url))
    page.on("websocket", lambda ws: offsite.append(ws.url))

    try:
        page.goto(base_url + page_path, wait_until="load", timeout=LOAD_TIMEOUT_MS)
        has_mathjax = page.evaluate(
            "() => (window.MathJax && MathJax.startup && MathJax.startup.promise)"
            " ? MathJax.startup.promise.then(() => true) : false")
        if page.locator('script[type="application/vnd.jupyter.widget-view+json"]').count():
            try:
                page.wait_for_function("() => document.documentElement.hasAttribute('data-widgets-ready')",
                                       timeout=WIDGET_TIMEOUT_MS)
            except Exception:  # reported below with the counts
                pass
        page.evaluate(IMAGES_JS)
        try:
            page.wait_for_load_state("networkidle", timeout=10_000)
        except Exception:
            problems.append("the page kept loading for 10 s after its load event")
        page.screenshot(path=str(screenshots / screenshot_name(page_path)), full_page=True)
        info = page.evaluate(COLLECT_JS)
        widgets = page.evaluate(WIDGETS_JS)
        wide = wide_outputs(page)
        exercised = exercise_controls(page)
        if exercised["controls"]:
            wide += [f"after the controls were changed, {w}" for w in wide_outputs(page)]
        after = screenshots / screenshot_name(page_path).replace(".png", "__controls.png")
        if exercised["controls"]:
            page.screenshot(path=str(after), full_page=True)
        else:
            after.unlink(missing_ok=True)
    finally:
        page.close()

    # math
    if info["math"]:
        if not has_mathjax:
            problems.append(f"{info['math']} math elements but MathJax did not load")
        if info["mathUntypeset"]:
            problems.append(f"math not typeset by MathJax: {info['mathUntypeset'][:5]}")
        if not info["mjx"]:
            problems.append("no mjx-container on a page with math")
    elif any("mathjax" in s for s in info["scripts"]):
        problems.append("MathJax is loaded on a page without math")
    if info["mjxErrors"]:
        problems.append(f"MathJax TeX errors: {info['mjxErrors'][:5]}")
    raw = sorted({m.group(0) for m in RAW_TEX.finditer(info["text"])})
    if raw:
        problems.append(f"raw TeX in the page text (not typeset): {raw}")

    # widgets: drawn by the host alone, only where a notebook saved some, and every control alive
    widget_scripts = sorted({urlsplit(u).path for u in scripts_loaded
                             if re.search(r"widget|require|jupyter|anywidget", urlsplit(u).path, re.I)})
    host_path = "/" + WIDGET_HOST
    if info["widgetState"] or widgets["expected"]:
        if not widgets["expected"] or widgets["rendered"] < widgets["expected"]:
            problems.append(f"widgets: {widgets['rendered']} of {widgets['expected']} views rendered "
                            f"(failed: {widgets['failed']})")
        if widget_scripts != [host_path]:
            problems.append(f"a widget page should load the widget host and no other widget script: {widget_scripts}")
        host_bytes = (site / WIDGET_HOST).stat().st_size
        print(f"{page_path}: {widgets['expected']} widget view(s); widget JavaScript {host_bytes + widgets['esmBytes']:,} "
              f"bytes (host {host_bytes:,}, modules in the saved state {widgets['esmBytes']:,}); style sheets "
              f"{widgets['cssBytes']:,} bytes; saved state {widgets['stateBytes']:,} bytes")
    else:
        if widget_scripts or any("widgets/host.js" in s for s in info["scripts"]):
            problems.append(f"widget scripts on a page without widgets: {widget_scripts}")
        print(f"{page_path}: no widget, 0 bytes of widget JavaScript")
    for name in exercised["dead"]:
        problems.append(f"dead control: {name}")
    for name in exercised["bad_text"]:
        problems.append(f"control: {name}")
    if exercised["controls"]:
        print(f"{page_path}: {len(exercised['controls'])} controls changed:\n  " + "\n  ".join(exercised["controls"]))

    # outputs that do not fit the text column
    for finding in wide:
        problems.append(f"wider than the text column: {finding}")

    # images
    for img in info["images"]:
        if not img["ok"]:
            problems.append(f"image did not load: {img['src']}")

    # local links and assets
    page_url = base_url + page_path
    for ref in info["refs"]:
        url = ref["url"]
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or f"{parts.scheme}://{parts.netloc}" != origin:
            continue  # external links are fine to have; loading from them is what is forbidden
        target = urljoin(url, parts.path)
        status, ids = fetch(target)
        if status != 200:
            problems.append(f"<{ref['tag']}> {ref['raw']!r} -> HTTP {status}")
            continue
        fragment = unquote(parts.fragment)
        if ref["tag"] == "a" and fragment and ids is not None and fragment not in ids:
            where = "this page" if target == urljoin(page_url, urlsplit(page_url).path) else target
            problems.append(f"<a> {ref['raw']!r}: no element id={fragment!r} on {where}")

    if offsite:
        problems.append(f"requests that left 127.0.0.1 (blocked): {sorted(set(offsite))}")

    if problems:
        pytest.fail(f"{page_path}:\n  " + "\n  ".join(dict.fromkeys(problems)), pytrace=False)
