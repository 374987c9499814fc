"""Running a submission in a throw-away sandbox, and watching it from outside.

Whatever the isolation, the grader is never the submission's parent: it starts the supervisor
(``supervisor.py``), which forks the harness, which loads the submission.  The supervisor holds
every process the submission starts below itself, and kills them all when the harness ends (see
its docstring); the grader writes a result whatever happens to the processes below it.

With bubblewrap (``bwrap``, Debian's ``bubblewrap``) the submission gets:

- its own PID, network, IPC and UTS namespaces: no network at all (not even the host's
  loopback), no view of any process outside (``/proc`` is its own); the supervisor is the
  namespace's PID 1 (``--as-pid-1``), which nothing inside can kill, and when it exits the kernel
  kills every process of the namespace;
- a file system made of read-only binds of ``/usr`` (with ``/bin``, ``/lib``...), a few
  ``/etc/ld.so*`` files, the Python installation and the virtual environment's packages, the job
  folder (``/sandbox/in``: the extracted source and the inputs), the supervisor and the harness:
  the course checkout, ``solutions/``, ``graders/`` and the rest of the machine are not there;
- a private ``/tmp`` and a ``/scratch`` working folder, both size-capped tmpfs, as the only
  writable places; nothing it writes outlives it;
- when the grader runs as root, a user id of its own (a random one, never a real user) with no
  capabilities and ``no_new_privs``: it cannot signal the grader, and the process limit
  (``RLIMIT_NPROC``) counts only its own processes;
- resource limits set before its code runs: address space (2 GiB by default), CPU time, file
  size, open files, processes; and a clean environment.

Without bubblewrap (``isolation="subprocess"``, or ``auto`` where it cannot run) the fallback
uses what the kernel gives the grader's user:

- with util-linux's ``unshare`` (and, for a user other than root, user namespaces): the same PID,
  network, IPC, UTS and mount namespaces, the supervisor as PID 1, and a file system like
  bubblewrap's, made by the supervisor in its mount namespace (``supervisor.build_view``);
- without them, the supervisor is a child subreaper (``PR_SET_CHILD_SUBREAPER``): orphans come
  back to it, even from a new session, and it kills them; as a last resort the grader also sweeps
  by user id, session and an environment token.  Here the submission shares the machine's file
  system and network, and, unless it has a user id of its own, could signal the grader.

In both, when the grader is root, the submission runs as a user id of its own, and where the
machine lets the grader make a cgroup, all its processes share one memory limit and one process
count, and whatever is left in the cgroup is killed at the end.  ``Run.held`` says which of these
held in a run, and ``describe`` turns that into the results' ``isolation_detail``.

The grader watches from outside: a wall-clock limit for start-up and import, one for each test
(the harness's ``start`` messages, through ``Transcript``) and one for the whole submission;
output to stdout/stderr is drained and capped; the results channel is capped too.  Results never
come from stdout: only JSON lines on the channel are read, and they are only data to compare.
"""
from __future__ import annotations

import json
import os
import re
import secrets
import selectors
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from . import supervisor as _supervisor
from .transcript import MAX_LINE, Transcript

__all__ = ["Limits", "Run", "Sandbox", "SandboxUnavailable", "HARNESS", "SUPERVISOR", "bwrap_status",
           "namespaces_status", "kill_all", "describe"]

HERE = Path(__file__).resolve().parent
HARNESS = HERE / "harness.py"
SUPERVISOR = HERE / "supervisor.py"
GRACE = 1.0           # seconds the grader waits beyond the harness's own timer before killing
STOP_SECONDS = 4.0    # how long a supervisor asked to stop (SIGTERM) may take to kill and reap
REPORT_BYTES = 1 << 16
WORKDIR = "/tmp/scratch"       # the fallback's working folder, in its private /tmp
# Starts the supervisor from its file, by the import machinery (a script is compiled every time;
# an imported module's compiled form is reused): ``python -c BOOT SUPERVISOR.py OPTIONS...``.
BOOT = ("import importlib.util as u, sys; s = u.spec_from_file_location('supervisor', sys.argv[1]); "
        "m = u.module_from_spec(s); s.loader.exec_module(m); m.main(sys.argv[1:])")


@dataclass
class Limits:
    """Limits of one graded submission (the CLI's flags set them)."""

    memory_bytes: int = 2 << 30          # RLIMIT_AS of every process of the submission
    test_seconds: float = 2.0            # per test, unless a test says otherwise
    submission_seconds: float = 30.0     # the whole submission, start-up included
    import_seconds: float = 10.0         # interpreter start-up and importing the submission
    output_bytes: int = 64 << 10         # stdout + stderr kept (the rest is drained and dropped)
    channel_bytes: int = 64 << 20        # results channel
    tmpfs_bytes: int = 64 << 20          # size of /tmp and /scratch, and the file size limit
    processes: int = 64                  # RLIMIT_NPROC, when the sandbox has a user id of its own
    open_files: int = 256
    max_restarts: int = 3                # relaunches after a test killed the process
    give_up_after: int = 3               # tests timed out before the rest are skipped (0: never)

    def as_dict(self) -> dict:
        return dict(self.__dict__)


