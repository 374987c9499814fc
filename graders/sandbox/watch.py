"""The watch loop: the grader's view of a running sandbox, from outside.

One loop reads three pipes (the results channel, the supervisor's reports, stdout and stderr
together) and a pidfd of the top process, and enforces the wall-clock limits: one for start-up
and import, one per test (renewed only by a test's ``start`` message, through ``Transcript``),
one for the whole submission.  Output is drained and capped, the channel is capped, and results
come only from JSON lines on the channel, which are data to compare, never instructions.
"""
from __future__ import annotations

import json
import os
import selectors
import subprocess
import time

from .transcript import MAX_LINE
from .limits import Limits, Run

GRACE = 1.0           # seconds the grader waits beyond the harness's own timer before killing
REPORT_BYTES = 1 << 16
AFTER_EXIT = 0.2      # seconds the loop still reads after the top process exits


def watch(proc, channel_fd, report_fd, report: bytearray, run: Run, limits: Limits,
          test_seconds: dict, start: float) -> None:
    """Watch one run until it ends or a limit is reached (``run.killed`` says which); fills
    ``run`` (transcript, output) and ``report`` (the supervisor's lines)."""
    watcher = _Watcher(proc, channel_fd, report_fd, report, run, limits, test_seconds, start)
    try:
        while not watcher.step():
            pass
    finally:
        watcher.close()
    run.output = watcher.output.decode("utf-8", errors="replace")


def _selector(proc, channel_fd, report_fd):
    """The three pipes, non-blocking, and the top process's exit, in one selector.  Returns it,
    the exit's descriptor (None where the kernel has no pidfd: the loop then polls) and the
    descriptor to close at the end (the pidfd opened here)."""
    sel = selectors.DefaultSelector()
    for fd in (channel_fd, report_fd, proc.stdout.fileno()):
        os.set_blocking(fd, False)
    sel.register(channel_fd, selectors.EVENT_READ, "channel")
    sel.register(report_fd, selectors.EVENT_READ, "report")
    sel.register(proc.stdout, selectors.EVENT_READ, "output")
    # Wake up when the process exits even if its pipes stay open (children holding them).
    pidfd = own_pidfd = None
    try:
        # a run in a warm sandbox says its end on a descriptor of its own (``warm``)
        pidfd = getattr(proc, "exit_fd", None)
        if pidfd is None:
            pidfd = own_pidfd = os.pidfd_open(proc.pid)
        sel.register(pidfd, selectors.EVENT_READ, "exit")
    except (AttributeError, OSError):
        pidfd = None
    return sel, pidfd, own_pidfd


def _read_chunk(fd: int) -> bytes | None:
    """What a ready pipe holds (b"" once its writers are gone), or None when it had nothing."""
    try:
        return os.read(fd, 1 << 16)
    except BlockingIOError:
        return None
    except OSError:
        return b""


