"""bench_grader: how fast the autograder grades, and the same submissions graded by otter-grader.

Measured here, in one run (``python -m bench grader``, or ``make bench``):

1. the median wall time to grade one ``attend_step`` submission (a notebook), in the grader's
   process (``graders.grade_file``) and through the command line (``python -m graders grade``,
   which adds an interpreter start-up);
2. where the time of one submission goes: an empty sandbox (bubblewrap and the interpreter), the
   same importing numpy, and the whole grading;
3. the same submission graded by this grader and by the grader of another git revision (by
   default where this branch left ``main``; ``BENCH_GRADER_BASELINE=REV`` to choose, ``none`` to
   skip), each in processes of its own, in alternating rounds, so that both see the same machine;
   and this grader with the subprocess fallback instead of bubblewrap;
4. a batch of 200 distinct ``attend_step`` submissions with ``--jobs 1`` and ``--jobs 2``:
   throughput and speed-up (the batch is limited by the cores when 2 jobs give about twice 1);
5. otter-grader's local runner (``otter run``) on the first few of the same submissions, from a
   scratch virtual environment of this benchmark's own (``_build/bench/otter-venv``, created with
   ``pip install otter-grader`` on first use: a peer to compare with, not a dependency), with an
   otter autograder whose tests check what ours do; the ratio of the medians is reported.  When
   otter cannot be installed or run here, the benchmark says exactly why.

6. the grader's own peak memory (its process's peak RSS, each case in a fresh process) on the worst
   submissions this benchmark can build: an ordinary one (the baseline), one whose function writes
   lines of ``{}`` on the results channel up to its cap (60 MB) at every call, and a 120 MB
   notebook of ``{}``; the goal is a few hundred MB at most per job.

7. a ``mutants`` grade of the course's own answer (``solutions/mutants.ipynb``, 54 sandboxes: part 1
   and a sandbox per builder), through ``python -m graders grade``: wall time and CPU time (the
   grader and everything it started), the median of a few runs, against the target of 10 s of wall
   time on 2 cores (met / NOT met), with the machine's load average beside it (the machine is
   shared: a busy one stretches the wall time, not the CPU time); and the same grade by this grader
   with one sandbox at a time (``--sandboxes 1``), with every run in a fresh sandbox instead of
   forked from a warm one (``--cold``), and by the grader of the baseline revision (3 above), in
   alternating runs, for before and after.

Set ``BENCH_GRADER_MUTANTS_N`` for the runs of 7 (default 3; 0 skips it), ``BENCH_GRADER_ONLY=mutants``
to measure 7 alone, ``BENCH_GRADER_MEMORY=0`` to skip 6, ``BENCH_GRADER_N`` for a smaller batch (default 200) and ``BENCH_OTTER_N`` for the number of
submissions otter grades (default 8; each takes seconds).
"""
from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "_build" / "bench" / "grader"
OTTER_VENV = ROOT / "_build" / "bench" / "otter-venv"


# ------------------------------------------------------------------------------ submissions


def _answer_source(i: int) -> str:
    """A correct attend_step, written a few different ways (so the batch is not one file 200 times)."""
    variants = [
        """
        def attend_step(x_t, cache, p):
            q, k, v = x_t @ p["Wq"], x_t @ p["Wk"], x_t @ p["Wv"]
            K = np.vstack([cache["k"], k[None]])
            V = np.vstack([cache["v"], v[None]])
            s = K @ q / np.sqrt(q.shape[0])
            w = np.exp(s - s.max())
            return (w / w.sum()) @ V, {"k": K, "v": V}
        """,
        """
        def attend_step(x_t, cache, p):
            q = x_t @ p["Wq"]
            K = np.concatenate([cache["k"], (x_t @ p["Wk"])[None, :]], axis=0)
            V = np.concatenate([cache["v"], (x_t @ p["Wv"])[None, :]], axis=0)
            scores = K @ q / math.sqrt(len(q))
            weights = np.exp(scores - np.max(scores))
            weights = weights / np.sum(weights)
            return weights @ V, {"k": K, "v": V}
        """,
        """
        def softmax(s):
            e = np.exp(s - s.max())
            return e / e.sum()

        def attend_step(x_t, cache, p):
            q, k, v = (x_t @ p[name] for name in ("Wq", "Wk", "Wv"))
            new = {"k": np.vstack([cache["k"], k]), "v": np.vstack([cache["v"], v])}
            return softmax(new["k"] @ q / np.sqrt(q.size)) @ new["v"], new
        """,
    ]
    return "import math\nimport numpy as np\n" + textwrap.dedent(variants[i % len(variants)]) + f"\n# learner {i}\n"


