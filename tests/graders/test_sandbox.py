"""graders.sandbox: what a submission can see and do, asked from inside by probe functions.

A probe is a function ``probe()`` run by the real harness in the real sandbox; what it returns
comes back as data through the results channel.
"""
import json
import os
import sys
import socket
import tempfile
import textwrap
import threading
import time
from pathlib import Path

import pytest

from graders.harness import decode
from graders.sandbox import Limits, Sandbox

from grader_helpers import ROOT, needs_bwrap

LIMITS = Limits(test_seconds=5.0, submission_seconds=20.0, import_seconds=10.0)


def probe(source: str, isolation: str = "bwrap", limits: Limits = LIMITS, timeout: float = 5.0):
    """Run ``probe()`` from ``source`` in a sandbox; (value or error dict, Run)."""
    folder = Path(tempfile.mkdtemp(prefix="probe-"))
    try:
        (folder / "submission.py").write_text(textwrap.dedent(source))
        (folder / "spec.json").write_text(json.dumps({
            "limits": {"memory_bytes": limits.memory_bytes, "file_bytes": limits.tmpfs_bytes,
                       "processes": limits.processes, "open_files": limits.open_files, "cpu_seconds": 60},
            "import_timeout": limits.import_seconds,
            "cases": [{"id": "p", "timeout": timeout, "calls": [{"fn": "probe", "args": []}]}]}))
        folder.chmod(0o755)
        for p in folder.iterdir():
            p.chmod(0o644)
        run = Sandbox(isolation).run(folder, limits, {"p": timeout})
    finally:
        for p in folder.iterdir():
            p.unlink()
        folder.rmdir()
    result = run.transcript.results.get("p")
    if result is None or not result["calls"]:
        return None, run
    call = result["calls"][0]
    return (decode(call["value"]) if call.get("ok") else call["error"]), run


def _namespaces() -> bool:
    return Sandbox("subprocess").namespaces


# The sandboxes that show the submission a file system of their own: bubblewrap, and the fallback
# where unshare gives it namespaces (the job folder is at its own path there, the scratch folder
# in its private /tmp).
ISOLATED = [pytest.param("bwrap", marks=needs_bwrap),
            pytest.param("subprocess", marks=pytest.mark.skipif(not _namespaces(),
                                                                 reason="unshare cannot make namespaces here"))]
SCRATCH = {"bwrap": "/scratch", "subprocess": "/tmp/scratch"}


@pytest.mark.parametrize("isolation", ISOLATED)
def test_the_course_checkout_is_not_visible(isolation):
    value, run = probe(f"""
        import os
        def probe():
            root = {str(ROOT)!r}
            return {{"root": os.listdir(root) if os.path.isdir(root) else None,
                    "solutions": os.path.exists(os.path.join(root, "solutions")),
                    "graders": os.path.exists(os.path.join(root, "graders")),
                    "top": sorted(os.listdir("/")),
                    "home": sorted(os.listdir("/home")) if os.path.isdir("/home") else [],
                    "main": sorted(os.listdir("/work/main")) if os.path.isdir("/work/main") else None,
                    "sandbox": sorted(os.listdir("/sandbox")) if os.path.isdir("/sandbox") else None,
                    "compiled": sorted(os.listdir("/sandbox/__pycache__")) if os.path.isdir("/sandbox/__pycache__") else [],
                    "inputs": sorted(os.listdir(os.path.dirname(__file__)))}}
        """, isolation)
    assert run.isolation == isolation
    assert value["solutions"] is False and value["graders"] is False
    assert value["root"] in (None, [".venv"])        # at most the virtual environment's folder
    assert value["home"] == []
    # the course's main checkout, when it is not this one: invisible; when it is: its venv alone
    assert value["main"] in (None, [".venv"])
    assert value["inputs"] == ["spec.json", "submission.py"]     # inputs only: no expected values
    if isolation == "bwrap":
        assert "home" not in value["top"] and "scratch" in value["top"]
        # the two programs (and their compiled form, where the grader could write it), the inputs
        assert set(value["sandbox"]) - {"__pycache__"} == {"harness.py", "in", "supervisor.py"}
        assert {name.split(".")[0] for name in value["compiled"]} <= {"harness", "supervisor"}
    assert run.held["file_view"] is True


