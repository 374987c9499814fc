"""The learner's copy and its venv, made once per session for the tests that use it as a learner
does (``test_learner_copy.py``, and in JupyterLab ``test_learner_copy_lab.py``)."""
from __future__ import annotations

import os
import re
import shutil
import subprocess

from pathlib import Path

import pytest

from coursetools.release import make_release

ROOT = Path(__file__).resolve().parents[2]



def _readme_commands(readme: str) -> list[str]:
    """The shell lines of the README's set-up block, but the one that opens JupyterLab."""
    block = re.search(r"```sh\n(.*?)```", readme, re.S)
    assert block, "the copy's README has no set-up commands"
    return [line for line in block.group(1).splitlines() if line.strip() and "jupyter lab" not in line]


@pytest.fixture(scope="session")
def learner_copy(tmp_path_factory):
    """(the copy, its venv's python): made once per session."""
    out = tmp_path_factory.mktemp("learner") / "course"
    make_release(out, root=ROOT)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    for command in _readme_commands((out / "README.md").read_text()):
        proc = subprocess.run(["sh", "-c", command], cwd=out, env=env, capture_output=True, text=True,
                              timeout=1800)
        assert proc.returncode == 0, f"{command}: {proc.stderr[-3000:]}"
    python = out / ".venv" / "bin" / "python"
    assert python.exists()
    shutil.copytree(out / "exercises", out.parent / "exercises-as-handed-out")
    return out, python
