"""graders.batch: a class at once, a gradebook, resuming, surviving a kill, and Dask."""
import csv
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from graders import Limits, registry
from graders.batch import run_batch

from grader_helpers import FAST, GOOD, HOSTILE, PYTHON, ROOT

SLOW_GOOD = GOOD["kv_cache_bytes"].replace(
    "def kv_cache_bytes(", "import time\ndef kv_cache_bytes(").replace(
    "    return 2 *", "    time.sleep(0.03)\n    return 2 *")


def make_class(folder: Path, n_good: int = 3, hostile=("loop_in_function.py", "os_exit.py")) -> dict:
    """A folder of kv_cache_bytes submissions: good ones (distinct files), a wrong one, an unreadable
    one, hostile ones, in one sub-folder per learner for some."""
    folder.mkdir(parents=True, exist_ok=True)
    expected = {}
    for i in range(n_good):
        path = folder / (f"learner{i}" if i % 2 else "") / f"good{i}.py"
        path.parent.mkdir(exist_ok=True)
        path.write_text(GOOD["kv_cache_bytes"] + f"# learner {i}\n")
        expected[str(path.relative_to(folder))] = "ok"
    (folder / "wrong.py").write_text("def kv_cache_bytes(*a):\n    return 1\n")
    expected["wrong.py"] = "ok"
    (folder / "broken.ipynb").write_text('{"cells": [')
    expected["broken.ipynb"] = "unreadable"
    for name in hostile:
        text = (HOSTILE / name).read_text()
        text = text.replace("def time_per_token(n_params, bytes_per_param, bandwidth):",
                            "def kv_cache_bytes(n_layers, n_kv_heads, head_dim, n_tokens, bytes_per_value):")
        text = text.replace("def softmax(scores):",
                            "def kv_cache_bytes(n_layers, n_kv_heads, head_dim, n_tokens, bytes_per_value):")
        (folder / name).write_text(text)
        expected[name] = {"loop_in_function.py": "timeout", "os_exit.py": "crashed"}.get(name, "ok")
    (folder / ".ipynb_checkpoints").mkdir(exist_ok=True)
    (folder / ".ipynb_checkpoints" / "good0-checkpoint.py").write_text("ignored")
    return expected


def read_csv(path: Path) -> dict[str, dict]:
    with open(path, newline="") as f:
        return {row["submission"]: row for row in csv.DictReader(f)}


def test_a_class_is_graded_into_a_gradebook_and_bad_ones_do_not_stop_it(tmp_path):
    expected = make_class(tmp_path / "class")
    out = tmp_path / "gradebook.csv"
    summary = run_batch(tmp_path / "class", "kv_cache_bytes", out, jobs=2, limits=FAST, progress=False)
    assert summary["missing_results"] == 0 and summary["graded"] == len(expected)
    rows = read_csv(out)
    assert set(rows) == set(expected)
    tests = registry.tests("kv_cache_bytes")
    max_score = sum(t.points for t in tests)
    for name, status in expected.items():
        assert rows[name]["status"] == status, (name, rows[name])
        result = json.loads((tmp_path / "gradebook-results" / (name.replace("/", "__") + ".json")).read_text())
        assert result["status"] == status and result["submission"] == name
        if name.startswith(("good", "learner")):
            assert float(rows[name]["score"]) == max_score
            assert all(float(rows[name][f"{t.id} {t.name}"]) == t.points for t in tests)
        else:
            assert float(rows[name]["score"]) < max_score
    assert rows["broken.ipynb"]["message"]


def test_a_rerun_resumes_and_a_changed_submission_is_regraded(tmp_path):
    make_class(tmp_path / "class", n_good=2, hostile=())
    out = tmp_path / "gb.csv"
    run_batch(tmp_path / "class", "kv_cache_bytes", out, jobs=2, limits=FAST, progress=False)
    results = tmp_path / "gb-results"
    before = {p.name: p.stat().st_mtime_ns for p in results.iterdir()}
    summary = run_batch(tmp_path / "class", "kv_cache_bytes", out, jobs=2, limits=FAST, progress=False)
    assert summary["graded"] == 0 and summary["resumed"] == len(before)
    assert {p.name: p.stat().st_mtime_ns for p in results.iterdir()} == before
    (tmp_path / "class" / "wrong.py").write_text(GOOD["kv_cache_bytes"])          # resubmitted, fixed
    summary = run_batch(tmp_path / "class", "kv_cache_bytes", out, jobs=2, limits=FAST, progress=False)
    assert summary["graded"] == 1
    assert read_csv(out)["wrong.py"]["score"] == read_csv(out)["good0.py"]["score"]
    summary = run_batch(tmp_path / "class", "kv_cache_bytes", out, jobs=2, limits=FAST, progress=False, force=True)
    assert summary["graded"] == len(before)


