"""The supervisor: the small process between the grader and the submission, in every sandbox.

The grader is never the submission's parent.  It starts this program (inside bubblewrap, inside
``unshare``, or as a plain subprocess), and this program forks the harness, which loads the
submission.  It knows nothing worth stealing and touches nothing of the submission; it

- holds the submission's processes below itself: it is PID 1 of the sandbox's own PID namespace
  (``bwrap --as-pid-1``, ``unshare --pid --fork``), where the kernel ignores the signals the
  namespace sends it and kills every process of the namespace when it exits; elsewhere it makes
  itself a child subreaper (``prctl(PR_SET_CHILD_SUBREAPER)``), so that every orphan of the
  submission, even one that left its session and process group, becomes its child;
- when it is root in a mount namespace of its own (the fallback with ``unshare``), shows the
  submission a file system like bubblewrap's: the system folders, the Python installation and its
  packages, read-only; the job folder; a private, size-capped ``/tmp``; every other top-level
  folder of the machine (the course checkout, homes, ``/work``...) an empty one;
- drops the harness's privileges before anything of the submission runs: as root, a user id of
  the sandbox's own (``--uid``) with no capabilities, no supplementary groups and
  ``no_new_privs``; root of a user namespace, every capability dropped;
- in the fallback, installs the grader's seccomp filter (``--seccomp-fd``: the BPF program
  ``graders.sandbox.seccomp`` built) in the harness's process right after that (bubblewrap
  installs the same filter itself, before this program starts), and reports what then holds for
  that process (its user id, capabilities, seccomp mode) before the submission is loaded;
- reaps every process that ends below it, and when the harness has ended (or the grader asks,
  with SIGTERM), kills everything left below it, reaps it, and exits with the harness's status
  (its exit code, or 128 + the signal that killed it).

What it did goes back to the grader on ``--report-fd``, a descriptor the submission never holds:
one JSON line when the harness starts (what held), one from the harness's process once it is
confined (it closes the descriptor right after), one when everything below it is gone.

Run as ``python -I -S -B supervisor.py [OPTIONS] -- HARNESS.py ARGS...``.  Standard library
only: the ``graders`` package is not visible in the sandbox.
"""
from __future__ import annotations

import json
import os
import signal
import sys
import time

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_CAPBSET_DROP = 24
PR_SET_SECUREBITS = 28
PR_SET_NO_NEW_PRIVS = 38
PR_SET_CHILD_SUBREAPER = 36
PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 22, 2
SECURE_NOROOT_ALL = 0x3f            # noroot, no setuid fixup, keep caps: each set and locked

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18

# Top-level folders the submission sees as they are (read-only for it: they belong to root).
SYSTEM = ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "dev", "proc")
# Files of /etc the dynamic loader and the C library need; the rest of /etc is hidden.
ETC = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives", "/etc/localtime")
# What the whole machine shares and any process could change and read: covered in every view
# (files by /dev/null, folders by an empty read-only tmpfs), so that two sandboxes that run at
# once cannot signal each other through a count (processes, memory, pseudo-terminals, AIO
# events, locks, interrupts, pressure...).  Per-namespace and per-process entries stay.
MACHINE_WIDE_PROC_FILES = ("buddyinfo", "diskstats", "interrupts", "key-users", "keys", "loadavg", "locks",
                           "meminfo", "pagetypeinfo", "schedstat", "slabinfo", "softirqs", "stat", "swaps",
                           "timer_list", "uptime", "vmallocinfo", "vmstat", "zoneinfo")
MACHINE_WIDE_PROC_DIRS = ("sys", "pressure", "sysvipc", "tty", "fs", "irq", "bus", "driver", "acpi")
# Pseudo-terminals are counted and capped machine-wide (kernel.pty.nr, kernel.pty.max): none.
NO_DEVICES = ("/dev/ptmx",)
NO_DEVICE_DIRS = ("/dev/pts",)
KILL_SECONDS = 3.0                  # the longest the final kill keeps looking for processes
NOT_STARTED = 70                    # the harness's exit status when it never started (privileges, a crash)


