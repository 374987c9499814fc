"""The hostile corpus (tests/graders/hostile/): every attack scores zero on what it attacks, gets a
clear status and message, and the grader carries on.

The attacks that would be dangerous outside a sandbox (killing every process it may signal,
deleting files, a fork bomb, the network) are graded with ``isolation="bwrap"`` only, so that a
machine without bubblewrap skips them instead of running them unsandboxed.
"""
import os
import socket
import threading
import time
from pathlib import Path

import pytest

from graders import Limits, grade_bytes
from graders.sandbox import Sandbox

from grader_helpers import BWRAP, FAST, GOOD, HOSTILE, grade_text, needs_bwrap

VALUE_TESTS = lambda name: not any(w in name for w in ("not modified", "shape and dtype"))  # noqa: E731
ALL_TESTS = lambda name: True  # noqa: E731


def grade_hostile(filename, exercise, *, limits=FAST, isolation="auto", fill=None):
    data = (HOSTILE / filename).read_bytes()
    for key, value in (fill or {}).items():
        data = data.replace(key.encode(), str(value).encode())
    return grade_bytes(data, filename, exercise, limits=limits, isolation=isolation)


def assert_zero(result, on=ALL_TESTS):
    attacked = [t for t in result["tests"] if on(t["name"])]
    assert attacked, "no test covers the attack"
    assert all(t["score"] == 0 and t["status"] == "failed" for t in attacked), \
        [(t["name"], t["output"]) for t in attacked if t["score"]]
    for t in result["tests"]:
        assert t["output"] and "Traceback" not in t["output"]
    assert result["max_score"] > 0


# (file, exercise, statuses, words in the feedback, which tests must score zero, limits)
CASES = [
    ("loop_at_import.py", "softmax", {"timeout"}, "loading the submission took longer", ALL_TESTS, FAST),
    ("loop_in_function.py", "time_per_token", {"timeout"}, "took longer than 0.5 s", ALL_TESTS, FAST),
    ("loop_ignoring_alarm.py", "time_per_token", {"timeout"}, "took longer than 0.5 s", ALL_TESTS, FAST),
    ("memory_bomb.py", "time_per_token", {"ok"}, "ran out of memory", ALL_TESTS,
     Limits(memory_bytes=512 << 20, test_seconds=5, submission_seconds=30)),
    ("sys_exit.py", "softmax", {"ok"}, "called sys.exit(0)", ALL_TESTS, FAST),
    ("sys_exit_at_import.py", "softmax", {"crashed"}, "called sys.exit(0)", ALL_TESTS, FAST),
    ("os_exit.py", "softmax", {"crashed"}, "os._exit()", ALL_TESTS, FAST),
    ("fake_result.py", "softmax", {"ok", "timeout"}, "Python str", VALUE_TESTS, FAST),
    ("patch_numpy.py", "softmax", {"ok"}, "differs", VALUE_TESTS, FAST),
    ("stack_frames.py", "softmax", {"ok", "timeout"}, "differs", VALUE_TESTS, FAST),
    ("channel_flood.py", "softmax", {"crashed"}, "flooded the grader's results channel", ALL_TESTS, FAST),
    ("disk_fill.py", "time_per_token", {"ok"}, "File too large", ALL_TESTS, Limits(test_seconds=3, submission_seconds=20)),
    ("native_crash.py", "time_per_token", {"crashed"}, "SIGSEGV", ALL_TESTS, FAST),
    ("liar_objects.py", "time_per_token", {"ok"}, "submission.Liar", ALL_TESTS, FAST),
    ("liar_objects.py", "softmax", {"ok"}, "differs", VALUE_TESTS, FAST),
    ("liar_objects.py", "kv_cache_bytes", {"ok"}, "not plain data", ALL_TESTS, FAST),
    ("huge_array.py", "softmax", {"ok"}, "too large", VALUE_TESTS, FAST),
]


