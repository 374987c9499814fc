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


#: The installed real model the engine's and the chapters' tests run (kvcache.models.MODELS).
SMOLLM2 = "smollm2-135m-instruct"


@pytest.fixture(scope="session")
def smollm2_engine():
    """(Model, Tokenizer) of SmolLM2-135M-Instruct in float32, read from its GGUF file once per
    test process rather than once per module (each read is half a minute on a busy machine).  The
    tests only read it: the model's one table filled on use, the rotary angles, holds the same
    values whatever length it has grown to."""
    from kvcache.models import load_with_tokenizer
    return load_with_tokenizer(SMOLLM2)


@pytest.fixture(scope="session")
def smollm2_transformers():
    """transformers' model of the same GGUF file (de-quantized to float32, in eval mode), once per
    test process (de-quantizing takes up to a minute on a busy machine): the reference the engine's
    outputs are judged against.  A test that would change it changes a deep copy."""
    import torch
    from transformers import AutoModelForCausalLM

    from kvcache.models import model_path
    path = model_path(SMOLLM2)
    return AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32).eval()


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


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """``--dist loadfile`` with the files that take minutes first and the learner's copy's two
    files as one unit (``xdist_scheduling``)."""
    from xdist_scheduling import make_scheduler
    return make_scheduler(config, log)
