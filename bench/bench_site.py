"""bench_site: an exercise page's Python in headless Chromium, from a server on loopback:
``python -m bench site``.

Measured on the built site (``make book``), on the softmax page, in one run:

1. the bytes fetched at the first Run, file by file (the module, the standard library, the
   course's packages, the runtime's scripts): the page's budget is 25 MB;
2. the time from pressing Run to the first line of output, cold (nothing fetched, nothing
   compiled; a new browser profile): the budget is 3 s;
3. a second Run of the same code (the interpreter kept in its worker): the budget is 0.3 s;
4. Stop in an endless loop, then Run: the time the new worker takes to start from what the page
   kept;
5. the tab's peak memory: the largest peak resident size (``VmHWM``) of Chromium's renderer
   processes, which run the page and its worker.

The machine may be shared: its load is printed at the start and the end, and the times are the
best of three fresh browsers.
"""
from __future__ import annotations

import functools
import http.server
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SITE = ROOT / "_build" / "html"
CHROMIUM = os.environ.get("KVCOURSE_CHROMIUM", "/usr/bin/chromium")
PAGE = "exercises/softmax.html"
ANSWER = ("import numpy as np\n\n\ndef softmax(scores):\n    s = np.asarray(scores, dtype=np.float64)\n"
          "    e = np.exp(s - s.max(axis=-1, keepdims=True))\n    return e / e.sum(axis=-1, keepdims=True)\n")
BUDGET_BYTES, BUDGET_COLD, BUDGET_WARM = 25e6, 3.0, 0.3
TRIES = 3


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 - the base class's signature
        pass


def _serve():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(SITE)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_port}/"


def _descendants(pid: int) -> set[int]:
    """Every process below ``pid`` (this process starts Playwright's driver, which starts Chromium)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry.name))
    found, queue = set(), [pid]
    while queue:
        for child in children.get(queue.pop(), []):
            if child not in found:
                found.add(child)
                queue.append(child)
    return found


def _renderer_peak_bytes() -> int:
    """The largest VmHWM (peak resident size) of the renderer processes of the browsers this
    process started: other browsers may run on the machine."""
    peak = 0
    for pid in _descendants(os.getpid()):
        try:
            if b"--type=renderer" not in Path(f"/proc/{pid}/cmdline").read_bytes():
                continue
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith("VmHWM:"):
                peak = max(peak, int(line.split()[1]) * 1024)
    return peak


def _one_browser(playwright, base: str) -> dict:
    profile = tempfile.mkdtemp(prefix="kvcourse-bench-")
    context = playwright.chromium.launch_persistent_context(
        profile, executable_path=CHROMIUM, headless=True,
        args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking"])
    try:
        page = context.new_page()
        fetched: dict[str, int] = {}

        def finished(request):
            try:
                sizes = request.sizes()
                fetched[request.url.rsplit("/", 1)[-1].split("?")[0]] = sizes["responseBodySize"]
            except Exception:  # noqa: BLE001 - a request without sizes (a blob)
                pass

        page.goto(base + PAGE)
        page.wait_for_function("window.courseExercise !== undefined")
        page.evaluate("(c) => courseExercise.setCode(c)", ANSWER)
        page.on("requestfinished", finished)
        first = page.evaluate("""() => new Promise((resolve) => {
            const out = document.querySelector('[data-exercise-output]');
            const start = performance.now();
            const seen = new MutationObserver(() => {
              if (out.textContent.includes('\\n')) { seen.disconnect(); resolve(performance.now() - start); }
            });
            seen.observe(out, { childList: true, characterData: true, subtree: true });
            document.querySelector('[data-control=run]').click();
        })""") / 1000
        page.wait_for_function("document.querySelector('[data-control=run]').disabled === false")
        page.remove_listener("requestfinished", finished)
        second = page.evaluate("async () => { const t = performance.now(); await courseExercise.run(); "
                               "return performance.now() - t; }") / 1000
        page.evaluate("courseExercise.setCode('while True:\\n    pass\\n')")
        page.evaluate("() => { window.__r = courseExercise.run(); }")
        time.sleep(0.5)
        page.evaluate("courseExercise.stop()")
        page.evaluate("window.__r")
        page.evaluate("(c) => courseExercise.setCode(c)", ANSWER)
        restart = page.evaluate("async () => { const t = performance.now(); await courseExercise.run(); "
                                "return performance.now() - t; }") / 1000
        peak = _renderer_peak_bytes()
        return {"fetched": fetched, "first": first, "second": second, "restart": restart, "peak": peak}
    finally:
        context.close()
        shutil.rmtree(profile, ignore_errors=True)


def main() -> int:
    if not (SITE / PAGE).is_file():
        print(f"no built site ({SITE / PAGE} is missing): run 'make book' first")
        return 1
    from playwright.sync_api import sync_playwright
    print(f"load average at the start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    server, base = _serve()
    try:
        with sync_playwright() as playwright:
            runs = [_one_browser(playwright, base) for _ in range(TRIES)]
    finally:
        server.shutdown()
    fetched = runs[0]["fetched"]
    print("bytes fetched at the first Run:")
    for name, size in sorted(fetched.items(), key=lambda kv: -kv[1]):
        print(f"  {name:28s} {size:>12,}")
    total = sum(fetched.values())
    print(f"  {'total':28s} {total:>12,}   (budget {BUDGET_BYTES:,.0f}: {'within' if total <= BUDGET_BYTES else 'OVER'})")
    best = {key: min(r[key] for r in runs) for key in ("first", "second", "restart")}
    each = ", ".join(f"{r['first']:.2f}" for r in runs)
    print(f"Run to the first output line, cold: {best['first']:.2f} s (best of {TRIES}; each: "
          f"{each}; budget {BUDGET_COLD} s: "
          f"{'within' if best['first'] <= BUDGET_COLD else 'OVER'})")
    print(f"a second Run: {best['second'] * 1000:.0f} ms (budget {BUDGET_WARM * 1000:.0f} ms: "
          f"{'within' if best['second'] <= BUDGET_WARM else 'OVER'})")
    print(f"Run after Stop (a new worker from the files kept): {best['restart']:.2f} s")
    print(f"the tab's peak memory (renderer VmHWM): {max(r['peak'] for r in runs) / 2**20:,.0f} MiB")
    print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
