"""What the harness said on the results channel, read once, as it arrives.

The harness sends one JSON object per line: ``hello``, ``import_start``, ``import``, then
``start``/``result`` for each test, then ``done`` (or ``public`` for the public checks).  The
submission runs in the same process and may write on the channel too, so every line is untrusted
data, and this is the only place that interprets it:

- only the harness's own sequence moves the run on: a test starts when the previous one has
  ended, each test of the run once (a ``start`` in the middle of a test or of the import, a
  second one for a test, or an id that is not one of this run's tests is ignored, so it cannot
  renew a deadline); nothing else moves a deadline but a test's start and the end of the run;
- a test's result is the last ``result`` for it before the next test starts (the harness writes
  its own after the submission's code has returned);
- the end of the run (``done``, ``public``) is heard only between tests, and even then the
  harness's next ``start`` still counts (a fake end only hurries the grader); the last one says
  how many tests were given up on;
- of ``import`` the first counts; free text (the imports that failed) is capped and kept only
  for statements the submission really has;
- lines that are not messages are counted, never kept.

``Sandbox._watch`` feeds each line to ``Transcript.feed`` and sets its deadlines from
``Transcript.phase``; the grader then reads the finished transcript's fields, never the lines.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

__all__ = ["Transcript", "parse_line", "MAX_LINE"]

MAX_LINE = 24 << 20          # the longest message line read from the channel
MAX_FAILURES = 50            # failed imports kept
MAX_TEXT = 200               # characters of each


def parse_line(line: bytes) -> dict | None:
    """One channel line as a message (a JSON object with a string ``t``), or None."""
    if not line or len(line) > MAX_LINE:
        return None
    try:
        message = json.loads(line)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    if not isinstance(message, dict) or not isinstance(message.get("t"), str):
        return None
    return message


@dataclass
class Transcript:
    """The run's channel, interpreted: phase (``startup``, ``import``, ``between``, ``test``,
    ``done``), the test running now, and what came back."""

    tests: frozenset = frozenset()           # the ids this run may start
    phase: str = "startup"
    running: str | None = None               # the test in progress
    imported: dict | None = None             # the import message: {"ok", "timeout"?, "error"?}
    import_failures: dict = field(default_factory=dict)   # statement -> why (untrusted, capped)
    results: dict = field(default_factory=dict)           # test id -> its result message
    finished: dict | None = None             # the done message (``gave_up``) or the public one
    junk: int = 0                            # lines that were not messages
    hello: bool = False                      # the harness started (its first message)
    _last: str | None = None                 # the test started last
    _started: set = field(default_factory=set)

    def feed(self, line: bytes) -> None:
        message = parse_line(line)
        if message is None:
            self.junk += 1
            return
        kind = message["t"]
        if kind == "hello":
            self.hello = True
        elif kind == "import_start" and self.phase == "startup":
            self.phase = "import"
        elif kind == "import" and self.phase in ("startup", "import"):
            self.imported = message
            self.phase = "between"
            failures = message.get("import_failures")
            if message.get("ok") and isinstance(failures, dict):
                self.import_failures = {k: v[:MAX_TEXT] for k, v in list(failures.items())[:MAX_FAILURES]
                                        if isinstance(k, str) and isinstance(v, str)}
        elif kind == "start" and self.phase in ("between", "done"):
            tid = message.get("id")
            if isinstance(tid, str) and tid in self.tests and tid not in self._started:
                self._started.add(tid)
                self.phase, self.running, self._last = "test", tid, tid
        elif (kind == "result" and self._last is not None and message.get("id") == self._last
              and self.phase in ("test", "between", "done")):
            self.results[self._last] = message           # the last one before the next start wins
            if self.phase == "test":
                self.phase, self.running = "between", None
        elif kind in ("done", "public") and self.phase in ("between", "done"):
            self.finished = message
            self.phase, self.running = "done", None

    @property
    def import_ok(self) -> bool:
        return bool(self.imported and self.imported.get("ok") is True)

    def gave_up(self, n_tests: int) -> int | None:
        """How many tests timed out before the harness skipped the rest, when it said so (only a
        plausible count: the channel is untrusted)."""
        if not self.finished or self.finished.get("t") != "done":
            return None
        count = self.finished.get("gave_up")
        return count if type(count) is int and 0 < count <= n_tests else None

    def public(self) -> dict | None:
        return self.finished if self.finished and self.finished.get("t") == "public" else None

    def known_import_failures(self, statements) -> dict:
        """The failed imports the submission really has (text from the channel cannot invent one)."""
        return {k: v for k, v in self.import_failures.items() if k in statements}