# What can hold in a run, in the order ``describe`` names them.
PROTECTIONS = ("supervisor", "pid_namespace", "subreaper", "own_user", "cgroup", "no_network", "file_view")


@dataclass
class Run:
    """What happened in one sandboxed run: only data, nothing the submission can turn into a grade."""

    transcript: Transcript = field(default_factory=Transcript)
    output: str = ""                     # stdout and stderr, capped
    output_dropped: int = 0              # bytes beyond the cap
    returncode: int | None = None        # the harness's: its exit code, 128 + a signal, or < 0
    killed: str | None = None            # import_timeout, test_timeout, submission_timeout, channel_overflow
    isolation: str = ""
    elapsed: float = 0.0
    cgroup: bool = False                 # its processes shared one memory limit (a cgroup)
    oom_killed: int = 0                  # processes the kernel killed for going over it
    supervisor: dict = field(default_factory=dict)    # the supervisor's start report
    ended: dict = field(default_factory=dict)         # its exit report (empty: it was killed)
    held: dict = field(default_factory=dict)          # protection -> whether it held (PROTECTIONS)

    @property
    def running(self) -> str | None:
        """The test in progress when the process ended or was killed."""
        return self.transcript.running

    @property
    def phase(self) -> str:
        return self.transcript.phase

    @property
    def supervisor_lost(self) -> bool:
        """The supervisor died before it could report (the submission killed its parent), and
        not because the grader killed the run."""
        return bool(self.supervisor) and not self.ended and self.killed is None


class SandboxUnavailable(RuntimeError):
    """``isolation="bwrap"`` was asked for where bubblewrap cannot run."""


_live: set = set()                 # the sandboxes running now (to kill them on Ctrl-C)
_live_lock = threading.Lock()


def kill_all() -> None:
    """Kill every sandbox this process started that is still running."""
    with _live_lock:
        procs = list(_live)
    for proc in procs:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


# ---------------------------------------------------------------------------------- probes

_probe_lock = threading.Lock()
_probe: dict[str, tuple[bool, str]] = {}


_tools: dict[str, str | None] = {}


def _which(tool: str) -> str | None:
    """Where ``tool`` is on this process's PATH, looked up once (the sandbox's commands name it
    by that path: their own environment has a PATH of its own)."""
    if tool not in _tools:
        _tools[tool] = shutil.which(tool)
    return _tools[tool]


def _random_uid() -> int:
    return 100_000 + secrets.randbelow(1_000_000_000)


def bwrap_status() -> tuple[bool, str]:
    """(usable, why): whether bubblewrap is installed and can start a sandbox here."""
    with _probe_lock:
        if "bwrap" not in _probe:
            path = _which("bwrap")
            if not path:
                _probe["bwrap"] = (False, "bubblewrap (bwrap) is not installed")
            else:
                uid = _random_uid() if os.geteuid() == 0 else None
                cmd = _bwrap_prefix(uid=uid, tmpfs_bytes=1 << 20, job_dir=None, libs=()) + ["/usr/bin/true"]
                ok, why = _try(cmd)
                _probe["bwrap"] = (ok, f"bubblewrap at {path}" if ok else why)
        return _probe["bwrap"]


def namespaces_status() -> tuple[bool, str]:
    """(usable, why): whether the fallback can have namespaces of its own here (``unshare`` and
    ``setpriv`` from util-linux; for a user other than root, unprivileged user namespaces), and
    its supervisor can build the submission's file system and drop its privileges in them."""
    with _probe_lock:
        if "namespaces" not in _probe:
            missing = [tool for tool in ("unshare", "setpriv") if not _which(tool)]
            if missing:
                _probe["namespaces"] = (False, f"{' and '.join(missing)} (util-linux) not installed")
            else:
                uid = _random_uid() if os.geteuid() == 0 else None
                cmd = _unshare_prefix() + _supervisor_cmd(str(SUPERVISOR), uid=uid, report_fd=None, close=(),
                                                          keep=_python_roots(), tmp_bytes=1 << 20, probe=True)
                ok, why = _try(cmd, cwd="/")
                _probe["namespaces"] = (ok, "unshare" if ok else f"unshare could not start a sandbox here ({why})")
        return _probe["namespaces"]


def _try(cmd: list[str], cwd: str | None = None) -> tuple[bool, str]:
    try:
        proc = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, timeout=30, cwd=cwd,
                              env=_environment("/"))
    except (OSError, subprocess.TimeoutExpired) as err:
        return False, str(err)
    if proc.returncode == 0:
        return True, ""
    return False, (proc.stderr.decode(errors="replace").strip()[:300] or f"exit status {proc.returncode}")


# ------------------------------------------------------------------------------- commands


def _python_roots() -> list[str]:
    """Folders the sandboxed interpreter needs: the installation and the packages' folders."""
    roots = [sys.base_prefix, sys.prefix]
    import numpy
    roots.append(str(Path(numpy.__file__).resolve().parent.parent))
    out: list[str] = []
    for root in roots:
        for path in {os.path.abspath(root), os.path.realpath(root)}:
            if not any(path == r or path.startswith(r.rstrip("/") + "/") for r in out):
                out = [r for r in out if not r.startswith(path.rstrip("/") + "/")] + [path]
    return out