# ------------------------------------------------------------------------------ the view


def plan_view(top: dict[str, str], keep: list[str]) -> dict:
    """What the mount namespace must do so that the submission sees only the system and ``keep``.

    ``top`` maps each entry of ``/`` to its kind (``"dir"``, ``"file"``, ``"link"``); ``keep`` are
    the absolute paths the submission needs (the interpreter, the packages, the job folder).
    Returns ``{"hide": folders to cover with an empty tmpfs, "blank": files to cover with an
    empty one, "tmp": "/tmp", "keep": the kept paths that lie under something covered, in the
    order they must be bound back}``.  Pure: ``tests/graders`` checks it on machines of every
    shape.
    """
    hide = sorted(f"/{name}" for name, kind in top.items()
                  if kind == "dir" and name not in SYSTEM and name != "tmp")
    blank = sorted(f"/{name}" for name, kind in top.items() if kind == "file")
    covered = hide + ["/tmp"]

    def under(path, folder):
        return path == folder or path.startswith(folder.rstrip("/") + "/")

    wanted = sorted({os.path.normpath(p) for p in list(keep) + list(ETC)})
    kept: list[str] = []
    for path in wanted:
        if not any(under(path, c) for c in covered):
            continue                                  # visible anyway (under /usr, say)
        if any(under(path, k) for k in kept):
            continue                                  # inside a folder already bound back
        kept.append(path)
    return {"hide": hide, "blank": blank, "tmp": "/tmp", "keep": kept}


def machine_wide_files(proc: str = "/proc") -> list[str]:
    """The machine-wide files of ``proc`` that this kernel has (``MACHINE_WIDE_PROC_FILES``)."""
    return [f"{proc}/{name}" for name in MACHINE_WIDE_PROC_FILES if os.path.isfile(f"{proc}/{name}")]


def machine_wide_dirs(proc: str = "/proc") -> list[str]:
    """The machine-wide folders of ``proc`` that this kernel has (``MACHINE_WIDE_PROC_DIRS``)."""
    return [f"{proc}/{name}" for name in MACHINE_WIDE_PROC_DIRS if os.path.isdir(f"{proc}/{name}")]


def _libc():
    import ctypes
    return ctypes, ctypes.CDLL(None, use_errno=True)


def _mount(libc, ctypes, source, target, fstype, flags, data=None) -> None:
    enc = (lambda s: None if s is None else s.encode())
    if libc.mount(enc(source), enc(target), enc(fstype), flags, enc(data)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), target)


