"""The hostile corpus (tests/graders/hostile/): every attack scores zero on what it attacks, gets a
clear status and message, and the grader carries on, in every isolation mode.

Each test takes the ``isolation`` fixture: ``test_hostile.py`` runs them all with
bubblewrap, ``test_hostile_fallback.py`` with the subprocess fallback (two files, so that
``--dist loadfile`` runs the two halves on two workers).  An attack that would be dangerous where
a protection is missing (killing every process it may signal, deleting files, a fork bomb, the
network) declares what it needs (``needs``), and is skipped, with the reason, on a machine whose
sandbox would not have it, instead of being run unsandboxed.
"""
import os
import random
import socket
import tempfile
import threading
import time
from pathlib import Path

import pytest

from graders import Limits, grade_bytes, grading
from graders.exercises import mutants as mutants_exercise
from graders.sandbox import Sandbox, resident

from grader_helpers import BWRAP, BWRAP_WHY, FAST, GOOD, HOSTILE, ROOT, grade_text, processes_matching

VALUE_TESTS = lambda name: not any(w in name for w in ("not modified", "shape and dtype"))  # noqa: E731
ALL_TESTS = lambda name: True  # noqa: E731
QUANT_VALUES = lambda name: not name.startswith("dequantize_kv")  # noqa: E731 - its answer is right there
TIME_VALUES = lambda name: "is a float" not in name  # noqa: E731 - time_per_token's values (-1.0 is a float)


def sandbox_for(isolation: str) -> Sandbox:
    if isolation == "bwrap" and not BWRAP:
        pytest.skip(f"bubblewrap cannot run here: {BWRAP_WHY}")
    return Sandbox(isolation)


def needs(isolation: str, *protections: str) -> None:
    """Skip unless the sandbox of ``isolation`` has one of ``protections`` here (``Run.held``
    names); say which were missing."""
    planned = sandbox_for(isolation).planned()
    if not any(planned[p] for p in protections):
        pytest.skip(f"the {isolation} sandbox here has none of {', '.join(protections)}: "
                    "this attack is not run unsandboxed")


def grade_hostile(filename, exercise, isolation, *, limits=FAST, fill=None):
    sandbox_for(isolation)
    data = (HOSTILE / filename).read_bytes()
    for key, value in (fill or {}).items():
        data = data.replace(key.encode(), str(value).encode())
    result = grade_bytes(data, filename, exercise, limits=limits, isolation=isolation)
    assert result["isolation"] == isolation
    return result


def assert_zero(result, on=ALL_TESTS):
    attacked = [t for t in result["tests"] if on(t["name"])]
    assert attacked, "no test covers the attack"
    assert all(t["score"] == 0 and t["status"] == "failed" for t in attacked), \
        [(t["name"], t["output"]) for t in attacked if t["score"]]
    for t in result["tests"]:
        assert t["output"] and "Traceback" not in t["output"]
    assert result["max_score"] > 0


def assert_grading_goes_on(isolation):
    again = grade_text(GOOD["time_per_token"], "time_per_token", isolation=isolation)
    assert again["score"] == again["max_score"]


# ------------------------------------------------------- text, links and files of a class
# What a submission writes is data: lone surrogates reach the result escaped, never as a crash; a
# link is refused in grade and batch; a batch of a class with poisoned files writes every row.


def assert_valid_result(result):
    """The result is strict UTF-8 JSON once written (no lone surrogate), as results.write_json writes it."""
    import json
    json.dumps(result, ensure_ascii=False, allow_nan=False).encode("utf-8")


def test_a_correct_answer_with_surrogates_in_its_notes_gets_full_marks(isolation):
    result = grade_hostile("surrogate_notes.py", "softmax", isolation)
    assert result["status"] == "ok" and result["score"] == result["max_score"] > 0, result["output"]
    assert "\\udc80\\udcff" in result["output"]
    assert_valid_result(result)


def test_surrogates_in_exceptions_and_function_names_are_escaped(isolation):
    result = grade_hostile("surrogate_errors.py", "softmax", isolation)
    assert result["status"] == "ok", result["output"]
    assert_zero(result)
    feedback = "\n".join(t["output"] for t in result["tests"])
    assert "no answer \\udc80 here" in feedback and "in \\udc80\\udcff" in feedback
    assert_valid_result(result)


def test_heavy_lines_on_the_channel_are_dropped_unparsed_and_the_result_says_so(isolation):
    """Two lines of 400,000 ``{}`` each: over the budget of one message, never parsed; the answer
    is otherwise correct, so the harness's own results still count."""
    result = grade_hostile("channel_heavy_lines.py", "softmax", isolation)
    assert sum(r["dropped_messages"] for r in result["runs"]) == 2, result["runs"]
    assert "2 messages on the grader's results channel went over its budget" in result["output"]
    assert result["status"] == "ok" and result["score"] == result["max_score"]


