"""A page of the site opened in Chromium, with everything that would go wrong written down.

``watched_page(browser, base_url, path)`` opens ``path`` and yields ``(page, problems)``; every
console error, uncaught exception, failed or refused request, HTTP error and request that leaves
the loopback server (blocked) is appended to ``problems`` as it happens.  The tests assert that
the list is empty at the end, after the reader's actions, not only after the load.
"""
from __future__ import annotations

from contextlib import contextmanager

LOAD_TIMEOUT_MS = 30_000
WIDGET_TIMEOUT_MS = 20_000


@contextmanager
def watched_page(browser, base_url: str, path: str, wait_for_widgets: bool = True):
    problems: list[str] = []
    page = browser.new_page()

    def route(route_):
        url = route_.request.url
        if url.startswith(base_url) or url.startswith(("data:", "blob:")):
            route_.continue_()
        else:
            problems.append(f"request that left 127.0.0.1 (blocked): {url}")
            route_.abort("blockedbyclient")

    page.route("**/*", route)
    page.on("console", lambda msg: msg.type == "error" and problems.append(f"console error: {msg.text}"))
    page.on("pageerror", lambda err: problems.append(f"uncaught error: {err}"))
    page.on("requestfailed", lambda req: req.url.startswith(base_url) and problems.append(
        f"request failed: {req.url} ({req.failure})"))
    page.on("response", lambda resp: resp.status >= 400 and problems.append(f"HTTP {resp.status}: {resp.url}"))
    page.on("websocket", lambda ws: problems.append(f"websocket opened: {ws.url}"))
    try:
        page.goto(base_url + path, wait_until="load", timeout=LOAD_TIMEOUT_MS)
        if wait_for_widgets:
            page.wait_for_function("() => document.documentElement.hasAttribute('data-widgets-ready')",
                                   timeout=WIDGET_TIMEOUT_MS)
        yield page, problems
    finally:
        page.close()


def settle(page) -> None:
    """Wait two animation frames: whatever an event handler redrew is on the page then."""
    page.evaluate("() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(() => r(true))))")