def make_submissions(folder: Path, n: int) -> list[Path]:
    """``n`` distinct attend_step notebooks, as learners hand them in (scratch cells included)."""
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    paths = []
    for i in range(n):
        cells = [
            {"id": "statement", "cell_type": "markdown", "metadata": {}, "source": "# attend_step"},
            {"id": "answer", "cell_type": "code", "metadata": {"tags": ["answer"]}, "execution_count": None,
             "outputs": [], "source": _answer_source(i)},
            {"id": "scratch", "cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [],
             "source": "x = np.ones(2)\nprint(attend_step(x, {'k': np.zeros((0, 2)), 'v': np.zeros((0, 2))},"
                       " {'Wq': np.eye(2), 'Wk': np.eye(2), 'Wv': np.eye(2)}))\n"},
        ]
        nb = {"cells": cells, "metadata": {"kvcourse": {"exercise": "attend_step", "chapter": 2},
                                           "kernelspec": {"name": "python3", "display_name": "Python 3",
                                                          "language": "python"}},
              "nbformat": 4, "nbformat_minor": 5}
        path = folder / f"learner{i:03d}-attend_step.ipynb"
        path.write_text(json.dumps(nb, indent=1))
        paths.append(path)
    return paths


# ---------------------------------------------------------------------------------- ours


def _median_time(fn, repeat: int) -> tuple[float, list[float]]:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), times


def bench_one(paths: list[Path]) -> dict:
    from graders import grade_file
    from graders.sandbox import Limits, Sandbox

    grade_file(paths[0])                                  # warm: tests and expected values built once
    results = []

    def one():
        results.append(grade_file(paths[len(results) % len(paths)]))
    median, times = _median_time(one, 15)
    assert all(r["score"] == r["max_score"] for r in results), "a correct submission lost points"

    def cli():
        subprocess.run([sys.executable, "-m", "graders", "grade", str(paths[0])], cwd=ROOT,
                       capture_output=True, check=True)
    cli_median, _ = _median_time(cli, 5)

    # Where the time goes: an empty sandbox, then one whose submission imports numpy.
    sandbox = Sandbox("auto")
    starts = {}
    for label, source in (("empty", "pass\n"), ("numpy", "import numpy\n")):
        folder = Path(tempfile.mkdtemp(prefix="bench-empty-"))
        try:
            folder.chmod(0o755)
            (folder / "submission.py").write_text(source)
            (folder / "spec.json").write_text(json.dumps({"limits": {}, "cases": []}))
            for p in folder.iterdir():
                p.chmod(0o644)
            starts[label], _ = _median_time(lambda: sandbox.run(folder, Limits(), {}), 7)
        finally:
            shutil.rmtree(folder)
    return {"median": median, "min": min(times), "max": max(times), "cli_median": cli_median,
            "empty_sandbox": starts["empty"], "numpy_sandbox": starts["numpy"],
            "isolation": results[0]["isolation"], "tests": len(results[0]["tests"])}


