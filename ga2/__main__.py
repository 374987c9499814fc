"""``python -m ga2``: the published chapter's tables, from the model (see ``ga2.report``)."""
import sys

from .report import main

sys.exit(main())