class _Watcher:
    """One watch of one run: its selector, its two deadlines (the phase's, renewed by a test's
    start, and the whole submission's) and what it has read so far."""

    def __init__(self, proc, channel_fd, report_fd, report: bytearray, run: Run, limits: Limits,
                 test_seconds: dict, start: float):
        self.proc, self.run, self.limits, self.test_seconds = proc, run, limits, test_seconds
        self.report = report
        self.sel, self.pidfd, self.own_pidfd = _selector(proc, channel_fd, report_fd)
        self.tick = 3600.0 if self.pidfd is not None else 0.05
        self.open_streams = 3
        self.pending = bytearray()          # the channel's last line, not ended yet
        self.channel_total = 0
        self.output = bytearray()
        self.phase_deadline = start + limits.import_seconds + GRACE
        self.overall = start + limits.submission_seconds + GRACE
        self.exited_at = None

    def step(self) -> bool:
        """One turn of the loop: read what is ready, or wait for it; True once the watch is over."""
        now = time.monotonic()
        if self.proc.poll() is not None:
            self.exited_at = self.exited_at or now
            if self.open_streams == 0 or now - self.exited_at > AFTER_EXIT:
                return True     # what is left in the pipes after AFTER_EXIT belongs to stray children
        deadline = min(self.phase_deadline, self.overall)
        if now >= deadline:
            self.run.killed = self._timeout(now)
            return True
        if self.run.killed:
            return True
        if self.open_streams == 0:           # nothing left to read: wait for the exit itself
            try:
                self.proc.wait(timeout=max(0.0, deadline - now))
            except subprocess.TimeoutExpired:
                pass
            return False
        wait = min(deadline - now, 0.05 if self.exited_at else self.tick)
        for key, _ in self.sel.select(timeout=max(0.0, wait)):
            self._read(key)
            if self.run.killed:
                break
        return False

    def _timeout(self, now: float) -> str:
        """Which limit the run reached: start-up and import, the whole submission, or one test's."""
        if self.run.transcript.phase in ("startup", "import"):
            return "import_timeout"
        return "submission_timeout" if now >= self.overall else "test_timeout"

    def _read(self, key) -> None:
        if key.data == "exit":
            self.sel.unregister(self.pidfd)
            return
        chunk = _read_chunk(key.fd)
        if chunk is None:
            return
        if not chunk:
            self.sel.unregister(key.fileobj)
            self.open_streams -= 1
            return
        {"output": self._output, "report": self._report, "channel": self._channel}[key.data](chunk)

    def _output(self, chunk: bytes) -> None:
        """stdout and stderr: kept up to ``limits.output_bytes``, the rest counted and dropped."""
        room = self.limits.output_bytes - len(self.output)
        if room > 0:
            self.output += chunk[:room]
        self.run.output_dropped += max(0, len(chunk) - max(room, 0))

    def _report(self, chunk: bytes) -> None:
        self.report += chunk[:max(0, REPORT_BYTES - len(self.report))]

    def _channel(self, chunk: bytes) -> None:
        """The results channel: past ``limits.channel_bytes`` the run is killed; each whole line
        goes to the transcript, and a line longer than any message is junk."""
        self.channel_total += len(chunk)
        if self.channel_total > self.limits.channel_bytes:
            self.run.killed = "channel_overflow"
            return
        transcript = self.run.transcript
        if b"\n" not in chunk:
            self.pending += chunk
            if len(self.pending) > MAX_LINE:      # no message is that long: junk
                self.pending, transcript.junk = bytearray(), transcript.junk + 1
            return
        *lines, rest = chunk.split(b"\n")
        lines[0] = bytes(self.pending) + lines[0]
        self.pending = bytearray(rest)
        for line in lines:
            self._feed(line)

    def _feed(self, line: bytes) -> None:
        """One line to the transcript.  Only a test's start and the end of the run move the
        deadline: the harness starts the next test right after a result (and the first right
        after the import), so a result or an import faked from the sandbox buys no time."""
        transcript = self.run.transcript
        before = (transcript.phase, transcript.running)
        transcript.feed(line)
        if (transcript.phase, transcript.running) == before:
            return
        now = time.monotonic()
        if transcript.phase == "test":
            self.phase_deadline = now + self.test_seconds.get(transcript.running, self.limits.test_seconds) + GRACE
        elif transcript.phase == "done":       # the harness exits right after
            self.phase_deadline = min(self.overall, now + GRACE)

    def close(self) -> None:
        self.sel.close()
        if self.own_pidfd is not None:
            os.close(self.own_pidfd)


def read_report(data: bytes, run: Run, top: int) -> None:
    """The supervisor's reports (see ``supervisor.main``): its start, the harness's process once
    confined, its exit.  The harness's status is the one it reports, else what the top
    process's exit says."""
    for line in data.splitlines()[:8]:
        try:
            message = json.loads(line)
        except (ValueError, UnicodeDecodeError):
            continue
        if not isinstance(message, dict):
            continue
        kind = message.get("t")
        if kind == "supervisor" and not run.supervisor:
            run.supervisor = message
        elif kind == "confined" and not run.confined:
            run.confined = message
        elif kind == "exit" and not run.ended:
            run.ended = message
    code = run.ended.get("code")
    run.returncode = code if type(code) is int else top


def drain(fd: int, into: bytearray) -> None:
    """What is left in a pipe whose writers are gone (or still there: then what is there now)."""
    os.set_blocking(fd, False)
    while len(into) < REPORT_BYTES:
        try:
            chunk = os.read(fd, 1 << 16)
        except (BlockingIOError, OSError):
            return
        if not chunk:
            return
        into += chunk[:REPORT_BYTES - len(into)]
