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
- lines that are not messages are counted, never kept;
- the grader's memory is the grader's: a line is weighed before it is parsed (its bytes, and its
  structural characters ``{ [ , :``, an upper bound of the objects ``json.loads`` would build),
  at most ``MAX_MESSAGES`` lines are parsed per run, a line heavier than ``MESSAGE_TOKENS`` is never
  parsed, the results kept by a run weigh at most ``KEPT_BYTES`` and ``KEPT_TOKENS`` per test it
  may start, and of the import and ``done`` messages only the fields the grader reads are kept.  What goes over is dropped and counted in
  ``dropped``, which the result reports.  A `{}` line of the channel's 64 MB cap would otherwise be
  millions of dicts kept per test; the harness's own messages are far under these budgets.

The watch loop (``watch``) feeds each line to ``Transcript.feed`` and sets its deadlines from
``Transcript.phase``; the grader then reads the finished transcript's fields, never the lines.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

__all__ = ["Transcript", "parse_line", "weigh", "MAX_LINE", "MAX_MESSAGES", "MESSAGE_TOKENS", "KEPT_BYTES",
           "KEPT_TOKENS"]

MAX_LINE = 24 << 20          # the longest message line read from the channel
MAX_MESSAGES = 10_000        # lines parsed per run (the harness sends 2 per test and 4 more)
MESSAGE_TOKENS = 300_000     # structural characters of one parsed line (about 15 MB of objects at most;
                             # the heaviest result of a correct answer, BlockAllocator's, is 62,072)
KEPT_BYTES = 2 << 20         # bytes of results kept per test of the run (the largest correct one: 276 KB)
KEPT_TOKENS = 64_000         # structural characters of results kept per test of the run
MAX_FAILURES = 50            # failed imports kept
MAX_TEXT = 200               # characters of each


def weigh(line: bytes) -> int:
    """The structural characters of ``line`` (``{ [ , :``, in strings too): at least the number of
    containers and items ``json.loads`` would build from it, counted without building any."""
    return line.count(b"{") + line.count(b"[") + line.count(b",") + line.count(b":")


def parse_line(line: bytes, tokens: int = MESSAGE_TOKENS) -> dict | None:
    """One channel line as a message (a JSON object with a string ``t``), or None; a line that
    weighs more than ``tokens`` is not parsed."""
    if not line or len(line) > MAX_LINE or weigh(line) > tokens:
        return None
    return _decode(line)


def _decode(line: bytes) -> dict | None:
    """A line already weighed, as a message, or None."""
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
    parsed: int = 0                          # lines parsed (at most MAX_MESSAGES)
    dropped: int = 0                         # lines or results over the budget: never parsed, or let go
    too_large: set = field(default_factory=set)           # tests whose result went over the budget
    kept_bytes: int = 0                      # what the kept results weigh
    kept_tokens: int = 0
    _last: str | None = None                 # the test started last
    _started: set = field(default_factory=set)
    _weights: dict = field(default_factory=dict)          # test id -> (bytes, tokens) of its result

    @property
    def budget(self) -> tuple[int, int]:
        """(bytes, structural characters) the results of this run may keep."""
        share = max(1, len(self.tests))
        return KEPT_BYTES * share, KEPT_TOKENS * share

    def feed(self, line: bytes) -> None:
        if not line:
            self.junk += 1
            return
        if self.parsed >= MAX_MESSAGES:
            self.dropped += 1
            return
        tokens = weigh(line)
        if tokens > MESSAGE_TOKENS or len(line) > MAX_LINE:
            self.dropped += 1
            if self.phase == "test" and self.running is not None:   # what the running test sent
                self.too_large.add(self.running)
            return
        self.parsed += 1
        message = _decode(line)
        if message is None:
            self.junk += 1
            return
        self._message(message, len(line), tokens)

    def _message(self, message: dict, size: int, tokens: int) -> None:
        """One decoded message, taken only where the harness's protocol allows it (a message out
        of turn changes nothing)."""
        kind = message["t"]
        if kind == "hello":
            self.hello = True
        elif kind == "import_start" and self.phase == "startup":
            self.phase = "import"
        elif kind == "import" and self.phase in ("startup", "import"):
            self._imported(message)
        elif kind == "start" and self.phase in ("between", "done"):
            tid = message.get("id")
            if isinstance(tid, str) and tid in self.tests and tid not in self._started:
                self._started.add(tid)
                self.phase, self.running, self._last = "test", tid, tid
        elif (kind == "result" and self._last is not None and message.get("id") == self._last
              and self.phase in ("test", "between", "done")):
            self._keep(self._last, message, size, tokens)  # the last one before the next start wins
            if self.phase == "test":
                self.phase, self.running = "between", None
        elif kind in ("done", "public") and self.phase in ("between", "done"):
            self.finished = message if kind == "public" else {"t": "done", "gave_up": message.get("gave_up")}
            self.phase, self.running = "done", None

    def _imported(self, message: dict) -> None:
        """The submission was loaded (or not): keep what the harness says of it and of the imports
        that failed."""
        self.imported = _import_fields(message)
        self.phase = "between"
        failures = message.get("import_failures")
        if message.get("ok") and isinstance(failures, dict):
            self.import_failures = {k: v[:MAX_TEXT] for k, v in list(failures.items())[:MAX_FAILURES]
                                    if isinstance(k, str) and isinstance(v, str)}

    def _keep(self, tid: str, message: dict, size: int, tokens: int) -> None:
        """Keep ``message`` as the result of ``tid`` (in place of an earlier one) within the run's
        budget; over it, the test keeps no result at all (a smaller earlier one is not its answer)."""
        old_size, old_tokens = self._weights.pop(tid, (0, 0))
        self.results.pop(tid, None)
        self.kept_bytes -= old_size
        self.kept_tokens -= old_tokens
        max_bytes, max_tokens = self.budget
        if self.kept_bytes + size > max_bytes or self.kept_tokens + tokens > max_tokens:
            self.dropped += 1
            self.too_large.add(tid)
            return
        self.too_large.discard(tid)
        self.results[tid] = message
        self._weights[tid] = (size, tokens)
        self.kept_bytes += size
        self.kept_tokens += tokens

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


def _import_fields(message: dict) -> dict:
    """What the grader reads of the import message: ``ok``, ``timeout`` and the error's type,
    message, function and line, each capped (the rest of a forged one is let go)."""
    kept = {"t": "import", "ok": message.get("ok") is True, "timeout": message.get("timeout") is True}
    error = message.get("error")
    if isinstance(error, dict):
        kept["error"] = {key: (error[key][:MAX_TEXT * 5] if isinstance(error[key], str) else error[key])
                         for key in ("type", "message", "function", "line", "bases")
                         if key in error and isinstance(error[key], (str, int, list))}
        if isinstance(kept["error"].get("bases"), list):
            kept["error"]["bases"] = [b[:MAX_TEXT] for b in kept["error"]["bases"][:20] if isinstance(b, str)]
    return kept
