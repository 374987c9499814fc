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

from ..transcript import MAX_LINE
from .limits import Limits, Run

GRACE = 1.0           # seconds the grader waits beyond the harness's own timer before killing
REPORT_BYTES = 1 << 16


def watch(proc, channel_fd, report_fd, report: bytearray, run: Run, limits: Limits,
          test_seconds: dict, start: float) -> None:
    """Watch one run until it ends or a limit is reached (``run.killed`` says which); fills
    ``run`` (transcript, output) and ``report`` (the supervisor's lines)."""
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
    tick = 3600.0 if pidfd is not None else 0.05
    open_streams = 3
    transcript = run.transcript
    pending = bytearray()
    channel_total = 0
    output = bytearray()
    phase_deadline = start + limits.import_seconds + GRACE
    overall = start + limits.submission_seconds + GRACE
    exited_at = None
    while True:
        now = time.monotonic()
        if proc.poll() is not None:
            exited_at = exited_at or now
            if open_streams == 0 or now - exited_at > 0.2:
                break       # what is left in the pipes after 0.2 s belongs to stray children
        deadline = min(phase_deadline, overall)
        if now >= deadline:
            if transcript.phase in ("startup", "import"):
                run.killed = "import_timeout"
            elif now >= overall:
                run.killed = "submission_timeout"
            else:
                run.killed = "test_timeout"
            break
        if run.killed:
            break
        if open_streams == 0:           # nothing left to read: wait for the exit itself
            try:
                proc.wait(timeout=max(0.0, deadline - now))
            except subprocess.TimeoutExpired:
                pass
            continue
        wait = min(deadline - now, 0.05 if exited_at else tick)
        for key, _ in sel.select(timeout=max(0.0, wait)):
            if key.data == "exit":
                sel.unregister(pidfd)
                continue
            try:
                chunk = os.read(key.fd, 1 << 16)
            except BlockingIOError:
                continue
            except OSError:
                chunk = b""
            if not chunk:
                sel.unregister(key.fileobj)
                open_streams -= 1
                continue
            if key.data == "output":
                room = limits.output_bytes - len(output)
                if room > 0:
                    output += chunk[:room]
                run.output_dropped += max(0, len(chunk) - max(room, 0))
                continue
            if key.data == "report":
                report += chunk[:max(0, REPORT_BYTES - len(report))]
                continue
            channel_total += len(chunk)
            if channel_total > limits.channel_bytes:
                run.killed = "channel_overflow"
                break
            if b"\n" not in chunk:
                pending += chunk
                if len(pending) > MAX_LINE:      # no message is that long: junk
                    pending, transcript.junk = bytearray(), transcript.junk + 1
                continue
            *lines, rest = chunk.split(b"\n")
            lines[0] = bytes(pending) + lines[0]
            pending = bytearray(rest)
            for line in lines:
                before = (transcript.phase, transcript.running)
                transcript.feed(line)
                if (transcript.phase, transcript.running) == before:
                    continue
                # Only a test's start and the end of the run move the deadline: the harness
                # starts the next test right after a result (and the first right after the
                # import), so a result or an import faked from the sandbox buys no time.
                now = time.monotonic()
                if transcript.phase == "test":
                    phase_deadline = now + test_seconds.get(transcript.running, limits.test_seconds) + GRACE
                elif transcript.phase == "done":       # the harness exits right after
                    phase_deadline = min(overall, now + GRACE)
    sel.close()
    if own_pidfd is not None:
        os.close(own_pidfd)
    run.output = output.decode("utf-8", errors="replace")


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
