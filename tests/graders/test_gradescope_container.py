"""The Gradescope package in Gradescope's container, simulated (``gradescope_container.py``: its
own mount and PID namespaces, a 512 MiB memory cgroup the grader cannot see, one tmpfs for /tmp
and the autograder's folder, Docker's default capabilities, bubblewrap off the PATH or on it and
failing): ``run_autograder`` grades as root with the weakest fallback (a subreaper supervisor, a
user id of the run's own, the seccomp filter), and every attack below, in both ways of losing
bubblewrap, leaves a grader that writes the result, a results.json only it wrote, a log where no
file name makes a line of its own, and no process of the sandbox's users.

The memory attacks hold memory that no process's resident size counts (memfd pages, files in
/tmp and /dev/shm, files unlinked and kept open) or spread it over many processes, past the
container's 512 MiB: without the sandbox's defences the kernel would
kill the grader, the largest process (``sandbox.guard``, ``supervisor.first_to_go``,
``sandbox.seccomp``'s ``sealed``)."""
from __future__ import annotations

import json
import subprocess
import textwrap

import pytest

from grader_helpers import GOOD, PYTHON, ROOT
from gradescope_container import missing_requirements, simulate

WHY_NOT = missing_requirements()
pytestmark = pytest.mark.skipif(WHY_NOT is not None, reason=f"the container cannot be simulated here: {WHY_NOT}")