@pytest.mark.parametrize("filename, exercise, statuses, words, zero_on, limits", CASES,
                         ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_hostile_submission_scores_zero_with_a_clear_message(filename, exercise, statuses, words, zero_on, limits):
    result = grade_hostile(filename, exercise, limits=limits)
    assert result["status"] in statuses, (result["status"], result["output"])
    assert_zero(result, zero_on)
    feedback = "\n".join(t["output"] for t in result["tests"]) + result["output"]
    assert words in feedback


def test_a_fake_printed_result_is_never_read():
    result = grade_hostile("fake_result.py", "softmax")
    assert '"score": 100' in result["submission_output"]      # it printed its fake result ...
    assert_zero(result, VALUE_TESTS)                            # ... and nothing came of it
    assert "Score: 14 / 14" not in result["output"]


@needs_bwrap
def test_killing_the_grader_fails_and_grading_goes_on():
    before = os.getpid()
    result = grade_hostile("kill_grader.py", "time_per_token", isolation="bwrap")
    assert os.getpid() == before and result["status"] == "ok"
    assert_zero(result)
    again = grade_text(GOOD["time_per_token"], "time_per_token")
    assert again["score"] == again["max_score"]


def _processes_matching(*needles: str) -> list[str]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0] in "ZX":
                continue            # killed, waiting to be reaped by init: gone
            comm = Path(f"/proc/{entry}/comm").read_text().strip()
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if any(n in comm or n in cmdline for n in needles):
            found.append(f"{entry} {comm} {cmdline}")
    return found


@needs_bwrap
def test_children_that_try_to_outlive_the_grading_are_gone():
    result = grade_hostile("fork_children.py", "kv_cache_bytes", isolation="bwrap")
    assert_zero(result)
    time.sleep(0.2)
    assert _processes_matching("hostile-child", "hostile-daemon", "sleep 987654") == []


def test_children_are_gone_in_the_fallback_too():
    result = grade_hostile("fork_children.py", "kv_cache_bytes", isolation="subprocess")
    assert result["isolation"] == "subprocess" and "fallback" in result["output"]
    assert_zero(result)
    time.sleep(0.2)
    assert _processes_matching("hostile-child", "hostile-daemon", "sleep 987654") == []


@needs_bwrap
def test_reading_or_importing_the_reference_answers_finds_nothing():
    result = grade_hostile("read_solutions.py", "softmax", isolation="bwrap",
                           limits=Limits(test_seconds=3, submission_seconds=20))
    assert_zero(result)
    assert "no reference answers visible" in result["tests"][0]["output"]


@needs_bwrap
def test_deleting_files_outside_the_scratch_folder_fails(tmp_path):
    canary = tmp_path / "keep" / "canary.txt"
    canary.parent.mkdir()
    canary.write_text("still here")
    result = grade_hostile("delete_files.py", "time_per_token", isolation="bwrap", fill={"__CANARY__": canary})
    assert_zero(result)
    assert canary.read_text() == "still here"
    again = grade_text(GOOD["time_per_token"], "time_per_token")     # the harness and inputs survived
    assert again["score"] == again["max_score"]


@needs_bwrap
def test_gigabytes_of_output_are_capped():
    limits = Limits(test_seconds=0.5, submission_seconds=3, import_seconds=3, output_bytes=10_000)
    result = grade_hostile("huge_output.py", "time_per_token", limits=limits, isolation="bwrap")
    assert result["status"] == "timeout"
    assert_zero(result)
    kept, _, note = result["submission_output"].partition("\n[...")
    assert len(kept) <= 10_000 and "more bytes of output dropped" in note


@needs_bwrap
def test_a_socket_reaches_nothing():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(5)
    server.settimeout(0.1)
    accepted = []
    stop = threading.Event()

    def serve():
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            accepted.append(1)
            conn.sendall(b"ok")
            conn.close()
    thread = threading.Thread(target=serve)
    thread.start()
    try:
        result = grade_hostile("socket_oracle.py", "time_per_token", isolation="bwrap",
                               fill={"__PORT__": server.getsockname()[1]})
    finally:
        stop.set()
        thread.join()
        server.close()
    assert accepted == []
    assert_zero(result)
    assert "Connection" in result["tests"][0]["output"] or "Network" in result["tests"][0]["output"]


@pytest.mark.skipif(not BWRAP or not Sandbox("bwrap").own_user,
                    reason="a fork bomb is only graded with bubblewrap and a user of its own (process limit)")
