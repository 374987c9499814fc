"""Grading a whole class: every submission in a folder, in parallel, into a CSV gradebook.

- Submissions are the files under DIR (sub-folders too, one per learner is fine; hidden files and
  folders and ``.ipynb_checkpoints`` are skipped).  Every one gets a row: a file that is not a
  ``.ipynb`` or a ``.py`` (a ``.pdf``), a symbolic link (never followed: ``notebook.open_file``),
  anything that is not a regular file, or one that cannot be read, gets zero and the reason.
- The exercise is the one the instructor names: a submission's metadata never changes it.
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
  submission, a column per test, the score, the status (ok, timeout, crashed, missing,
  unreadable, grader_error) and, for every row below full marks, the main reason in ``message``.
- Nothing a submission holds stops the batch: its text is made valid before it is written
  (``results.clean``), a file name too long for a results file gets a shorter one, and a result
  that cannot be written to disk is still a row of the gradebook.
- On a Dask cluster with no worker connected, the batch says so and waits (``wait_for_workers``
  seconds, then stops, keeping what was graded; None waits for good); a scheduler that cannot be
  reached is a clear error that leaves no empty results folder behind.
"""
from __future__ import annotations

import csv
import dataclasses
import hashlib
import io
import json
import os
import stat
import sys
import time
from collections import Counter
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from pathlib import Path

from tqdm import tqdm

from . import registry
from .grading import grade_bytes
from .notebook import MAX_FILE_BYTES, Refused, open_file, read_file
from .results import grader_failed, one_line, write_json, write_text, zero_result
from .sandbox import Limits, kill_all

__all__ = ["discover", "run_batch", "grade_blob", "results_folder", "write_gradebook"]

SUFFIXES = (".ipynb", ".py")
CSV_EVERY = 2.0        # seconds between rewrites of the gradebook while grading


def discover(directory: Path, skip: tuple[Path, ...] = ()) -> list[Path]:
    """Every file under ``directory`` (links too, never followed), in a stable order."""
    directory = Path(directory)
    skip = tuple(p.resolve() for p in skip)
    found = []
    for path in sorted(directory.rglob("*")):
        rel = path.relative_to(directory)
        if any(part.startswith(".") or part in ("__pycache__", ".ipynb_checkpoints") for part in rel.parts):
            continue
        real = Path(os.path.realpath(path.parent)) / path.name     # the entry itself is not followed
        if any(real == s or s in real.parents for s in skip):
            continue
        try:
            mode = os.lstat(path).st_mode
        except OSError:
            continue                     # gone since the listing
        if not stat.S_ISDIR(mode):       # a regular file, a link (to a file or a folder), a FIFO...
            found.append(path)
    return found


def _refusal(path: Path) -> str | None:
    """Why ``path`` is not graded at all (it is not a submission the grader reads), or None."""
    try:
        mode = os.lstat(path).st_mode
    except OSError as err:
        return f"the file could not be read ({err.strerror})"
    if stat.S_ISLNK(mode):
        return ("it is a symbolic link; the grader reads only regular files, never what a link points to "
                "(hand in the notebook itself)")
    if not stat.S_ISREG(mode):
        return "it is not a regular file"
    if path.suffix.lower() not in SUFFIXES:
        kind = f"a {path.suffix.lower()} file" if path.suffix else "a file without a suffix"
        return f"{kind} is not a notebook or a Python file (hand in the .ipynb)"
    return None


def results_folder(out_csv: Path) -> Path:
    """Default folder of the per-submission JSONs: ``gradebook.csv`` -> ``gradebook-results/``."""
    return out_csv.with_name(out_csv.stem + "-results")


MAX_NAME_BYTES = 200      # a results file's name (file systems allow 255 bytes)


def _json_name(rel: Path) -> str:
    name = "__".join(rel.parts) + ".json"
    if len(os.fsencode(name)) <= MAX_NAME_BYTES:
        return name
    digest = hashlib.sha256(os.fsencode(str(rel))).hexdigest()[:16]
    return os.fsdecode(os.fsencode(name)[:MAX_NAME_BYTES - 22]).rstrip("\udcff") + f"-{digest}.json"


def _json_names(rels: list[Path]) -> dict[Path, str]:
    """The results file of each submission: ``learner__hw.ipynb.json``; when two would share a name
    (``a/b.py`` and a file called ``a__b.py``), each of those gets a hash of its path too, so that
    no learner's file name can overwrite another's results."""
    counts = Counter(_json_name(rel) for rel in rels)
    return {rel: _json_name(rel) if counts[_json_name(rel)] == 1 else
            f"{_json_name(rel)[:-5]}-{hashlib.sha256(os.fsencode(str(rel))).hexdigest()[:10]}.json"
            for rel in rels}


