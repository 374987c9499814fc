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

# The supervisor starts in every sandboxed run: what one mode needs is imported in that mode
# (``ctypes`` to mount the fallback's view, ``importlib.util`` to load the harness, ``select``,
# ``socket`` and ``importlib`` for a warm sandbox's server), so a run pays for no other.

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

# Top-level folders the submission sees as the machine has them (its devices, its processes);
# every other folder is hidden or replaced by the copy of the system a run needs.
MACHINE_OWN = ("dev", "proc")
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


def plan_view(top: dict[str, str], keep: list[str], shown: list[str]) -> dict:
    """What the mount namespace must do so that the submission sees only the copy of the system
    a run needs (``shown``) and ``keep``.

    ``top`` maps each entry of ``/`` to its kind (``"dir"``, ``"file"``, ``"link"``); ``shown`` are
    the folders bound from that copy (``sandbox.resident``), each at its own path: top-level
    folders, or folders right under ``/tmp``; ``keep`` are the machine's own paths the submission
    needs (the job folder, the course packages).  Returns ``{"hide": folders to cover with an
    empty tmpfs, "blank": files to cover with an empty one, "tmp": "/tmp", "show": ``shown`` in
    the order they are bound, "keep": the kept paths, bound back after them}``.  Only ``/dev``
    and ``/proc`` stay as they are; top-level links are left alone (they point into what is
    shown).  Pure: ``tests/graders`` checks it on machines of every shape.
    """
    show = sorted({os.path.normpath(p) for p in shown}, key=lambda p: (p.count("/"), p))
    hide = sorted(f"/{name}" for name, kind in top.items()
                  if kind == "dir" and name not in MACHINE_OWN and name != "tmp" and f"/{name}" not in show)
    blank = sorted(f"/{name}" for name, kind in top.items() if kind == "file")
    covered = hide + ["/tmp"] + show

    def under(path, folder):
        return path == folder or path.startswith(folder.rstrip("/") + "/")

    kept: list[str] = []
    for path in sorted({os.path.normpath(p) for p in keep}):
        if not any(under(path, c) for c in covered):
            continue                                  # visible anyway (under /dev, say)
        if any(under(path, k) for k in kept):
            continue                                  # inside a folder already bound back
        kept.append(path)
    return {"hide": hide, "blank": blank, "tmp": "/tmp", "show": show, "keep": kept}


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


def build_view(keep: list[str], tmp_bytes: int, workdir: str, uid: int | None, copy_root: str,
               shown: list[str]) -> dict:
    """Make the submission's file system (see ``plan_view``) in this process's mount namespace,
    which must be its own and private: ``unshare --mount``; ``shown`` come from ``copy_root`` +
    each one's path.  Raises OSError if any step fails."""
    ctypes, libc = _libc()
    top = {}
    for entry in os.scandir("/"):
        top[entry.name] = ("link" if entry.is_symlink() else "dir" if entry.is_dir(follow_symlinks=False)
                           else "file")
    plan = plan_view(top, keep, shown)
    os.umask(0o022)
    _mount(libc, ctypes, None, "/", None, MS_REC | MS_PRIVATE)
    held = _hold(plan, copy_root)     # opened before anything is covered (afterwards it is hidden)
    _cover(libc, ctypes, plan, tmp_bytes)
    for path, kind, what in held:
        _bind_back(libc, ctypes, path, kind, what)
    os.makedirs(workdir, 0o700, exist_ok=True)
    if uid is not None:
        os.chown(workdir, uid, uid)
    os.chdir(workdir)
    return {"hidden": plan["hide"], "kept": [p for p, _, _ in held if p not in plan["show"]], "shown": plan["show"]}


def _hold(plan: dict, copy_root: str) -> list[tuple]:
    """(path, kind, what) of everything to bind back: an O_PATH descriptor of each folder shown
    (from ``copy_root``) and of each path kept, or a kept link's target."""
    held = []
    for path in plan["show"]:
        held.append((path, "dir", os.open(copy_root + path, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)))
    for path in plan["keep"]:
        if os.path.islink(path):
            held.append((path, "link", os.readlink(path)))
        elif os.path.exists(path):
            held.append((path, "dir" if os.path.isdir(path) else "file", os.open(path, os.O_PATH | os.O_CLOEXEC)))
    return held


def _cover(libc, ctypes, plan: dict, tmp_bytes: int) -> None:
    """Hide the plan's folders under empty tmpfs, blank its files and the machine-wide files of
    /proc and the devices, and give /tmp and /dev/shm tmpfs of ``tmp_bytes`` each."""
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


