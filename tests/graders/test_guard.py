"""The weakest fallback's guard of memory-backed files (``graders.sandbox.guard``): what a user
id keeps in the shared folders, counted as the grader counts it, and a run stopped and its files
removed past the budget (the whole story, in Gradescope's container, is
``test_gradescope_container.py``)."""
import os
import time

import pytest

from graders.sandbox import guard

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="files of another user id need root")

UID = 100_000 + os.getpid() % 1_000_000 + 7_000_000


def _file(path, size, uid=UID):
    with open(path, "wb") as f:
        f.write(b"x" * size)
    os.chown(path, uid, uid)


def test_what_a_user_keeps_counts_its_files_pages_and_entries_once(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o1777)
    shared.chmod(0o1777)
    _file(shared / "a", 1 << 20)
    os.link(shared / "a", shared / "a-again")               # one file, two names: counted once
    own = shared / "own"
    own.mkdir()
    os.chown(own, UID, UID)
    for k in range(10):                                       # empty files cost a page each
        _file(own / f"empty-{k}", 0)
    _file(shared / "someone-else", 1 << 20, uid=UID + 1)
    (tmp_path / "closed").mkdir(mode=0o755)                   # a folder the user cannot write: not read
    held = guard.files_held(UID, [str(shared), str(tmp_path / "closed")], 1 << 30)
    expected = (1 << 20) + 4096 + 10 * 4096                   # the file, its folder, ten empty files
    assert expected <= held < expected + (64 << 10), held     # (a file system may round a file up)
    assert guard.files_held(UID, [str(shared)], 4096) > 4096          # counting stops once past the limit


def test_past_its_budget_the_guard_kills_the_users_processes_and_removes_its_files(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    pid = os.fork()
    if pid == 0:                                 # a process of that user, holding on
        try:
            os.setgid(UID)
            os.setuid(UID)
            time.sleep(30)
        finally:
            os._exit(0)
    tripped = []
    try:
        with guard.Guard(UID, 2 << 20, lambda: tripped.append(True), extra=[str(shared)]) as watching:
            _file(shared / "small", 1 << 20)
            time.sleep(0.2)
            assert not tripped
            _file(shared / "big", 3 << 20)
            for _ in range(200):
                if tripped:
                    break
                time.sleep(0.02)
        assert tripped and watching.tripped > 2 << 20
        assert os.waitpid(pid, 0)[1] != 0                      # killed
        assert list(shared.iterdir()) == []
    finally:
        try:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
        except OSError:
            pass
