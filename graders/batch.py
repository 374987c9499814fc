"""Grading a whole class: every submission in a folder, in parallel, into a CSV gradebook.

- Submissions are the ``.ipynb`` and ``.py`` files under DIR (sub-folders too, one per learner
  is fine; hidden folders and ``.ipynb_checkpoints`` are skipped).
- Each is graded in its own sandbox (``grading.grade_bytes``).  Locally a pool of threads keeps
  ``--jobs`` sandboxes busy (the work happens in the sandboxes' processes, so threads are
  enough and start nothing); with ``--scheduler ADDRESS`` the same calls go to a Dask
  distributed cluster through its ``concurrent.futures`` executor, with the submission's bytes
  (the workers need not see DIR).
- One JSON per submission (Gradescope's format) lands in the results folder as soon as it is
  graded, written atomically (temporary file, fsync, rename), so killing the batch at any moment
  loses nothing already graded.  A rerun skips every submission whose JSON has the same content
  hash and grader fingerprint (``--force`` regrades); results of the grader failing
  (``grader_error``) are always retried.
- The CSV is rebuilt from those results (atomically, every few seconds and at the end): a row per
  submission, a column per test, the score and the status (ok, timeout, crashed, missing,
  unreadable, grader_error).
"""
from __future__ import annotations

import csv
import hashlib
import io
import json
import sys
import time
from collections import Counter
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from pathlib import Path

from . import registry
from .results import make_result, test_entry, write_json, write_text
from .notebook import MAX_FILE_BYTES
from .sandbox import Limits, kill_all

__all__ = ["discover", "run_batch", "grade_blob", "results_folder", "write_gradebook"]

SUFFIXES = (".ipynb", ".py")
CSV_EVERY = 2.0        # seconds between rewrites of the gradebook while grading


def discover(directory: Path, skip: tuple[Path, ...] = ()) -> list[Path]:
    """The submissions under ``directory``, in a stable order."""
    directory = Path(directory)
    skip = tuple(p.resolve() for p in skip)
    found = []
    for path in sorted(directory.rglob("*")):
        rel = path.relative_to(directory)
        if any(part.startswith(".") or part in ("__pycache__", ".ipynb_checkpoints") for part in rel.parts):
            continue
        if any(path.resolve() == s or s in path.resolve().parents for s in skip):
            continue
        if path.is_file() and path.suffix.lower() in SUFFIXES:
            found.append(path)
    return found


def results_folder(out_csv: Path) -> Path:
    """Default folder of the per-submission JSONs: ``gradebook.csv`` -> ``gradebook-results/``."""
    return out_csv.with_name(out_csv.stem + "-results")


def _json_name(rel: Path) -> str:
    return "__".join(rel.parts) + ".json"


def _json_names(rels: list[Path]) -> dict[Path, str]:
    """The results file of each submission: ``learner__hw.ipynb.json``; when two would share a name
    (``a/b.py`` and a file called ``a__b.py``), each of those gets a hash of its path too, so that
    no learner's file name can overwrite another's results."""
    counts = Counter(_json_name(rel) for rel in rels)
    return {rel: _json_name(rel) if counts[_json_name(rel)] == 1 else
            f"{_json_name(rel)[:-5]}-{hashlib.sha256(str(rel).encode()).hexdigest()[:10]}.json" for rel in rels}


def grade_blob(data: bytes, filename: str, exercise: str, limits: dict, isolation: str, label: str) -> dict:
    """Grade one submission's bytes (what a thread or a Dask worker runs).  Always a result."""
    from .grading import grade_bytes
    try:
        return grade_bytes(data, filename, exercise, limits=Limits(**limits), isolation=isolation, label=label)
    except Exception as err:  # noqa: BLE001 - e.g. bubblewrap missing on a Dask worker
        return _failed(exercise, label, hashlib.sha256(data).hexdigest(), f"{type(err).__name__}: {err}")