def _bind_back(libc, ctypes, path: str, kind: str, what) -> None:
    """Put one held path back, read-only: a link as a link, a folder or file bound from its
    descriptor (which is closed)."""
    os.makedirs(os.path.dirname(path), 0o755, exist_ok=True)
    if kind == "link":
        os.symlink(what, path)
        return
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


def drop_privileges(uid: int | None, dumpable: bool = True) -> None:
    """In the harness, before the submission: no way back to any privilege.  Exits the process
    (``NOT_STARTED``) rather than run the submission with a privilege it should not have.
    ``dumpable`` False (the subreaper, whose seccomp filter is ``sealed``) leaves the process as
    the change of user left it, not dumpable: its /proc files, ``oom_score_adj`` among them, stay
    root's, so that no process of the run can lower its OOM score (``first_to_go``)."""
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
        # a change of user made it undumpable (as fs.suid_dumpable says: 0 or 2, never 1)
        _prctl(libc, PR_SET_DUMPABLE, 1 if dumpable else 0)
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

OOM_SCORE_ADJ = 1000                # the kernel's first choice when memory runs out


def first_to_go() -> bool:
    """Make this process, and so everything it forks, the kernel's first choice to kill when
    memory runs out (``oom_score_adj`` 1000: its badness then exceeds that of any process at 0,
    whatever their sizes), so that a run that fills the memory of a machine or a container
    whose limit the grader cannot see (no cgroup of its own) loses its own processes, never the
    grader.  Raising one's own score needs no capability; whether the run can lower it again is
    the seccomp filter's (``sealed``) and ``drop_privileges``'s.  False where /proc refuses."""
    try:
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write(str(OOM_SCORE_ADJ))
        return True
    except OSError:
        return False


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
        if key in ("--keep", "--show"):
            opts.setdefault(key[2:], []).append(value)
        else:
            opts[key[2:].replace("-", "_")] = value
        k += 2
    return opts, argv[split + 1:]


def _reporter(fd: int | None):
    """A function that sends one report (a JSON line) on ``fd``, and ignores a closed one."""
    def report(message: dict) -> None:
        if fd is not None:
            try:
                os.write(fd, (json.dumps(message) + "\n").encode())
            except OSError:
                pass
    return report


def main(argv: list[str]) -> None:
    opts, harness_argv = _options(argv[1:])
    report_fd = int(opts["report_fd"]) if "report_fd" in opts else None
    uid = int(opts["uid"]) if "uid" in opts else None

    report = _reporter(report_fd)
    seccomp = None
    if "seccomp_fd" in opts:                        # read now: the harness never holds it
        try:
            seccomp = _read_all(int(opts["seccomp_fd"]))
            os.close(int(opts["seccomp_fd"]))
        except (OSError, ValueError) as err:
            report({"t": "supervisor", "error": f"the seccomp program: {err}"})
            os._exit(71)

    first_to_go()
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
            view = build_view(opts["keep"], int(opts.get("tmp_bytes", 64 << 20)), opts["workdir"], uid,
                              opts["copy_root"], opts.get("show", []))
        except OSError as err:
            report({"t": "supervisor", "error": f"the sandbox's file system: {err}"})
            os._exit(71)
    if "serve" in opts:
        serve(int(opts["serve"]), harness, harness_argv, seccomp, opts)
    supervise(harness, harness_argv, uid, seccomp, report, opts, pid1=pid1, subreaper=subreaper, view=view)


def supervise(harness, harness_argv, uid, seccomp, report, opts, *, pid1: bool, subreaper: bool, view,
              status_in_report_only: bool = False) -> None:
    """Fork the harness (privileges dropped, the seccomp filter installed), reap what ends below
    this process until the harness has ended, kill what is left, report, and exit with the
    harness's status (or, ``status_in_report_only``, with 0: the status is in the report alone).
    Never returns."""
    report_fd = int(opts["report_fd"]) if "report_fd" in opts else None
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
            drop_privileges(uid, dumpable=not subreaper)
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
    os._exit(0 if status_in_report_only else code)


# ---------------------------------------------------------------------- the warm sandbox

CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWPID, CLONE_NEWNET = 0x20000000, 0x40000000
RUN_FDS = (3, 4)            # in a warm run: the report descriptor, the results channel
JOBS = "/sandbox/jobs"      # a warm sandbox's job folders, one per run, each bound at /sandbox/in
_NAME_OK = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.")