def grade_blob(data: bytes, filename: str, exercise: str, limits: dict, isolation: str, label: str) -> dict:
    """Grade one submission's bytes (what a thread or a Dask worker runs).  Always a result."""
    try:
        return grade_bytes(data, filename, exercise, limits=Limits(**limits), isolation=isolation, label=label)
    except Exception as err:  # noqa: BLE001 - e.g. bubblewrap missing on a Dask worker
        return grader_failed(exercise, f"{type(err).__name__}: {err}", submission=label,
                             sha256=hashlib.sha256(data).hexdigest())


def _read(path: Path) -> bytes:
    """A submission's bytes, at most one past what the grader reads (a bigger one is refused),
    opened without following a link (``notebook.read_file``)."""
    return read_file(path)


def _file_sha256(path: Path) -> str:
    """The SHA-256 of what ``_read`` returns, without holding the file in memory."""
    digest, left = hashlib.sha256(), MAX_FILE_BYTES + 1
    with open_file(path) as f:
        while left > 0 and (chunk := f.read(min(1 << 20, left))):
            digest.update(chunk)
            left -= len(chunk)
    return digest.hexdigest()


def _unreadable(exercise: str, label: str, why: str, sha256: str = "") -> dict:
    """The row of a file that is not graded: zero on every test, and why."""
    return zero_result(exercise, "unreadable", f"The submission could not be read: {why}. Every test scores 0.",
                       f"not run: {why}", submission=label, sha256=sha256)


def _why(err: Exception) -> str:
    """What an error reading a submission means, in the row's words."""
    if isinstance(err, Refused):
        return str(err)
    return f"the file could not be read ({getattr(err, 'strerror', None) or type(err).__name__})"


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
              results_dir: Path | None = None, force: bool = False, progress: bool = True,
              wait_for_workers: float | None = None, connect_timeout: float = 30.0) -> dict:
    """Grade every submission under ``directory``; returns a summary dict.  With ``scheduler``,
    ``wait_for_workers`` seconds with no Dask worker connected stop the batch (None: wait)."""
    limits = limits or Limits()
    if limits.sandboxes is None:           # the batch's jobs already keep the cores busy
        limits = dataclasses.replace(limits, sandboxes=1)
    out_csv = Path(out_csv)
    results_dir = Path(results_dir) if results_dir else results_folder(out_csv)
    registry.tests(exercise)                   # built once, before any thread starts
    fingerprint = registry.fingerprint(exercise)
    submissions = discover(directory, skip=(results_dir, out_csv))
    pool = _Pool.dask(scheduler, connect_timeout) if scheduler else _Pool.threads(jobs)   # before writing
    results_dir.mkdir(parents=True, exist_ok=True)

    batch = _Batch(exercise, out_csv, limits, isolation)
    todo = batch.resume(directory, submissions, results_dir, fingerprint, force)
    print(one_line(f"{exercise}: {len(submissions)} files in {directory}; {len(batch.results)} already graded "
                     f"or refused, {len(todo)} to grade with {pool.where}"), file=sys.stderr)
    workers = _WorkerWatch(pool.client, scheduler, wait_for_workers) if pool.client is not None else None
    stopped = batch.grade(todo, pool, workers, progress)
    return batch.summary(submissions, len(todo), results_dir, stopped)


@dataclasses.dataclass
class _Pool:
    """Where the gradings run: a pool of local threads, or a Dask cluster's executor (``client``);
    ``window`` gradings are in flight at a time."""

    executor: object
    where: str
    window: int
    client: object = None

    @classmethod
    def threads(cls, jobs: int | None) -> _Pool:
        jobs = jobs or os.cpu_count() or 1
        return cls(ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="grader"),
                   f"{jobs} local job{'s' if jobs != 1 else ''}", 2 * jobs)

    @classmethod
    def dask(cls, scheduler: str, connect_timeout: float) -> _Pool:
        from distributed import Client      # optional: only a batch on a cluster needs Dask
        client = Client(scheduler, timeout=f"{connect_timeout:g}s")
        try:
            window = max(4, 2 * sum(client.nthreads().values()))
        except Exception:  # noqa: BLE001
            window = 16
        return cls(client.get_executor(pure=False), f"Dask cluster at {scheduler}", window, client)

    def close(self) -> None:
        if self.client is not None:
            self.executor.shutdown(wait=False)
            self.client.close()
        else:
            self.executor.shutdown(wait=True, cancel_futures=True)


