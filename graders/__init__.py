"""The course's autograder: ``python -m graders grade|batch|check|release``.

Read top to bottom, one module per concept:

- ``notebook``: reading a submission defensively (the answer's definitions, nothing else);
- ``registry`` and ``exercises/``: every exercise's hidden tests, with the grader's own references;
- ``harness``: the small program that runs inside the sandbox, and the data codec;
- ``supervisor``: the process between the grader and the harness, which holds and ends every
  process the submission starts;
- ``sandbox``: a package: the isolation modes (bubblewrap, the fallback), the seccomp filter,
  cgroups, limits, and watching from outside;
- ``transcript``: the untrusted results channel, read once;
- ``checks``: comparisons with messages that never reveal hidden inputs or expected values;
- ``grading``: one submission, start to end;
- ``results``: Gradescope's results.json, atomic writes, the text report;
- ``batch``: a class in parallel (threads or Dask), resumable, into a CSV gradebook;
- ``release``: the learner's copy of the course;
- ``cli``: the command line.

The grader is never shipped to learners (``make release`` leaves it out).
"""
from .grading import UsageError, check_file, grade_bytes, grade_file
from .sandbox import Limits

__all__ = ["grade_file", "grade_bytes", "check_file", "Limits", "UsageError"]
