"""The hostile corpus graded with the subprocess fallback, as on a machine without bubblewrap
(the tests: ``hostile_suite.py``; ``test_fallback.py`` takes the fallback's other paths)."""
import pytest

from hostile_suite import *  # noqa: F401,F403 - the suite's tests, collected here


@pytest.fixture
def isolation():
    return "subprocess"