def _failed(exercise: str, label: str, sha: str, why: str) -> dict:
    tests = [test_entry(i.name, i.points, False, "not graded: the grader failed", i.visibility)
             for i in registry.items(exercise)]
    return make_result(exercise=exercise, tests=tests, status="grader_error", isolation="none",
                       execution_time=0.0, output=f"The grader failed on this submission: {why}",
                       submission=label, sha256=sha, fingerprint=registry.fingerprint(exercise))


def _read(path: Path) -> bytes:
    """A submission's bytes, at most one past what the grader reads (a bigger one is refused)."""
    with open(path, "rb") as f:
        return f.read(MAX_FILE_BYTES + 1)


def _file_sha256(path: Path) -> str:
    """The SHA-256 of what ``_read`` returns, without holding the file in memory."""
    digest, left = hashlib.sha256(), MAX_FILE_BYTES + 1
    with open(path, "rb") as f:
        while left > 0 and (chunk := f.read(min(1 << 20, left))):
            digest.update(chunk)
            left -= len(chunk)
    return digest.hexdigest()


def _unreadable(exercise: str, label: str, err: OSError) -> dict:
    why = f"the file could not be read ({err.strerror or type(err).__name__})"
    tests = [test_entry(i.name, i.points, False, f"not run: {why}", i.visibility) for i in registry.items(exercise)]
    return make_result(exercise=exercise, tests=tests, status="unreadable", isolation="none",
                       execution_time=0.0, output=f"The submission could not be read: {why}. Every test scores 0.",
                       submission=label, fingerprint=registry.fingerprint(exercise))


def _previous(path: Path, sha: str, exercise: str, fingerprint: str) -> dict | None:
    try:
        result = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if (isinstance(result, dict) and result.get("sha256") == sha and result.get("exercise") == exercise
            and result.get("fingerprint") == fingerprint and result.get("status") != "grader_error"):
        return result
    return None


def run_batch(directory: Path, exercise: str, out_csv: Path, *, jobs: int | None = None,
              scheduler: str | None = None, limits: Limits | None = None, isolation: str = "auto",
              results_dir: Path | None = None, force: bool = False, progress: bool = True) -> dict:
    """Grade every submission under ``directory``; returns a summary dict."""
    import os
    from tqdm import tqdm

    limits = limits or Limits()
    out_csv = Path(out_csv)
    results_dir = Path(results_dir) if results_dir else results_folder(out_csv)
    results_dir.mkdir(parents=True, exist_ok=True)
    tests = registry.tests(exercise)           # built once, before any thread starts
    fingerprint = registry.fingerprint(exercise)
    submissions = discover(directory, skip=(results_dir, out_csv))
    results: dict[str, dict] = {}
    todo = []
    names = _json_names([path.relative_to(directory) for path in submissions])
    for path in submissions:            # hashed here, read only when its turn comes (memory)
        rel = path.relative_to(directory)
        target = results_dir / names[rel]
        try:
            sha = _file_sha256(path)
        except OSError as err:          # one file the grader cannot read does not stop the class
            todo.append((rel, path, target))
            continue
        previous = None if force else _previous(target, sha, exercise, fingerprint)
        if previous is not None:
            results[str(rel)] = previous
        else:
            todo.append((rel, path, target))

    if scheduler:
        from distributed import Client
        client = Client(scheduler, timeout="30s")
        executor = client.get_executor(pure=False)
        where = f"Dask cluster at {scheduler}"
        try:
            window = max(4, 2 * sum(client.nthreads().values()))
        except Exception:  # noqa: BLE001
            window = 16
    else:
        client = None
        jobs = jobs or os.cpu_count() or 1
        executor = ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="grader")
        where = f"{jobs} local job{'s' if jobs != 1 else ''}"
        window = 2 * jobs

    print(f"{exercise}: {len(submissions)} submissions in {directory}; {len(results)} already graded, "
          f"{len(todo)} to grade with {where}", file=sys.stderr)
    bar = tqdm(total=len(todo), desc=f"grading {exercise}", unit="sub", disable=not progress or not todo,
               file=sys.stderr, dynamic_ncols=True)
    last_csv = 0.0
    queue = iter(todo)
    futures: dict = {}

    def finish(rel, target, result):
        write_json(target, result)
        results[str(rel)] = result
        bar.update(1)
        bar.set_postfix_str(f"last: {result['status']}", refresh=False)

    def submit_next():
        """Read the next submission and hand it over; a few are in flight at a time, so that a
        class of big notebooks is never all in memory at once."""
        for rel, path, target in queue:
            try:
                data = _read(path)
            except OSError as err:
                finish(rel, target, _unreadable(exercise, str(rel), err))
                continue
            future = executor.submit(grade_blob, data, rel.name, exercise, limits.as_dict(), isolation, str(rel))
            futures[future] = (rel, target)
            return future
        return None

    try:
        pending = set()
        while len(pending) < window and (future := submit_next()) is not None:
            pending.add(future)
        while pending:
            done, pending = wait(pending, timeout=1.0, return_when=FIRST_COMPLETED)
            for future in done:
                rel, target = futures.pop(future)
                try:
                    result = future.result()
                except Exception as err:  # noqa: BLE001 - a worker lost, a cluster error
                    result = _failed(exercise, str(rel), "", f"{type(err).__name__}: {err}")
                finish(rel, target, result)
                if (new := submit_next()) is not None:
                    pending.add(new)
            if done and time.monotonic() - last_csv > CSV_EVERY:
                write_gradebook(out_csv, exercise, results)
                last_csv = time.monotonic()
    except KeyboardInterrupt:
        kill_all()
        raise
    finally:
        bar.close()
        if client is not None:
            executor.shutdown(wait=False)
            client.close()
        else:
            executor.shutdown(wait=True, cancel_futures=True)
        write_gradebook(out_csv, exercise, results)

    statuses = Counter(r.get("status", "?") for r in results.values())
    summary = {"submissions": len(submissions), "graded": len(todo), "resumed": len(submissions) - len(todo),
               "statuses": dict(statuses), "csv": str(out_csv), "results": str(results_dir),
               "missing_results": len(submissions) - len(results)}
    print(f"{exercise}: {len(results)} results ({', '.join(f'{k} {v}' for k, v in sorted(statuses.items()))}); "
          f"gradebook {out_csv}, one JSON per submission in {results_dir}", file=sys.stderr)
    return summary