N_KILLED = 7


@pytest.mark.parametrize("isolation", ["auto", "subprocess"])
def test_a_batch_killed_at_any_moment_loses_nothing_and_resumes(tmp_path, isolation):
    folder = tmp_path / "class"
    folder.mkdir()
    for i in range(N_KILLED):
        (folder / f"s{i:02d}.py").write_text(SLOW_GOOD + f"# {i}\n")
    out = tmp_path / "gb.csv"
    results = tmp_path / "gb-results"
    cmd = [PYTHON, "-m", "graders", "batch", str(folder), "--exercise", "kv_cache_bytes", "--out", str(out),
           "--jobs", "1", "--no-progress", "--isolation", isolation]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and len(list(results.glob("*.json"))) < 2:
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGKILL)           # the batch and everything in its group, at once
    finally:
        proc.wait(timeout=30)
    # The sandboxes die with the batch (bubblewrap's --die-with-parent; the fallback's unshare
    # and supervisor by their parent-death signals): no orphan is left.
    deadline = time.monotonic() + 5
    while _orphan_sandboxes(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _orphan_sandboxes(proc.pid) == []
    done = {p.name: p.read_bytes() for p in results.glob("*.json")}
    assert 2 <= len(done) < N_KILLED, "the kill should land in the middle of the batch"
    for data in done.values():                        # every result on disk is whole
        assert json.loads(data)["status"] == "ok"
    if out.exists():                                  # the gradebook on disk is whole too
        assert len(read_csv(out)) <= len(done)

    rerun = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr
    assert f"{len(done)} already graded" in rerun.stderr
    for name, data in done.items():                   # what was graded is kept as it was
        assert (results / name).read_bytes() == data
    rows = read_csv(out)
    assert len(rows) == N_KILLED and all(r["status"] == "ok" and r["score"] == r["max_score"] for r in rows.values())


def _orphan_sandboxes(batch_pid: int) -> list[str]:
    """Sandboxes of the batch ``batch_pid`` (their job folders carry its pid) still alive: the
    bubblewrap processes, and the supervisors and harnesses they started (other graders on the
    machine are none of this test's business)."""
    found = []
    needle = f"grader-job-{batch_pid}-".encode()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            except OSError:
                continue
            if stat[stat.rindex(")") + 2:].split()[0] not in "ZX" and needle in cmdline:
                found.append(entry)
    return found


def test_the_same_batch_runs_on_a_dask_cluster(tmp_path):
    distributed = pytest.importorskip("distributed")
    make_class(tmp_path / "class", n_good=2, hostile=("os_exit.py",))
    with distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=False,
                                  dashboard_address=None) as cluster:
        out = tmp_path / "dask.csv"
        summary = run_batch(tmp_path / "class", "kv_cache_bytes", out, scheduler=cluster.scheduler_address,
                            limits=FAST, progress=False)
    local = tmp_path / "local.csv"
    run_batch(tmp_path / "class", "kv_cache_bytes", local, jobs=2, limits=FAST, progress=False)
    assert summary["missing_results"] == 0
    dask_rows, local_rows = read_csv(out), read_csv(local)
    assert set(dask_rows) == set(local_rows)
    for name in local_rows:
        assert (dask_rows[name]["status"], dask_rows[name]["score"]) == \
               (local_rows[name]["status"], local_rows[name]["score"])