def site_dirs() -> list[str]:
    """The package folders put on the sandboxed ``sys.path`` (``-S``: no ``.pth`` files are run,
    so an editable install's path to the course checkout never gets there)."""
    import numpy
    return [str(Path(numpy.__file__).resolve().parent.parent)]


_compiled: dict[Path, Path | None] = {}
_compile_lock = threading.Lock()


def _bytecode(source: Path) -> Path | None:
    """``source`` compiled into its ``__pycache__`` (once per process, whatever
    PYTHONDONTWRITEBYTECODE says), or None where that cannot be written: the sandbox's interpreter
    then loads the supervisor and the harness without compiling them for every run (it checks
    that the compiled file matches the source, and compiles the source when it does not)."""
    with _compile_lock:
        if source not in _compiled:
            import importlib.util
            import py_compile
            cached = Path(importlib.util.cache_from_source(str(source)))
            try:
                py_compile.compile(str(source), cfile=str(cached), doraise=True)
                _compiled[source] = cached
            except (OSError, py_compile.PyCompileError):
                _compiled[source] = None
        return _compiled[source]


def _bwrap_prefix(uid, tmpfs_bytes, job_dir, libs) -> list[str]:
    args = [_which("bwrap") or "bwrap", "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts",
            "--unshare-cgroup-try", "--hostname", "sandbox", "--die-with-parent", "--new-session",
            "--as-pid-1", "--ro-bind", "/usr", "/usr"]
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        path = Path("/") / name
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), str(path)]
        elif path.is_dir():
            args += ["--ro-bind", str(path), str(path)]
    for etc in ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives",
                "/etc/localtime"):
        args += ["--ro-bind-try", etc, etc]
    # The private /tmp comes before the Python binds: a checkout (and so its .venv) may itself
    # live under /tmp, and a tmpfs mounted afterwards would hide the interpreter.
    args += ["--proc", "/proc", "--dev", "/dev",
             "--perms", "1777", "--size", str(tmpfs_bytes), "--tmpfs", "/tmp",
             "--perms", "1777", "--size", str(tmpfs_bytes), "--tmpfs", "/scratch"]
    roots = _python_roots()
    compiled = {} if job_dir is None else {f"/sandbox/__pycache__/{code.name}": code
                                           for code in map(_bytecode, (HARNESS, SUPERVISOR)) if code is not None}
    # bwrap makes missing parent folders 0700: make them searchable for the sandbox's user.
    parents = sorted({str(q) for r in roots for q in Path(r).parents if str(q) not in ("/", "/tmp")}
                     | {"/sandbox"} | ({"/sandbox/lib"} if libs else set())
                     | ({"/sandbox/__pycache__"} if compiled else set()),
                     key=lambda q: q.count("/"))
    for folder in parents:
        args += ["--perms", "0755", "--dir", folder]
    for root in roots:
        args += ["--ro-bind", root, root]
    if job_dir is not None:
        args += ["--ro-bind", str(job_dir), "/sandbox/in", "--ro-bind", str(HARNESS), "/sandbox/harness.py",
                 "--ro-bind", str(SUPERVISOR), "/sandbox/supervisor.py"]
        for inside, code in compiled.items():
            args += ["--ro-bind", str(code), inside]
    for lib in libs:                    # course packages the job needs (the public checks)
        args += ["--ro-bind", str(lib), f"/sandbox/lib/{Path(lib).name}"]
    args += ["--chdir", "/scratch", "--clearenv"]
    for key, value in _environment("/scratch").items():
        args += ["--setenv", key, value]
    if uid is not None:
        # Root: the supervisor keeps what it needs to switch the harness to the sandbox's own
        # user and to kill what is left at the end; the harness drops all of it.
        args += ["--cap-drop", "ALL"]
        for cap in ("CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP", "CAP_KILL"):
            args += ["--cap-add", cap]
        args += ["--"]
    else:
        args += ["--unshare-user", "--disable-userns", "--"]
    return args


def _unshare_prefix() -> list[str]:
    """The fallback's namespaces: the supervisor is PID 1 of its own PID namespace (``--fork``),
    in its own mount, network, IPC and UTS namespaces; a user other than root gets a user
    namespace where it is root, to build the file system (the harness drops that again).
    ``setpriv --pdeathsig`` kills ``unshare`` when the grader dies, and ``--kill-child`` the rest."""
    user = [] if os.geteuid() == 0 else ["--user", "--map-root-user"]
    return [_which("setpriv") or "setpriv", "--pdeathsig", "KILL", "--", _which("unshare") or "unshare",
            *user, "--pid", "--fork", "--kill-child", "--mount", "--mount-proc", "--net", "--ipc", "--uts", "--"]


