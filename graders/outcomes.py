"""What came back for one test, and what the grader made of it.

- ``Returned``: the harness's message for the test (untrusted data, judged by the test's check);
- ``Problem``: no answer to judge (the test timed out, the process died, it was not run), with
  the words for the learner and its ``Trouble``;
- ``Verdict``: one test judged (passed or not, the message, any trouble);
- ``Trouble``: what went wrong beyond a wrong answer; it decides the submission's status.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Union

__all__ = ["Trouble", "Returned", "Problem", "Outcome", "Verdict"]


class Trouble(str, Enum):
    """What went wrong with a test beyond a wrong answer; it decides the submission's status."""

    TIMEOUT = "timeout"
    CRASHED = "crashed"


@dataclass(frozen=True)
class Returned:
    """What the harness sent back for one test (untrusted data, judged by the test's check)."""

    message: dict

    @property
    def timed_out(self) -> bool:
        return bool(self.message.get("timeout"))


@dataclass(frozen=True)
class Problem:
    """A test with no answer to judge: it timed out, the process died, or it was not run."""

    text: str
    trouble: Trouble | None        # None: a wrong answer, not a timeout or a crash

    @property
    def timed_out(self) -> bool:
        return self.trouble is Trouble.TIMEOUT


Outcome = Union[Returned, Problem]


@dataclass(frozen=True)
class Verdict:
    """One test judged: passed or not, the message for the learner, and any trouble.  ``raised``:
    a call of the learner's function raised an exception; ``value``: what the test's check
    returned (an exercise's ``report`` may read it)."""

    passed: bool
    message: str = ""
    trouble: Trouble | None = None
    raised: bool = False
    value: object = None