def serve(control_fd: int, harness, harness_argv, seccomp: bytes | None, opts: dict) -> None:
    """A warm sandbox's first process: loads numpy once, then runs one run per request from the
    grader, one after another, each in namespaces of its own.  Never returns.

    It is PID 1 of the sandbox bubblewrap made (the system and Python read-only, no network),
    and keeps what it needs to make a run's namespaces.  A request on ``control_fd`` (a
    SOCK_SEQPACKET socket: one message each) is ``{"t": "run", "job", "libs", "uid", "argv"}``
    with three descriptors (report, results channel, output); ``{"t": "stop"}`` kills the run
    in progress.  For each run it forks a process that makes fresh mount, PID, network, IPC and
    UTS namespaces and forks the run's own PID 1 (``_fresh_run``), which shows the run only its
    own job folder and fresh ``/tmp``, ``/dev/shm``, ``/scratch`` and ``/proc`` and then is the
    run's supervisor (``supervise``): nothing one run writes, starts or names outlives it, and
    this process, which holds nothing of any run (it never reads a job folder), is out of every
    run's sight.  It answers ``{"t": "started", "ok"}`` and ``{"t": "ended"}`` for each run: the
    run's exit status reaches the grader in the run's own report, never this process (every
    later run is a copy of it).  What a run can change here is only whether it was stopped.
    """
    import select
    import socket
    site = [p for p in opts.get("preload_site", "").split(os.pathsep) if p]
    sys.path[:0] = site
    try:
        import importlib
        importlib.import_module("numpy")        # once here: each run starts from a copy of this process
    except ImportError:
        pass
    del sys.path[:len(site)]
    control = socket.socket(fileno=control_fd)
    tmp_bytes = int(opts.get("tmp_bytes", 64 << 20))
    while True:
        try:
            data, fds, _, _ = socket.recv_fds(control, 1 << 16, 3)
        except OSError:
            break
        if not data:
            break                                   # the grader is done with this sandbox
        try:
            request = json.loads(data)
        except ValueError:
            request = {}
        if request.get("t") != "run" or len(fds) != 3:
            for fd in fds:
                os.close(fd)
            continue
        run = _start_run(request, fds, control_fd, harness, harness_argv, seccomp, tmp_bytes)
        for fd in fds:
            os.close(fd)
        control.send(b'{"t": "started", "ok": true}' if run is not None else b'{"t": "started", "ok": false}')
        if run is not None:
            _wait_run(run, control, select)
        control.send(b'{"t": "ended"}')
    os._exit(0)


def _wait_run(pid: int, control, select) -> None:
    """Wait for the run whose PID 1 is ``pid`` (a child of this process) to end, or kill it when
    the grader asks.  Its status is not looked at: it is in the run's own report."""
    pidfd = os.pidfd_open(pid)
    try:
        while True:
            ready, _, _ = select.select([pidfd, control], [], [])
            if control in ready:
                try:
                    message = control.recv(1 << 16)
                except OSError:
                    message = b""
                if not message or b'"stop"' in message:
                    os.kill(pid, signal.SIGKILL)    # PID 1 of its namespace: all of it goes
            if pidfd in ready:
                os.waitpid(pid, 0)                  # the kernel has killed the rest of it by now
                return
    finally:
        os.close(pidfd)


def _start_run(request: dict, fds, control_fd: int, harness, harness_argv, seccomp, tmp_bytes: int) -> int | None:
    """Fork the run's namespaces and its PID 1; that PID 1's process id (a child of this
    process, the one between having exited), or None when they could not be made."""
    job, libs, uid = request.get("job"), request.get("libs", []), request.get("uid")
    argv = request.get("argv")
    if not (_plain_name(job) and isinstance(libs, list) and all(map(_plain_name, libs))
            and type(uid) is int and uid > 0 and isinstance(argv, list)
            and all(isinstance(a, str) for a in argv)):
        return None
    found_r, found_w = os.pipe()
    between = os.fork()
    if between == 0:
        try:
            os.close(found_r)
            ctypes, libc = _libc()
            if libc.unshare(CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS) != 0:
                os._exit(NOT_STARTED)
            _mount(libc, ctypes, None, "/", None, MS_REC | MS_PRIVATE)
            pid = os.fork()
            if pid == 0:
                try:
                    os.close(found_w)
                    _fresh_run(job, libs, uid, fds, control_fd, harness, [harness_argv[0]] + argv, seccomp,
                               tmp_bytes)
                finally:
                    os._exit(NOT_STARTED)
            os.write(found_w, str(pid).encode())
        finally:
            os._exit(0)
    os.close(found_w)
    found = _read_all(found_r)
    os.close(found_r)
    os.waitpid(between, 0)
    return int(found) if found.isdigit() else None


def _plain_name(name) -> bool:
    return isinstance(name, str) and 0 < len(name) <= 100 and set(name) <= _NAME_OK and name not in (".", "..")


