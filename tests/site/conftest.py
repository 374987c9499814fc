"""Fixtures for the site test: the built book served on loopback, and headless Chromium.

The site is built by ``make book`` (``make test`` builds it first); these tests only read
``_build/html``.  Chromium is Debian's ``/usr/bin/chromium`` (``make system-deps`` installs it
when missing and root), driven by Playwright's bundled driver: no browser is downloaded.
"""
from __future__ import annotations

import functools
import http.server
import os
import shutil
import tempfile
import threading
from pathlib import Path

import pytest

# The book to test: this repository, or another checkout of it (KVCOURSE_BOOK_ROOT).
ROOT = Path(os.environ.get("KVCOURSE_BOOK_ROOT") or Path(__file__).resolve().parents[2])
SITE = ROOT / "_build" / "html"
SCREENSHOTS = ROOT / "_build" / "screenshots"
CHROMIUM = os.environ.get("KVCOURSE_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
    "--disable-quic",
]
NO_SITE = (f"the built site is missing ({SITE / 'index.html'} does not exist): "
           f"run 'make book' first (make test does it for you)")


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 - signature of the base class
        pass


@pytest.fixture(scope="session")
def site() -> Path:
    if not (SITE / "index.html").is_file():
        pytest.fail(NO_SITE, pytrace=False)
    return SITE


@pytest.fixture(scope="session")
def base_url(site: Path):
    """http://127.0.0.1:PORT/ serving _build/html, for the whole session."""
    handler = functools.partial(_QuietHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="site-server", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="session")
def browser(playwright_driver):
    if not (os.path.isfile(CHROMIUM) and os.access(CHROMIUM, os.X_OK)):
        pytest.fail(f"Chromium is not installed at {CHROMIUM}: run 'make system-deps' as root "
                    f"(apt-get install chromium)", pytrace=False)
    profile = tempfile.mkdtemp(prefix="kvcourse-chromium-")
    # A fresh profile each run; launch_persistent_context is Playwright's way to name it.
    context = playwright_driver.chromium.launch_persistent_context(
        profile,
        executable_path=CHROMIUM,
        headless=True,
        args=CHROMIUM_FLAGS,
        viewport={"width": 1280, "height": 900},
        service_workers="block",
    )
    try:
        yield context
    finally:
        context.close()
        shutil.rmtree(profile, ignore_errors=True)


@pytest.fixture(scope="session")
def screenshots() -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    return SCREENSHOTS


@pytest.fixture(scope="session")
def scratch_site(tmp_path_factory):
    """(folder, url): a folder of pages the tests write (coursebook.widgets.save_page), served on
    loopback like the built site, for widgets that no chapter shows yet."""
    folder = tmp_path_factory.mktemp("widget-pages")
    handler = functools.partial(_QuietHandler, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="scratch-server", daemon=True)
    thread.start()
    try:
        yield folder, f"http://127.0.0.1:{server.server_port}/"
    finally:
        server.shutdown()
        server.server_close()
