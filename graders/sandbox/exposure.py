"""What the weakest fallback's submission must not read, and a real check that it cannot.

The fallback without namespaces (``modes.Subreaper``) shows the submission the machine's files
as its user sees them: a user id of its own, i.e. any other user.  On an ordinary checkout
(umask 022) that includes the course's answers and the grader's references, which compute the
expected answers.  The folders kept from it (``guarded_folders``):

- the checkout's ``solutions/`` (every answer);
- ``graders/``, the whole package folder of the running grader (the hidden tests' references);
- the ``ga2`` package folder the grader would import (``quant.py``, ``attn.py``, ``mutants.py``,
  ``rtl/``), wherever it is installed;
- the checkout's engine and lessons (``kvcache/``, ``lessons/``): they implement the functions
  the early exercises grade (``lessons.attention.softmax``, ``kvcache.paged.BlockAllocator``);
- in a Gradescope package (``exercise.json`` beside ``graders/``), its whole source folder.

``readable_to(uid, folders)`` asks the kernel rather than the mode bits (ACLs and group
membership exist): a child interpreter that drops to ``uid`` as the supervisor does (no
supplementary groups, real, effective and saved ids all ``uid``) tries ``os.listdir`` on every
folder and ``os.open`` on every file below each guarded folder (the grader lists them: a folder
open to traversal but not to listing still gives away the files whose names are known).

``close_to_others(folder, keep)`` is the Gradescope package's remedy: ``o-rwx`` on ``folder``,
or, where a path the sandbox needs lies inside it (the interpreter, its packages), on every
entry beside that path, the folders on the way left open to traversal only.
"""
from __future__ import annotations

import importlib.util
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

from .commands import GRADERS
from .interpreter import environment

MAX_PATHS = 20_000          # per guarded folder: every file of a course is far fewer
CHECK_SECONDS = 30

# Run as the sandbox's user: which of the paths it can open.  Its input on stdin is
# [[folder, [paths...]], ...]; it prints, per folder, the first path that opened (or null).
CHILD = r"""
import json, os, sys
found = []
for folder, paths in json.load(sys.stdin):
    hit = None
    for path in [folder] + paths:
        try:
            if os.path.isdir(path):
                os.listdir(path)
            else:
                os.close(os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW))
            hit = path
            break
        except OSError:
            continue
    found.append(hit)
print(json.dumps(found))
"""


def gradescope_source() -> Path | None:
    """The Gradescope package's source folder when the running grader is one (its
    ``exercise.json`` beside ``graders/``), else None."""
    source = GRADERS.parent
    return source if (source / "exercise.json").is_file() else None


def _ga2_folder() -> Path | None:
    """The ``ga2`` package folder the grader would import, found without importing it."""
    try:
        spec = importlib.util.find_spec("ga2")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0]).resolve()


def guarded_folders() -> list[Path]:
    """The folders the submission's user must not read (see the module's docstring), those that
    exist, outermost only."""
    candidates = [GRADERS.parent / "solutions", GRADERS, _ga2_folder(), gradescope_source(),
                  GRADERS.parent / "kvcache", GRADERS.parent / "lessons"]
    folders: list[Path] = []
    for folder in candidates:
        if folder is None or not folder.is_dir():
            continue
        folder = folder.resolve()
        if any(folder == f or f in folder.parents for f in folders):
            continue
        folders = [f for f in folders if folder not in f.parents] + [folder]
    return folders


def _paths_below(folder: Path) -> list[str]:
    """Every folder and regular file below ``folder`` (links not followed), at most MAX_PATHS."""
    out: list[str] = []
    for top, dirs, files in os.walk(folder):
        for name in dirs + files:
            path = os.path.join(top, name)
            try:
                mode = os.lstat(path).st_mode
            except OSError:
                continue
            if stat.S_ISDIR(mode) or stat.S_ISREG(mode):
                out.append(path)
            if len(out) >= MAX_PATHS:
                return out
    return out


def readable_to(uid: int, folders: list[Path]) -> dict[str, str | None]:
    """For each of ``folders``: the first path in it that user ``uid`` (no groups) could open or
    list, or None where nothing could be.  Raises OSError when the check itself cannot run."""
    plan = [[str(folder), _paths_below(folder)] for folder in folders]
    proc = subprocess.run([sys.executable, "-I", "-S", "-B", "-c", CHILD], input=json.dumps(plan).encode(),
                          capture_output=True, timeout=CHECK_SECONDS, env=environment("/"), cwd="/",
                          user=uid, group=uid, extra_groups=[])
    if proc.returncode != 0:
        raise OSError(f"the check as user {uid} failed: "
                      f"{proc.stderr.decode(errors='replace').strip()[-300:] or proc.returncode}")
    found = json.loads(proc.stdout)
    return {str(folder): hit for folder, hit in zip(folders, found)}


def close_to_others(folder: Path, keep: list[str]) -> list[str]:
    """Make ``folder`` unreadable to other users (``o-rwx``), except the paths of ``keep`` inside
    it and the folders on their way (left open to traversal, ``o=x``); returns what was closed."""
    folder = Path(folder).resolve()
    kept = [Path(os.path.realpath(k)) for k in keep]
    inside = [k for k in kept if k == folder or folder in k.parents]
    if any(k == folder for k in inside):
        return []
    mode = stat.S_IMODE(os.lstat(folder).st_mode)
    if not inside:
        os.chmod(folder, mode & ~0o007)
        return [str(folder)]
    os.chmod(folder, (mode & ~0o007) | 0o001)
    closed = []
    for entry in sorted(os.scandir(folder), key=lambda e: e.name):
        path = Path(entry.path)
        if entry.is_symlink():
            continue
        if any(k == path or path in k.parents for k in inside):
            if entry.is_dir(follow_symlinks=False):
                closed += close_to_others(path, keep)
            continue
        os.chmod(path, stat.S_IMODE(entry.stat(follow_symlinks=False).st_mode) & ~0o007)
        closed.append(str(path))
    return closed