TIME_ONE = r"""
import json, statistics, sys, time
sys.path.insert(0, sys.argv[1])
from graders import grade_file
path, repeat, isolation = sys.argv[2], int(sys.argv[3]), sys.argv[4]
grade_file(path, isolation=isolation)                # warm: tests and expected values built once
times = []
for _ in range(repeat):
    start = time.perf_counter()
    result = grade_file(path, isolation=isolation)
    times.append(time.perf_counter() - start)
    assert result["score"] == result["max_score"], result["output"]
print(json.dumps(times))
"""


BASELINE_PARTS = ("graders", "public_checks", "ga2")     # what a baseline grader brings of its own


def _baseline_revision() -> tuple[str | None, str]:
    """(revision, why): the grader to compare with, or None and why not."""
    asked = os.environ.get("BENCH_GRADER_BASELINE", "")
    if asked.lower() == "none":
        return None, "BENCH_GRADER_BASELINE=none"
    git = ["git", "-C", str(ROOT)]
    try:
        rev = asked or subprocess.run(git + ["merge-base", "HEAD", "main"], capture_output=True, text=True,
                                      check=True).stdout.strip()
        rev = subprocess.run(git + ["rev-parse", "--short", rev], capture_output=True, text=True,
                             check=True).stdout.strip()
        same = subprocess.run(git + ["diff", "--quiet", rev, "--", *BASELINE_PARTS]).returncode == 0
    except (OSError, subprocess.CalledProcessError) as err:
        return None, f"no git revision to compare with ({err})"
    if same:
        return None, f"graders/, public_checks/ and ga2/ are the same as at {rev} (set BENCH_GRADER_BASELINE=REV to compare with another)"
    return rev, ""


def _baseline_tree(rev: str) -> Path:
    """The grader (``graders/``, ``public_checks/``) of revision ``rev``, with the ``ga2`` its
    sandboxes hold, extracted once."""
    old = OUT / f"baseline-{rev}"
    if not all((old / part).is_dir() for part in BASELINE_PARTS):
        shutil.rmtree(old, ignore_errors=True)
        old.mkdir(parents=True)
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, *BASELINE_PARTS],
                                 capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(old)], input=archive, check=True)
    return old


def bench_before_after(path: Path, rounds: int = 4, repeat: int = 5) -> dict:
    """Median time to grade ``path``: the grader of the baseline revision and this one (bubblewrap
    and the fallback), ``rounds`` alternating rounds of ``repeat`` gradings each."""
    rev, why = _baseline_revision()
    trees = {"this grader": ROOT}
    if rev is not None:
        trees = {f"the grader at {rev}": _baseline_tree(rev), **trees}
    runs = [(label, tree, "auto") for label, tree in trees.items()] + [("this grader, fallback", ROOT, "subprocess")]
    times: dict[str, list[float]] = {label: [] for label, _, _ in runs}
    for _ in range(rounds):
        for label, tree, isolation in runs:
            proc = subprocess.run([sys.executable, "-c", TIME_ONE, str(tree), str(path), str(repeat), isolation],
                                  cwd=ROOT, capture_output=True, text=True, check=True)
            times[label] += json.loads(proc.stdout.strip().splitlines()[-1])
    return {"medians": {label: statistics.median(t) for label, t in times.items()}, "why": why,
            "n": rounds * repeat}


def bench_batch(folder: Path, jobs: int) -> dict:
    from graders.batch import run_batch
    out = OUT / f"gradebook-jobs{jobs}.csv"
    results = OUT / f"results-jobs{jobs}"
    shutil.rmtree(results, ignore_errors=True)
    start = time.perf_counter()
    summary = run_batch(folder, "attend_step", out, jobs=jobs, results_dir=results, force=True, progress=False)
    elapsed = time.perf_counter() - start
    assert summary["statuses"] == {"ok": summary["submissions"]}, summary["statuses"]
    return {"seconds": elapsed, "per_second": summary["submissions"] / elapsed, "n": summary["submissions"]}


# ---------------------------------------------------------------------------------- otter