def _fresh_run(job: str, libs: list[str], uid, fds, control_fd: int, harness, harness_argv, seccomp,
               tmp_bytes: int) -> None:
    """A warm run's PID 1, in its fresh namespaces: its own file system view, then ``supervise``.
    Never returns."""
    report_fd, channel_fd, output_fd = fds
    report = _reporter(RUN_FDS[0])
    try:
        os.dup2(output_fd, 1)
        os.dup2(output_fd, 2)
        os.dup2(report_fd, RUN_FDS[0])
        os.dup2(channel_fd, RUN_FDS[1])
        os.closerange(RUN_FDS[1] + 1, os.sysconf("SC_OPEN_MAX") if os.sysconf("SC_OPEN_MAX") > 0 else 1024)
        _run_view(job, libs, tmp_bytes)
    except OSError as err:
        report({"t": "supervisor", "error": f"the run's file system: {err}"})
        os._exit(71)
    _reseed()
    opts = {"report_fd": str(RUN_FDS[0]), "close": str(RUN_FDS[1])}
    # the command line a sandbox of its own would have run (the submission may read it)
    sys.argv = [sys.argv[0], "/sandbox/supervisor.py", "--report-fd", opts["report_fd"], "--close", opts["close"],
                *(["--uid", str(uid)] if uid is not None else []), "--", *harness_argv]
    # The status goes to the grader alone: the first process, which every later run is a copy
    # of, learns nothing a run chose (its exit status would stay in that process's memory).
    supervise(harness, harness_argv, uid, seccomp, report, opts, pid1=True, subreaper=False, view=None,
              status_in_report_only=True)


def _run_view(job: str, libs: list[str], tmp_bytes: int) -> None:
    """A warm run's file system, in its own mount namespace: a fresh ``/proc`` of its PID
    namespace (machine-wide entries covered again), fresh ``/tmp``, ``/dev/shm`` and
    ``/scratch``, its job folder at ``/sandbox/in`` and the packages copied into it at
    ``/sandbox/lib``, read-only; every other run's folder covered; the root read-only."""
    ctypes, libc = _libc()
    sealed = MS_NOSUID | MS_NODEV | MS_NOEXEC
    _mount(libc, ctypes, "proc", "/proc", "proc", sealed)
    for folder in machine_wide_dirs("/proc"):
        _mount(libc, ctypes, "tmpfs", folder, "tmpfs", sealed | MS_RDONLY, "mode=0555,size=4k,nr_inodes=8")
    for path in machine_wide_files("/proc"):
        _mount(libc, ctypes, "/dev/null", path, None, MS_BIND)
    # What bubblewrap bound under /tmp (Python itself, when the checkout and its .venv live there)
    # is held open now and bound back over the fresh /tmp, read-only as it was.
    held = [(path, os.open(path, os.O_PATH | os.O_CLOEXEC)) for path in _mount_points_under("/tmp")]
    for folder in ("/tmp", "/dev/shm", "/scratch"):
        _mount(libc, ctypes, "tmpfs", folder, "tmpfs", MS_NOSUID | MS_NODEV, f"mode=1777,size={int(tmp_bytes)}")
    for path, fd in held:
        os.makedirs(path, 0o755, exist_ok=True)
        _mount(libc, ctypes, f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC)
        os.close(fd)
        locked = os.statvfs(path).f_flag & (MS_NOSUID | MS_NODEV | MS_NOEXEC)
        _mount(libc, ctypes, None, path, None, MS_REMOUNT | MS_BIND | MS_RDONLY | locked)
    binds = [(f"{JOBS}/{job}", "/sandbox/in")] + [(f"{JOBS}/{job}/lib/{lib}", f"/sandbox/lib/{lib}") for lib in libs]
    for source, target in binds:
        os.makedirs(target, 0o755, exist_ok=True)   # a mount point in the sandbox's root, made as root
        _mount(libc, ctypes, source, target, None, MS_BIND | MS_REC)
        _mount(libc, ctypes, None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)
    _mount(libc, ctypes, "tmpfs", JOBS, "tmpfs", sealed | MS_RDONLY, "mode=0555,size=4k,nr_inodes=8")
    _mount(libc, ctypes, None, "/", None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)
    os.chdir("/scratch")


def _mount_points_under(folder: str) -> list[str]:
    """The outermost mount points below ``folder`` (not ``folder`` itself), from mountinfo."""
    found = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            point = line.split()[4]
            point = point.encode().decode("unicode_escape") if "\\" in point else point
            if point.startswith(folder.rstrip("/") + "/"):
                found.append(point)
    return [p for p in sorted(set(found)) if not any(p.startswith(q + "/") for q in found)]


def _reseed() -> None:
    """Fresh seeds for the random generators loaded before the fork, which every run would
    otherwise share with the others (a fresh interpreter draws its own)."""
    random = sys.modules.get("random")
    if random is not None:
        random.seed()
    numpy_random = sys.modules.get("numpy.random")
    if numpy_random is not None:
        numpy_random.seed()


if __name__ == "__main__":
    main(sys.argv)