def _supervisor_cmd(path: str, *, uid, report_fd, close, keep=None, tmp_bytes=0, subreaper=False,
                    probe=False) -> list[str]:
    # normalized: a grader started as ../.venv/bin/python must name its interpreter by a path that
    # exists in the sandbox, where only the installation's folders are
    cmd = [os.path.normpath(os.path.abspath(sys.executable)), "-I", "-S", "-B", "-c", BOOT, path] + (["--probe"] if probe else [])
    if report_fd is not None:
        cmd += ["--report-fd", str(report_fd)]
    if close:
        cmd += ["--close", ",".join(map(str, close))]
    if uid is not None:
        cmd += ["--uid", str(uid)]
    if subreaper:
        cmd += ["--subreaper"]
    if keep is not None:
        cmd += ["--workdir", WORKDIR, "--tmp-bytes", str(tmp_bytes)]
        for path in keep:
            cmd += ["--keep", str(path)]
    return cmd


def _environment(home: str) -> dict[str, str]:
    return {"PATH": "/usr/bin:/bin", "HOME": home, "TMPDIR": "/tmp", "LANG": "C.UTF-8",
            "LC_ALL": "C.UTF-8", "PYTHONHASHSEED": "0", "PYTHONIOENCODING": "utf-8",
            "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
            "NUMEXPR_NUM_THREADS": "1", "MPLBACKEND": "Agg"}


def _world_usable() -> bool:
    """Whether any user can run the interpreter and read the packages and the harness (every
    folder on the way searchable by others, the files readable by others)."""
    import stat
    paths = [os.path.realpath(sys.executable), str(HARNESS), str(SUPERVISOR)] + site_dirs()
    for path in paths:
        p = Path(path)
        for folder in [p] + list(p.parents):
            try:
                mode = folder.stat().st_mode
            except OSError:
                return False
            if stat.S_ISDIR(mode) and not mode & stat.S_IXOTH:
                return False
            if stat.S_ISREG(mode) and not mode & stat.S_IROTH:
                return False
    return True


def describe(mode: str, why: str, held: dict) -> str:
    """``isolation_detail``: in words, exactly which protections held (``Run.held``)."""
    parts = []
    if held.get("supervisor"):
        parts.append("a supervisor between the grader and the submission")
    else:
        parts.append("no supervisor report (it did not start, or was killed at once)")
    if held.get("pid_namespace"):
        parts.append("own PID namespace with the supervisor as its PID 1 (every process the "
                     "submission started ends with it; the grader is out of its reach)")
    elif held.get("subreaper"):
        parts.append("the supervisor a subreaper (it kills every process left below it, new "
                     "sessions included), and a final sweep")
    else:
        parts.append("no PID namespace and no subreaper: process-group kill and a sweep only")
    if held.get("own_user"):
        parts.append("its own user id, no capabilities (it cannot signal the grader or read its files)")
    elif held.get("pid_namespace"):
        parts.append("the grader's user id, inside namespaces of its own")
    else:
        parts.append("the grader's own user id (it could signal the grader)")
    if held.get("cgroup"):
        parts.append("one memory limit and process count for all its processes (a cgroup, killed at the end)")
    else:
        parts.append("a memory limit per process (no cgroup)")
    parts.append("no network" if held.get("no_network") else "the machine's network")
    if held.get("file_view"):
        parts.append("read-only system and Python, private /tmp, the course checkout and the rest "
                     "of the machine's files invisible")
    else:
        parts.append("the machine's files as any user sees them (it can read what its user can read)")
    if mode == "bwrap":
        return "bubblewrap: " + "; ".join(parts)
    return f"subprocess fallback ({why}): " + "; ".join(parts)


# -------------------------------------------------------------------------- the last sweep

def _sweep(uid: int | None = None, token: str | None = None, session: int | None = None) -> None:
    """Kill every process of user ``uid`` (the sandbox's own user: nobody else has it), or whose
    environment carries ``token``, or that is still in ``session`` (the fallback without a user
    of its own: children that started a new session keep the token unless they drop their
    environment, which is why the fallback says it is weaker)."""
    needle = f"KVGRADER_RUN={token}".encode() if token else None
    me = os.getpid()
    for _ in range(5):
        found = False
        try:
            entries = list(os.scandir("/proc"))
        except OSError:                 # no /proc (not Linux): the process-group kill is all there is
            return
        for entry in entries:
            if not entry.name.isdigit() or int(entry.name) == me:
                continue
            pid = int(entry.name)
            hit = False
            try:
                if uid is not None:
                    with open(f"/proc/{pid}/status") as f:
                        for line in f:
                            if line.startswith("Uid:"):
                                hit = int(line.split()[1]) == uid
                                break
                if not hit and session is not None:
                    with open(f"/proc/{pid}/stat", "rb") as f:
                        fields = f.read().rsplit(b")", 1)[1].split()
                    hit = int(fields[3]) == session          # the session id
                if not hit and needle is not None:
                    with open(f"/proc/{pid}/environ", "rb") as f:
                        hit = needle in f.read().split(b"\0")
            except (OSError, ValueError, IndexError):
                continue
            if hit:
                found = True
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        if not found:
            return
        time.sleep(0.01)


# ------------------------------------------------------------------------- work folders

_STALE = re.compile(r"grader-(?:job|check|scratch)-(\d+)-")
STALE_AFTER = 600.0    # seconds: older than any run, in case another PID namespace shares /tmp
_swept: list[bool] = []