OTTER_TEST = '''OK_FORMAT = True

test = {
    "name": "attend_step",
    "points": 19,
    "suites": [
        {
            "cases": [
                {"code": """>>> import numpy as np
>>> def _ref(X, p):
...     Q, K, V = X @ p["Wq"], X @ p["Wk"], X @ p["Wv"]
...     rows = []
...     for t in range(len(X)):
...         s = K[:t + 1] @ Q[t] / np.sqrt(Q.shape[1])
...         w = np.exp(s - s.max()); w = w / w.sum()
...         rows.append(w @ V[:t + 1])
...     return np.array(rows)
>>> def _decode(X, p, d):
...     cache = {"k": np.zeros((0, d)), "v": np.zeros((0, d))}
...     outs = []
...     for x in X:
...         before = {k: v.copy() for k, v in cache.items()}
...         out, new = attend_step(x, cache, p)
...         assert all(np.array_equal(before[k], cache[k]) for k in cache)
...         assert out.shape == (d,) and new["k"].shape == (len(outs) + 1, d)
...         outs.append(out); cache = new
...     return np.array(outs)
>>> rng = np.random.default_rng(0)
>>> ok = True
>>> for D, d, T in [(2, 2, 3), (4, 3, 1), (7, 5, 9), (3, 1, 6), (4, 4, 5), (16, 8, 30), (3, 2, 4), (5, 7, 6), (8, 3, 11), (2, 5, 3), (11, 6, 7), (4, 4, 13)]:
...     X = rng.standard_normal((T, D))
...     p = {k: rng.standard_normal((D, d)) for k in ("Wq", "Wk", "Wv")}
...     ok = ok and np.allclose(_decode(X, p, d), _ref(X, p), rtol=1e-9, atol=1e-12)
>>> bool(ok)
True
""", "hidden": False, "locked": False},
            ],
            "scored": True, "setup": "", "teardown": "", "type": "doctest",
        }
    ],
}
'''


def _otter_setup(log) -> tuple[Path | None, str]:
    """The otter executable in the benchmark's own venv (created on first use), or why not."""
    otter = OTTER_VENV / "bin" / "otter"
    if otter.exists():
        return otter, ""
    log("creating the otter-grader venv (first run only): " + str(OTTER_VENV))
    try:
        if not (OTTER_VENV / "bin" / "python").exists():
            subprocess.run([sys.executable, "-m", "venv", str(OTTER_VENV)], check=True, capture_output=True,
                           timeout=300)
        pip = subprocess.run([str(OTTER_VENV / "bin" / "python"), "-m", "pip", "install", "--quiet",
                              "--disable-pip-version-check", "otter-grader", "ipykernel", "numpy"],
                             capture_output=True, text=True, timeout=1800)
    except (OSError, subprocess.SubprocessError) as err:
        return None, f"could not create {OTTER_VENV}: {err}"
    if pip.returncode != 0 or not otter.exists():
        tail = (pip.stderr or pip.stdout).strip().splitlines()[-3:]
        return None, "pip install otter-grader failed: " + " | ".join(tail)
    return otter, ""


def _otter_autograder(work: Path, otter: Path) -> tuple[Path | None, str]:
    """An otter autograder zip for attend_step (``otter generate`` on a tests folder)."""
    tests = work / "tests"
    tests.mkdir(parents=True, exist_ok=True)
    (tests / "attend_step.py").write_text(OTTER_TEST)
    (work / "requirements.txt").write_text("numpy\n")
    proc = subprocess.run([str(otter), "generate", "--tests-dir", "tests", "--output-path", "autograder.zip",
                           "--requirements", "requirements.txt"],
                          cwd=work, capture_output=True, text=True, timeout=600)
    zip_path = work / "autograder.zip"
    if proc.returncode != 0 or not zip_path.exists():
        return None, "otter generate failed: " + " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-3:])
    return zip_path, ""


