"""The command lines that start a sandbox: bubblewrap's, ``unshare``'s, the supervisor's, and
the clean environment they run with.

``python -I -S -B -c BOOT supervisor.py OPTIONS -- harness.py JOB`` is the core of each: the
supervisor is loaded by the import machinery (a script is compiled every time; an imported
module's compiled form is reused, ``bytecode``), and ``-S`` keeps every ``.pth`` file (an
editable install's path to the course checkout) out of ``sys.path``.
"""
from __future__ import annotations

import importlib.util
import os
import py_compile
import shutil
import threading
from pathlib import Path

from . import supervisor as _supervisor
from .interpreter import environment, interpreter
from .resident import view

GRADERS = Path(__file__).resolve().parent.parent
HARNESS = GRADERS / "harness.py"
SUPERVISOR = Path(__file__).resolve().parent / "supervisor.py"
WORKDIR = "/tmp/scratch"       # the fallback's working folder, in its private /tmp
BOOT = ("import importlib.util as u, sys; s = u.spec_from_file_location('supervisor', sys.argv[1]); "
        "m = u.module_from_spec(s); s.loader.exec_module(m); m.main(sys.argv[1:])")

_tools: dict[str, str | None] = {}


def which(tool: str) -> str | None:
    """Where ``tool`` is on this process's PATH, looked up once (the sandbox's commands name it
    by that path: their own environment has a PATH of its own)."""
    if tool not in _tools:
        _tools[tool] = shutil.which(tool)
    return _tools[tool]


_compiled: dict[Path, Path | None] = {}
_compile_lock = threading.Lock()


def bytecode(source: Path) -> Path | None:
    """``source`` compiled into its ``__pycache__`` (once per process, whatever
    PYTHONDONTWRITEBYTECODE says), or None where that cannot be written: the sandbox's interpreter
    then loads the supervisor and the harness without compiling them for every run (it checks
    that the compiled file matches the source, and compiles the source when it does not)."""
    with _compile_lock:
        if source not in _compiled:
            cached = Path(importlib.util.cache_from_source(str(source)))
            try:
                py_compile.compile(str(source), cfile=str(cached), doraise=True)
                _compiled[source] = cached
            except (OSError, py_compile.PyCompileError):
                _compiled[source] = None
        return _compiled[source]


def bwrap_prefix(uid: int | None, tmpfs_bytes: int, job_dir: Path | None, libs, seccomp_fd: int | None,
                 warm_jobs: Path | None = None) -> list[str]:
    """bubblewrap's options, up to and including ``--``: the namespaces, the read-only copy of
    the system and Python a run needs (``resident``), the private size-capped ``/tmp``,
    ``/dev/shm`` and ``/scratch``, the job folder at ``/sandbox/in`` (with the harness and the
    supervisor beside it), the clean environment, the user (``uid`` when the grader is root), the
    seccomp filter read from ``seccomp_fd``.

    ``warm_jobs`` (a root grader only) makes a warm sandbox (``supervisor.serve``) instead: the
    folder of its runs' job folders at ``/sandbox/jobs``, no job folder of its own, and the
    supervisor keeps ``CAP_SYS_ADMIN`` to make each run's namespaces (the filter is installed by
    the supervisor in each run's harness, as in the fallback)."""
    copy = view()
    args = _namespaces() + _machine_covered() + _private_folders(tmpfs_bytes)
    # The system and Python as a run sees them: a copy in memory of what it needs (``resident``),
    # bound after the private /tmp, since a checkout (and so its .venv) may itself live there.
    for folder in copy.folders():
        args += ["--ro-bind", copy.source(folder), folder]
    args += _sandbox_folder(copy, job_dir, libs, warm_jobs)
    args += ["--chdir", "/scratch", "--clearenv"]
    for key, value in environment("/scratch").items():
        args += ["--setenv", key, value]
    if seccomp_fd is not None:
        args += ["--seccomp", str(seccomp_fd)]
    return args + _user(uid, warm=warm_jobs is not None)


def _namespaces() -> list[str]:
    """bwrap, its namespaces, and the root's links into /usr."""
    args = [which("bwrap") or "bwrap", "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts",
            "--unshare-cgroup-try", "--hostname", "sandbox", "--die-with-parent", "--new-session",
            "--as-pid-1"]
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        path = Path("/") / name
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), str(path)]
    return args + ["--proc", "/proc", "--dev", "/dev"]


def _machine_covered() -> list[str]:
    """What the whole machine counts, covered (``supervisor.MACHINE_WIDE_PROC_FILES``): bwrap's
    own /proc is the kernel's, so the host's list is the sandbox's; and the pseudo-terminals
    (bwrap's /dev/ptmx links into /dev/pts)."""
    args = []
    for folder in _supervisor.machine_wide_dirs("/proc"):
        args += ["--perms", "0555", "--size", "4096", "--tmpfs", folder, "--remount-ro", folder]
    for path in _supervisor.machine_wide_files("/proc"):
        args += ["--ro-bind", "/dev/null", path]
    for folder in _supervisor.NO_DEVICE_DIRS:
        args += ["--perms", "0555", "--size", "4096", "--tmpfs", folder, "--remount-ro", folder]
    return args


