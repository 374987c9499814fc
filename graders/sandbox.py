"""Running a submission in a throw-away sandbox, and watching it from outside.

With bubblewrap (``bwrap``, Debian's ``bubblewrap``) the submission gets:

- its own PID, network, IPC and UTS namespaces: no network at all (not even the host's
  loopback), no view of any process outside (``/proc`` is its own), and every process it starts
  dies when the sandbox does (``--die-with-parent``; PID 1 of the namespace exits with the
  harness, which takes the whole namespace with it);
- a file system made of read-only binds of ``/usr`` (with ``/bin``, ``/lib``...), a few
  ``/etc/ld.so*`` files, the Python installation and the virtual environment's packages, the job
  folder (``/sandbox/in``: the extracted source and the inputs) and the harness: the course
  checkout, ``solutions/``, ``graders/`` and the rest of the machine are not there;
- a private ``/tmp`` and a ``/scratch`` working folder, both size-capped tmpfs, as the only
  writable places; nothing it writes outlives it;
- when the grader runs as root, a user id of its own (a random one, never a real user) with no
  capabilities and ``no_new_privs``: it cannot signal the grader, and the process limit
  (``RLIMIT_NPROC``) counts only its own processes;
- resource limits set before its code runs: address space (2 GiB by default), CPU time, file
  size, open files, processes; and a clean environment.

Without bubblewrap (or when it cannot start here) the fallback is a plain subprocess: the same
limits, a new session killed as a group, the same separate user id when root (so the grader
cannot be signalled, and every process of that user is killed afterwards), but the submission
can read what that user can read and reach the network.  ``Run.isolation`` says which was used,
and the results say so.

The grader watches from outside: a wall-clock limit for start-up and import, one for each test
(renewed by the harness's ``start`` messages) and one for the whole submission; output to
stdout/stderr is drained and capped; the results channel is capped too.  Results never come
from stdout: only JSON lines on the channel are read, and they are only data to compare.
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

__all__ = ["Limits", "Run", "Sandbox", "SandboxUnavailable", "HARNESS", "bwrap_status", "kill_all"]

HARNESS = Path(__file__).resolve().parent / "harness.py"
GRACE = 1.0           # seconds the grader waits beyond the harness's own timer before killing
MAX_LINE = 24 << 20   # the longest message line read from the channel


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


@dataclass
class Run:
    """What happened in one sandboxed run: only data, nothing the submission can turn into a grade."""

    messages: list[dict] = field(default_factory=list)
    output: str = ""                     # stdout and stderr, capped
    output_dropped: int = 0              # bytes beyond the cap
    returncode: int | None = None
    killed: str | None = None            # import_timeout, test_timeout, submission_timeout, channel_overflow
    running: str | None = None           # the test in progress when the process ended or was killed
    phase: str = "startup"               # startup, import, test, between, done
    isolation: str = ""
    elapsed: float = 0.0
    channel_junk: int = 0                # lines on the channel that were not valid messages
    cgroup: bool = False                 # its processes shared one memory limit (a cgroup)
    oom_killed: int = 0                  # processes the kernel killed for going over it


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


_probe_lock = threading.Lock()
_probe: dict[str, str] = {}


def bwrap_status() -> tuple[bool, str]:
    """(usable, why): whether bubblewrap is installed and can start a sandbox here."""
    with _probe_lock:
        if "status" not in _probe:
            path = shutil.which("bwrap")
            if not path:
                _probe["status"], _probe["why"] = "no", "bubblewrap (bwrap) is not installed"
            else:
                uid = 100_000 + secrets.randbelow(1_000_000) if os.geteuid() == 0 else None
                cmd = _bwrap_prefix(uid=uid, tmpfs_bytes=1 << 20, job_dir=None, public_checks=None) + ["/usr/bin/true"]
                try:
                    proc = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, timeout=30)
                    ok = proc.returncode == 0
                    why = "" if ok else proc.stderr.decode(errors="replace").strip()[:300]
                except (OSError, subprocess.TimeoutExpired) as err:
                    ok, why = False, str(err)
                _probe["status"] = "yes" if ok else "no"
                _probe["why"] = why if not ok else f"bubblewrap at {path}"
        return _probe["status"] == "yes", _probe["why"]


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


def _bwrap_prefix(uid, tmpfs_bytes, job_dir, public_checks) -> list[str]:
    args = ["bwrap", "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts",
            "--unshare-cgroup-try", "--hostname", "sandbox", "--die-with-parent", "--new-session",
            "--ro-bind", "/usr", "/usr"]
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
    # bwrap makes missing parent folders 0700: make them searchable for the sandbox's user.
    parents = sorted({str(q) for r in roots for q in Path(r).parents if str(q) not in ("/", "/tmp")}
                     | {"/sandbox"} | ({"/sandbox/lib"} if public_checks is not None else set()),
                     key=lambda q: q.count("/"))
    for folder in parents:
        args += ["--perms", "0755", "--dir", folder]
    for root in roots:
        args += ["--ro-bind", root, root]
    if job_dir is not None:
        args += ["--ro-bind", str(job_dir), "/sandbox/in", "--ro-bind", str(HARNESS), "/sandbox/harness.py"]
    if public_checks is not None:       # `graders check` only: the public checks are public
        args += ["--ro-bind", str(public_checks), "/sandbox/lib/public_checks"]
    args += ["--chdir", "/scratch", "--clearenv"]
    for key, value in _environment("/scratch").items():
        args += ["--setenv", key, value]
    if uid is not None:
        # Root: keep only what setpriv needs to switch to the sandbox's own user; it drops the rest.
        args += ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID",
                 "--cap-add", "CAP_SETPCAP", "--"]
        args += ["/usr/bin/setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
                 "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--"]
    else:
        args += ["--unshare-user", "--disable-userns", "--"]
    return args


def _environment(home: str) -> dict[str, str]:
    return {"PATH": "/usr/bin:/bin", "HOME": home, "TMPDIR": "/tmp", "LANG": "C.UTF-8",
            "LC_ALL": "C.UTF-8", "PYTHONHASHSEED": "0", "PYTHONIOENCODING": "utf-8",
            "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
            "NUMEXPR_NUM_THREADS": "1", "MPLBACKEND": "Agg"}


def _world_usable() -> bool:
    """Whether any user can run the interpreter and read the packages and the harness (every
    folder on the way searchable by others, the files readable by others)."""
    import stat
    paths = [os.path.realpath(sys.executable), str(HARNESS)] + site_dirs()
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


def _sweep(uid: int | None = None, token: str | None = None, session: int | None = None) -> None:
    """Kill every process of user ``uid`` (the sandbox's own user: nobody else has it), or whose
    environment carries ``token``, or that is still in ``session`` (the fallback without a user
    of its own: children that started a new session keep the token unless they drop their
    environment, which is why the fallback says it is weaker)."""
    needle = f"KVGRADER_RUN={token}".encode() if token else None
    me = os.getpid()
    for _ in range(5):
        found = False
        for entry in os.scandir("/proc"):
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
    def create(cls, memory_bytes: int, processes: int, uid: int | None = None) -> "_Cgroup | None":
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
            if uid is not None:             # the fallback's first process runs as that user
                for procs in group.procs:
                    os.chown(procs, uid, uid)
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
    """Runs the harness on a job folder, in bubblewrap when it can ("auto"), or as asked
    ("bwrap" fails when bubblewrap cannot run; "subprocess" is the fallback on purpose)."""

    def __init__(self, isolation: str = "auto"):
        if isolation not in ("auto", "bwrap", "subprocess"):
            raise ValueError("isolation must be auto, bwrap or subprocess")
        ok, why = bwrap_status() if isolation != "subprocess" else (False, "the fallback was asked for")
        if isolation == "bwrap" and not ok:
            raise SandboxUnavailable(f"bubblewrap cannot be used: {why}")
        self.mode = "bwrap" if ok else "subprocess"
        self.why = why
        self.root = os.geteuid() == 0
        # The sandbox gets a user id of its own when the grader is root; in the fallback only if
        # that user can reach the interpreter and the packages (bubblewrap binds them for it).
        self.own_user = self.root and (self.mode == "bwrap" or _world_usable())

    @property
    def description(self) -> str:
        memory = ("one memory limit for all its processes (a cgroup)" if _cgroup_base() is not None
                  else "a memory limit per process (no cgroup available)")
        if self.mode == "bwrap":
            who = "its own user id, no capabilities" if self.root else "a user namespace"
            return ("bubblewrap: no network, own PID namespace, read-only system and Python, private "
                    f"/tmp and scratch, course checkout invisible, {who}, {memory}")
        who = "its own user id" if self.own_user else "the grader's own user (it could signal the grader)"
        return (f"subprocess fallback ({self.why}): resource limits, process-group kill, {who}, {memory}; "
                "the submission can read the grader's files and reach the network")

    def run(self, job_dir: Path, limits: Limits, test_seconds: dict[str, float], *,
            only: list[str] | None = None, public: str | None = None,
            public_checks: Path | None = None) -> Run:
        uid = 100_000 + secrets.randbelow(1_000_000_000) if self.own_user else None
        token = None
        run = Run(isolation=self.mode)
        read_fd, write_fd = os.pipe()
        scratch = None
        group = None
        try:
            if self.mode == "bwrap":
                inner_fd = write_fd
                cmd = _bwrap_prefix(uid, limits.tmpfs_bytes, job_dir, public_checks)
                cmd += [sys.executable, "-I", "-S", "-B", "/sandbox/harness.py", "/sandbox/in"]
                lib_arg = "/sandbox/lib" if public_checks is not None else ""
                kwargs = {"env": {}}
            else:
                inner_fd = write_fd
                import tempfile
                scratch = work_folder("grader-scratch-")
                if uid is not None:
                    os.chown(scratch, uid, uid)
                cmd = [sys.executable, "-I", "-S", "-B", str(HARNESS), str(job_dir), "--pdeathsig", "1"]
                lib_arg = str(Path(public_checks).parent) if public_checks is not None else ""
                token = secrets.token_hex(8)
                kwargs = {"env": {**_environment(scratch), "KVGRADER_RUN": token}, "cwd": scratch}
                if uid is not None:
                    kwargs.update(user=uid, group=uid, extra_groups=[])
            cmd += ["--channel-fd", str(inner_fd), "--site", os.pathsep.join(site_dirs())]
            if uid is not None:     # RLIMIT_NPROC counts a user's processes: only with a user of its own
                cmd += ["--nproc", str(limits.processes)]
            if lib_arg:
                cmd += ["--lib", lib_arg]
            if only:
                cmd += ["--only", ",".join(only)]
            if public:
                cmd += ["--public", public]
            # All its processes share one memory limit, where the machine lets the grader make a
            # cgroup (RLIMIT_AS alone is per process: 64 forked children would have 64 x 2 GiB).
            # The tmpfs folders' pages are charged to it too, hence their room on top.
            group = _Cgroup.create(limits.memory_bytes + 2 * limits.tmpfs_bytes, limits.processes + 8,
                                   uid if self.mode == "subprocess" else None)
            if group is not None:
                cmd = group.wrap(cmd)
                run.cgroup = True
            start = time.monotonic()
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, pass_fds=(write_fd,),
                                    start_new_session=True, **kwargs)
            os.close(write_fd)
            write_fd = -1
            with _live_lock:
                _live.add(proc)
            try:
                self._watch(proc, read_fd, run, limits, test_seconds, start)
            finally:
                run.returncode = self._kill(proc, uid, token)
                with _live_lock:
                    _live.discard(proc)
            run.elapsed = time.monotonic() - start
            return run
        finally:
            if group is not None:            # whatever is left in it dies, then it goes
                group.kill()
                run.oom_killed = group.oom_kills()
                group.remove()
            if write_fd >= 0:
                os.close(write_fd)
            os.close(read_fd)
            if scratch:
                shutil.rmtree(scratch, ignore_errors=True)

    # -------------------------------------------------------------------------------- watching

    def _watch(self, proc, read_fd, run: Run, limits: Limits, test_seconds, start) -> None:
        sel = selectors.DefaultSelector()
        os.set_blocking(read_fd, False)
        os.set_blocking(proc.stdout.fileno(), False)
        sel.register(read_fd, selectors.EVENT_READ, "channel")
        sel.register(proc.stdout, selectors.EVENT_READ, "output")
        # Wake up when the process exits even if its pipes stay open (children holding them).
        pidfd = None
        try:
            pidfd = os.pidfd_open(proc.pid)
            sel.register(pidfd, selectors.EVENT_READ, "exit")
        except (AttributeError, OSError):
            pass
        tick = 3600.0 if pidfd is not None else 0.05
        open_streams = 2
        pending = bytearray()
        channel_total = 0
        output = bytearray()
        phase_deadline = start + limits.import_seconds + GRACE
        overall = start + limits.submission_seconds + GRACE
        exited_at = None
        started: set[str] = set()
        while True:
            now = time.monotonic()
            if proc.poll() is not None:
                exited_at = exited_at or now
                if open_streams == 0 or now - exited_at > 0.2:
                    break       # what is left in the pipes after 0.2 s belongs to stray children
            deadline = min(phase_deadline, overall)
            if now >= deadline:
                if run.phase in ("startup", "import"):
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
                channel_total += len(chunk)
                if channel_total > limits.channel_bytes:
                    run.killed = "channel_overflow"
                    break
                if b"\n" not in chunk:
                    pending += chunk
                    if len(pending) > MAX_LINE:      # no message is that long: junk
                        pending, run.channel_junk = bytearray(), run.channel_junk + 1
                    continue
                *lines, rest = chunk.split(b"\n")
                lines[0] = bytes(pending) + lines[0]
                pending = bytearray(rest)
                for line in lines:
                    message = _parse(line)
                    if message is None:
                        run.channel_junk += 1
                        continue
                    run.messages.append(message)
                    kind = message["t"]
                    now = time.monotonic()
                    if kind == "import_start" and run.phase == "startup":
                        run.phase = "import"
                    elif kind == "import" and run.phase in ("startup", "import"):
                        run.phase = "between"
                        phase_deadline = overall
                    elif kind == "start" and run.phase == "between":
                        # The harness starts a test only after the previous one's result, and each
                        # test once.  The submission can write on the channel too: a "start" in the
                        # middle of a test (or a second one for the same test, or an id that is not
                        # even a string) must not push its deadline back, so it is ignored.
                        tid = message.get("id")
                        if isinstance(tid, str) and tid in test_seconds and tid not in started:
                            started.add(tid)
                            run.phase, run.running = "test", tid
                            phase_deadline = now + test_seconds[tid] + GRACE
                    elif kind == "result" and run.phase == "test" and message.get("id") == run.running:
                        run.phase, run.running = "between", None
                        phase_deadline = overall
                    elif kind in ("done", "public") and run.phase != "done":
                        run.phase, run.running = "done", None      # the harness exits right after
                        phase_deadline = min(overall, now + GRACE)
        sel.close()
        if pidfd is not None:
            os.close(pidfd)
        run.output = output.decode("utf-8", errors="replace")

    def _kill(self, proc, uid, token) -> int:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        if self.mode == "subprocess":
            _sweep(uid=uid, token=token, session=proc.pid)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        if uid is not None and self.mode == "bwrap" and proc.returncode is not None and proc.returncode < 0:
            _sweep(uid=uid)   # killed mid-run: make sure nothing of that user is left
        if proc.returncode is None:
            proc.returncode = -9
        proc.stdout.close()
        return proc.returncode


def _parse(line: bytes):
    if not line or len(line) > MAX_LINE:
        return None
    try:
        message = json.loads(line)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    if not isinstance(message, dict) or not isinstance(message.get("t"), str):
        return None
    return message