def work_folder(prefix: str) -> str:
    """A fresh temporary folder named after this grader's process id, so that the ones a grader
    killed mid-run left behind (hidden inputs in them) can be told apart and removed: the first
    call of each process removes those of graders that are gone."""
    import tempfile
    with _cgroup_lock:
        if not _swept:
            _swept.append(True)
            _remove_stale_folders(Path(tempfile.gettempdir()))
    return tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-")


def _remove_stale_folders(tmp: Path) -> None:
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


# --------------------------------------------------------------------------------- cgroups

_CGROUP_PREFIX = "kvgrader-"
_cgroup_lock = threading.Lock()
_cgroup_probe: dict[str, object] = {}


def _cgroup_base() -> dict | None:
    """Where the grader may make the sandboxes' cgroups (see ``_find_cgroup_base``), or None (not
    root, no memory controller, a cgroup v2 that does not delegate it).  Looked up once."""
    with _cgroup_lock:
        if "base" not in _cgroup_probe:
            _cgroup_probe["base"] = _find_cgroup_base()
        return _cgroup_probe["base"]


def _find_cgroup_base() -> dict | None:
    """{"memory": folder, "version": 1 or 2, "pids": folder or None}: the grader's own cgroups
    (memory, and the process-count controller when it is a separate v1 hierarchy)."""
    if os.geteuid() != 0:
        return None
    try:
        own = [line.split(":", 2) for line in Path("/proc/self/cgroup").read_text().splitlines()]
        mounts = []
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            fields, _, tail = line.partition(" - ")
            fields, tail = fields.split(), tail.split()
            if len(fields) >= 5 and len(tail) >= 3 and tail[0] in ("cgroup", "cgroup2"):
                mounts.append((fields[3], fields[4], tail[0], set(tail[2].split(","))))
    except (OSError, ValueError):
        return None

    def folder(fstype, cgpath, option=None):
        for root, point, kind, options in mounts:
            if kind == fstype and (option is None or option in options):
                rel = os.path.relpath(cgpath, root) if cgpath.startswith(root) else None
                if rel is not None and not rel.startswith(".."):
                    return Path(point) / ("" if rel == "." else rel)
        return None

    def v1(controller):
        for entry in own:
            if len(entry) == 3 and controller in entry[1].split(","):
                return folder("cgroup", entry[2], controller)
        return None

    memory = v1("memory")                               # cgroup v1: the memory hierarchy
    if memory is not None and (memory / "memory.limit_in_bytes").exists() and _usable(memory):
        pids = v1("pids")
        return {"memory": memory, "version": 1, "pids": pids if pids is not None and _usable(pids) else None}
    for entry in own:                                   # cgroup v2 (unified)
        if len(entry) == 3 and entry[0] == "0" and entry[1] == "":
            base = folder("cgroup2", entry[2])
            if base is None:
                continue
            try:
                control = base / "cgroup.subtree_control"
                if "memory" not in control.read_text().split():
                    control.write_text("+memory")
                if "pids" not in control.read_text().split():
                    try:
                        control.write_text("+pids")
                    except OSError:
                        pass
            except OSError:
                return None
            return {"memory": base, "version": 2, "pids": None} if _usable(base) else None
    return None


def _usable(base: Path) -> bool:
    """Whether a cgroup can be made in ``base`` (tried once); the ones a grader that was killed left
    behind (its process id is in their name) are emptied and removed on the way."""
    try:
        for old in base.glob(_CGROUP_PREFIX + "*"):
            try:
                owner = int(old.name[len(_CGROUP_PREFIX):].split("-")[0])
                if time.time() - old.stat().st_mtime < STALE_AFTER:
                    continue
                os.kill(owner, 0)
                continue                                # its grader is still running
            except ProcessLookupError:
                _Cgroup([old]).remove()
            except (ValueError, OSError):
                continue
        probe = base / f"{_CGROUP_PREFIX}{os.getpid()}-probe{secrets.token_hex(4)}"
        probe.mkdir()
        probe.rmdir()
        return True
    except OSError:
        return False