def test_a_fork_bomb_is_contained():
    limits = Limits(test_seconds=0.5, submission_seconds=3, import_seconds=3)
    result = grade_hostile("fork_bomb.py", "time_per_token", limits=limits, isolation="bwrap")
    assert result["status"] == "timeout"
    assert_zero(result)
    again = grade_text(GOOD["time_per_token"], "time_per_token")
    assert again["score"] == again["max_score"]


def test_lingering_threads_and_atexit_handlers_do_not_hold_grading():
    result = grade_hostile("linger_atexit.py", "softmax")
    assert result["status"] == "ok" and result["score"] == result["max_score"]


def test_magic_and_shell_lines_are_never_executed(tmp_path):
    canary = tmp_path / "created-by-the-notebook"
    result = grade_hostile("magics_and_shell.ipynb", "softmax", fill={"__CANARY__": canary})
    assert result["score"] == result["max_score"]
    assert not canary.exists()


def test_a_pickle_payload_is_never_loaded():
    marker = Path("/tmp/pwned-by-pickle")
    existed = marker.exists()
    result = grade_hostile("liar_objects.py", "kv_cache_bytes")
    assert_zero(result)
    assert marker.exists() == existed


HANG_ON_ZERO = GOOD["kv_cache_bytes"].replace(
    "    return 2 *", "    if n_tokens == 0:\n        BLOCK\n        while True:\n            pass\n    return 2 *")


@pytest.mark.parametrize("block", ["pass", "import signal; signal.signal(signal.SIGALRM, signal.SIG_IGN)"],
                         ids=["harness-timer", "grader-watchdog"])
def test_a_hang_on_one_input_costs_that_test_only(block):
    """The harness's timer stops the call, or (timer disabled) the grader kills the sandbox and
    relaunches it for the tests after: either way the other tests keep their points."""
    result = grade_text(HANG_ON_ZERO.replace("BLOCK", block), "kv_cache_bytes")
    assert result["status"] == "timeout"
    failed = [t for t in result["tests"] if t["status"] == "failed"]
    assert [t["name"] for t in failed] == ["no tokens cached yet (T = 0) gives 0"]
    assert "took longer than 0.5 s" in failed[0]["output"]
    assert result["score"] == result["max_score"] - failed[0]["max_score"]


def test_junk_on_the_results_channel_costs_nothing_and_breaks_nothing():
    """Unhashable test ids and unknown kinds once made the grader itself fail (grader_error)."""
    result = grade_hostile("channel_bad_ids.py", "kv_cache_bytes")
    assert result["status"] == "ok", result["output"]
    assert result["score"] == result["max_score"]


def test_words_put_on_the_results_channel_stay_out_of_the_feedback():
    import json
    result = grade_hostile("channel_text_injection.py", "max_batch")
    assert result["status"] != "grader_error"
    assert_zero(result)
    assert "ALL TESTS PASSED" not in result["output"]          # no fake import failure, no fake count
    assert not any("timed out on ALL" in t["output"] for t in result["tests"])
    assert all(len(t["output"]) <= 2_000 for t in result["tests"])
    assert len(json.dumps(result)) < 60_000


def test_start_messages_from_the_submission_do_not_renew_a_tests_deadline():
    """A hang on one input that keeps writing "start" on the channel still costs that test only
    (it used to keep the sandbox alive until the whole submission's budget was gone)."""
    result = grade_hostile("channel_deadline_renewal.py", "kv_cache_bytes")
    assert result["status"] == "timeout"
    failed = [t for t in result["tests"] if t["status"] == "failed"]
    assert [t["name"] for t in failed] == ["no tokens cached yet (T = 0) gives 0"], \
        [(t["name"], t["output"]) for t in failed]
    assert "took longer than 0.5 s" in failed[0]["output"]


def _cgroups():
    from graders.sandbox import _cgroup_base
    return _cgroup_base() is not None


needs_cgroup = pytest.mark.skipif(not _cgroups(), reason="the grader cannot make cgroups here (not root, or "
                                                           "no memory controller): memory is limited per process")
