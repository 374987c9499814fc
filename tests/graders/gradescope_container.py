"""Gradescope's container, simulated on this machine, and ``run_autograder`` run in it as
Gradescope runs it (imported by ``test_gradescope_container.py``).

Gradescope runs ``/autograder/run_autograder`` as root in a Docker container.  What the grader
finds there, and how this module makes each of it:

- its own mount and PID namespaces: ``unshare --mount --pid --fork --mount-proc``; the
  simulation's first process is PID 1 of that namespace and outlives ``run_autograder``, so that
  it can look for what a run left behind before the namespace (and everything in it) ends;
- a memory limit it cannot see: a memory cgroup made here (v1 or v2, ``CONTAINER_BYTES``) that
  the simulation joins before anything starts, then ``/sys/fs/cgroup`` unmounted in its mount
  namespace (no cgroup in ``/proc/self/mountinfo``: the grader can make none);
- one tmpfs holding ``/tmp`` and the autograder's folder (``/tmp/autograder``), and Docker's
  ``/dev/shm``, a tmpfs of 64 MiB;
- Docker's default capabilities and no others (``DOCKER_CAPS``): ``capsh --drop`` of every other
  one from the bounding set, so that ``run_autograder``, root, has only those (no
  ``CAP_SYS_ADMIN``: bubblewrap and ``unshare`` fail; no ``CAP_SYS_RESOURCE``: nothing can lower
  an OOM score below 0; no ``CAP_SYS_PTRACE``);
- bubblewrap off the ``PATH`` (``bwrap="absent"``) or on it and failing (``bwrap="failing"``:
  Debian's, which cannot make namespaces without ``CAP_SYS_ADMIN``); util-linux on it, failing
  likewise, as Gradescope's image has it (the autograder's ``setup.sh`` installs both);
- the interpreter open to every user (on this machine it lives under ``/root``, mode 0700: the
  folders on its way are covered with searchable ones holding their entries), and any ``ga2``
  this interpreter would import from the course checkout closed to them (the package closes its
  own source folder).

``simulate(zip, files, ...)`` returns what the simulation saw: ``results`` (results.json),
``results_owner``, ``results_mode`` (the folder's), ``results_folder`` (its entries), ``log``
(run_autograder's output), ``left_processes`` and ``left_files`` (of any sandbox user id, after
run_autograder), ``oom_kills`` (in the container's cgroup), ``seconds`` (run_autograder's wall
time), ``killed_grader`` (whether the simulation killed the grader, as an OOM killer would).
"""
from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

CONTAINER_BYTES = 512 << 20
FIRST_SANDBOX_UID = 100_000          # graders.sandbox.probes.FIRST_UID: every sandbox user is above
DOCKER_CAPS = {"chown", "dac_override", "fowner", "fsetid", "kill", "setgid", "setuid", "setpcap",
               "net_bind_service", "net_raw", "sys_chroot", "mknod", "audit_write", "setfcap"}
CAP_NAMES = ["chown", "dac_override", "dac_read_search", "fowner", "fsetid", "kill", "setgid", "setuid",
             "setpcap", "linux_immutable", "net_bind_service", "net_broadcast", "net_admin", "net_raw",
             "ipc_lock", "ipc_owner", "sys_module", "sys_rawio", "sys_chroot", "sys_ptrace", "sys_pacct",
             "sys_admin", "sys_boot", "sys_nice", "sys_resource", "sys_time", "sys_tty_config", "mknod",
             "lease", "audit_write", "audit_control", "setfcap", "mac_override", "mac_admin", "syslog",
             "wake_alarm", "block_suspend", "audit_read", "perfmon", "bpf", "checkpoint_restore"]
#: What run_autograder calls itself; the grader looks for bwrap, unshare and setpriv.
TOOLS = ("bash", "rm", "mkdir", "unshare", "setpriv")