def _private_folders(tmpfs_bytes: int) -> list[str]:
    """The run's own /dev/shm, /tmp and /scratch, each capped at ``tmpfs_bytes``."""
    return [arg for folder in ("/dev/shm", "/tmp", "/scratch")
            for arg in ("--perms", "1777", "--size", str(tmpfs_bytes), "--tmpfs", folder)]


def _sandbox_folder(copy, job_dir: Path | None, libs, warm_jobs: Path | None) -> list[str]:
    """/sandbox: the job folder (or a warm sandbox's folder of job folders), the harness and the
    supervisor with their compiled forms, and the course packages the job needs."""
    running = job_dir is not None or warm_jobs is not None
    compiled = {} if not running else {
        f"/sandbox/__pycache__/{code.name}": copy.holding(code, f"__pycache__/{code.name}")
        for code in map(bytecode, (HARNESS, SUPERVISOR)) if code is not None}
    # bwrap makes missing parent folders 0700: make them searchable for the sandbox's user.
    args = []
    for folder in ["/sandbox"] + (["/sandbox/lib"] if libs else []) + (["/sandbox/__pycache__"] if compiled else []):
        args += ["--perms", "0755", "--dir", folder]
    if warm_jobs is not None:
        args += ["--perms", "0755", "--dir", "/sandbox/in", "--ro-bind", str(warm_jobs), _supervisor.JOBS]
    if running:
        if job_dir is not None:
            args += ["--ro-bind", str(job_dir), "/sandbox/in"]
        args += ["--ro-bind", copy.holding(HARNESS, "harness.py"), "/sandbox/harness.py",
                 "--ro-bind", copy.holding(SUPERVISOR, "supervisor.py"), "/sandbox/supervisor.py"]
        for inside, code in compiled.items():
            args += ["--ro-bind", str(code), inside]
    for lib in libs:                    # course packages the job needs (the public checks)
        args += ["--ro-bind", str(lib), f"/sandbox/lib/{Path(lib).name}"]
    return args


def _user(uid: int | None, warm: bool) -> list[str]:
    """Root: the supervisor keeps what it needs to switch the harness to the sandbox's own user
    and to kill what is left at the end (and, warm, to make each run's namespaces); the harness
    drops all of it.  Anyone else: a user namespace, and no further one."""
    if uid is None:
        return ["--unshare-user", "--disable-userns", "--"]
    caps = ("CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP", "CAP_KILL") + (("CAP_SYS_ADMIN",) if warm else ())
    return ["--cap-drop", "ALL"] + [arg for cap in caps for arg in ("--cap-add", cap)] + ["--"]


def unshare_prefix() -> list[str]:
    """The fallback's namespaces: the supervisor is PID 1 of its own PID namespace (``--fork``),
    in its own mount, network, IPC and UTS namespaces; a user other than root gets a user
    namespace where it is root, to build the file system (the harness drops that again).
    ``setpriv --pdeathsig`` kills ``unshare`` when the grader dies, and ``--kill-child`` the rest."""
    user = [] if os.geteuid() == 0 else ["--user", "--map-root-user"]
    return [which("setpriv") or "setpriv", "--pdeathsig", "KILL", "--", which("unshare") or "unshare",
            *user, "--pid", "--fork", "--kill-child", "--mount", "--mount-proc", "--net", "--ipc", "--uts", "--"]


def supervisor_cmd(path: str, *, uid, report_fd, close, keep=None, view=None, tmp_bytes=0, subreaper=False,
                   probe=False, seccomp_fd=None) -> list[str]:
    """The supervisor's command line (its options: ``supervisor.main``)."""
    cmd = [interpreter(), "-I", "-S", "-B", "-c", BOOT, path] + (["--probe"] if probe else [])
    if report_fd is not None:
        cmd += ["--report-fd", str(report_fd)]
    if close:
        cmd += ["--close", ",".join(map(str, close))]
    if uid is not None:
        cmd += ["--uid", str(uid)]
    if subreaper:
        cmd += ["--subreaper"]
    if seccomp_fd is not None:
        cmd += ["--seccomp-fd", str(seccomp_fd)]
    if keep is not None:
        cmd += ["--workdir", WORKDIR, "--tmp-bytes", str(tmp_bytes)]
        for path in keep:
            cmd += ["--keep", str(path)]
        cmd += ["--copy-root", view.root]          # ``resident.View``: what the view shows
        for folder in view.folders():
            cmd += ["--show", folder]
    return cmd