class _Cgroup:
    """The cgroup(s) of one run: every process of the sandbox in it, sharing one memory limit
    (which a fork, shared memory or a memfd cannot get around, unlike the per-process RLIMIT_AS)
    and one process count (which, unlike RLIMIT_NPROC, holds when the sandbox has no user id of
    its own), and a sure list of them to kill at the end.  ``paths[0]`` has the memory
    controller; with cgroup v1 a second folder may have the process count."""

    def __init__(self, paths: list[Path], version: int = 1):
        self.paths, self.version = paths, version
        self.procs = [p / "cgroup.procs" for p in paths]

    @classmethod
    def create(cls, memory_bytes: int, processes: int) -> "_Cgroup | None":
        base = _cgroup_base()
        if base is None:
            return None
        name = f"{_CGROUP_PREFIX}{os.getpid()}-{secrets.token_hex(6)}"
        paths = [base["memory"] / name] + ([base["pids"] / name] if base["pids"] is not None else [])
        group = cls([], base["version"])
        try:
            for path in paths:
                path.mkdir()
                group.paths.append(path)
                group.procs.append(path / "cgroup.procs")
            memory = paths[0]
            if group.version == 1:
                (memory / "memory.limit_in_bytes").write_text(str(memory_bytes))
                optional = [(memory / "memory.memsw.limit_in_bytes", str(memory_bytes))]
            else:
                (memory / "memory.max").write_text(str(memory_bytes))
                optional = [(memory / "memory.swap.max", "0")]
            optional += [(paths[-1] / "pids.max", str(processes))]
            for path, value in optional:    # no swap to spill into; a process count, where they exist
                try:
                    path.write_text(value)
                except OSError:
                    pass
        except OSError:
            group.remove()
            return None
        return group

    def wrap(self, cmd: list[str]) -> list[str]:
        """``cmd`` started from inside the cgroup(s): a shell joins them, then becomes ``cmd``."""
        joins = "; ".join(f'echo $$ > "${k}" 2>/dev/null' for k in range(len(self.procs)))
        shifts = "; shift" * (len(self.procs) - 1)
        return ["/bin/sh", "-c", f'{joins}{shifts}; exec "$@"', *map(str, self.procs), *cmd]

    def pids(self) -> list[int]:
        found = set()
        for procs in self.procs:
            try:
                found.update(int(p) for p in procs.read_text().split())
            except (OSError, ValueError):
                pass
        return sorted(found)

    def oom_kills(self) -> int:
        if not self.paths:
            return 0
        name = "memory.oom_control" if self.version == 1 else "memory.events"
        try:
            for line in (self.paths[0] / name).read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
        except (OSError, ValueError):
            pass
        return 0

    def kill(self) -> None:
        """SIGKILL every process still in the cgroup, until none is left (up to 2 s)."""
        for _ in range(200):
            pids = self.pids()
            if not pids:
                return
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            time.sleep(0.01)

    def remove(self) -> None:
        for path in self.paths:
            for _ in range(50):
                try:
                    path.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    self.kill()
                    time.sleep(0.02)