def tool(name: str) -> str | None:
    """Where ``name`` is: on the PATH, or in the system's sbin folders (capsh lives there)."""
    return shutil.which(name) or next((f"{d}/{name}" for d in ("/usr/sbin", "/sbin") if os.path.exists(f"{d}/{name}")),
                                      None)


def missing_requirements() -> str | None:
    """Why the simulation cannot run here, or None."""
    if os.geteuid() != 0:
        return "needs root (mount and PID namespaces, a memory cgroup)"
    for name in ("unshare", "capsh", "bwrap", "setpriv"):
        if not tool(name):
            return f"needs {name} (make system-deps)"
    if _memory_cgroup_base() is None:
        return "needs a memory cgroup this user can make (cgroup v1's memory hierarchy, or v2 delegating memory)"
    return None


# ------------------------------------------------------------------------------ the cgroup


def _memory_cgroup_base() -> tuple[Path, int] | None:
    """(this process's memory cgroup folder, cgroup version) where a child can be made."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        number, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            base = Path("/sys/fs/cgroup/memory") / path.lstrip("/")
            if (base / "memory.limit_in_bytes").exists() and os.access(base, os.W_OK):
                return base, 1
    for line in lines:
        number, controllers, path = line.split(":", 2)
        if number == "0" and controllers == "":
            for mount in (Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/unified")):
                base = mount / path.lstrip("/")
                control = base / "cgroup.subtree_control"
                try:
                    if "memory" not in control.read_text().split():
                        control.write_text("+memory")
                    if os.access(base, os.W_OK):
                        return base, 2
                except OSError:
                    continue
    return None


class Container:
    """The container's memory cgroup: ``CONTAINER_BYTES``, no swap."""

    def __init__(self, limit: int = CONTAINER_BYTES):
        base, self.version = _memory_cgroup_base()
        self.path = Path(tempfile.mkdtemp(prefix="kvsim-gradescope-", dir=base))
        if self.version == 1:
            (self.path / "memory.limit_in_bytes").write_text(str(limit))
            try:
                (self.path / "memory.memsw.limit_in_bytes").write_text(str(limit))
            except OSError:
                pass
        else:
            (self.path / "memory.max").write_text(str(limit))
            try:
                (self.path / "memory.swap.max").write_text("0")
            except OSError:
                pass

    @property
    def procs(self) -> Path:
        return self.path / "cgroup.procs"

    def oom_kills(self) -> int:
        name = "memory.oom_control" if self.version == 1 else "memory.events"
        for line in (self.path / name).read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
        return 0

    def remove(self) -> None:
        for _ in range(200):
            pids = [int(p) for p in self.procs.read_text().split()]
            for pid in pids:
                try:
                    os.kill(pid, 9)
                except OSError:
                    pass
            try:
                self.path.rmdir()
                return
            except OSError:
                time.sleep(0.02)


# ------------------------------------------------------------------------------ the inside