def bench_otter(paths: list[Path], log) -> dict:
    otter, why = _otter_setup(log)
    if otter is None:
        return {"error": why}
    work = OUT / "otter"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    zip_path, why = _otter_autograder(work, otter)
    if zip_path is None:
        return {"error": why}
    times, scores = [], []
    env = {**os.environ, "PATH": f"{OTTER_VENV / 'bin'}:{os.environ.get('PATH', '')}"}
    for i, path in enumerate(paths):
        out = work / f"out{i}"
        out.mkdir()
        start = time.perf_counter()
        proc = subprocess.run([str(otter), "run", "-a", str(zip_path), "-o", str(out), str(path)],
                              cwd=work, capture_output=True, text=True, timeout=600, env=env)
        times.append(time.perf_counter() - start)
        results = out / "results.json"
        if proc.returncode != 0 or not results.exists():
            tail = " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-4:])
            return {"error": f"otter run failed on {path.name} (exit {proc.returncode}): {tail}"}
        data = json.loads(results.read_text())
        tests = [t for t in data.get("tests", []) if isinstance(t.get("score"), (int, float))]
        scores.append((sum(t["score"] for t in tests), sum(t.get("max_score") or 0 for t in tests)))
    version = "otter-grader " + subprocess.run(
        [str(OTTER_VENV / "bin" / "python"), "-c", "import importlib.metadata as m; print(m.version('otter-grader'))"],
        capture_output=True, text=True).stdout.strip()
    return {"median": statistics.median(times), "times": times, "scores": scores, "version": version}


# ------------------------------------------------------------------------- a mutants grade

MUTANTS_TARGET = 10.0          # seconds of wall time for a correct mutants grade on 2 cores


def _cpu_of_children() -> float:
    import resource
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def grade_mutants_once(tree: Path, path: Path, options: tuple[str, ...] = ()) -> dict:
    """One ``python -m graders grade`` of ``path`` as ``mutants`` by the grader in ``tree`` (with
    ``options``): its wall time, its CPU time (the grader's and its sandboxes': every process it
    started was waited for), the score, the number of sandbox runs and how many ran at once at
    most (from the runs' start times and lengths)."""
    out = Path(tempfile.mkdtemp(prefix="bench-mutants-")) / "result.json"
    # run from ``tree``: ``-m`` puts the working folder first on sys.path, before PYTHONPATH
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree), str(ROOT)])}
    try:
        cpu, start = _cpu_of_children(), time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "graders", "grade", str(path), "--exercise", "mutants",
                               "--json", str(out), *options], cwd=tree, env=env, capture_output=True, text=True,
                              timeout=900)
        wall, cpu = time.perf_counter() - start, _cpu_of_children() - cpu
        if proc.returncode != 0 or not out.exists():
            raise RuntimeError(f"the grade failed (exit {proc.returncode}): {proc.stderr.strip()[-300:]}")
        result = json.loads(out.read_text())
    finally:
        shutil.rmtree(out.parent, ignore_errors=True)
    runs = result.get("runs", [])
    return {"wall": wall, "cpu": cpu, "score": result["score"], "max_score": result["max_score"],
            "runs": len(runs), "isolation": result.get("isolation"), "at_once": _most_at_once(runs)}


def _most_at_once(runs: list[dict]) -> int | None:
    """The most runs in progress at one moment (None: a grader that does not say when they started)."""
    if not runs or any("started" not in r for r in runs):
        return None
    edges = sorted([(r["started"], 1) for r in runs] + [(r["started"] + r["seconds"], -1) for r in runs],
                   key=lambda e: (e[0], e[1]))
    most = now = 0
    for _, step in edges:
        now += step
        most = max(most, now)
    return most