def test_the_batch_command_line(tmp_path):
    make_class(tmp_path / "class", n_good=2, hostile=())
    out = tmp_path / "gb.csv"
    proc = subprocess.run([PYTHON, "-m", "graders", "batch", str(tmp_path / "class"), "--exercise",
                           "kv_cache_bytes", "--out", str(out), "--jobs", "2"], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "grading kv_cache_bytes" in proc.stderr            # the progress bar
    assert "gradebook" in proc.stderr and len(read_csv(out)) == 4
    proc = subprocess.run([PYTHON, "-m", "graders", "batch", str(tmp_path / "nope"), "--exercise",
                           "kv_cache_bytes", "--out", str(out)], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 2 and "not a folder" in proc.stderr


def test_a_file_that_cannot_be_read_is_a_row_not_the_end_of_the_batch(tmp_path, monkeypatch):
    """Reading every submission up front once let one unreadable file stop the whole batch
    (OSError out of run_batch); now it is a row with status unreadable."""
    import graders.batch as batch
    (tmp_path / "class").mkdir()
    (tmp_path / "class" / "a.py").write_text(GOOD["kv_cache_bytes"])
    (tmp_path / "class" / "b.py").write_text(GOOD["kv_cache_bytes"] + "# b\n")
    real_read = batch._read

    def flaky(path):
        if path.name == "a.py":
            raise PermissionError(13, "Permission denied")
        return real_read(path)
    monkeypatch.setattr(batch, "_read", flaky)
    summary = run_batch(tmp_path / "class", "kv_cache_bytes", tmp_path / "gb.csv", jobs=1, limits=FAST,
                        progress=False)
    rows = read_csv(tmp_path / "gb.csv")
    assert summary["missing_results"] == 0
    assert rows["a.py"]["status"] == "unreadable" and "Permission denied" in rows["a.py"]["message"]
    assert rows["b.py"]["status"] == "ok" and rows["b.py"]["score"] == rows["b.py"]["max_score"]


def test_only_a_few_submissions_are_held_in_memory_at_once(tmp_path, monkeypatch):
    """Every submission's bytes used to be read (and handed to the executor) before the first was
    graded: a class of 50 MB notebooks all in memory at once."""
    import threading
    import graders.batch as batch
    (tmp_path / "class").mkdir()
    for i in range(8):
        (tmp_path / "class" / f"s{i}.py").write_text(GOOD["kv_cache_bytes"] + f"# {i}\n")
    lock, state = threading.Lock(), {"read": 0, "done": 0, "most": 0}
    real_read, real_grade = batch._read, batch.grade_blob

    def counting_read(path):
        with lock:
            state["read"] += 1
            state["most"] = max(state["most"], state["read"] - state["done"])
        return real_read(path)

    def counting_grade(*args, **kwargs):
        try:
            return real_grade(*args, **kwargs)
        finally:
            with lock:
                state["done"] += 1
    monkeypatch.setattr(batch, "_read", counting_read)
    monkeypatch.setattr(batch, "grade_blob", counting_grade)
    summary = run_batch(tmp_path / "class", "kv_cache_bytes", tmp_path / "gb.csv", jobs=1, limits=FAST,
                        progress=False)
    assert summary["missing_results"] == 0 and state["read"] == 8
    assert state["most"] <= 2          # 2 x jobs in flight, not the whole class


def test_a_file_name_cannot_overwrite_another_learners_results(tmp_path):
    """``alice/hw.py`` and a file called ``alice__hw.py`` both had ``alice__hw.py.json``: the second
    graded overwrote the first's results (and every rerun regraded both)."""
    (tmp_path / "class" / "alice").mkdir(parents=True)
    (tmp_path / "class" / "alice" / "hw.py").write_text(GOOD["kv_cache_bytes"])
    (tmp_path / "class" / "alice__hw.py").write_text("def kv_cache_bytes(*a):\n    return 1\n")
    out = tmp_path / "gb.csv"
    run_batch(tmp_path / "class", "kv_cache_bytes", out, jobs=1, limits=FAST, progress=False)
    files = sorted((tmp_path / "gb-results").glob("*.json"))
    assert len(files) == 2
    by_submission = {json.loads(p.read_text())["submission"]: json.loads(p.read_text()) for p in files}
    assert by_submission["alice/hw.py"]["score"] == by_submission["alice/hw.py"]["max_score"]
    assert by_submission["alice__hw.py"]["score"] < by_submission["alice__hw.py"]["max_score"]
    again = run_batch(tmp_path / "class", "kv_cache_bytes", out, jobs=1, limits=FAST, progress=False)
    assert again["graded"] == 0 and again["resumed"] == 2


# ------------------------------------------------------------------- what an instructor sees


def test_every_row_below_full_marks_says_its_main_reason(tmp_path):
    """The message column was empty for every ``ok`` row, even at 0: the untouched starter, every
    test out of memory, an import of the engine that failed."""
    import shutil
    folder = tmp_path / "class"
    folder.mkdir()
    shutil.copy(ROOT / "exercises" / "kv_cache_bytes.ipynb", folder / "starter.ipynb")
    (folder / "memory.py").write_text("def kv_cache_bytes(*args):\n    raise MemoryError\n")
    (folder / "engine.py").write_text("import kvcache.cache\n" + GOOD["kv_cache_bytes"].replace(
        "return 2 *", "return kvcache.cache.nothing_here() * 2 *"))
    (folder / "good.py").write_text(GOOD["kv_cache_bytes"])
    run_batch(folder, "kv_cache_bytes", tmp_path / "gb.csv", jobs=2, limits=FAST, progress=False)
    rows = read_csv(tmp_path / "gb.csv")
    assert {r["status"] for r in rows.values()} == {"ok"}
    assert "is not implemented yet" in rows["starter.ipynb"]["message"]
    assert "ran out of memory" in rows["memory.py"]["message"]
    assert "'import kvcache.cache' failed in the grader" in rows["engine.py"]["message"]
    assert rows["good.py"]["message"] == "" and rows["good.py"]["score"] == rows["good.py"]["max_score"]


def test_the_exercise_is_the_one_the_batch_names_whatever_the_metadata_says(tmp_path):
    folder = tmp_path / "class"
    folder.mkdir()
    nb = {"cells": [{"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
                     "source": GOOD["max_batch"]}],
          "metadata": {"kvcourse": {"exercise": "max_batch"}}, "nbformat": 4, "nbformat_minor": 5}
    (folder / "kv_cache_bytes.ipynb").write_text(json.dumps(nb))
    run_batch(folder, "kv_cache_bytes", tmp_path / "gb.csv", jobs=1, limits=FAST, progress=False)
    row = read_csv(tmp_path / "gb.csv")["kv_cache_bytes.ipynb"]
    assert row["score"] == "0" and "no function named 'kv_cache_bytes'" in row["message"]
    result = json.loads((tmp_path / "gb-results" / "kv_cache_bytes.ipynb.json").read_text())
    assert result["exercise"] == "kv_cache_bytes"


def test_an_unreachable_scheduler_is_an_error_that_leaves_no_results_folder(tmp_path):
    pytest.importorskip("distributed")
    import socket
    make_class(tmp_path / "class", n_good=1, hostile=())
    with socket.socket() as s:                   # a loopback port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.run([PYTHON, "-m", "graders", "batch", str(tmp_path / "class"), "--exercise",
                           "kv_cache_bytes", "--out", str(tmp_path / "gb.csv"), "--scheduler",
                           f"tcp://127.0.0.1:{port}", "--connect-timeout", "2"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "could not be reached" in proc.stderr, proc.stderr
    assert not (tmp_path / "gb-results").exists() and not (tmp_path / "gb.csv").exists()


def test_with_every_dask_worker_gone_the_batch_says_so_and_stops_when_told(tmp_path, capsys):
    distributed = pytest.importorskip("distributed")
    make_class(tmp_path / "class", n_good=2, hostile=())
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                                  dashboard_address=None, protocol="tcp", host="127.0.0.1") as cluster:
        for worker in list(cluster.workers.values()):
            cluster.sync(worker.close)
        cluster.scale(0)
        summary = run_batch(tmp_path / "class", "kv_cache_bytes", tmp_path / "gb.csv",
                            scheduler=cluster.scheduler_address, limits=FAST, progress=False,
                            wait_for_workers=2)
    err = capsys.readouterr().err
    assert f"no Dask worker is connected to {cluster.scheduler_address}" in err
    assert "waiting 2 s for one (--wait-for-workers), then stopping" in err
    assert summary["stopped"].startswith("no Dask worker was connected")
    assert summary["missing_results"] == summary["submissions"] > 0
    assert read_csv(tmp_path / "gb.csv") == {}         # the gradebook is written, with what was graded


def test_with_no_worker_at_first_the_batch_waits_and_grades_when_one_connects(tmp_path, capsys):
    distributed = pytest.importorskip("distributed")
    import threading
    make_class(tmp_path / "class", n_good=2, hostile=())
    with distributed.LocalCluster(n_workers=0, processes=False, dashboard_address=None,
                                  protocol="tcp", host="127.0.0.1") as cluster:
        later = threading.Timer(3.0, lambda: cluster.scale(1))
        later.start()
        try:
            summary = run_batch(tmp_path / "class", "kv_cache_bytes", tmp_path / "gb.csv",
                                scheduler=cluster.scheduler_address, limits=FAST, progress=False)
        finally:
            later.cancel()
    err = capsys.readouterr().err
    assert "no Dask worker is connected" in err and "waiting until one connects" in err
    assert summary["missing_results"] == 0 and summary["stopped"] is None


def test_the_gradebook_is_written_whatever_a_result_holds(tmp_path):
    """Surrogates in a name and a message, a score that is not a number (a results file edited by
    hand): the gradebook is still written, in valid UTF-8, with a row for each."""
    from graders.batch import write_gradebook
    name = registry.items("kv_cache_bytes")[0].name
    results = {"a\udc80.py": {"status": "ok", "score": 0.0, "max_score": 9.0, "output": "Note: bad \udcff import",
                              "tests": [{"name": name, "score": 0.0, "status": "failed", "output": "x"}]},
               "b.py": {"status": "ok", "score": None, "max_score": "9", "tests": [{"name": name, "score": "?"}]}}
    write_gradebook(tmp_path / "gb.csv", "kv_cache_bytes", results)
    rows = read_csv(tmp_path / "gb.csv")
    assert set(rows) == {"a\\udc80.py", "b.py"}
    assert rows["a\\udc80.py"]["message"] == "bad \\udcff import" and rows["b.py"]["score"] == "None"