def build_view(keep: list[str], tmp_bytes: int, workdir: str, uid: int | None) -> dict:
    """Make the submission's file system (see ``plan_view``) in this process's mount namespace,
    which must be its own and private: ``unshare --mount``.  Raises OSError if any step fails."""
    ctypes, libc = _libc()
    top = {}
    for entry in os.scandir("/"):
        top[entry.name] = ("link" if entry.is_symlink() else "dir" if entry.is_dir(follow_symlinks=False)
                           else "file")
    plan = plan_view(top, keep)
    os.umask(0o022)
    _mount(libc, ctypes, None, "/", None, MS_REC | MS_PRIVATE)
    # Everything to bind back is opened before anything is covered (afterwards it is hidden).
    held = []
    for path in plan["keep"]:
        if os.path.islink(path):
            held.append((path, "link", os.readlink(path)))
        elif os.path.exists(path):
            held.append((path, "dir" if os.path.isdir(path) else "file", os.open(path, os.O_PATH | os.O_CLOEXEC)))
    for folder in plan["hide"]:
        _mount(libc, ctypes, "tmpfs", folder, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m,nr_inodes=4096")
    for path in plan["blank"]:
        _mount(libc, ctypes, "/dev/null", path, None, MS_BIND)
    for folder in machine_wide_dirs("/proc") + [d for d in NO_DEVICE_DIRS if os.path.isdir(d)]:
        _mount(libc, ctypes, "tmpfs", folder, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_RDONLY,
               "mode=0555,size=4k,nr_inodes=8")
    for path in machine_wide_files("/proc") + [d for d in NO_DEVICES if os.path.exists(d)]:
        _mount(libc, ctypes, "/dev/null", path, None, MS_BIND)
    _mount(libc, ctypes, "tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, f"mode=1777,size={int(tmp_bytes)}")
    if os.path.isdir("/dev/shm"):
        _mount(libc, ctypes, "tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, f"mode=1777,size={int(tmp_bytes)}")
    for path, kind, what in held:
        os.makedirs(os.path.dirname(path), 0o755, exist_ok=True)
        if kind == "link":
            os.symlink(what, path)
            continue
        if kind == "dir":
            os.makedirs(path, 0o755, exist_ok=True)
        else:
            open(path, "a").close()
        _mount(libc, ctypes, f"/proc/self/fd/{what}", path, None, MS_BIND | MS_REC)
        os.close(what)
        # Read-only for the submission; the flags the kernel locked on the original mount
        # (nosuid, nodev, noexec in a user namespace) must be asked for again.
        locked = os.statvfs(path).f_flag & (MS_NOSUID | MS_NODEV | MS_NOEXEC)
        _mount(libc, ctypes, None, path, None, MS_REMOUNT | MS_BIND | MS_RDONLY | locked)
    os.makedirs(workdir, 0o700, exist_ok=True)
    if uid is not None:
        os.chown(workdir, uid, uid)
    os.chdir(workdir)
    return {"hidden": plan["hide"], "kept": [p for p, _, _ in held]}


# -------------------------------------------------------------------------- privileges


def _prctl(libc, *args) -> bool:
    try:
        return libc.prctl(*[int(a) for a in args] + [0] * (5 - len(args))) == 0
    except AttributeError:              # not Linux: no prctl, none of what it gives
        return False


def _cap_last() -> int:
    try:
        with open("/proc/sys/kernel/cap_last_cap") as f:
            return int(f.read())
    except (OSError, ValueError):
        return 63


def _effective_caps() -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("CapEff:"):
                    return int(line.split()[1], 16)
    except (OSError, ValueError):
        pass
    return None


def drop_privileges(uid: int | None) -> None:
    """In the harness, before the submission: no way back to any privilege.  Exits the process
    (``NOT_STARTED``) rather than run the submission with a privilege it should not have."""
    try:
        ctypes, libc = _libc()
    except OSError:
        libc = None
    if libc is not None:
        _prctl(libc, PR_SET_NO_NEW_PRIVS, 1)
    if os.getuid() == 0 or os.geteuid() == 0:
        if libc is None:
            _refuse("root without ctypes: cannot drop privileges")
        for cap in range(_cap_last() + 1):          # the bounding set: no exec can regain any
            _prctl(libc, PR_CAPBSET_DROP, cap)
        if uid is not None:                         # real root: become the sandbox's own user
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
        else:                                       # root of a user namespace: drop every capability
            _prctl(libc, PR_SET_SECUREBITS, SECURE_NOROOT_ALL)

            class Header(ctypes.Structure):
                _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

            class Data(ctypes.Structure):
                _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                            ("inheritable", ctypes.c_uint32)]
            if libc.capset(ctypes.byref(Header(0x20080522, 0)), (Data * 2)()) != 0:
                _refuse("capset failed")
        if _effective_caps() not in (0, None) or (uid is not None and os.getuid() != uid):
            _refuse("privileges still held after dropping them")
    elif uid is not None and os.getuid() != uid:
        _refuse("asked for a user id of its own but not root")
    if libc is not None:
        _prctl(libc, PR_SET_DUMPABLE, 1)            # a change of user made it undumpable
        _prctl(libc, PR_SET_PDEATHSIG, signal.SIGKILL)   # (cleared by the change of user)


def _refuse(why: str) -> None:
    try:
        os.write(2, f"supervisor: {why}\n".encode())
    finally:
        os._exit(NOT_STARTED)


def install_seccomp(program: bytes) -> None:
    """Install the BPF ``program`` (an array of 8-byte ``struct sock_filter``) as this
    process's seccomp filter, inherited by every child and never removable.  Needs
    ``no_new_privs`` (``drop_privileges`` set it).  Exits (``NOT_STARTED``) when the kernel
    refuses it: the submission never runs without the filter it was meant to have."""
    try:
        ctypes, libc = _libc()
    except OSError:
        _refuse("no C library: cannot install the seccomp filter")

    class Fprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    if not program or len(program) % 8:
        _refuse("the seccomp program is not a whole number of instructions")
    buffer = ctypes.create_string_buffer(program, len(program))
    fprog = Fprog(len(program) // 8, ctypes.addressof(buffer))
    if libc.prctl(ctypes.c_int(PR_SET_SECCOMP), ctypes.c_ulong(SECCOMP_MODE_FILTER),
                  ctypes.c_void_p(ctypes.addressof(fprog)), ctypes.c_ulong(0), ctypes.c_ulong(0)) != 0:
        _refuse(f"the seccomp filter could not be installed ({os.strerror(ctypes.get_errno())})")


def confinement() -> dict:
    """What holds for this process: its user ids, effective capabilities and seccomp mode
    (0 none, 2 a filter), read back from the kernel rather than assumed."""
    found = {"uid": os.getuid(), "euid": os.geteuid(), "caps": _effective_caps(), "seccomp": None}
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Seccomp:"):
                    found["seccomp"] = int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return found


def _read_all(fd: int) -> bytes:
    chunks = []
    while True:
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


# ------------------------------------------------------------------------------ killing


def _descendants(root: int) -> list[int]:
    """Every process below ``root``, from the parent links in /proc."""
    children: dict[int, list[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for name in entries:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                ppid = int(f.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(name))
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def kill_everything(pid1: bool) -> tuple[int, int]:
    """Kill and reap every process below this one: (reaped, still there after KILL_SECONDS).
    PID 1 of a namespace reaches them all with kill(-1); a subreaper finds them in /proc (its
    orphans are its children, so when it has no child left, nothing is left below it)."""
    reaped, deadline = 0, time.monotonic() + KILL_SECONDS
    while True:
        if pid1:
            try:
                os.kill(-1, signal.SIGKILL)
            except OSError:
                pass
        else:
            for pid in _descendants(os.getpid()):
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        try:
            while True:
                pid, _ = os.waitpid(-1, os.WNOHANG)
                if pid == 0:
                    break
                reaped += 1
        except ChildProcessError:
            return reaped, 0
        if time.monotonic() > deadline:
            return reaped, len(_descendants(os.getpid()))
        time.sleep(0.002)


class _Stop(Exception):
    """The grader asked the supervisor to end the run (SIGTERM)."""


def _stop(signum, frame):
    raise _Stop()


# --------------------------------------------------------------------------------- main


def _options(argv: list[str]) -> tuple[dict, list[str]]:
    split = argv.index("--") if "--" in argv else len(argv)
    opts: dict = {"keep": []}
    args = argv[:split]
    k = 0
    while k < len(args):
        key = args[k]
        if key in ("--subreaper", "--probe"):
            opts[key[2:]] = True
            k += 1
            continue
        value = args[k + 1]
        if key == "--keep":
            opts["keep"].append(value)
        else:
            opts[key[2:].replace("-", "_")] = value
        k += 2
    return opts, argv[split + 1:]


def main(argv: list[str]) -> None:
    opts, harness_argv = _options(argv[1:])
    report_fd = int(opts["report_fd"]) if "report_fd" in opts else None
    uid = int(opts["uid"]) if "uid" in opts else None

    def report(message: dict) -> None:
        if report_fd is not None:
            try:
                os.write(report_fd, (json.dumps(message) + "\n").encode())
            except OSError:
                pass

    seccomp = None
    if "seccomp_fd" in opts:                        # read now: the harness never holds it
        try:
            seccomp = _read_all(int(opts["seccomp_fd"]))
            os.close(int(opts["seccomp_fd"]))
        except (OSError, ValueError) as err:
            report({"t": "supervisor", "error": f"the seccomp program: {err}"})
            os._exit(71)

    pid1 = os.getpid() == 1
    try:
        ctypes, libc = _libc()
    except OSError:
        libc = None
    subreaper = False
    if not pid1 and libc is not None:
        if "subreaper" in opts:
            subreaper = _prctl(libc, PR_SET_CHILD_SUBREAPER, 1)
        if _prctl(libc, PR_SET_PDEATHSIG, signal.SIGKILL) and os.getppid() == 1:
            os._exit(1)                             # the grader is already gone
    if libc is not None:
        _prctl(libc, PR_SET_DUMPABLE, 0)            # its /proc entries stay closed to the sandbox
    # The harness is loaded now, while its file is still in view (the view may hide it).
    harness = None
    if harness_argv:
        import importlib.util
        spec = importlib.util.spec_from_file_location("harness", harness_argv[0])
        harness = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(harness)
    view = None
    if "workdir" in opts:
        # Only ever in the namespaces ``unshare --pid --fork --mount`` made for it: PID 1 of a
        # fresh PID namespace.  Anywhere else these mounts would change the grader's machine.
        try:
            if not pid1:
                raise OSError("the file system is built only by PID 1 of the sandbox's own namespaces")
            view = build_view(opts["keep"], int(opts.get("tmp_bytes", 64 << 20)), opts["workdir"], uid)
        except OSError as err:
            report({"t": "supervisor", "error": f"the sandbox's file system: {err}"})
            os._exit(71)
    if subreaper:
        signal.signal(signal.SIGTERM, _stop)        # the grader's "end it now" (PID 1 is killed instead)
    # What holds is said before the harness starts: the submission may kill this process first.
    report({"t": "supervisor", "pid": os.getpid(), "pid1": pid1, "subreaper": subreaper, "uid": uid,
            "view": view})
    # SIGTERM waits until each side is ready for it: the harness, with the default action; this
    # process, inside the loop that turns it into the final kill.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    child = os.fork()
    if child == 0:
        try:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
            drop_privileges(uid)
            if seccomp is not None:
                install_seccomp(seccomp)
            if report_fd is not None:       # what holds now, said before anything else runs here
                report({"t": "confined", **confinement()})
                os.close(report_fd)
            if "probe" in opts:         # can a fresh interpreter start, as the submission's user?
                os.execv(sys.executable, [sys.executable, "-I", "-S", "-B", "-c", "import json, decimal"])
            harness.main(harness_argv)
        finally:
            os._exit(NOT_STARTED)
    status, stopped = None, False
    try:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
        for fd in opts.get("close", "").split(","):     # the results channel is the harness's alone
            if fd:
                try:
                    os.close(int(fd))
                except OSError:
                    pass
        while status is None:
            pid, raw = os.waitpid(-1, 0)
            if pid == child:
                status = raw
    except _Stop:
        stopped = True
    except ChildProcessError:
        pass
    signal.signal(signal.SIGTERM, signal.SIG_IGN)      # asked or not, the end is the same now
    reaped, left = kill_everything(pid1)
    if status is None:
        code = 128 + signal.SIGKILL
    elif os.WIFSIGNALED(status):
        code = 128 + os.WTERMSIG(status)
    else:
        code = os.WEXITSTATUS(status)
    report({"t": "exit", "code": code, "stopped": stopped, "reaped": reaped, "left": left})
    os._exit(code)


if __name__ == "__main__":
    main(sys.argv)