def bench_mutants(rounds: int, log) -> dict:
    """``rounds`` alternating gradings of the solution by the baseline grader (when there is one)
    and this one; the medians of each, and the load average around them."""
    path = ROOT / "solutions" / "mutants.ipynb"
    rev, why = _baseline_revision()
    trees = {"this grader": (ROOT, ()), "this grader, one sandbox at a time": (ROOT, ("--sandboxes", "1")),
             "this grader, every run in a fresh sandbox": (ROOT, ("--cold",))}
    if rev is not None:
        trees = {f"the grader at {rev}": (_baseline_tree(rev), ()), **trees}
    measured: dict[str, list[dict]] = {label: [] for label in trees}
    loads = [os.getloadavg()[0]]
    for k in range(rounds):
        for label, (tree, options) in trees.items():
            one = grade_mutants_once(tree, path, options)
            measured[label].append(one)
            loads.append(os.getloadavg()[0])
            log(f"  run {k + 1} of {rounds}, {label}: {one['wall']:.1f} s wall, {one['cpu']:.1f} s CPU, "
                f"{one['score']:g} / {one['max_score']:g}, {one['runs']} sandbox runs")
    summary = {}
    for label, runs in measured.items():
        if any(r["score"] != r["max_score"] for r in runs):
            raise AssertionError(f"{label}: the course's answer lost points: {[r['score'] for r in runs]}")
        summary[label] = {"wall": statistics.median(r["wall"] for r in runs),
                          "cpu": statistics.median(r["cpu"] for r in runs), "runs": runs[0]["runs"],
                          "isolation": runs[0]["isolation"], "at_once": max((r["at_once"] or 1) for r in runs)}
    return {"medians": summary, "why": why, "load": (min(loads), max(loads))}


def report_mutants(rounds: int, log) -> None:
    log(f"a mutants grade of solutions/mutants.ipynb through 'python -m graders grade' (median of {rounds}, "
        f"alternating with the baseline grader; {os.cpu_count()} cores):")
    measured = bench_mutants(rounds, log)
    for label, m in measured["medians"].items():
        log(f"  {label}: {m['wall']:.1f} s wall, {m['cpu']:.1f} s CPU ({m['runs']} sandbox runs, "
            f"{m['cpu'] / max(1, m['runs']) * 1000:.0f} ms CPU per run, at most {m['at_once']} at once, "
            f"isolation {m['isolation']})")
    if measured["why"]:
        log(f"  no earlier grader measured: {measured['why']}")
    ours = measured["medians"]["this grader"]
    low, high = measured["load"]
    log(f"  the machine's 1-minute load average during these runs: {low:.1f} to {high:.1f} "
        f"(on {os.cpu_count()} cores; above about 1 the wall time includes waiting for a core)")
    log(f"  target under {MUTANTS_TARGET:g} s wall on 2 cores: {'met' if ours['wall'] < MUTANTS_TARGET else 'NOT met'} "
        f"({ours['wall']:.1f} s)")


# ----------------------------------------------------------------------------------- main


# ------------------------------------------------------------------------- the grader's memory

FLOOD_SOURCE = r"""
import os
import sys
import numpy as np

_SENT = []


def _running_test():
    # the harness's frames name the running test today; any test id will do when they do not
    frame = sys._getframe()
    while frame is not None:
        case = frame.f_locals.get("case")
        if isinstance(case, dict) and isinstance(case.get("id"), str):
            return case["id"]
        frame = frame.f_back
    return "t%02d" % (len(_SENT) % 14 + 1)


def _flood():
    # one line of 20 MB of {} per call, as the result of the running test: what the grader would
    # parse into millions of dicts and keep, until the channel's 64 MB cap ends the run
    fd = int(sys.argv[sys.argv.index("--channel-fd") + 1]) if "--channel-fd" in sys.argv else 3
    line = b'{"t": "result", "id": "%s", "calls": [' % _running_test().encode() + b"{}," * 6_600_000 + b"{}]}\n"
    _SENT.append(1)
    try:
        os.write(fd, line)
    except OSError:
        pass


def attend_step(x_t, cache, p):
    _flood()
    q, k, v = x_t @ p["Wq"], x_t @ p["Wk"], x_t @ p["Wv"]
    K = np.vstack([cache["k"], k[None]])
    V = np.vstack([cache["v"], v[None]])
    s = K @ q / np.sqrt(q.shape[0])
    w = np.exp(s - s.max())
    return (w / w.sum()) @ V, {"k": K, "v": V}
"""

