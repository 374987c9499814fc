"""``python -m graders ...``: see ``graders.cli``."""
import os
import sys

from .cli import main

try:
    code = main()
    sys.stdout.flush()
except BrokenPipeError:
    # The reader went away (``... | head``): what was asked for is written; say nothing more, and
    # let no traceback out.  (Python's own recipe: point stdout at /dev/null before exiting.)
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    code = 0 if len(sys.argv) > 1 and sys.argv[1] == "grade" else 1
sys.exit(code)
