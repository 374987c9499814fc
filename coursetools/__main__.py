"""``python -m coursetools ...``: see ``coursetools.cli``."""
import sys

from .cli import main

sys.exit(main())
