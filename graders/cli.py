"""``python -m graders``: grade one submission, a whole class, run the public checks; and (by
``coursetools``, the course's build tools) make a release and the Gradescope autograders.

    python -m graders grade SUBMISSION --exercise NAME [--json OUT]
    python -m graders batch DIR --exercise NAME --out gradebook.csv [--jobs N] [--scheduler ADDRESS
                            [--wait-for-workers S]]
    python -m graders check SUBMISSION [--exercise NAME]
    python -m graders release --out _build/release
    python -m graders autograder EXERCISE... --out DIR      (or --all)
    python -m graders list

Exit status: ``grade`` 0 whenever a result was produced, whatever the score (and the result is
written with ``--json`` even when the submission or the grader crashed); ``check`` 0 when every
public check passed, 1 otherwise; ``batch`` 0 when every submission has a result; 2 for a usage
error (argparse's convention), everywhere: a symbolic link, a file whose name and metadata name
different exercises when no ``--exercise`` is given, an unreachable Dask scheduler.
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

from . import batch, grading, registry, results
from .sandbox import (SUBMISSION_SECONDS, TEST_SECONDS, Limits, Sandbox, SandboxUnavailable,
                      bwrap_status)

USAGE_ERROR = 2


class _Parser(argparse.ArgumentParser):
    def error(self, message):   # argparse exits 2 too; this keeps the message short and clear
        self.print_usage(sys.stderr)
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        sys.exit(USAGE_ERROR)


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be positive: {text!r}")
    return value


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {text!r}")
    return value


def _memory(text: str) -> int:
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    t = text.strip().lower().rstrip("ib").rstrip("b") if text.strip().lower().endswith(("ib", "b")) else text.strip().lower()
    try:
        if t and t[-1] in units:
            return int(float(t[:-1]) * units[t[-1]])
        return int(t)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (say 2G, 512M or a number of bytes)") from None


def _add_limits(p: argparse.ArgumentParser) -> None:
    d = Limits()
    g = p.add_argument_group("limits")
    g.add_argument("--test-timeout", type=_positive_float, default=None, metavar="S",
                   help=f"wall-clock seconds per test (default {TEST_SECONDS:g}, or the exercise's own)")
    g.add_argument("--timeout", type=_positive_float, default=None, metavar="S",
                   help=f"wall-clock seconds per submission (default {SUBMISSION_SECONDS:g}, or the "
                        "exercise's own)")
    g.add_argument("--memory", type=_memory, default=d.memory_bytes, metavar="SIZE",
                   help="address-space limit of the submission (default 2G)")
    g.add_argument("--isolation", choices=("auto", "bwrap", "subprocess"), default="auto",
                   help="auto: bubblewrap when it works here, else the subprocess fallback")


def _limits(args) -> Limits:
    return Limits(memory_bytes=args.memory, test_seconds=args.test_timeout, submission_seconds=args.timeout,
                  import_seconds=10.0 if args.timeout is None else min(10.0, args.timeout))


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m graders", description="The course's autograder.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    g = sub.add_parser("grade", help="grade one submission (.ipynb or .py)")
    g.add_argument("submission", metavar="SUBMISSION",
                   help="the learner's notebook (.ipynb) or Python file (.py); a symbolic link is refused")
    g.add_argument("--exercise", metavar="NAME",
                   help="the exercise to grade it as (see 'list'); without it, the notebook's metadata or "
                        "the file name says, the choice is printed, and a file whose name and metadata "
                        "disagree is refused. Instructors: always pass it")
    g.add_argument("--json", metavar="OUT", help="write Gradescope's results.json format to OUT")
    g.add_argument("--show-output", action="store_true", help="also print what the submission printed")
    g.add_argument("--no-progress", action="store_true",
                   help="no progress line on stderr (it is shown only when stderr is a terminal)")
    _add_limits(g)
    g.add_argument("--sandboxes", type=_positive_int, default=None, metavar="N",
                   help="isolated sandboxes of the submission run at once (default: one per core, two "
                        "at most; always one in the fallback without namespaces or when not run as root)")
    g.add_argument("--cold", action="store_true",
                   help="start every run in a sandbox and an interpreter of its own, instead of forking "
                        "it from a warm sandbox that has loaded numpy (slower; to compare)")

    b = sub.add_parser("batch", help="grade every submission in a folder into a gradebook")
    b.add_argument("directory", metavar="DIR",
                   help="the class's folder: every file under it (sub-folders too) gets a row of the "
                        "gradebook; hidden files are skipped")
    b.add_argument("--exercise", metavar="NAME", required=True,
                   help="the exercise every submission is graded as (see 'list'), whatever its metadata says")
    b.add_argument("--out", metavar="CSV", required=True, help="the gradebook (one row per submission)")
    b.add_argument("--jobs", type=_positive_int, default=None, metavar="N",
                   help="submissions graded at once (default: the number of cores)")
    b.add_argument("--scheduler", metavar="ADDRESS", help="a Dask distributed scheduler (tcp://host:8786)")
    b.add_argument("--wait-for-workers", type=_positive_float, default=None, metavar="S",
                   help="with --scheduler: stop after S seconds with no Dask worker connected, keeping what "
                        "was graded (default: say so and keep waiting)")
    b.add_argument("--connect-timeout", type=_positive_float, default=30.0, metavar="S",
                   help="with --scheduler: seconds to reach the scheduler (default 30)")
    b.add_argument("--results", metavar="FOLDER", help="one JSON per submission (default: next to the CSV)")
    b.add_argument("--force", action="store_true", help="regrade submissions already graded")
    b.add_argument("--no-progress", action="store_true", help="no progress bar")
    _add_limits(b)

    c = sub.add_parser("check", help="run the public checks only")
    c.add_argument("submission", metavar="SUBMISSION",
                   help="the learner's notebook (.ipynb) or Python file (.py); a symbolic link is refused")
    c.add_argument("--exercise", metavar="NAME",
                   help="the exercise whose public checks to run (default: from the notebook's metadata or "
                        "the file name; refused when they disagree)")
    _add_limits(c)

    r = sub.add_parser("release", help="a learner's copy of the course (no solutions, no hidden tests)")
    r.add_argument("--out", metavar="DIR", default="_build/release",
                   help="the folder to write the learner's copy to (default _build/release)")
    r.add_argument("--root", metavar="DIR", default=None, help="the course checkout (default: this one)")

    a = sub.add_parser("autograder", help="a Gradescope autograder zip per exercise (DIR/EXERCISE.zip)")
    a.add_argument("exercises", metavar="EXERCISE", nargs="*", help="the exercises (see 'list')")
    a.add_argument("--all", action="store_true", help="every exercise the grader knows")
    a.add_argument("--out", metavar="DIR", required=True, help="the folder the zips are written to")

    sub.add_parser("list", help="the exercises the grader knows")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if getattr(args, "isolation", None) == "bwrap":
        usable, why = bwrap_status()
        if not usable:
            return _usage(f"--isolation bwrap: bubblewrap cannot be used here ({why})")
    if args.command == "batch" and not args.scheduler:   # no sandbox fit to grade in: refuse the class
        try:
            Sandbox(args.isolation)
        except SandboxUnavailable as err:
            return _usage(str(err))
    handler = {"grade": _grade, "batch": _batch, "check": _check, "release": _release, "list": _list,
               "autograder": _autograder}
    return handler[args.command](args)


def _usage(message: str) -> int:
    print(f"python -m graders: error: {results.one_line(message)}", file=sys.stderr)     # it may name a learner's file
    return USAGE_ERROR


def _grade(args) -> int:
    if args.exercise is not None and args.exercise not in registry.names():
        _write_usage_result(args, f"no exercise named {args.exercise!r}")
        return _usage(f"no exercise named {args.exercise!r}; the grader knows: {', '.join(registry.names())}")
    line = (ProgressLine(sys.stderr, _exercise_for_progress(args))
            if not args.no_progress and _is_terminal(sys.stderr) else None)
    try:
        limits = dataclasses.replace(_limits(args), sandboxes=args.sandboxes, warm=not args.cold)
        result = grading.grade_file(args.submission, args.exercise, limits=limits, isolation=args.isolation,
                            progress=line.update if line else None)
    except (grading.UsageError, SandboxUnavailable) as err:     # (bwrap asked for where it cannot run)
        if line:
            line.finish()
        _write_usage_result(args, str(err))
        return _usage(str(err))
    except Exception as err:  # noqa: BLE001 - the grader crashed before it had a result
        result = _crash_result(args, err)
    if line:
        line.finish()
    if result.get("exercise_inferred"):
        print(f"python -m graders: {results.one_line(result['exercise_inferred'])}; pass --exercise NAME to fix it",
              file=sys.stderr)
    if args.json:
        try:
            results.write_json(args.json, result)
        except OSError as err:
            _print_result(result, args)
            return _usage(f"cannot write {args.json}: {err.strerror}")
        except Exception as err:  # noqa: BLE001 - a result that cannot be written as JSON
            result = _crash_result(args, err)
            results.write_json(args.json, result)
    _print_result(result, args)
    return 0


def _is_terminal(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):        # no isatty, or a closed stream
        return False


def _exercise_for_progress(args) -> str:
    """The exercise the progress line names: given, or as the grading will choose it (any
    problem with the choice is the grading's to report, not this line's)."""
    if args.exercise is not None:
        return args.exercise
    try:
        return grading.resolve_exercise(grading.read_submission(args.submission), Path(args.submission).name, None)
    except Exception:  # noqa: BLE001 - the line then names no exercise
        return ""


class ProgressLine:
    """One line on the terminal (``stream``, stderr), rewritten as the hidden tests come back:
    "mutants: 12 of 54 hidden tests done (8 s)" (mutants runs a sandbox per builder, a minute of
    silence otherwise).  It is for the person at the terminal only: never in the result, the
    JSON or the feedback, and not shown when stderr is not a terminal or with --no-progress."""

    def __init__(self, stream, exercise: str = ""):
        self.stream, self.exercise = stream, exercise
        self.start = time.monotonic()
        self.width = 0                   # of the line shown, to blank what a shorter one leaves

    def text(self, done: int, total: int, seconds: float) -> str:
        who = f"{self.exercise}: " if self.exercise else ""
        return f"{who}{done} of {total} hidden tests done ({seconds:.0f} s)"

    def update(self, done: int, total: int) -> None:
        text = self.text(done, total, time.monotonic() - self.start)
        try:
            self.stream.write("\r" + text.ljust(self.width))
            self.stream.flush()
        except (OSError, ValueError):  # the terminal went away: grading goes on
            return
        self.width = max(self.width, len(text))

    def finish(self) -> None:
        """End the line (when one was shown), so that what is printed next starts on its own."""
        if self.width:
            try:
                self.stream.write("\n")
                self.stream.flush()
            except (OSError, ValueError):
                pass
            self.width = 0


def _crash_result(args, err: BaseException) -> dict:
    """A result for a grader that crashed outside the grading itself (``results.grader_failed``,
    as ``grade`` and ``batch`` give): every test of the exercise, when it can still be told, at 0."""
    name = args.exercise
    if name is None:
        try:
            name = grading.resolve_exercise(grading.read_submission(args.submission), Path(args.submission).name, None)
        except Exception:  # noqa: BLE001 - the exercise stays unknown; the result is still written
            name = None
    return results.grader_failed(name, f"{type(err).__name__}: {err}", submission=args.submission)


def _print_result(result: dict, args) -> None:
    try:
        text = results.format_text(result, show_output=args.show_output)
    except Exception as err:  # noqa: BLE001 - the text is a courtesy; the result is what counts
        text = (f"{result.get('exercise') or '?'}: {args.submission}\n  (the feedback could not be "
                f"printed: {type(err).__name__})\nScore: {result.get('score')} / {result.get('max_score')}")
    print(text)


def _write_usage_result(args, message: str) -> None:
    """Even a usage error leaves a result file behind when one was asked for."""
    if not getattr(args, "json", None):
        return
    try:
        result = results.make_result(exercise=args.exercise, tests=[], status="usage_error", isolation="none",
                                     execution_time=0.0, output=f"Not graded: {message}",
                                     submission=args.submission)
        results.write_json(args.json, result)
    except OSError:
        pass


def _batch(args) -> int:
    directory = Path(args.directory)
    if not directory.is_dir():
        return _usage(f"{directory} is not a folder")
    if args.exercise not in registry.names():
        return _usage(f"no exercise named {args.exercise!r}; the grader knows: {', '.join(registry.names())}")
    try:
        summary = batch.run_batch(directory, args.exercise, Path(args.out), jobs=args.jobs,
                            scheduler=args.scheduler, limits=_limits(args), isolation=args.isolation,
                            results_dir=Path(args.results) if args.results else None,
                            force=args.force, progress=not args.no_progress,
                            wait_for_workers=args.wait_for_workers, connect_timeout=args.connect_timeout)
    except KeyboardInterrupt:
        print("interrupted: what was graded is saved; run the same command again to resume", file=sys.stderr)
        return 130
    except (OSError, RuntimeError, ValueError) as err:
        where = f" (the Dask scheduler {args.scheduler} could not be reached)" if args.scheduler else ""
        return _usage(f"{err}{where}")
    return 0 if summary["missing_results"] == 0 else 1


def _check(args) -> int:
    # The public checks are the learner's, not the grader's: a Gradescope autograder (which never
    # runs ``check``) is built without them.
    from public_checks import HIDDEN_NOTE
    if args.exercise is not None and args.exercise not in registry.names():
        return _usage(f"no exercise named {args.exercise!r}; the grader knows: {', '.join(registry.names())}")
    try:
        report = grading.check_file(args.submission, args.exercise, limits=_limits(args), isolation=args.isolation)
    except (grading.UsageError, SandboxUnavailable) as err:
        return _usage(str(err))
    except Exception as err:  # noqa: BLE001 - never a traceback
        print(f"{args.submission}: the public checks could not run: the grader itself failed "
              f"({type(err).__name__}: {err})")
        return 1
    name = report["exercise"]
    print(f"{name}: public checks of {args.submission}")
    if report["problem"]:
        print(f"  {results.one_line(report['problem'])}")
        print(f"{name}: the public checks could not run.")
        return 1
    outcomes = report["outcomes"]
    for o in outcomes:
        mark = {"passed": "ok  ", "failed": "FAIL", "not implemented": "todo"}[o["status"]]
        line = f"[{mark}] {o['description']}" + (f": {o['message']}" if o["message"] else "")
        print("  " + results.one_line(line))
    passed = sum(o["status"] == "passed" for o in outcomes)
    print(f"{passed} of {len(outcomes)} public checks passed.")
    if outcomes and passed == len(outcomes):
        print(f"{name}: {HIDDEN_NOTE}.")
        return 0
    if outcomes and all(o["status"] == "not implemented" for o in outcomes):
        print(f"{name}: not implemented yet.")
    return 1


def _release(args) -> int:
    # The build tools are not the grader's: imported when asked for, so that a Gradescope
    # autograder (the grader without them) still starts.
    from coursetools.cli import release
    return release(args, prog="python -m graders")


def _autograder(args) -> int:
    from coursetools.cli import autograder        # as for _release
    return autograder(args, prog="python -m graders")


def _list(args) -> int:
    for name in registry.names():
        ex = registry.get(name)
        tests, items = registry.tests(name), registry.items(name)
        counted = f"{len(tests):2d} tests" if len(items) == len(tests) else f"{len(tests):2d} tests in {len(items)} parts"
        print(f"{name:22s} chapter {ex.chapter:2d}  {counted}, "
              f"{sum(i.points for i in items):g} points  ({', '.join(ex.functions)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
