"""``python -m coursetools``: build what a class receives.

    python -m coursetools release [--out _build/release] [--root DIR]
    python -m coursetools autograder EXERCISE... --out DIR      (or --all)
    python -m coursetools lab [--out _build/lab]                 (the tree ``make lab`` opens)

``python -m graders release|autograder`` are the same commands.  Exit status: 0 when the product
was written, 2 when it cannot be (the reason is printed).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from course import catalogue

from .course_lab import make_lab_tree
from .gradescope import AutograderError, build_all
from .release import ReleaseError, make_release

__all__ = ["main", "add_release_arguments", "add_autograder_arguments", "release", "autograder", "lab"]

USAGE_ERROR = 2


def add_release_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", metavar="DIR", default="_build/release",
                        help="the folder to write the learner's copy to (default _build/release)")
    parser.add_argument("--root", metavar="DIR", default=None,
                        help="the course checkout to release (default: the one this package is in)")


def add_autograder_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("exercises", nargs="*", metavar="EXERCISE")
    parser.add_argument("--all", action="store_true", help="every exercise")
    parser.add_argument("--out", metavar="DIR", required=True, help="the folder to write the zips to")


PROG = "python -m coursetools"


def _usage(message: str, prog: str) -> int:
    print(f"{prog}: error: {message}", file=sys.stderr)
    return USAGE_ERROR


def release(args, prog: str = PROG) -> int:
    """Write the learner's copy; print the report."""
    try:
        report = make_release(Path(args.out), root=Path(args.root) if args.root else None)
    except ReleaseError as err:
        return _usage(str(err), prog)
    for line in report:
        print(line)
    return 0


def autograder(args, prog: str = PROG) -> int:
    """Write a Gradescope autograder zip per exercise; print the report."""
    names = list(catalogue.names()) if args.all else args.exercises
    if not names:
        return _usage("autograder: name at least one EXERCISE, or --all", prog)
    try:
        report = build_all(names, Path(args.out))
    except AutograderError as err:
        return _usage(str(err), prog)
    for line in report:
        print(line)
    return 0


def lab(args, prog: str = PROG) -> int:
    """Write the reading tree ``make lab`` opens (``course_lab``); print the report."""
    root = Path(args.root).resolve() if args.root else Path(__file__).resolve().parent.parent
    try:
        report = make_lab_tree(root, Path(args.out))
    except (OSError, ValueError) as err:
        return _usage(str(err), prog)
    for line in report:
        print(line)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=PROG, description="The course's build tools.")
    sub = parser.add_subparsers(dest="command", required=True)
    add_release_arguments(sub.add_parser("release", help="a learner's copy of the course"))
    add_autograder_arguments(sub.add_parser("autograder", help="a Gradescope autograder zip per exercise"))
    lab_parser = sub.add_parser("lab", help="the course as JupyterLab shows it to a reader (make lab)")
    lab_parser.add_argument("--out", metavar="DIR", default="_build/lab", help="the tree to write (default _build/lab)")
    lab_parser.add_argument("--root", metavar="DIR", default=None, help="the course checkout (default: this one)")
    args = parser.parse_args(argv)
    return {"release": release, "autograder": autograder, "lab": lab}[args.command](args)