class _Batch:
    """The results of one batch, kept as they come (a JSON file each, and a row of the gradebook
    even when the file cannot be written)."""

    def __init__(self, exercise: str, out_csv: Path, limits: Limits, isolation: str):
        self.exercise, self.out_csv, self.limits, self.isolation = exercise, out_csv, limits, isolation
        self.results: dict[str, dict] = {}
        self.unwritten: list[str] = []

    def keep(self, rel, target, result) -> None:
        """The result is a row whatever happens; its file is written when the disk lets it."""
        self.results[str(rel)] = result
        try:
            write_json(target, result)
        except OSError as err:
            self.unwritten.append(str(rel))
            print(f"{one_line(str(rel))}: its result could not be written to {target.name} ({err.strerror}); "
                  "it is in the gradebook", file=sys.stderr)

    def resume(self, directory: Path, submissions: list[Path], results_dir: Path, fingerprint: str,
               force: bool) -> list[tuple]:
        """Keep the refusals and the results still current; return (rel, path, target) of every
        submission left to grade.  Each is hashed here, read only when its turn comes (memory)."""
        names = _json_names([path.relative_to(directory) for path in submissions])
        todo = []
        for path in submissions:
            rel = path.relative_to(directory)
            target = results_dir / names[rel]
            refusal = _refusal(path)
            if refusal is not None:
                self.keep(rel, target, _unreadable(self.exercise, str(rel), refusal))
                continue
            try:
                sha = _file_sha256(path)
            except (OSError, Refused):      # one file the grader cannot read does not stop the class
                todo.append((rel, path, target))
                continue
            previous = None if force else _previous(target, sha, self.exercise, fingerprint)
            if previous is not None:
                self.results[str(rel)] = previous
            else:
                todo.append((rel, path, target))
        return todo

    def grade(self, todo: list[tuple], pool: _Pool, workers: _WorkerWatch | None, progress: bool) -> str | None:
        """Grade ``todo`` on ``pool``, a window of submissions in flight at a time (so that a class
        of big notebooks is never all in memory at once), the gradebook rewritten every
        ``CSV_EVERY`` seconds and at the end.  Returns why the batch stopped early, or None."""
        bar = tqdm(total=len(todo), desc=f"grading {self.exercise}", unit="sub", disable=not progress or not todo,
                   file=sys.stderr, dynamic_ncols=True)
        flight = _Flight(self, iter(todo), pool, bar)
        last_csv, stopped = 0.0, None
        try:
            flight.fill()
            while flight.pending:
                done = flight.collect()
                if workers is not None and not done and (stopped := workers.check()):
                    flight.cancel()
                    break
                if done and time.monotonic() - last_csv > CSV_EVERY:
                    write_gradebook(self.out_csv, self.exercise, self.results)
                    last_csv = time.monotonic()
        except KeyboardInterrupt:
            kill_all()
            raise
        finally:
            bar.close()
            pool.close()
            write_gradebook(self.out_csv, self.exercise, self.results)
        return stopped

    def summary(self, submissions: list[Path], graded: int, results_dir: Path, stopped: str | None) -> dict:
        """The batch's summary, also said on stderr."""
        results, exercise = self.results, self.exercise
        statuses = Counter(r.get("status", "?") for r in results.values())
        print(one_line(f"{exercise}: {len(results)} results for {len(submissions)} files "
                         f"({', '.join(f'{k} {v}' for k, v in sorted(statuses.items()))}); gradebook {self.out_csv}, "
                         f"one JSON per submission in {results_dir}"), file=sys.stderr)
        if stopped:
            print(one_line(f"{exercise}: stopped: {stopped}; what was graded is saved: run the same command "
                             "again to resume"), file=sys.stderr)
        return {"submissions": len(submissions), "graded": graded, "resumed": len(submissions) - graded,
                "statuses": dict(statuses), "csv": str(self.out_csv), "results": str(results_dir),
                "missing_results": len(submissions) - len(results), "unwritten": self.unwritten, "stopped": stopped}