# PID 1 of the container: lays the container out, runs run_autograder as Gradescope does (root,
# Docker's capabilities), then reports what is left.  argv: the plan as JSON.
INSIDE = r"""
import base64, json, os, shutil, signal, stat, subprocess, sys, time, zipfile
from graders.sandbox.supervisor import MS_BIND, MS_PRIVATE, MS_REC, _libc, _mount
plan = json.loads(sys.argv[1])
package = open(plan["zip"], "rb").read()            # before /tmp is covered
ctypes, libc = _libc()
_mount(libc, ctypes, None, "/", None, MS_REC | MS_PRIVATE)
if libc.umount2(b"/sys/fs/cgroup", 2) != 0:         # MNT_DETACH: no cgroup in view at all
    raise OSError(ctypes.get_errno(), "umount /sys/fs/cgroup")

def cover(folder, mode):
    # a tmpfs of that mode over the folder, its entries bound back
    entries = {}
    for name in os.listdir(folder):
        path = os.path.join(folder, name)
        info = os.lstat(path)
        if stat.S_ISLNK(info.st_mode):
            entries[name] = ("link", os.readlink(path))
        elif stat.S_ISDIR(info.st_mode) or stat.S_ISREG(info.st_mode):
            entries[name] = ("dir" if stat.S_ISDIR(info.st_mode) else "file", os.open(path, os.O_PATH))
    _mount(libc, ctypes, "tmpfs", folder, "tmpfs", 0, f"mode={mode}")
    for name, (kind, what) in entries.items():
        path = os.path.join(folder, name)
        if kind == "link":
            os.symlink(what, path)
            continue
        os.mkdir(path) if kind == "dir" else open(path, "w").close()
        _mount(libc, ctypes, f"/proc/self/fd/{what}", path, None, MS_BIND | MS_REC)

for target in sorted({os.path.realpath(p) for p in (sys.base_prefix, sys.prefix, plan["python"])}):
    parts = target.split("/")
    for k in range(2, len(parts) + 1):
        folder = "/".join(parts[:k])
        if os.path.isdir(folder) and not os.stat(folder).st_mode & 0o001:
            cover(folder, "0755")
for folder in plan["close"]:
    cover(folder, "0700")
# Gradescope's Python lives outside /tmp (setup.sh installs it); a checkout whose venv lies under
# /tmp (a CI clone) has its venv held open and bound back over the fresh /tmp, at the same path
held = [(p, os.open(p, os.O_PATH)) for p in sorted({os.path.realpath(sys.prefix)}) if p.startswith("/tmp/")]
_mount(libc, ctypes, "tmpfs", "/tmp", "tmpfs", 0, "mode=1777")
for path, fd in held:
    os.makedirs(path, mode=0o755)
    _mount(libc, ctypes, f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC)
_mount(libc, ctypes, "tmpfs", "/dev/shm", "tmpfs", 0, "mode=1777,size=64m")
root = "/tmp/autograder"
import io
with zipfile.ZipFile(io.BytesIO(package)) as archive:
    archive.extractall(root + "/source")
for folder, dirs, files in os.walk(root):           # as unzipped with umask 022
    os.chmod(folder, 0o755)
    for name in files:
        os.chmod(os.path.join(folder, name), 0o644)
shutil.copy(root + "/source/run_autograder", root + "/run_autograder")
os.chmod(root + "/run_autograder", 0o755)
os.makedirs(root + "/submission")
for name, data in plan["files"].items():
    path = os.path.join(root, "submission", name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(base64.b64decode(data))
for name, target in plan["links"].items():
    os.symlink(target, os.path.join(root, "submission", name))
os.makedirs(root + "/results", mode=0o777)
os.chmod(root + "/results", 0o1777)                 # as open as Gradescope's might be
tools = "/tmp/tools"
os.makedirs(tools)
for tool, path in plan["tools"].items():
    os.symlink(path, os.path.join(tools, tool))
env = {"PATH": tools, "HOME": "/root", "LANG": "C.UTF-8", "AUTOGRADER_ROOT": root,
       "AUTOGRADER_PYTHON": plan["python"]}
started = time.monotonic()
proc = subprocess.Popen([plan["capsh"], "--drop=" + ",".join(plan["drop"]), "--", "-c", 'exec "$@"',
                         "run_autograder", root + "/run_autograder"],
                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, cwd="/tmp")
killed = False

def grader():
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmd = open(f"/proc/{entry}/cmdline", "rb").read().split(b"\0")
            except OSError:
                continue
            if b"graders.autograder" in cmd and b"--finish" not in cmd:
                return int(entry)
    return None

if plan["kill_on"]:             # the grader killed as an OOM killer would, once the run says when
    while proc.poll() is None and not killed:
        if os.path.exists(plan["kill_on"]):
            pid = grader()
            if pid:
                os.kill(pid, signal.SIGKILL)
                killed = True
        time.sleep(0.005)
log = proc.communicate()[0].decode("utf-8", "replace")
seconds = time.monotonic() - started
time.sleep(0.2)                 # what the run left has had time to show itself
left = []
for entry in os.listdir("/proc"):
    if entry.isdigit():
        try:
            status = open(f"/proc/{entry}/status").read()
            uid = int(next(l for l in status.splitlines() if l.startswith("Uid:")).split()[1])
            state = next(l for l in status.splitlines() if l.startswith("State:")).split()[1]
        except (OSError, StopIteration, ValueError):
            continue
        if uid >= plan["first_uid"] and state not in "ZX":
            left.append(f"{entry} uid {uid}: " + open(f"/proc/{entry}/cmdline", "rb").read().replace(b"\0", b" ").decode("utf-8", "replace"))
files = []
for top in ("/tmp", "/dev/shm"):
    for folder, dirs, names in os.walk(top):
        for name in dirs + names:
            path = os.path.join(folder, name)
            try:
                if os.lstat(path).st_uid >= plan["first_uid"]:
                    files.append(path)
            except OSError:
                pass
result_path = root + "/results/results.json"
report = {"log": log, "seconds": seconds, "killed_grader": killed, "left_processes": left, "left_files": files,
          "results_folder": sorted(os.listdir(root + "/results")),
          "results_mode": stat.S_IMODE(os.stat(root + "/results").st_mode)}
try:
    info = os.lstat(result_path)
    report["results_owner"] = info.st_uid
    report["results"] = json.loads(open(result_path, encoding="utf-8").read())
except (OSError, ValueError) as err:
    report["results"], report["results_owner"] = None, None
print("\n" + json.dumps(report))
"""