def test_a_link_is_refused_and_nothing_of_its_target_is_read(isolation, tmp_path):
    from graders import grade_file
    from graders.grading import UsageError
    secret = tmp_path / "secret.txt"
    secret.write_text("def softmax(x):\n    return 'TARGET-CANARY'\n")
    for target in (ROOT / "solutions" / "softmax.ipynb", secret):
        link = tmp_path / f"softmax-{target.stem}.py"
        link.symlink_to(target)
        with pytest.raises(UsageError, match="is a symbolic link; the grader reads only regular files"):
            grade_file(link, "softmax", limits=FAST, isolation=isolation)


def test_a_class_with_poisoned_files_gets_a_row_for_every_file(isolation, tmp_path):
    """One good submission among a link to the solutions, a link to a file outside the class, a
    120 MB notebook of ``{}``, surrogates in a file name and in exceptions, a .pdf and a .txt:
    every file has a row, with zero and the reason for every poisoned one."""
    import csv
    import os
    from graders.batch import run_batch
    sandbox_for(isolation)
    folder = tmp_path / "class"
    folder.mkdir()
    (folder / "good.py").write_text(GOOD["softmax"])
    (folder / "solution-link.ipynb").symlink_to(ROOT / "solutions" / "softmax.ipynb")
    outside = tmp_path / "outside.py"
    outside.write_text("OUTSIDE-CANARY = 1\n")
    (folder / "outside-link.py").symlink_to(outside)
    with open(folder / "huge.ipynb", "wb") as f:
        f.write(b'{"cells": [')
        for _ in range(40):
            f.write(b"{}," * 1_000_000)
        f.write(b'{}], "metadata": {}}')
    (folder / os.fsdecode(b"learner\xff.py")).write_bytes((HOSTILE / "surrogate_errors.py").read_bytes())
    (folder / "essay.pdf").write_bytes(b"%PDF-1.4 not a notebook")
    (folder / "notes.txt").write_text("my answers are in the notebook")
    out = tmp_path / "gradebook.csv"
    summary = run_batch(folder, "softmax", out, jobs=2, limits=FAST, isolation=isolation, progress=False)
    assert summary["submissions"] == 7 and summary["missing_results"] == 0
    with open(out, newline="", encoding="utf-8") as f:
        rows = {row["submission"]: row for row in csv.DictReader(f)}
    assert set(rows) == {"good.py", "solution-link.ipynb", "outside-link.py", "huge.ipynb", "learner\\udcff.py",
                         "essay.pdf", "notes.txt"}
    assert rows["good.py"]["score"] == rows["good.py"]["max_score"] and rows["good.py"]["message"] == ""
    for name, words in (("solution-link.ipynb", "symbolic link"), ("outside-link.py", "symbolic link"),
                        ("huge.ipynb", "more than 1,000,000 items"), ("learner\\udcff.py", "no answer \\udc80"),
                        ("essay.pdf", "a .pdf file is not a notebook"), ("notes.txt", "a .txt file is not")):
        assert rows[name]["score"] == "0" and words in rows[name]["message"], (name, rows[name])
    written = out.read_text(encoding="utf-8") + "".join(
        p.read_text(encoding="utf-8") for p in (tmp_path / "gradebook-results").iterdir())
    assert "CANARY" not in written and "OUTSIDE" not in written
    assert len(list((tmp_path / "gradebook-results").iterdir())) == 7


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
    ("liar_programs.py", "attention_tail", {"ok"}, "attention_tail(", lambda name: "as it was" not in name, FAST),
    ("denied_syscalls.py", "time_per_token", {"ok"}, "off by a relative", TIME_VALUES, FAST),
    # latent attention: a liar output and a cache that hides the keys and values it keeps; the
    # patched comparisons of the process; a property test counts only with the right answer
    ("latent_liar_cache.py", "latent_attend_step", {"ok"}, "it is a submission.LiarCache", ALL_TESTS, FAST),
    ("latent_patch_numpy.py", "latent_attend_step", {"ok"}, "differs", ALL_TESTS, FAST),
    # speculative sampling: a list of tokens that equals anything; the patched comparisons of the
    # process (and len); a property test counts only with the right answer
    ("speculative_liar_list.py", "speculative_accept", {"ok"}, "LiarTokens", ALL_TESTS, FAST),
    ("speculative_patch_numpy.py", "speculative_accept", {"ok"}, "should be", ALL_TESTS, FAST),
    # the quantizer: codes whose comparisons lie; the patched comparisons of the process (and len);
    # dequantize_kv's own test counts on its values, the property tests only with the right answer
    ("quantize_liar_codes.py", "quantize_kv", {"ok"}, "codes differ", QUANT_VALUES, FAST),
    ("quantize_patch_numpy.py", "quantize_kv", {"ok"}, "codes differ", QUANT_VALUES, FAST),
    # the eviction policy: refusals with a look-alike ValueError (the right positions otherwise),
    # a ValueError for everything (a refusal counts only with the right answer), patched comparisons
    ("keep_lookalike_error.py", "keep_positions", {"ok"}, "a class of its own, not Python's ValueError",
     lambda name: "ValueError" in name, FAST),
    ("keep_refuse_everything.py", "keep_positions", {"ok"}, "raised ValueError", ALL_TESTS, FAST),
    ("keep_patch_numpy.py", "keep_positions", {"ok"}, "keeps", ALL_TESTS, FAST),
]


