"""Work folders: a fresh temporary folder per job or run, named after the grader's process id, so
that those a grader killed mid-run left behind (hidden inputs in them) can be told apart and
removed by the next grader."""
from __future__ import annotations

import os
import re
import shutil
import tempfile
import threading
import time
from pathlib import Path

_STALE = re.compile(r"grader-(?:job|check|scratch|view)-(\d+)-")
STALE_AFTER = 600.0    # seconds: older than any run, in case another PID namespace shares /tmp
_swept: list[bool] = []
_lock = threading.Lock()


def work_folder(prefix: str) -> str:
    """A fresh temporary folder ``PREFIX<pid>-XXXX``; the first call of each process removes
    those of graders that are gone."""
    with _lock:
        if not _swept:
            _swept.append(True)
            remove_stale_folders(Path(tempfile.gettempdir()))
    return tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-")


def remove_stale_folders(tmp: Path) -> None:
    """Remove the work folders in ``tmp`` that this user made, that are older than
    ``STALE_AFTER``, and whose grader (the process id in their name) is gone."""
    try:
        entries = list(os.scandir(tmp))
    except OSError:
        return
    for entry in entries:
        match = _STALE.match(entry.name)
        if not match:
            continue
        try:
            info = entry.stat(follow_symlinks=False)
            if (info.st_uid != os.geteuid() or not entry.is_dir(follow_symlinks=False)
                    or time.time() - info.st_mtime < STALE_AFTER):
                continue
            os.kill(int(match.group(1)), 0)
        except ProcessLookupError:
            shutil.rmtree(entry.path, ignore_errors=True)
        except (OSError, ValueError):
            continue