@pytest.mark.parametrize("isolation", ISOLATED)
def test_own_pid_namespace_own_user_and_no_capabilities(isolation):
    value, run = probe("""
        import os
        def probe():
            status = open("/proc/self/status").read()
            caps = [l.split()[1] for l in status.splitlines() if l.startswith(("CapEff", "CapPrm", "CapBnd"))]
            nnp = [l.split()[1] for l in status.splitlines() if l.startswith("NoNewPrivs")]
            return {"pid": os.getpid(), "ppid": os.getppid(), "uid": os.getuid(),
                    "procs": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()),
                    "caps": caps, "nnp": nnp, "env": sorted(os.environ)}
        """, isolation)
    assert value["ppid"] == 1 and value["pid"] == 2  # its parent: the supervisor, PID 1 of the namespace
    assert all(p <= 3 for p in value["procs"])     # nothing of the host is visible
    assert set(value["caps"]) == {"0000000000000000"} and value["nnp"] == ["1"]
    if os.geteuid() == 0:
        assert value["uid"] >= 100_000             # a user id of its own, not root
        assert run.held["own_user"] is True
    assert run.held["supervisor"] and run.held["pid_namespace"] and not run.held["subreaper"]
    assert "PATH" in value["env"] and not any(k.startswith(("SSH", "AWS", "GIT", "PYTEST")) for k in value["env"])


@pytest.mark.parametrize("isolation", ISOLATED)
def test_no_network_not_even_the_hosts_loopback(isolation):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(5)
    server.settimeout(0.2)
    port = server.getsockname()[1]
    accepted = []

    def accept():
        try:
            accepted.append(server.accept())
        except OSError:
            pass
    thread = threading.Thread(target=accept)
    thread.start()
    try:
        value, run = probe(f"""
            import socket
            def probe():
                out = {{}}
                for host in ("127.0.0.1", "10.0.0.1"):
                    try:
                        socket.create_connection((host, {port}), timeout=0.5).close()
                        out[host] = "connected"
                    except OSError as err:
                        out[host] = type(err).__name__
                return out
            """, isolation)
    finally:
        thread.join()
        server.close()
    assert value["127.0.0.1"] != "connected" and value["10.0.0.1"] != "connected"
    assert accepted == [] and run.held["no_network"] is True


@pytest.mark.parametrize("isolation", ISOLATED)
def test_private_tmp_and_read_only_everything_else(isolation):
    source = f"""
        import os, sys
        def probe():
            found = sorted(os.listdir("/tmp"))
            open("/tmp/left-behind", "w").write("x")
            open("left-in-scratch", "w").write("x")
            denied = []
            job = os.path.dirname(__file__)
            for path in ("/usr/bin/evil", job + "/spec.json", job + "/evil", os.path.join(sys.prefix, "evil"),
                         "/evil"):
                try:
                    open(path, "w").write("x")
                except OSError as err:
                    denied.append(path)
            return {{"found": found, "cwd": os.getcwd(), "denied": denied, "job": os.path.basename(job)}}
        """
    first, _ = probe(source, isolation)
    second, _ = probe(source, isolation)
    # /tmp is private and empty, apart from the mount points of the interpreter when the checkout
    # (and so its .venv) itself lives under /tmp (and, in the fallback, the scratch folder and the
    # job folder at its own path); nothing written in one sandbox survives it.
    interpreter_mounts = {Path(root).relative_to("/tmp").parts[0] for root in (sys.prefix, sys.base_prefix)
                          if Path(root).is_relative_to("/tmp")}
    if isolation == "subprocess":
        assert set(first["found"]) - interpreter_mounts == {"scratch", first["job"]}
    else:
        assert set(first["found"]) == interpreter_mounts
    assert "left-behind" not in second["found"]
    assert first["cwd"] == SCRATCH[isolation]
    assert len(first["denied"]) == 5
    assert not Path("/tmp/left-behind").exists() or Path("/tmp/left-behind").read_text() != "x"


@pytest.mark.parametrize("isolation", ISOLATED)
def test_resource_limits_apply_inside(isolation):
    value, _ = probe("""
        import resource
        def probe():
            try:
                big = bytearray(3 << 30)
                got = "allocated 3 GiB"
            except MemoryError:
                got = "MemoryError"
            return {"as": resource.getrlimit(resource.RLIMIT_AS)[0], "got": got,
                    "nproc": resource.getrlimit(resource.RLIMIT_NPROC)[0],
                    "fsize": resource.getrlimit(resource.RLIMIT_FSIZE)[0]}
        """, isolation, limits=Limits(memory_bytes=1 << 30, test_seconds=5, submission_seconds=20))
    assert value["as"] == 1 << 30 and value["got"] == "MemoryError"
    assert 0 < value["fsize"] <= 64 << 20
    if os.geteuid() == 0:
        assert value["nproc"] == 64