class Sandbox:
    """Runs the supervisor and the harness on a job folder, in bubblewrap when it can ("auto"),
    or as asked ("bwrap" fails when bubblewrap cannot run; "subprocess" is the fallback on
    purpose).  ``namespaces``, ``own_user`` and ``cgroup`` are what the fallback would use here;
    the tests turn them off to take the paths of machines they do not run on."""

    def __init__(self, isolation: str = "auto", *, namespaces: bool | None = None,
                 own_user: bool | None = None, cgroup: bool | None = None):
        if isolation not in ("auto", "bwrap", "subprocess"):
            raise ValueError("isolation must be auto, bwrap or subprocess")
        ok, why = bwrap_status() if isolation != "subprocess" else (False, "the fallback was asked for")
        if isolation == "bwrap" and not ok:
            raise SandboxUnavailable(f"bubblewrap cannot be used: {why}")
        self.mode = "bwrap" if ok else "subprocess"
        self.why = why
        self.root = os.geteuid() == 0
        self.namespaces = False
        if self.mode == "subprocess" and namespaces is not False:
            self.namespaces, ns_why = namespaces_status()
            if not self.namespaces:
                self.why = f"{why}; {ns_why}"
        # The sandbox gets a user id of its own when the grader is root, if that user can reach
        # the interpreter and the packages (bubblewrap and the fallback's namespaces show them).
        reachable = self.mode == "bwrap" or self.namespaces or _world_usable()
        self.own_user = self.root and reachable and own_user is not False
        self.use_cgroup = cgroup is not False
        for program in (SUPERVISOR, HARNESS):   # compiled once, not by every sandbox
            _bytecode(program)

    def planned(self) -> dict:
        """What would hold in a run here (``Run.held`` says what did)."""
        contained = self.mode == "bwrap" or self.namespaces
        return {"supervisor": True, "pid_namespace": contained, "subreaper": not contained,
                "own_user": self.own_user, "cgroup": self.use_cgroup and _cgroup_base() is not None,
                "no_network": contained, "file_view": contained}

    @property
    def description(self) -> str:
        return describe(self.mode, self.why, self.planned())

    def run(self, job_dir: Path, limits: Limits, test_seconds: dict[str, float], *,
            only: list[str] | None = None, public: str | None = None, libs=()) -> Run:
        """Run the harness on ``job_dir`` (the tests ``only``, or all of ``test_seconds``; or the
        public checks of ``public``, with the course packages ``libs`` importable)."""
        uid = _random_uid() if self.own_user else None
        token = None
        run = Run(transcript=Transcript(tests=frozenset(only if only is not None else test_seconds)),
                  isolation=self.mode)
        channel_r, channel_w = os.pipe()
        report_r, report_w = os.pipe()
        scratch = group = None
        try:
            libs = [Path(lib) for lib in libs]
            supervisor = dict(uid=uid, report_fd=report_w, close=[channel_w])
            if self.mode == "bwrap":
                lib_dirs = ["/sandbox/lib"] if libs else []
                cmd = (_bwrap_prefix(uid, limits.tmpfs_bytes, job_dir, libs)
                       + _supervisor_cmd("/sandbox/supervisor.py", **supervisor)
                       + ["--", "/sandbox/harness.py", "/sandbox/in"])
                kwargs = {"env": {}}
            elif self.namespaces:
                lib_dirs = sorted({str(lib.parent) for lib in libs})
                keep = _python_roots() + [str(job_dir)] + [str(lib) for lib in libs]
                cmd = (_unshare_prefix()
                       + _supervisor_cmd(str(SUPERVISOR), keep=keep, tmp_bytes=limits.tmpfs_bytes, **supervisor)
                       + ["--", str(HARNESS), str(job_dir)])
                kwargs = {"env": _environment(WORKDIR), "cwd": "/"}
            else:
                scratch = work_folder("grader-scratch-")
                # Each package on a shelf of its own (a link to it), so that what lies next to it
                # (the rest of the course, graders/) cannot be imported by name.
                lib_dirs = [os.path.join(scratch, ".lib")] if libs else []
                for lib in libs:
                    os.makedirs(lib_dirs[0], 0o755, exist_ok=True)
                    os.symlink(lib, os.path.join(lib_dirs[0], lib.name))
                if uid is not None:
                    os.chown(scratch, uid, uid)
                token = secrets.token_hex(8)
                cmd = (_supervisor_cmd(str(SUPERVISOR), subreaper=True, **supervisor)
                       + ["--", str(HARNESS), str(job_dir)])
                kwargs = {"env": {**_environment(scratch), "KVGRADER_RUN": token}, "cwd": scratch}
            cmd += ["--channel-fd", str(channel_w), "--site", os.pathsep.join(site_dirs())]
            if uid is not None:     # RLIMIT_NPROC counts a user's processes: only with a user of its own
                cmd += ["--nproc", str(limits.processes)]
            if lib_dirs:
                cmd += ["--lib", os.pathsep.join(lib_dirs)]
            if only:
                cmd += ["--only", ",".join(only)]
            if public:
                cmd += ["--public", public]
            # All its processes share one memory limit, where the machine lets the grader make a
            # cgroup (RLIMIT_AS alone is per process: 64 forked children would have 64 x 2 GiB).
            # The tmpfs folders' pages are charged to it too, hence their room on top.
            if self.use_cgroup:
                group = _Cgroup.create(limits.memory_bytes + 2 * limits.tmpfs_bytes, limits.processes + 8)
            if group is not None:
                cmd = group.wrap(cmd)
                run.cgroup = True
            start = time.monotonic()
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, pass_fds=(channel_w, report_w),
                                    start_new_session=True, **kwargs)
            for fd in (channel_w, report_w):
                os.close(fd)
            channel_w = report_w = -1
            with _live_lock:
                _live.add(proc)
            report = bytearray()
            try:
                self._watch(proc, channel_r, report_r, report, run, limits, test_seconds, start)
            finally:
                top = self._kill(proc, uid, token)
                with _live_lock:
                    _live.discard(proc)
            _drain(report_r, report)
            self._read_report(bytes(report), run, top)
            run.held = {**self.planned(), "supervisor": bool(run.supervisor) and "error" not in run.supervisor,
                        "pid_namespace": run.supervisor.get("pid1") is True,
                        "subreaper": run.supervisor.get("subreaper") is True,
                        "own_user": uid is not None and run.supervisor.get("uid") == uid,
                        "cgroup": run.cgroup,
                        "no_network": run.supervisor.get("pid1") is True,
                        "file_view": self.mode == "bwrap" and run.supervisor.get("pid1") is True
                        or bool(run.supervisor.get("view"))}
            run.elapsed = time.monotonic() - start
            # The sandbox itself failed, before anything of the submission ran: the grader's problem.
            if "error" in run.supervisor:
                raise RuntimeError(f"the sandbox could not start: {str(run.supervisor['error'])[:300]}")
            if run.returncode == _supervisor.NOT_STARTED and not run.transcript.hello and not run.killed:
                raise RuntimeError(f"the sandbox could not start the harness: {run.output[-300:].strip()}")
            return run
        finally:
            if group is not None:            # whatever is left in it dies, then it goes
                group.kill()
                run.oom_killed = group.oom_kills()
                group.remove()
            for fd in (channel_w, report_w, channel_r, report_r):
                if fd >= 0:
                    os.close(fd)
            if scratch:
                shutil.rmtree(scratch, ignore_errors=True)

    # -------------------------------------------------------------------------------- watching

    def _watch(self, proc, channel_fd, report_fd, report: bytearray, run: Run, limits: Limits,
               test_seconds, start) -> None:
        sel = selectors.DefaultSelector()
        for fd in (channel_fd, report_fd, proc.stdout.fileno()):
            os.set_blocking(fd, False)
        sel.register(channel_fd, selectors.EVENT_READ, "channel")
        sel.register(report_fd, selectors.EVENT_READ, "report")
        sel.register(proc.stdout, selectors.EVENT_READ, "output")
        # Wake up when the process exits even if its pipes stay open (children holding them).
        pidfd = None
        try:
            pidfd = os.pidfd_open(proc.pid)
            sel.register(pidfd, selectors.EVENT_READ, "exit")
        except (AttributeError, OSError):
            pass
        tick = 3600.0 if pidfd is not None else 0.05
        open_streams = 3
        transcript = run.transcript
        pending = bytearray()
        channel_total = 0
        output = bytearray()
        phase_deadline = start + limits.import_seconds + GRACE
        overall = start + limits.submission_seconds + GRACE
        exited_at = None
        while True:
            now = time.monotonic()
            if proc.poll() is not None:
                exited_at = exited_at or now
                if open_streams == 0 or now - exited_at > 0.2:
                    break       # what is left in the pipes after 0.2 s belongs to stray children
            deadline = min(phase_deadline, overall)
            if now >= deadline:
                if transcript.phase in ("startup", "import"):
                    run.killed = "import_timeout"
                elif now >= overall:
                    run.killed = "submission_timeout"
                else:
                    run.killed = "test_timeout"
                break
            if run.killed:
                break
            if open_streams == 0:           # nothing left to read: wait for the exit itself
                try:
                    proc.wait(timeout=max(0.0, deadline - now))
                except subprocess.TimeoutExpired:
                    pass
                continue
            wait = min(deadline - now, 0.05 if exited_at else tick)
            for key, _ in sel.select(timeout=max(0.0, wait)):
                if key.data == "exit":
                    sel.unregister(pidfd)
                    continue
                try:
                    chunk = os.read(key.fd, 1 << 16)
                except BlockingIOError:
                    continue
                except OSError:
                    chunk = b""
                if not chunk:
                    sel.unregister(key.fileobj)
                    open_streams -= 1
                    continue
                if key.data == "output":
                    room = limits.output_bytes - len(output)
                    if room > 0:
                        output += chunk[:room]
                    run.output_dropped += max(0, len(chunk) - max(room, 0))
                    continue
                if key.data == "report":
                    report += chunk[:max(0, REPORT_BYTES - len(report))]
                    continue
                channel_total += len(chunk)
                if channel_total > limits.channel_bytes:
                    run.killed = "channel_overflow"
                    break
                if b"\n" not in chunk:
                    pending += chunk
                    if len(pending) > MAX_LINE:      # no message is that long: junk
                        pending, transcript.junk = bytearray(), transcript.junk + 1
                    continue
                *lines, rest = chunk.split(b"\n")
                lines[0] = bytes(pending) + lines[0]
                pending = bytearray(rest)
                for line in lines:
                    before = (transcript.phase, transcript.running)
                    transcript.feed(line)
                    if (transcript.phase, transcript.running) == before:
                        continue
                    # Only a test's start and the end of the run move the deadline: the harness
                    # starts the next test right after a result (and the first right after the
                    # import), so a result or an import faked from the sandbox buys no time.
                    now = time.monotonic()
                    if transcript.phase == "test":
                        phase_deadline = now + test_seconds.get(transcript.running, limits.test_seconds) + GRACE
                    elif transcript.phase == "done":       # the harness exits right after
                        phase_deadline = min(overall, now + GRACE)
        sel.close()
        if pidfd is not None:
            os.close(pidfd)
        run.output = output.decode("utf-8", errors="replace")

    def _kill(self, proc, uid, token) -> int:
        """End the run: everything it started is gone afterwards.  Returns the top process's
        exit status."""
        subreaper = self.mode == "subprocess" and not self.namespaces
        if subreaper and proc.poll() is None:
            # The supervisor (the top process here) kills and reaps everything below it when
            # asked, new sessions included, which killing the process group cannot reach.
            try:
                os.kill(proc.pid, signal.SIGTERM)
                proc.wait(timeout=STOP_SECONDS)
            except (OSError, subprocess.TimeoutExpired):
                pass
        try:
            os.killpg(proc.pid, signal.SIGKILL)   # PID 1 of a namespace takes the namespace with it
        except (ProcessLookupError, PermissionError):
            pass
        if subreaper:
            _sweep(uid=uid, token=token, session=proc.pid)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        if uid is not None and not subreaper and proc.returncode is not None and proc.returncode < 0:
            _sweep(uid=uid)   # killed mid-run: make sure nothing of that user is left
        if proc.returncode is None:
            proc.returncode = -9
        proc.stdout.close()
        return proc.returncode

    @staticmethod
    def _read_report(data: bytes, run: Run, top: int) -> None:
        """The supervisor's two reports (see ``supervisor.main``); the harness's status is the one
        it reports, else what the top process's exit says."""
        for line in data.splitlines()[:8]:
            try:
                message = json.loads(line)
            except (ValueError, UnicodeDecodeError):
                continue
            if not isinstance(message, dict):
                continue
            if message.get("t") == "supervisor" and not run.supervisor:
                run.supervisor = message
            elif message.get("t") == "exit" and not run.ended:
                run.ended = message
        code = run.ended.get("code")
        run.returncode = code if type(code) is int else top


def _drain(fd: int, into: bytearray) -> None:
    """What is left in a pipe whose writers are gone (or still there: then what is there now)."""
    os.set_blocking(fd, False)
    while len(into) < REPORT_BYTES:
        try:
            chunk = os.read(fd, 1 << 16)
        except (BlockingIOError, OSError):
            return
        if not chunk:
            return
        into += chunk[:REPORT_BYTES - len(into)]