def _close_up(python: str) -> list[str]:
    """The ``ga2`` this interpreter imports from outside the package (an editable install of the
    course checkout): closed to other users inside the container, as a course would keep it."""
    proc = subprocess.run([python, "-I", "-c", "import importlib.util as u; s = u.find_spec('ga2'); "
                           "print(list(s.submodule_search_locations)[0] if s else '')"],
                          capture_output=True, text=True, cwd="/", timeout=60)
    found = proc.stdout.strip()
    return [os.path.realpath(found)] if found else []


def simulate(package: Path, files: dict[str, bytes], *, bwrap: str, links: dict[str, str] | None = None,
             kill_on: str | None = None, python: str, pythonpath: str, limit: int = CONTAINER_BYTES) -> dict:
    """Run ``package``'s run_autograder in a simulated Gradescope container on a submission
    (``files``: name -> bytes; ``links``: name -> target), with bubblewrap ``"absent"`` or
    ``"failing"``; ``kill_on``: a path whose appearance makes the simulation kill the grader."""
    assert bwrap in ("absent", "failing")
    tools = {name: shutil.which(name) for name in TOOLS}
    if bwrap == "failing":
        tools["bwrap"] = shutil.which("bwrap")
    last = int(Path("/proc/sys/kernel/cap_last_cap").read_text())
    plan = {"zip": str(package), "python": python, "close": _close_up(python), "tools": tools,
            "files": {name: base64.b64encode(data).decode() for name, data in files.items()},
            "links": links or {}, "kill_on": kill_on, "first_uid": FIRST_SANDBOX_UID,
            "capsh": tool("capsh"),
            "drop": [f"cap_{name}" for name in CAP_NAMES[:last + 1] if name not in DOCKER_CAPS]}
    container = Container(limit)
    try:
        cmd = ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', str(container.procs),
               shutil.which("unshare"), "--mount", "--pid", "--fork", "--mount-proc", "--",
               python, "-c", INSIDE, json.dumps(plan)]
        proc = subprocess.run(cmd, capture_output=True, timeout=600, cwd="/",
                              env={"PATH": "/usr/bin:/bin", "PYTHONPATH": pythonpath, "LANG": "C.UTF-8"})
        out = proc.stdout.decode("utf-8", "replace")
        assert proc.returncode == 0 and out.strip(), (proc.returncode, out[-3000:],
                                                      proc.stderr.decode("utf-8", "replace")[-3000:])
        report = json.loads(out.strip().splitlines()[-1])
        report["oom_kills"] = container.oom_kills()
        return report
    finally:
        container.remove()