SMALL_MEMORY = Limits(memory_bytes=256 << 20, tmpfs_bytes=16 << 20, test_seconds=4, submission_seconds=20)


@needs_cgroup
def test_forked_children_share_one_memory_limit():
    """Six children of 200 MiB each, under a 256 MiB limit: RLIMIT_AS alone let them all have it
    (1.2 GiB; with the 2 GiB default and 64 processes, far more than the machine)."""
    result = grade_hostile("fork_memory.py", "time_per_token", limits=SMALL_MEMORY,
                           fill={"__CHUNK__": 200 << 20})
    assert_zero(result)
    assert result["runs"] and all(r["cgroup"] for r in result["runs"])
    assert any("memory" in t["output"] for t in result["tests"]) or "memory limit" in result["output"]
    again = grade_text(GOOD["time_per_token"], "time_per_token")
    assert again["score"] == again["max_score"]


@needs_cgroup
def test_memory_held_in_anonymous_files_counts_too():
    """80 memfds of 8 MiB (640 MiB) under a 256 MiB limit: no per-process limit sees them."""
    result = grade_hostile("memfd_memory.py", "time_per_token", limits=SMALL_MEMORY, fill={"__COUNT__": 80})
    assert_zero(result)
    assert "memory" in result["output"] + " ".join(t["output"] for t in result["tests"])


def test_the_memory_limit_said_is_the_one_used():
    """The feedback said "the limit is 2 GiB" whatever --memory was."""
    result = grade_hostile("memory_bomb.py", "time_per_token",
                           limits=Limits(memory_bytes=384 << 20, test_seconds=5, submission_seconds=30))
    assert_zero(result)
    assert any("384 MiB" in t["output"] for t in result["tests"]), [t["output"] for t in result["tests"]]


@pytest.mark.skipif(not _cgroups() or Sandbox("subprocess").own_user,
                    reason="the fallback shares the grader's user id only where the interpreter is not "
                           "world-readable, and a process count needs a cgroup")
def test_the_fallback_without_a_user_of_its_own_still_counts_processes():
    """RLIMIT_NPROC means nothing to a sandbox that runs as the grader's own user (root ignores it):
    200 forks all succeeded.  The run's cgroup counts them instead."""
    source = """
        import ctypes, os, time
        def kv_cache_bytes(n_layers, n_kv_heads, head_dim, n_tokens, bytes_per_value):
            for n in range(200):
                try:
                    pid = os.fork()
                except OSError:
                    raise RuntimeError(f"fork number {n + 1} refused")
                if pid == 0:
                    ctypes.CDLL(None).prctl(15, b"counted-child", 0, 0, 0)
                    time.sleep(30)
                    os._exit(0)
            return 2 * n_layers * n_kv_heads * head_dim * n_tokens * bytes_per_value
        """
    result = grade_text(source, "kv_cache_bytes", isolation="subprocess",
                        limits=Limits(test_seconds=2, submission_seconds=10))
    assert_zero(result)
    assert "fork number" in result["tests"][0]["output"]
    time.sleep(0.2)
    assert _processes_matching("counted-child") == []


def test_a_sigalrm_the_submission_sends_itself_is_not_a_timeout():
    """It used to end every test as "took longer than 0.5 s" after a few milliseconds (and the
    give-up rule then skipped the rest)."""
    result = grade_hostile("self_alarm.py", "kv_cache_bytes")
    assert result["status"] == "ok", [t["output"] for t in result["tests"]]
    assert result["score"] == result["max_score"]


@needs_bwrap
def test_proc_leads_nowhere_outside_the_sandbox(tmp_path, monkeypatch):
    """The grader's environment and the host's files, through /proc/*/environ, /proc/*/root and
    /proc/*/cwd: nothing of them is reachable."""
    canary = tmp_path / "canary.txt"
    canary.write_text("host file")
    monkeypatch.setenv("KVGRADER_TEST_SECRET", "hunter2-9f3a")
    result = grade_hostile("proc_escape.py", "time_per_token", isolation="bwrap",
                           fill={"__CANARY__": canary, "__SECRET__": "hunter2-9f3a"})
    assert_zero(result)
    assert "nothing outside the sandbox was reachable" in result["tests"][0]["output"]