def _cell(text: str) -> str:
    """A CSV cell a spreadsheet shows as text: one starting like a formula (``=HYPERLINK(...)``, a
    learner's file name or words from their code) gets a leading apostrophe."""
    text = str(text)
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


def _column(number: int, item) -> str:
    """The gradebook's header of a result's entry: its number and name ("t03 one token")."""
    return f"t{number:02d} {item.name}"


def write_gradebook(out_csv: Path, exercise: str, results: dict[str, dict]) -> None:
    """The CSV: a row per submission, a column per entry of the results (a hidden test, or a part
    of an exercise that reports in parts), then the total, atomically."""
    tests = registry.items(exercise)
    headers = ["submission", "status", "score", "max_score"] + [_column(k, t) for k, t in enumerate(tests, 1)] + \
              ["isolation", "execution_time", "sha256", "message"]
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(headers)
    for name in sorted(results):
        result = results[name]
        by_name = {}
        for entry in result.get("tests", []):
            by_name.setdefault(entry.get("name"), entry)
        cells = []
        for t in tests:
            entry = by_name.get(t.name)
            cells.append(f"{entry['score']:g}" if entry else "")
        message = ""
        if result.get("status") != "ok":      # why: the first note, else the first failing test's
            lines = [l.removeprefix("Note: ") for l in (result.get("output") or "").splitlines()
                     if not l.startswith("Isolation:") and " hidden tests passed" not in l]
            lines += [t.get("output", "") for t in result.get("tests", []) if t.get("status") != "passed"]
            message = (lines[0] if lines else "")[:300]
        writer.writerow([_cell(name), result.get("status", ""), f"{result.get('score', 0):g}",
                         f"{result.get('max_score', 0):g}", *cells, result.get("isolation", ""),
                         result.get("execution_time", ""), result.get("sha256", ""), _cell(message)])
    write_text(out_csv, buf.getvalue())