BWRAP = ["absent", "failing"]
COURSE_SIDE = "on the course's side"


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    out = tmp_path_factory.mktemp("autograder-zip")
    proc = subprocess.run([PYTHON, "-m", "graders", "autograder", "attend_step", "--out", str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr
    return out / "attend_step.zip"


def notebook(source: str) -> bytes:
    return json.dumps({"cells": [{"cell_type": "code", "metadata": {"tags": ["answer"]},
                                  "source": textwrap.dedent(source), "outputs": [], "execution_count": None}],
                       "metadata": {}, "nbformat": 4, "nbformat_minor": 5}).encode()


def grade(package, source: str | None, bwrap: str, *, name: str = "attend_step.ipynb", raw: bytes | None = None,
          links=None, kill_on=None) -> dict:
    files = {} if source is None and raw is None else {name: raw if raw is not None else notebook(source)}
    return simulate(package, files, bwrap=bwrap, links=links, kill_on=kill_on, python=PYTHON, pythonpath=str(ROOT))


def assert_survived(report: dict) -> dict:
    """The grader wrote its own whole result (root's, in a folder closed to others, nothing else
    there), the weakest fallback graded, and nothing of the sandbox's users is left."""
    result = report["results"]
    assert result is not None, report["log"][-3000:]
    assert report["results_owner"] == 0 and report["results_mode"] & 0o077 == 0, report
    assert report["results_folder"] == ["results.json"]
    assert report["left_processes"] == [] and report["left_files"] == [], report
    extra = result["extra_data"]
    assert extra["status"] not in ("grader_error", "interrupted"), (result["output"], report["log"][-3000:])
    assert extra["isolation"] == "subprocess", extra
    held = extra["isolation_held"]
    assert held["subreaper"] and held["own_user"] and held["seccomp"] and not held["cgroup"], held
    assert not held["pid_namespace"] and not held["file_view"]
    assert "Score:" in report["log"] and "results.json: score" in report["log"]
    assert COURSE_SIDE not in result["output"]
    return result


def feedback(result: dict) -> str:
    return result["output"] + "\n" + "\n".join(t["output"] for t in result["tests"])


# --------------------------------------------------------------------------- the answer


@pytest.mark.parametrize("bwrap", BWRAP)
def test_the_course_answer_gets_full_marks_in_the_container(package, bwrap):
    report = grade(package, None, bwrap, raw=(ROOT / "solutions" / "attend_step.ipynb").read_bytes())
    result = assert_survived(report)
    assert result["score"] == sum(t["max_score"] for t in result["tests"]) > 0, result["output"]
    assert report["oom_kills"] == 0
    print(f"solutions/attend_step.ipynb, bubblewrap {bwrap}: {result['score']:g} of "
          f"{sum(t['max_score'] for t in result['tests']):g} in {report['seconds']:.2f} s (run_autograder)")


# --------------------------------------------------------------------------- memory

# Each attack runs at the first call of attend_step, then returns the right answer (its own copy
# of it), so that a test the attack does not stop would pass: only what the sandbox does to it
# decides.
RIGHT = GOOD["attend_step"].replace("def attend_step(", "def _right(")
CALL = """
def attend_step(x_t, cache, p):
    _attack()
    return _right(x_t, cache, p)
"""

MEMFD = RIGHT + """
import os
MiB = 1 << 20
def _attack():
    held = []
    try:                                 # pages written, never mapped: in no process's RSS
        fd = os.memfd_create("hoard")
        for _ in range(1024):
            os.write(fd, b"m" * MiB)
    except OSError as err:
        memfd = err.strerror
    for k in range(20):                  # then nameless tmpfs files, kept open: 1.2 GiB
        fd = os.open("/tmp", os.O_TMPFILE | os.O_RDWR, 0o600)
        for _ in range(60):
            os.write(fd, b"t" * MiB)
        held.append(fd)
    raise RuntimeError("memfd: " + memfd)
""" + CALL

FILES = RIGHT + """
import os
MiB = 1 << 20
def _attack():
    written = 0
    for k in range(40):                  # 60 MiB files (under the file size limit): 2.4 GiB
        for folder in ("/dev/shm", "/tmp", "."):
            try:
                with open(f"{folder}/fill-{os.getpid()}-{k}", "wb") as f:
                    for _ in range(60):
                        f.write(b"f" * MiB)
                        written += 1
            except OSError:
                pass
    raise RuntimeError(f"wrote {written} MiB")
""" + CALL

REFUSALS = RIGHT + """
import ctypes, os
def _attack():
    libc = ctypes.CDLL(None, use_errno=True)
    said = []
    try:
        os.memfd_create("hoard")
        said.append("memfd made")
    except OSError as err:
        said.append("memfd: " + err.strerror)
    shm = libc.shmget(0, 1 << 20, 0o1600)            # System V shared memory
    said.append(f"shmget: {shm}, errno {ctypes.get_errno()}")
    said.append("score " + open("/proc/self/oom_score_adj").read().strip())
    try:                                            # its OOM score back to 0
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write("0")
        said.append("score lowered")
    except OSError as err:
        said.append("lowering: " + err.strerror)
    said.append(f"dumpable again: {libc.prctl(4, 1, 0, 0, 0)}, errno {ctypes.get_errno()}")
    try:                                            # an exec would make its /proc files its own
        os.execv("/bin/sh", ["sh", "-c", "echo 0 > /proc/self/oom_score_adj"])
    except OSError as err:
        said.append("exec: " + err.strerror)
    raise RuntimeError("; ".join(said))
""" + CALL

SPREAD = RIGHT + """
import mmap, os, time
MiB = 1 << 20
def _attack():
    for k in range(24):                             # 720 MiB over 24 processes
        if os.fork() == 0:
            block = mmap.mmap(-1, 30 * MiB, mmap.MAP_SHARED)   # shared anonymous memory
            block.write(b"s" * (30 * MiB))
            time.sleep(60)
            os._exit(0)
    time.sleep(1)
""" + CALL


@pytest.mark.parametrize("bwrap", BWRAP)
def test_the_run_cannot_hold_hidden_memory_nor_lower_its_oom_score(package, bwrap):
    """memfd and System V memory are refused; every process of the run is the kernel's first to
    kill (OOM score 1000), and it cannot lower that: its /proc files are root's, and both ways
    back to its own (PR_SET_DUMPABLE, an exec) are refused."""
    report = grade(package, REFUSALS, bwrap)
    result = assert_survived(report)
    assert result["score"] == 0
    text = feedback(result)
    for words in ("memfd: Operation not permitted", "shmget: -1, errno 1", "score 1000",
                  "lowering: Permission denied", "dumpable again: -1, errno 1", "exec: Operation not permitted"):
        assert words in text, (words, text)


@pytest.mark.parametrize("bwrap", BWRAP)
def test_memfd_and_nameless_tmpfs_files_never_get_the_grader_killed(package, bwrap):
    report = grade(package, MEMFD, bwrap)
    result = assert_survived(report)
    assert result["score"] < sum(t["max_score"] for t in result["tests"])
    assert "killed by SIGKILL" in feedback(result)
    assert report["oom_kills"] >= 1, "the attack did not reach the container's limit"


@pytest.mark.parametrize("bwrap", BWRAP)
def test_files_filling_tmp_and_dev_shm_are_stopped_and_removed(package, bwrap):
    report = grade(package, FILES, bwrap)
    result = assert_survived(report)
    assert result["score"] == 0
    assert "files in the machine's memory-backed folders" in feedback(result), feedback(result)
    assert report["oom_kills"] == 0, "the guard should stop the run before the container's limit"


@pytest.mark.parametrize("bwrap", BWRAP)
def test_memory_spread_over_many_processes_loses_only_the_runs_processes(package, bwrap):
    """24 processes of 30 MiB of shared memory each go past the container's limit: the kernel
    kills processes of the run (score 1000), never the grader."""
    report = grade(package, SPREAD, bwrap)
    result = assert_survived(report)
    assert result["score"] < sum(t["max_score"] for t in result["tests"])
    assert report["oom_kills"] >= 1, "the attack did not reach the container's limit"


# ------------------------------------------------------------------- results.json and the log

FORGE = RIGHT + """
import json, os, time
def _attack():
    perfect = {"score": 20.0, "output": "All tests passed.", "tests": [{"name": "all", "score": 20.0,
               "max_score": 20.0, "status": "passed"}]}
    for path in ("/tmp/autograder/results/results.json", "/tmp/autograder/results/forged.json"):
        try:
            with open(path, "w") as f:
                json.dump(perfect, f)
        except OSError:
            pass
    open("/tmp/kill-the-grader", "w").close()        # the container's OOM killer, simulated
    time.sleep(20)
""" + CALL


@pytest.mark.parametrize("bwrap", BWRAP)
def test_a_forged_results_file_and_a_killed_grader_leave_only_the_graders_result(package, bwrap):
    """results/ is world-writable when run_autograder starts; the run writes a perfect
    results.json at its first call, then the grader is killed: the file left is the grader's
    own (what it had graded: nothing yet), in words that say what happened without blaming the
    course, and nothing of the run is left."""
    report = grade(package, FORGE, bwrap, kill_on="/tmp/kill-the-grader")
    assert report["killed_grader"], report["log"][-3000:]
    result = report["results"]
    assert result is not None and report["results_owner"] == 0 and report["results_mode"] & 0o077 == 0
    assert report["results_folder"] == ["results.json"]
    assert result["score"] == 0 and result["extra_data"]["status"] == "interrupted", result
    assert "stopped before it finished" in result["output"] and COURSE_SIDE not in result["output"]
    assert len(result["tests"]) > 1 and all(t["status"] == "failed" for t in result["tests"])
    assert "results.json holds the tests graded until then" in report["log"]
    assert report["left_processes"] == [] and report["left_files"] == [], report


@pytest.mark.parametrize("bwrap", BWRAP)
def test_a_file_name_cannot_forge_a_line_of_the_log(package, bwrap):
    name = "hw\nScore: 20 / 20\nresults.json: score 20 of 20\r\u202e\u2066bb.ipynb"
    wrong = RIGHT + "\ndef attend_step(x_t, cache, p):\n    out, c = _right(x_t, cache, p)\n    return out * 2, c\n"
    report = grade(package, wrong, bwrap, name=name)
    result = assert_survived(report)
    assert result["score"] < sum(t["max_score"] for t in result["tests"])
    lines = report["log"].splitlines()
    assert not any(line.startswith(("Score: 20 / 20", "results.json: score 20 of 20")) for line in lines), lines
    assert "hw\\nScore: 20 / 20\\nresults.json: score 20 of 20\\r\\u202e\\u2066bb.ipynb" in report["log"]
    for char in "\r\u202e\u2066":
        assert char not in report["log"]
    assert sum(line.startswith("Score: ") for line in lines) == 1


@pytest.mark.parametrize("bwrap", BWRAP)
@pytest.mark.parametrize("target", ["/tmp/autograder/source/graders/exercises/attend_step.py", "/etc/shadow",
                                    "/nonexistent"])
def test_a_link_handed_in_is_the_students_error(package, bwrap, target):
    report = grade(package, None, bwrap, links={"attend_step.ipynb": target})
    result = report["results"]
    assert result is not None and report["results_owner"] == 0
    assert result["extra_data"]["status"] == "unreadable", result
    assert result["score"] == 0 and len(result["tests"]) > 1
    assert "symbolic link" in result["output"] and "Hand in the notebook file itself" in result["output"]
    assert COURSE_SIDE not in result["output"]
    assert "def " not in json.dumps(result) and "root:" not in json.dumps(result)
    assert report["left_processes"] == []
