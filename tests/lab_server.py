"""A JupyterLab server for the tests that drive one in Chromium (the site's widgets in the lab,
the learner's copy in its own lab): headless, no token, a free loopback port, its settings,
workspaces and runtime files in a temporary folder, news and update checks off."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import pytest

#: Settings every test's lab has: no news fetched, no update check (no request leaves the machine).
QUIET = {"apputils-extension/notification": {"fetchNews": "false", "checkForUpdates": False}}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _write_settings(folder: Path, settings: dict[str, dict]) -> None:
    """``settings``: {"extension/plugin": its settings}, written as JupyterLab's user settings."""
    for plugin, values in settings.items():
        path = folder / "@jupyterlab" / f"{plugin}.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values))


def _wait_until_up(proc, base: str, log: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        if proc.poll() is not None:
            pytest.fail(f"JupyterLab exited with {proc.returncode}:\n{log.read_text()[-3000:]}", pytrace=False)
        try:
            urllib.request.urlopen(base + "api/status", timeout=2)
            return
        except OSError:
            if time.monotonic() > deadline:
                pytest.fail(f"JupyterLab did not answer in {timeout_s} s:\n{log.read_text()[-3000:]}", pytrace=False)
            time.sleep(0.3)


@contextmanager
def jupyterlab(python, root: Path, tmp_path: Path, env: dict[str, str], timeout_s: float,
               settings: dict[str, dict] = QUIET, args=()):
    """(base URL, log path) of JupyterLab run by ``python`` on the folder ``root``, with the
    environment ``env`` (its own folders under ``tmp_path`` added), the user ``settings`` and the
    further command-line ``args``;
    the test fails, with the end of the log, when it exits or does not answer in ``timeout_s``.
    Stopped afterwards."""
    _write_settings(tmp_path / "settings", settings)
    env = dict(env, JUPYTER_CONFIG_DIR=str(tmp_path / "config"), JUPYTERLAB_SETTINGS_DIR=str(tmp_path / "settings"),
               JUPYTERLAB_WORKSPACES_DIR=str(tmp_path / "workspaces"), JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"),
               IPYTHONDIR=str(tmp_path / "ipython"))
    port = free_port()
    command = [str(python), "-m", "jupyterlab", "--no-browser", "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}",
               "--ServerApp.port_retries=0", "--ServerApp.token=", "--ServerApp.password=",
               f"--ServerApp.root_dir={root}", "--LabApp.expose_app_in_browser=True", *args]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        command.append("--allow-root")
    log = tmp_path / "jupyterlab.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(command, env=env, cwd=root, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}/"
    try:
        _wait_until_up(proc, base, log, timeout_s)
        yield base, log
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