class _Flight:
    """The gradings in flight: submitted to the pool as others finish, at most ``pool.window``."""

    def __init__(self, batch: _Batch, queue, pool: _Pool, bar):
        self.batch, self.queue, self.pool, self.bar = batch, queue, pool, bar
        self.futures: dict = {}
        self.pending: set = set()

    def finish(self, rel, target, result) -> None:
        self.batch.keep(rel, target, result)
        self.bar.update(1)
        self.bar.set_postfix_str(f"last: {result['status']}", refresh=False)

    def submit_next(self):
        """Read the next submission and hand it over (a file that cannot be read is a row)."""
        batch = self.batch
        for rel, path, target in self.queue:
            try:
                data = _read(path)
            except (OSError, Refused) as err:
                self.finish(rel, target, _unreadable(batch.exercise, str(rel), _why(err)))
                continue
            future = self.pool.executor.submit(grade_blob, data, rel.name, batch.exercise, batch.limits.as_dict(),
                                               batch.isolation, str(rel))
            self.futures[future] = (rel, target)
            return future
        return None

    def fill(self) -> None:
        while len(self.pending) < self.pool.window and (future := self.submit_next()) is not None:
            self.pending.add(future)

    def collect(self) -> set:
        """Wait up to a second for gradings to finish; keep their results, submit as many more."""
        done, self.pending = wait(self.pending, timeout=1.0, return_when=FIRST_COMPLETED)
        for future in done:
            rel, target = self.futures.pop(future)
            try:
                result = future.result()
            except Exception as err:  # noqa: BLE001 - a worker lost, a cluster error
                result = grader_failed(self.batch.exercise, f"{type(err).__name__}: {err}", submission=str(rel))
            self.finish(rel, target, result)
            if (new := self.submit_next()) is not None:
                self.pending.add(new)
        return done

    def cancel(self) -> None:
        for future in self.pending:
            future.cancel()


class _WorkerWatch:
    """Whether a Dask cluster still has a worker: says so once when none is connected, again when
    one is back, and after ``patience`` seconds with none (None: never) says why the batch stops."""

    def __init__(self, client, scheduler: str, patience: float | None):
        self.client, self.scheduler, self.patience = client, scheduler, patience
        self.since: float | None = None

    def _count(self) -> int | None:
        try:
            return len(self.client.scheduler_info().get("workers", {}))
        except Exception:  # noqa: BLE001 - the scheduler itself is gone: distributed reports it
            return None

    def check(self) -> str | None:
        count = self._count()
        if count is None or count > 0:
            if self.since is not None and count:
                print(f"a Dask worker is connected to {self.scheduler} again: grading goes on", file=sys.stderr)
            self.since = None
            return None
        now = time.monotonic()
        if self.since is None:
            self.since = now
            then = ("waiting until one connects" if self.patience is None else
                    f"waiting {self.patience:g} s for one (--wait-for-workers), then stopping")
            print(f"no Dask worker is connected to {self.scheduler}: {then}", file=sys.stderr)
        if self.patience is not None and now - self.since >= self.patience:
            return f"no Dask worker was connected to {self.scheduler} for {self.patience:g} s"
        return None


def _cell(text: str) -> str:
    """A CSV cell a spreadsheet shows as text: one starting like a formula (``=HYPERLINK(...)``, a
    learner's file name or words from their code) gets a leading apostrophe."""
    text = one_line(text)                # one line: no newline, carriage return or override of its own
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


def _column(number: int, item) -> str:
    """The gradebook's header of a result's entry: its number and name ("t03 one token")."""
    return f"t{number:02d} {item.name}"


def _points(value) -> str:
    """A score as the gradebook writes it ("14", "0.5"); what is not a number is written as it is
    (a results file edited by hand cannot stop the gradebook)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return f"{value:g}"
    return str(value)


def _main_reason(result: dict) -> str:
    """The gradebook's ``message`` of a result: for every result below full marks, whatever its
    status, its first note (an import that failed, a time limit), else its first failing test's
    feedback (every test ran out of memory, the starter is not implemented yet); empty at full
    marks."""
    score, best = result.get("score"), result.get("max_score")
    if (result.get("status") == "ok" and isinstance(score, (int, float)) and isinstance(best, (int, float))
            and score >= best > 0):
        return ""
    lines = [l.removeprefix("Note: ") for l in str(result.get("output") or "").splitlines()
             if l.strip() and not l.startswith("Isolation:") and " hidden tests passed" not in l]
    lines += [str(t.get("output", "")) for t in result.get("tests", []) if t.get("status") != "passed"]
    return (lines[0] if lines else f"status {result.get('status', '?')}")[:300]


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
            cells.append(_points(entry.get("score")) if entry else "")
        message = _main_reason(result)
        writer.writerow([_cell(name), result.get("status", ""), _points(result.get("score", 0)),
                         _points(result.get("max_score", 0)), *cells, result.get("isolation", ""),
                         result.get("execution_time", ""), result.get("sha256", ""), _cell(message)])
    write_text(out_csv, buf.getvalue())