PEAK_ONE = r"""
import json, resource, sys
sys.path.insert(0, sys.argv[1])
from graders import grade_file
result = grade_file(sys.argv[2], "attend_step")
print(json.dumps({"peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "status": result["status"], "score": result["score"], "max_score": result["max_score"],
                  "dropped": sum(r.get("dropped_messages") or 0 for r in result.get("runs", [])),
                  "why": result["output"].splitlines()[:2]}))
"""


def worst_cases(folder: Path) -> dict[str, Path]:
    """The submissions of the memory benchmark, written once into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    cases = {"an ordinary submission": folder / "ordinary.py",
             "a forged channel (lines of {} up to its cap, at every call)": folder / "flood.py",
             "a 120 MB notebook of {}": folder / "empty-objects.ipynb"}
    cases["an ordinary submission"].write_text("import math\nimport numpy as np\n" +
                                               textwrap.dedent(_answer_source(0).split("import numpy as np\n", 1)[1]))
    cases["a forged channel (lines of {} up to its cap, at every call)"].write_text(FLOOD_SOURCE)
    notebook = cases["a 120 MB notebook of {}"]
    if not notebook.exists() or notebook.stat().st_size < 120_000_000:
        with open(notebook, "wb") as f:
            f.write(b'{"cells": [')
            for _ in range(40):
                f.write(b"{}," * 1_000_000)
            f.write(b'{}], "metadata": {"kvcourse": {"exercise": "attend_step"}}}')
    return cases


def bench_memory(folder: Path) -> dict[str, dict]:
    """Each worst case graded in a process of its own: its peak RSS and what the grader said."""
    measured = {}
    for label, path in worst_cases(folder).items():
        proc = subprocess.run([sys.executable, "-c", PEAK_ONE, str(ROOT), str(path)], cwd=ROOT,
                              capture_output=True, text=True, timeout=600)
        if proc.returncode != 0:
            measured[label] = {"error": (proc.stderr.strip().splitlines() or ["no output"])[-1]}
        else:
            measured[label] = json.loads(proc.stdout.strip().splitlines()[-1])
    return measured


def bench_copy() -> dict:
    """The sandbox's copy of the system and Python (``graders.sandbox.resident``): its size and
    how long one takes to make, its files already in the page cache (a second copy, made the same
    way the first was)."""
    from graders.sandbox import resident
    resident.view()                               # the first copy reads the files into memory
    started = time.perf_counter()
    copy = resident.build(resident.needed_paths())
    return {"seconds": time.perf_counter() - started, "files": copy.files, "bytes": copy.bytes,
            "in_memory": copy.in_memory}


def main() -> int:
    n = int(os.environ.get("BENCH_GRADER_N", "200"))
    n_otter = int(os.environ.get("BENCH_OTTER_N", "8"))
    log = lambda text: print(text, flush=True)  # noqa: E731
    OUT.mkdir(parents=True, exist_ok=True)
    mutants_rounds = int(os.environ.get("BENCH_GRADER_MUTANTS_N", "3"))
    if mutants_rounds > 0:
        report_mutants(mutants_rounds, log)
    else:
        log("a mutants grade: not measured (BENCH_GRADER_MUTANTS_N=0)")
    if os.environ.get("BENCH_GRADER_ONLY", "") == "mutants":
        return 0
    copy = bench_copy()
    log(f"the sandbox's copy of the system and Python: {copy['files']:,} files, {copy['bytes'] / 2**20:.0f} MiB, "
        f"made in {copy['seconds']:.2f} s ({'memory' if copy['in_memory'] else 'disk'})")
    folder = OUT / "submissions"
    paths = make_submissions(folder, n)
    log(f"{n} distinct attend_step notebooks in {folder} (machine: {os.cpu_count()} cores)")

    one = bench_one(paths)
    log(f"one submission ({one['tests']} hidden tests, isolation {one['isolation']}): median "
        f"{one['median'] * 1000:.0f} ms in-process (min {one['min'] * 1000:.0f}, max {one['max'] * 1000:.0f}), "
        f"{one['cli_median'] * 1000:.0f} ms through 'python -m graders grade'")
    log(f"  where it goes: an empty sandbox (bubblewrap + interpreter) {one['empty_sandbox'] * 1000:.0f} ms, "
        f"the same importing numpy {one['numpy_sandbox'] * 1000:.0f} ms; the rest is the tests and comparisons")
    log(f"  goal under 1 s a submission: {'met' if one['median'] < 1.0 else 'NOT met'}")

    if os.environ.get("BENCH_GRADER_MEMORY", "1") != "0":
        log("the grader's peak memory (RSS of its process, one fresh process per case):")
        for label, m in bench_memory(OUT / "worst").items():
            if "error" in m:
                log(f"  {label}: not measured ({m['error']})")
                continue
            log(f"  {label}: {m['peak_mb']:.0f} MB peak; {m['status']}, {m['score']:g} / {m['max_score']:g}"
                + (f", {m['dropped']} channel messages dropped" if m["dropped"] else "")
                + f" ({m['why'][-1][:110]})")

    compared = bench_before_after(paths[0])
    medians = compared["medians"]
    log(f"one submission, before and after (median of {compared['n']} each, alternating rounds, one "
        f"process per round):")
    for label, seconds in medians.items():
        log(f"  {label}: {seconds * 1000:.0f} ms")
    before = next((v for k, v in medians.items() if k.startswith("the grader at")), None)
    if before is None:
        log(f"  no earlier grader measured: {compared['why']}")
    else:
        log(f"  ratio this grader / before: {medians['this grader'] / before:.2f}x")
    log(f"  ratio fallback / bubblewrap: {medians['this grader, fallback'] / medians['this grader']:.2f}x")

    serial = bench_batch(folder, 1)
    parallel = bench_batch(folder, 2)
    speedup = serial["seconds"] / parallel["seconds"]
    log(f"batch of {n}: --jobs 1 {serial['seconds']:.1f} s ({serial['per_second']:.2f} submissions/s), "
        f"--jobs 2 {parallel['seconds']:.1f} s ({parallel['per_second']:.2f} submissions/s): "
        f"speed-up {speedup:.2f}x on 2 cores")
    log(f"  per submission in the batch: {parallel['seconds'] / n * 1000:.0f} ms with 2 jobs "
        f"(sandbox and interpreter start-up: {one['empty_sandbox'] / one['median'] * 100:.0f}% of one grading; "
        f"with numpy's import {one['numpy_sandbox'] / one['median'] * 100:.0f}%)")

    if n_otter < 1:
        log("otter-grader: not measured (BENCH_OTTER_N=0)")
        return 0
    log(f"otter-grader: 'otter run' on the first {n_otter} of the same submissions")
    otter = bench_otter(paths[:n_otter], log)
    if "error" in otter:
        log(f"  otter could not be measured here: {otter['error']}")
        log("  ratio otter / ours: not measured")
    else:
        ratio = otter["median"] / one["median"]
        log(f"  {otter['version']}: median {otter['median']:.2f} s per submission (scores {otter['scores'][:3]}...)")
        log(f"  ratio otter run / ours, median per submission, measured in this run: {ratio:.1f}x "
            f"(ours through the CLI: {otter['median'] / one['cli_median']:.1f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
