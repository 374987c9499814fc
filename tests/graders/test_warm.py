"""Warm sandboxes (``graders/sandbox/warm.py``, ``supervisor.serve``): where runs are forked from
one, that the verdicts are those of fresh sandboxes, that a warm sandbox that breaks or cannot
take a run costs no run, and that it refuses a request it does not understand.  What runs
forked from one warm sandbox might share is attacked in the hostile suite
(``mutants_warm_traces.py``, ``mutants_memorize.py``, the neighbour attacks)."""
import json
import os
import socket

import pytest

from graders import Limits, grade_file
from graders.sandbox import Sandbox, seccomp, supervisor
from graders.sandbox.warm import Warm

from grader_helpers import BWRAP, BWRAP_WHY, ROOT, processes_matching

ROOT_GRADER = os.geteuid() == 0
needs_warm = pytest.mark.skipif(not (BWRAP and ROOT_GRADER),
                                reason=f"warm sandboxes need bubblewrap and a root grader ({BWRAP_WHY or 'not root'})")
LIMITS = Limits(test_seconds=5, submission_seconds=120, import_seconds=5)


@pytest.mark.parametrize("name, expected", [
    ("0123abcd", True), ("ga2", True), ("public_checks", True), ("a.b-c", True),
    ("", False), (".", False), ("..", False), ("../x", False), ("a/b", False), ("/etc", False),
    ("x" * 101, False), ("caf\u00e9", False), (None, False), (3, False), (["ga2"], False)])
def test_a_warm_sandbox_takes_only_plain_names_for_job_folders_and_packages(name, expected):
    assert supervisor._plain_name(name) is expected


@needs_warm
def test_a_grading_forks_its_runs_from_warm_sandboxes_and_cold_gives_the_same_verdicts():
    """The course's mutants answer: every run forked from a warm sandbox, or (``Limits.warm``
    False, ``grade --cold``) every run in a sandbox of its own, with the same score test by test;
    no warm sandbox is left running afterwards."""
    path = ROOT / "solutions" / "mutants.ipynb"
    warm = grade_file(path, "mutants", limits=LIMITS)
    cold = grade_file(path, "mutants", limits=Limits(**{**LIMITS.as_dict(), "warm": False}))
    assert warm["score"] == cold["score"] == warm["max_score"]
    assert [(t["name"], t["score"]) for t in warm["tests"]] == [(t["name"], t["score"]) for t in cold["tests"]]
    assert len(warm["runs"]) == len(cold["runs"]) == 54
    assert all(r["warm"] for r in warm["runs"]) and not any(r["warm"] for r in cold["runs"])
    held = warm["isolation_held"]
    assert held == cold["isolation_held"] and held == {**{p: True for p in held}, "subreaper": False}
    assert not processes_matching("--serve")


@needs_warm
def test_the_public_checks_and_the_fallback_start_fresh_sandboxes():
    sandbox = Sandbox("bwrap")
    assert sandbox.warm_possible
    assert not Sandbox("subprocess").warm_possible
    with sandbox.warm_runs(LIMITS):
        assert sandbox._warm_sandboxes == {}


@needs_warm
def test_a_warm_sandbox_that_died_costs_no_run(monkeypatch):
    """The grading's warm sandbox is killed after its fourth run: the fifth run is refused by it
    without running (``NotWarm``) and runs in a sandbox of its own, a new warm sandbox takes the
    rest, and every verdict stands."""
    made, runs = [], []
    real_init, real_run = Warm.__init__, Warm.run

    def init(self, *args, **kwargs):
        made.append(self)
        real_init(self, *args, **kwargs)

    def run(self, *args, **kwargs):
        runs.append(self)
        if len(runs) == 5:
            os.killpg(self.proc.pid, 9)
            self.proc.wait()
        return real_run(self, *args, **kwargs)

    monkeypatch.setattr(Warm, "__init__", init)
    monkeypatch.setattr(Warm, "run", run)
    result = grade_file(ROOT / "solutions" / "mutants.ipynb", "mutants",
                        limits=Limits(**{**LIMITS.as_dict(), "sandboxes": 1}))
    assert result["score"] == result["max_score"]
    assert len(result["runs"]) == 54 and len(made) == 2
    assert [r["warm"] for r in result["runs"]].count(False) == 1     # the fifth, in a sandbox of its own


@needs_warm
def test_a_warm_sandbox_refuses_a_request_it_does_not_understand_and_goes_on():
    """A job folder named outside its folder of jobs, a user id that is not a number or root's
    (or none), a request without its three descriptors: none starts a run; the sandbox answers
    and takes the next."""
    warm = Warm(Sandbox("bwrap").isolation, LIMITS.resolved(), (), seccomp.program())
    try:
        for request in ({"job": "../../etc", "libs": [], "uid": 123456789, "argv": []},
                        {"job": "ok", "libs": ["../x"], "uid": 123456789, "argv": []},
                        {"job": "ok", "libs": [], "uid": "0", "argv": []},
                        {"job": "ok", "libs": [], "uid": None, "argv": []},      # it would run as root
                        {"job": "ok", "libs": [], "uid": 0, "argv": []}):
            pipes = [os.pipe() for _ in range(3)]
            socket.send_fds(warm.control, [json.dumps({"t": "run", **request}).encode()], [w for _, w in pipes])
            for r, w in pipes:
                os.close(w)
            assert warm._receive(10) == {"t": "started", "ok": False}
            assert warm._receive(10) == {"t": "ended"}
            for r, _ in pipes:
                assert os.read(r, 100) == b""           # nothing ran: nothing was written
                os.close(r)
        warm.control.send(json.dumps({"t": "run", "job": "x", "libs": [], "uid": None, "argv": []}).encode())
        pipes = [os.pipe() for _ in range(3)]
        socket.send_fds(warm.control, [json.dumps({"t": "run", "job": "missing", "libs": [], "uid": 123456789,
                                                   "argv": []}).encode()], [w for _, w in pipes])
        for _, w in pipes:
            os.close(w)
        assert warm._receive(10) == {"t": "started", "ok": True}
        ended = warm._receive(10)
        report = os.read(pipes[0][0], 4096).decode()
        assert ended == {"t": "ended"} and "the run's file system" in report, (ended, report)
        assert warm.usable
    finally:
        warm.close()
    assert warm.proc is None and not warm.jobs.exists()