@pytest.mark.parametrize("filename, exercise, statuses, words, zero_on, limits", CASES,
                         ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_hostile_submission_scores_zero_with_a_clear_message(isolation, filename, exercise, statuses, words,
                                                             zero_on, limits):
    result = grade_hostile(filename, exercise, isolation, limits=limits)
    assert result["status"] in statuses, (result["status"], result["output"])
    assert_zero(result, zero_on)
    feedback = "\n".join(t["output"] for t in result["tests"]) + result["output"]
    assert words in feedback


SHARED_FOLDERS = ("/tmp", "/dev/shm", "/var/tmp")


def test_no_state_carries_from_one_sandbox_to_the_next(isolation):
    """A file in /tmp, /dev/shm or /var/tmp, a key in the user's kernel keyring, an abstract unix
    socket held by a child that left its session: whatever the first grading leaves, the second
    (the same attack, the same mark) finds nothing, and nothing of it is on the machine after."""
    mark = 860_000 + os.getpid() % 100_000
    for _ in range(2):
        result = grade_hostile("shared_state.py", "time_per_token", isolation, fill={"__MARK__": mark})
        assert_zero(result, TIME_VALUES)
        assert not [p for p in SHARED_FOLDERS if os.path.exists(f"{p}/hostile-state-{mark}")]
        assert processes_matching(f"hs-{mark}") == []
    with socket.socket(socket.AF_UNIX) as probe:         # nor is the socket's name held here
        with pytest.raises(OSError):
            probe.connect(f"\0hostile-state-{mark}")
    assert_grading_goes_on(isolation)


def test_a_fake_printed_result_is_never_read(isolation):
    result = grade_hostile("fake_result.py", "softmax", isolation)
    assert '"score": 100' in result["submission_output"]      # it printed its fake result ...
    assert_zero(result, VALUE_TESTS)                            # ... and nothing came of it
    assert "Score: 14 / 14" not in result["output"]


def test_killing_the_grader_fails_and_grading_goes_on(isolation):
    needs(isolation, "pid_namespace", "own_user")
    before = os.getpid()
    result = grade_hostile("kill_grader.py", "time_per_token", isolation)
    assert os.getpid() == before and result["status"] == "ok"
    assert_zero(result)
    assert_grading_goes_on(isolation)


def test_killing_its_parent_kills_neither_the_grader_nor_the_result(isolation):
    """The parent of the submission used to be the grader itself in the fallback: one
    os.kill(os.getppid(), SIGKILL) and no result was ever written.  The parent is the supervisor
    now, which nothing in the sandbox can kill (PID 1 of its namespace, or another user)."""
    needs(isolation, "pid_namespace", "own_user")
    result = grade_hostile("kill_parent.py", "time_per_token", isolation)
    assert result["status"] == "ok", result["output"]
    assert_zero(result)
    assert all(r["supervisor_lost"] is False and r["returncode"] == 0 for r in result["runs"]), result["runs"]
    assert result["isolation_held"]["supervisor"] is True
    assert_grading_goes_on(isolation)


def test_children_that_try_to_outlive_the_grading_are_gone(isolation):
    result = grade_hostile("fork_children.py", "kv_cache_bytes", isolation)
    assert_zero(result)
    time.sleep(0.2)
    assert processes_matching("hostile-child", "hostile-daemon", "sleep 987654") == []


def test_processes_that_leave_the_session_and_drop_their_environment_are_gone(isolation):
    """setsid, fork again, execve with an empty environment: no process group, session or
    environment token leads to them; the supervisor (or the namespace) still does."""
    mark = 800_000 + os.getpid() % 100_000
    result = grade_hostile("escape_session.py", "kv_cache_bytes", isolation, fill={"__MARK__": mark})
    assert_zero(result)
    assert processes_matching(f"hostile-escapee {mark}") == []
    assert result["isolation_held"]["pid_namespace"] or result["isolation_held"]["subreaper"]


def test_reading_or_importing_the_reference_answers_finds_nothing(isolation):
    needs(isolation, "file_view")
    result = grade_hostile("read_solutions.py", "softmax", isolation, limits=Limits(test_seconds=3, submission_seconds=20))
    assert_zero(result)
    assert "no reference answers visible" in result["tests"][0]["output"]


def test_no_latent_attention_is_within_reach(isolation):
    """The lessons' latent attention, the hidden tests' reference and the solution notebook: none
    can be imported or read from the sandbox, and the attack that looks for them earns nothing."""
    needs(isolation, "file_view")
    result = grade_hostile("latent_reference.py", "latent_attend_step", isolation,
                           limits=Limits(test_seconds=3, submission_seconds=30))
    assert_zero(result)
    assert "no latent attention within reach" in "\n".join(t["output"] for t in result["tests"])
    assert_grading_goes_on(isolation)


def test_no_acceptance_rule_is_within_reach(isolation):
    """The lessons' rule, the hidden tests' reference and the solution notebook: none can be
    imported or read from the sandbox, and the attack that looks for them earns nothing."""
    needs(isolation, "file_view")
    result = grade_hostile("speculative_reference.py", "speculative_accept", isolation,
                           limits=Limits(test_seconds=3, submission_seconds=30))
    assert_zero(result)
    assert "no acceptance rule within reach" in "\n".join(t["output"] for t in result["tests"])
    assert_grading_goes_on(isolation)


def test_no_eviction_policy_is_within_reach(isolation):
    """The hidden tests' reference, the solution notebook and the public checks' data builder:
    none can be imported or read from the sandbox, and the attack that looks for them earns
    nothing."""
    needs(isolation, "file_view")
    result = grade_hostile("keep_reference.py", "keep_positions", isolation,
                           limits=Limits(test_seconds=3, submission_seconds=30))
    assert_zero(result)
    assert "no eviction policy within reach" in "\n".join(t["output"] for t in result["tests"])
    assert_grading_goes_on(isolation)


def test_a_lookalike_error_earns_only_what_is_not_a_refusal(isolation):
    """The look-alike ValueError loses the refusals and nothing else: the positions are right."""
    result = grade_hostile("keep_lookalike_error.py", "keep_positions", isolation)
    refusals = [t for t in result["tests"] if "ValueError" in t["name"]]
    assert len(refusals) == 2
    assert all(t["status"] == "passed" for t in result["tests"] if t not in refusals), \
        [(t["name"], t["output"]) for t in result["tests"] if t not in refusals and t["status"] != "passed"]


def test_deleting_files_outside_the_scratch_folder_fails(isolation, tmp_path):
    needs(isolation, "file_view")
    canary = tmp_path / "keep" / "canary.txt"
    canary.parent.mkdir()
    canary.write_text("still here")
    result = grade_hostile("delete_files.py", "time_per_token", isolation, fill={"__CANARY__": canary})
    assert_zero(result)
    assert canary.read_text() == "still here"
    assert_grading_goes_on(isolation)                    # the harness and inputs survived


def test_gigabytes_of_output_are_capped(isolation):
    limits = Limits(test_seconds=0.5, submission_seconds=3, import_seconds=3, output_bytes=10_000)
    result = grade_hostile("huge_output.py", "time_per_token", isolation, limits=limits)
    assert result["status"] == "timeout"
    assert_zero(result)
    kept, _, note = result["submission_output"].partition("\n[...")
    assert len(kept) <= 10_000 and "more bytes of output dropped" in note


def test_a_socket_reaches_nothing(isolation):
    needs(isolation, "no_network")
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
        result = grade_hostile("socket_oracle.py", "time_per_token", isolation,
                               fill={"__PORT__": server.getsockname()[1]})
    finally:
        stop.set()
        thread.join()
        server.close()
    assert accepted == []
    assert_zero(result)
    assert "Connection" in result["tests"][0]["output"] or "Network" in result["tests"][0]["output"]


def test_a_fork_bomb_is_contained(isolation):
    needs(isolation, "own_user", "cgroup")           # a process limit that holds
    needs(isolation, "pid_namespace", "own_user")    # and nothing outside that it can reach
    limits = Limits(test_seconds=0.5, submission_seconds=3, import_seconds=3)
    result = grade_hostile("fork_bomb.py", "time_per_token", isolation, limits=limits)
    assert result["status"] == "timeout"
    assert_zero(result)
    assert_grading_goes_on(isolation)


def test_lingering_threads_and_atexit_handlers_do_not_hold_grading(isolation):
    result = grade_hostile("linger_atexit.py", "softmax", isolation)
    assert result["status"] == "ok" and result["score"] == result["max_score"]


def test_magic_and_shell_lines_are_never_executed(isolation, tmp_path):
    canary = tmp_path / "created-by-the-notebook"
    result = grade_hostile("magics_and_shell.ipynb", "softmax", isolation, fill={"__CANARY__": canary})
    assert result["score"] == result["max_score"]
    assert not canary.exists()


def test_a_pickle_payload_is_never_loaded(isolation):
    marker = Path("/tmp/pwned-by-pickle")
    existed = marker.exists()
    result = grade_hostile("liar_objects.py", "kv_cache_bytes", isolation)
    assert_zero(result)
    assert marker.exists() == existed


HANG_ON_ZERO = GOOD["kv_cache_bytes"].replace(
    "    return 2 *", "    if n_tokens == 0:\n        BLOCK\n        while True:\n            pass\n    return 2 *")


@pytest.mark.parametrize("block", ["pass", "import signal; signal.signal(signal.SIGALRM, signal.SIG_IGN)"],
                         ids=["harness-timer", "grader-watchdog"])
def test_a_hang_on_one_input_costs_that_test_only(isolation, block):
    """The harness's timer stops the call, or (timer disabled) the grader kills the sandbox and
    relaunches it for the tests after: either way the other tests keep their points."""
    sandbox_for(isolation)
    result = grade_text(HANG_ON_ZERO.replace("BLOCK", block), "kv_cache_bytes", isolation=isolation)
    assert result["status"] == "timeout"
    failed = [t for t in result["tests"] if t["status"] == "failed"]
    assert [t["name"] for t in failed] == ["no tokens cached yet (T = 0) gives 0"]
    assert "took longer than 0.5 s" in failed[0]["output"]
    assert result["score"] == result["max_score"] - failed[0]["max_score"]


def test_junk_on_the_results_channel_costs_nothing_and_breaks_nothing(isolation):
    """Unhashable test ids and unknown kinds once made the grader itself fail (grader_error)."""
    result = grade_hostile("channel_bad_ids.py", "kv_cache_bytes", isolation)
    assert result["status"] == "ok", result["output"]
    assert result["score"] == result["max_score"]


def test_words_put_on_the_results_channel_stay_out_of_the_feedback(isolation):
    import json
    result = grade_hostile("channel_text_injection.py", "max_batch", isolation)
    assert result["status"] != "grader_error"
    assert_zero(result)
    assert "ALL TESTS PASSED" not in result["output"]          # no fake import failure, no fake count
    assert not any("timed out on ALL" in t["output"] for t in result["tests"])
    assert all(len(t["output"]) <= 2_000 for t in result["tests"])
    assert len(json.dumps(result)) < 60_000


def test_start_messages_from_the_submission_do_not_renew_a_tests_deadline(isolation):
    """A hang on one input that keeps writing "start" on the channel still costs that test only
    (it used to keep the sandbox alive until the whole submission's budget was gone)."""
    result = grade_hostile("channel_deadline_renewal.py", "kv_cache_bytes", isolation)
    assert result["status"] == "timeout"
    failed = [t for t in result["tests"] if t["status"] == "failed"]
    assert [t["name"] for t in failed] == ["no tokens cached yet (T = 0) gives 0"], \
        [(t["name"], t["output"]) for t in failed]
    assert "took longer than 0.5 s" in failed[0]["output"]


SMALL_MEMORY = Limits(memory_bytes=256 << 20, tmpfs_bytes=16 << 20, test_seconds=4, submission_seconds=20)


def test_forked_children_share_one_memory_limit(isolation):
    """Six children of 200 MiB each, under a 256 MiB limit: RLIMIT_AS alone let them all have it
    (1.2 GiB; with the 2 GiB default and 64 processes, far more than the machine)."""
    needs(isolation, "cgroup")
    result = grade_hostile("fork_memory.py", "time_per_token", isolation, limits=SMALL_MEMORY,
                           fill={"__CHUNK__": 200 << 20})
    assert_zero(result)
    assert result["runs"] and all(r["cgroup"] for r in result["runs"])
    assert any("memory" in t["output"] for t in result["tests"]) or "memory limit" in result["output"]
    assert_grading_goes_on(isolation)


def test_memory_held_in_anonymous_files_counts_too(isolation):
    """80 memfds of 8 MiB (640 MiB) under a 256 MiB limit: no per-process limit sees them."""
    needs(isolation, "cgroup")
    result = grade_hostile("memfd_memory.py", "time_per_token", isolation, limits=SMALL_MEMORY,
                           fill={"__COUNT__": 80})
    assert_zero(result)
    assert "memory" in result["output"] + " ".join(t["output"] for t in result["tests"])


def test_the_memory_limit_said_is_the_one_used(isolation):
    """The feedback said "the limit is 2 GiB" whatever --memory was."""
    result = grade_hostile("memory_bomb.py", "time_per_token", isolation,
                           limits=Limits(memory_bytes=384 << 20, test_seconds=5, submission_seconds=30))
    assert_zero(result)
    assert any("384 MiB" in t["output"] for t in result["tests"]), [t["output"] for t in result["tests"]]


def test_a_sigalrm_the_submission_sends_itself_is_not_a_timeout(isolation):
    """It used to end every test as "took longer than 0.5 s" after a few milliseconds (and the
    give-up rule then skipped the rest)."""
    result = grade_hostile("self_alarm.py", "kv_cache_bytes", isolation)
    assert result["status"] == "ok", [t["output"] for t in result["tests"]]
    assert result["score"] == result["max_score"]


def test_proc_leads_nowhere_outside_the_sandbox(isolation, tmp_path, monkeypatch):
    """The grader's environment and the host's files, through /proc/*/environ, /proc/*/root and
    /proc/*/cwd: nothing of them is reachable."""
    needs(isolation, "file_view")
    canary = tmp_path / "canary.txt"
    canary.write_text("host file")
    monkeypatch.setenv("KVGRADER_TEST_SECRET", "hunter2-9f3a")
    result = grade_hostile("proc_escape.py", "time_per_token", isolation,
                           fill={"__CANARY__": canary, "__SECRET__": "hunter2-9f3a"})
    assert_zero(result)
    assert "nothing outside the sandbox was reachable" in result["tests"][0]["output"]


def test_the_corpus_is_all_graded_here():
    """Every file of the corpus is graded by a test of this suite (a new attack cannot be left out)."""
    source = Path(__file__).read_text()
    for path in HOSTILE.iterdir():
        if path.suffix in (".py", ".ipynb"):
            assert f'"{path.name}"' in source, f"{path.name} is in the corpus but no test grades it"


# ------------------------------------------------------------------ the mutants exercise's checks
# A learner's check_builder receives builders in the sandbox and says True or False: these attack
# what it could learn there.  Each must score zero on part 2 (the "accepts every correct builder"
# entry fails with a reason, so the mutants count nothing), and nothing the check printed or
# raised may appear anywhere in the result.
PART_2 = lambda name: name.startswith("part 2")  # noqa: E731
MUTANTS_LIMITS = Limits(test_seconds=5, submission_seconds=20, import_seconds=5)
MARKS = ("MUTANTS-FLOOD-MARK", "MUTANTS-SOURCE-MARK", "MUTANTS-IMPORT-MARK")


def grade_mutants_check(filename, isolation, limits=MUTANTS_LIMITS, fill=None):
    result = grade_hostile(filename, "mutants", isolation, limits=limits, fill={"__CHECKOUT__": ROOT, **(fill or {})})
    assert result["status"] != "grader_error", result["output"]
    import json
    text = json.dumps(result)
    assert not any(mark in text for mark in MARKS), "the check's own words reached the result"
    return result


def validity(result):
    return next(t for t in result["tests"] if t["name"].startswith("part 2: accepts"))


@pytest.mark.parametrize("filename, why", [
    ("mutants_inspect_source.py", "rejected (False, or an exception)"),        # no source text to read
    ("mutants_truthy_liar.py", "must return True or False"),                   # a liar is no verdict
    ("mutants_print_flood.py", "rejected (False, or an exception)"),           # its output goes nowhere
])
def test_a_check_that_cannot_tell_scores_zero_on_part_2(isolation, filename, why, monkeypatch):
    sandbox_for(isolation)
    monkeypatch.setattr(grading, "_chance", random.Random(3))     # the order drawn, fixed here
    result = grade_mutants_check(filename, isolation)
    assert_zero(result, PART_2)
    assert "your check rejects a correct builder" in validity(result)["output"]
    assert "the course's builder itself, unchanged: " in validity(result)["output"]
    assert why in validity(result)["output"]
    # part 1, then the correct builders drawn before the unchanged one (the order is drawn per
    # grading): once it is rejected no more are run, and no mutant at all
    assert 2 <= len(result["runs"]) <= 1 + len(mutants_exercise.WHEATS)
    if filename == "mutants_print_flood.py":
        assert "not kept" in result["submission_output"]


def test_a_check_that_loops_forever_scores_zero_and_stops_early(isolation, monkeypatch):
    sandbox_for(isolation)
    monkeypatch.setattr(grading, "_chance", random.Random(3))     # the order drawn, fixed here
    limits = Limits(test_seconds=0.5, submission_seconds=10, import_seconds=5)
    result = grade_mutants_check("mutants_loop_forever.py", isolation, limits)
    assert result["status"] == "timeout"
    assert_zero(result, PART_2)
    assert "no answer in time: took longer than 0.5 s" in validity(result)["output"]
    # part 1, then the correct builders drawn before the unchanged one (the order is drawn per
    # grading): once it is rejected no more are run, and no mutant at all
    assert 2 <= len(result["runs"]) <= 1 + len(mutants_exercise.WHEATS)


@pytest.mark.parametrize("filename", ["mutants_read_files.py", "mutants_import_graders.py"])
def test_the_builder_and_the_grader_are_out_of_a_checks_reach(isolation, filename):
    """The real builder's text (ga2/attn.py, or ga2.attn itself) and the hidden variants
    (graders/exercises/mutants.py) are not in the sandbox: the check that needs them has nothing."""
    needs(isolation, "file_view")
    result = grade_mutants_check(filename, isolation)
    assert result["status"] == "ok", validity(result)["output"]
    assert_zero(result, PART_2)
    assert "the course's builder itself, unchanged: rejected" in validity(result)["output"]


def test_a_check_cannot_remember_one_builder_for_the_next(isolation):
    """Each builder is judged in a sandbox of its own: no memory, no /tmp, no process left running
    reaches the next one, so a check that compares each builder with the first one it saw sees
    every builder as its first (it accepts them all, and catches nothing)."""
    needs(isolation, "file_view")
    result = grade_mutants_check("mutants_memorize.py", isolation,
                                 Limits(test_seconds=5, submission_seconds=120, import_seconds=5))
    assert result["status"] == "ok", [t["output"] for t in result["tests"]]
    assert validity(result)["status"] == "passed"
    caught = next(t for t in result["tests"] if t["name"].startswith("part 2: rejects"))
    assert caught["score"] == 0 and caught["output"].startswith("caught 0 of ")


def assert_ran_together(spans, isolation):
    """The runs overlapped, so an attack on a neighbour had one: where runs have a user of their
    own, two ran at once for a good part of the grading; where they do not (a grader that is not
    root), none overlapped (``grading.runs_at_once``)."""
    overlapping = sum(later[0] < earlier[1] for earlier, later in zip(spans, spans[1:]))
    if sandbox_for(isolation).own_user:
        assert overlapping >= len(spans) // 4, spans
    else:
        assert overlapping == 0, spans


def grade_neighbour_attack(filename, isolation, sandboxes, fill=None):
    """A check that looks for the sandbox beside it, graded with ``sandboxes`` at once: the
    result (status ok) and the runs' spans (start, end), sorted."""
    needs(isolation, "file_view")
    result = grade_mutants_check(filename, isolation, Limits(test_seconds=5, submission_seconds=120,
                                                             import_seconds=5, sandboxes=sandboxes), fill)
    assert result["status"] == "ok", [t["output"] for t in result["tests"]]
    return result, sorted((r["started"], r["started"] + r["seconds"]) for r in result["runs"])


def assert_saw_no_one(result):
    """The check accepted every builder and so caught nothing: it found no neighbour."""
    assert validity(result)["status"] == "passed", validity(result)["output"]
    caught = next(t for t in result["tests"] if t["name"].startswith("part 2: rejects"))
    assert caught["score"] == 0 and caught["output"].startswith("caught 0 of "), caught["output"]


def test_a_check_cannot_reach_the_builder_judged_beside_it(isolation):
    """Two builders are judged at once, each in a sandbox of its own: a check that looks for its
    neighbour (a lock on a file both read, a watch on the folder both import from, /tmp,
    /dev/shm, an abstract socket name) and rejects a builder when it finds one sees no one.  It
    accepts every builder and catches nothing; the runs did overlap, so the attack had its
    chance."""
    result, spans = grade_neighbour_attack("mutants_neighbour.py", isolation, sandboxes=2)
    assert_saw_no_one(result)
    assert len(spans) == 1 + len(mutants_exercise.WHEATS) + len(mutants_exercise.chaffs())
    assert_ran_together(spans, isolation)


@pytest.mark.parametrize("channel", ["aio", "pty", "shmem", "threads"])
def test_a_check_cannot_signal_its_neighbour_through_a_counter_of_the_machine(isolation, channel):
    """Two builders are judged at once: a check that raises a count the whole machine shares
    and every process may read (``fs.aio-nr`` through ``io_setup``, ``kernel.pty.nr`` through
    ``/dev/ptmx``, the pages of every tmpfs in ``/proc/meminfo`` through its own ``/dev/shm``,
    the machine's thread count in ``/proc/loadavg`` through threads of its own) and rejects a builder when the count shows a neighbour's share beside its own
    must see no one: it accepts every builder and catches nothing, although the runs overlapped."""
    result, spans = grade_neighbour_attack("mutants_neighbour_counters.py", isolation, sandboxes=2,
                                           fill={"__CHANNEL__": channel})
    assert_ran_together(spans, isolation)
    assert_saw_no_one(result)


def test_a_check_cannot_reach_its_neighbour_through_a_vsock_port(isolation):
    """Two builders are judged at once: vsock ports (``AF_VSOCK``) are one table for the whole
    machine, whatever the network namespace, so a check that binds a fixed port and rejects a
    builder when the port is already taken would find the sandbox beside it.  It must see no one:
    it accepts every builder and catches nothing, although the runs overlapped."""
    result, spans = grade_neighbour_attack("mutants_neighbour_vsock.py", isolation, sandboxes=2)
    assert_ran_together(spans, isolation)
    assert_saw_no_one(result)


@pytest.mark.parametrize("sandboxes", [1, 2])
def test_runs_forked_from_one_warm_sandbox_share_nothing(isolation, sandboxes):
    """Where runs are forked one after another from a warm sandbox (bubblewrap, a root grader),
    a check that leaves a trace of itself wherever it can (files in every folder it can write,
    System V and POSIX IPC, the host name, the count of process ids) and looks for the traces
    of the runs before it (and for any process or descriptor that is not its run's own) finds
    none: it accepts every builder and catches nothing.  With one sandbox at a time, every run
    of the grading came from the same warm sandbox; the fallback's runs, each in a sandbox of
    its own, hold the same."""
    result, spans = grade_neighbour_attack("mutants_warm_traces.py", isolation, sandboxes=sandboxes)
    assert_saw_no_one(result)
    assert len(spans) == 1 + len(mutants_exercise.WHEATS) + len(mutants_exercise.chaffs())
    warm = sandbox_for(isolation).warm_possible
    assert all(r["warm"] is warm for r in result["runs"]), result["runs"]


@pytest.mark.parametrize("filename, channel", [("mutants_neighbour_counters.py", "aio"),
                                               ("mutants_neighbour_counters.py", "pty"),
                                               ("mutants_neighbour_vsock.py", None)])
def test_a_sandbox_leaves_nothing_in_the_machine_for_the_next_one(isolation, filename, channel):
    """One sandbox at a time: whatever a run raised in the machine's counters (an io_setup
    context, pseudo-terminals) or held there (a vsock port) is gone when the next run starts,
    so the attacks that look for a neighbour through them see no one, accept every builder and
    catch nothing (and what they find with two at once is the neighbour, not a run before)."""
    result, spans = grade_neighbour_attack(filename, isolation, sandboxes=1,
                                           fill={"__CHANNEL__": channel} if channel else None)
    assert not any(later[0] < earlier[1] for earlier, later in zip(spans, spans[1:])), spans
    assert_saw_no_one(result)


def _page_nobody_reads():
    """The largest file in a sandbox's view (``resident``: the copy every sandbox of this grader
    binds) and a page of it chosen at random in its first half, with the machine's own file of
    that path dropped from the page cache: (path, page index).  That is the page a sandbox shown
    the machine's files would have had to mark and time (``_disk_reads_are_slow`` shows the
    timing would tell)."""
    copy = resident.view()
    files = [os.path.join(top, name) for top, _, names in os.walk(copy.root) for name in names]
    largest = max((f for f in files if not os.path.islink(f)), key=os.path.getsize)
    path = largest[len(copy.root):]
    pages = os.path.getsize(path) // 4096
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    return path, random.randrange(pages // 8, pages // 2)


def _disk_reads_are_slow():
    """On this machine's disk (where the checkout lives), a read of a page that is not in the
    page cache takes several times as long as the same read again: the channel the copy in
    memory closes is real here.  (A checkout on a tmpfs has no disk to time: nothing to show.)"""
    folder = Path(__file__).parent
    if resident._fs_type(str(folder)) == "tmpfs":
        return
    fd, name = tempfile.mkstemp(dir=folder, prefix=".page-cache-")
    try:
        os.write(fd, os.urandom(64 << 20))
        os.fsync(fd)                                  # clean pages: dropping them drops them
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        cold, warm = [], []
        for page in random.sample(range(0, (64 << 20) // 4096, 1024), 9):    # 4 MiB apart: no read-ahead reaches
            for times in (cold, warm):
                began = time.perf_counter()
                os.pread(fd, 4096, page * 4096)
                times.append(time.perf_counter() - began)
        assert sorted(cold)[4] > 3 * sorted(warm)[4], (cold, warm)
    finally:
        os.close(fd)
        os.unlink(name)


@pytest.mark.parametrize("channel", ["nowait", "cachestat", "timing"])
@pytest.mark.parametrize("sandboxes", [1, 2])
def test_runs_cannot_ask_the_page_cache_what_the_runs_before_or_beside_them_read(isolation, sandboxes, channel):
    """The page cache is the machine's: whether one page of a file every sandbox can read is in
    memory is a bit any run could set (by reading it).  A check that asks for the bit of a page
    nobody else reads (``mincore`` is denied; ``preadv2(RWF_NOWAIT)``, which fails with EAGAIN
    on a page that is not there, gets EOPNOTSUPP; ``cachestat`` is refused on a file the run
    cannot write; how long a read of the page takes, against a read of a page no run has read),
    rejects a builder when it is set and then sets it, sees no run before it (one sandbox at a
    time) or beside it (two): it accepts every builder and catches nothing.  The timing holds
    because every file a sandbox can see is a copy in memory (``resident``): the machine's own
    file of the same path, which the sandbox does not see, would have carried the mark (reads
    from this machine's disk are many times slower than reads from memory)."""
    _disk_reads_are_slow()
    path, page = _page_nobody_reads()
    result, spans = grade_neighbour_attack("mutants_page_cache.py", isolation, sandboxes=sandboxes,
                                           fill={"__CHANNEL__": channel, "__FILE__": path, "__PAGE__": page})
    assert_saw_no_one(result)


def test_no_quantizer_is_within_reach(isolation):
    """The engine's quantizer, the hidden tests' reference and the solution notebook: none can be
    imported or read from the sandbox, and the attack that looks for them earns nothing."""
    needs(isolation, "file_view")
    result = grade_hostile("quantize_reference.py", "quantize_kv", isolation,
                           limits=Limits(test_seconds=3, submission_seconds=30))
    assert_zero(result, on=QUANT_VALUES)
    assert "no quantizer within reach" in "\n".join(t["output"] for t in result["tests"])
    assert_grading_goes_on(isolation)
