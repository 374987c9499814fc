"""Shared pytest configuration."""

# Notebooks under tests/ are test data (e.g. the grader's hostile submissions), not course
# notebooks: nbval must not execute them.
collect_ignore_glob = ["**/*.ipynb"]

import pytest  # noqa: E402 - after the collection setting above, which needs nothing


@pytest.fixture(scope="session")
def playwright_driver():
    """One Playwright per test process, shared by every test that drives Chromium: its sync API runs
    an event loop in this thread, and a second one started while the first is open fails ("Sync API
    inside the asyncio loop")."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail("the playwright Python package is missing: run 'make venv'", pytrace=False)
    with sync_playwright() as driver:
        yield driver


@pytest.fixture
def course_modules_kept():
    """A test that runs ``public_checks.browser`` (which drops the course's modules so that the next
    import reads them anew) gets this process's modules back afterwards: a later test in the same
    process would otherwise meet two of ga2's classes (an ``Instr`` that is not an ``Instr``)."""
    import sys

    from public_checks.browser import COURSE_PACKAGES

    def mine():
        return [k for k in sys.modules if k.split(".")[0] in COURSE_PACKAGES]
    saved = {k: sys.modules[k] for k in mine()}
    yield
    for k in mine():
        del sys.modules[k]
    sys.modules.update(saved)
