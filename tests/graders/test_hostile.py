"""The hostile corpus graded with bubblewrap (the tests: ``hostile_suite.py``)."""
import pytest

from hostile_suite import *  # noqa: F401,F403 - the suite's tests, collected here


@pytest.fixture
def isolation():
    return "bwrap"