def test_the_fallback_says_exactly_what_held():
    sandbox = Sandbox("subprocess")
    assert sandbox.mode == "subprocess" and sandbox.description.startswith("subprocess fallback (")
    value, run = probe("""
        import os, resource
        def probe():
            return {"uid": os.getuid(), "as": resource.getrlimit(resource.RLIMIT_AS)[0], "sid": os.getsid(0) == os.getpid(),
                    "ppid": os.getppid()}
        """, isolation="subprocess", limits=Limits(memory_bytes=1 << 30))
    assert run.isolation == "subprocess" and value["as"] == 1 << 30
    assert run.held["supervisor"] is True and run.supervisor and run.ended["code"] == 0
    assert run.held == {**sandbox.planned(), "cgroup": run.cgroup}
    assert value["ppid"] == run.supervisor["pid"] == (1 if run.held["pid_namespace"] else value["ppid"])
    if sandbox.own_user:
        assert value["uid"] >= 100_000          # never root, never the grader's user
    elif not sandbox.namespaces:
        assert "could signal the grader" in sandbox.description


def test_the_fallback_kills_what_the_submission_started():
    marker = f"fallback-linger-{os.getpid()}"
    _, run = probe(f"""
        import os, subprocess, time
        def probe():
            subprocess.Popen(["sleep", "777"], start_new_session=True)
            if os.fork() == 0:
                os.setsid()
                os.execv("/bin/sh", ["sh", "-c", "exec -a {marker} sleep 778"])
            time.sleep(0.2)
            return 1
        """, isolation="subprocess")
    assert run.returncode == 0 or run.returncode is not None
    # The sweep (by the sandbox's own user id, or its session and an environment token)
    # catches children in new sessions too.
    if True:
        leftovers = [p for p in os.listdir("/proc") if p.isdigit() and _cmdline(p).startswith((marker, "sleep 777"))]
        assert leftovers == []


def _cmdline(pid: str) -> str:
    try:
        if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in "ZX":
            return ""           # killed, waiting to be reaped by init: gone
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def test_output_is_capped_and_the_run_ends():
    _, run = probe("""
        import sys
        def probe():
            for _ in range(200):
                sys.stdout.write("y" * 65536)
            return 1
        """, isolation="auto", limits=Limits(output_bytes=1000, test_seconds=5, submission_seconds=20))
    assert len(run.output) <= 1000 and run.output_dropped > 0


def test_explicit_bwrap_request_fails_clearly_when_impossible(monkeypatch):
    from graders.sandbox import probes
    monkeypatch.setattr(probes, "bwrap_status", lambda: (False, "bubblewrap (bwrap) is not installed"))
    with pytest.raises(RuntimeError, match="not installed"):
        Sandbox("bwrap")
    assert Sandbox("auto").mode == "subprocess"


def test_cgroups_left_by_a_killed_grader_are_removed():
    """A grader killed mid-run (SIGKILL) leaves its sandboxes' cgroups behind; the next grader
    removes those whose grader is gone, and only those."""
    import subprocess
    from graders.sandbox import cgroups
    base = cgroups.cgroup_base()
    if base is None:
        pytest.skip("the grader cannot make cgroups here")
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = base["memory"] / f"{cgroups._CGROUP_PREFIX}{dead.pid}-test"
    live = base["memory"] / f"{cgroups._CGROUP_PREFIX}{os.getpid()}-test"
    stale.mkdir()
    live.mkdir()
    old = time.time() - 3600
    for folder in (stale, live):
        os.utime(folder, (old, old))
    try:
        cgroups._cgroup_probe.clear()
        assert cgroups.cgroup_base() == base
        assert not stale.exists() and live.exists()
    finally:
        for folder in (stale, live):
            if folder.exists():
                folder.rmdir()


def test_work_folders_left_by_a_killed_grader_are_removed(tmp_path):
    """A grader killed mid-run (SIGKILL) left its job folder, hidden inputs and all, in /tmp for
    good; the next grader removes those of graders that are gone (and old), and only those."""
    import subprocess
    from graders.sandbox import folders
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = tmp_path / f"grader-job-{dead.pid}-abc"
    fresh = tmp_path / f"grader-job-{dead.pid}-new"          # a run elsewhere may be starting
    mine = tmp_path / f"grader-job-{os.getpid()}-xyz"
    other = tmp_path / "grader-job-1abc2de"                  # not named by the grader's scheme
    for folder in (stale, fresh, mine, other):
        folder.mkdir()
        (folder / "spec.json").write_text("{}")
    old = time.time() - 3600
    for folder in (stale, mine, other):
        os.utime(folder, (old, old))
    folders.remove_stale_folders(tmp_path)
    assert not stale.exists()
    assert fresh.exists() and mine.exists() and other.exists()
