"""Attacks on the sandbox itself, asked from inside by probe functions, in every isolation mode
this machine can run: bubblewrap, the fallback with namespaces (``unshare``), and the fallback
without (the subreaper; run as root in a private mount namespace where the interpreter is open to
other users, with bubblewrap and util-linux off the grader's PATH).

Each probe tries what a hostile submission would (ctypes ``syscall``), and the test asserts what
the kernel answered: the seccomp filter's EPERM (or ENOSYS for clone3), a user id of the run's
own, nothing left for the next sandbox.  ``graders.sandbox.seccomp``'s program itself is also
checked instruction by instruction, on both architectures, against the kernel's own headers
where they are installed.
"""
import errno
import json
import os
import platform
import re
import shutil
import threading
import time
from pathlib import Path

import pytest

from graders.sandbox import seccomp

from grader_helpers import needs_bwrap, processes_matching
from test_sandbox import probe

MACHINE = platform.machine()


def _namespaces() -> bool:
    from graders.sandbox import Sandbox
    return Sandbox("subprocess").namespaces


MODES = [pytest.param("bwrap", marks=needs_bwrap),
         pytest.param("subprocess", marks=pytest.mark.skipif(not _namespaces(), reason="unshare cannot make namespaces here")),
         pytest.param("subreaper", marks=pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"),
                                                           reason="needs root and unshare to open the interpreter"))]

# The subreaper mode: the probes run by a grader that has no bubblewrap and no util-linux.
SUBREAPER_SCRIPT = r"""
import json, sys, threading, time
sys.path.insert(0, "tests/graders")
from test_sandbox import probe
sources, stagger = json.loads(sys.argv[1])
out = [None] * len(sources)

def one(k):
    value, run = probe(sources[k], isolation="subprocess")
    out[k] = [value, run.held, run.swept_files, run.isolation]

threads = []
for k in range(len(sources)):
    if stagger is None:
        one(k)
    else:
        threads.append(threading.Thread(target=one, args=(k,)))
        threads[-1].start()
        time.sleep(stagger)
for t in threads:
    t.join()
print(json.dumps(out))
"""


def run_probes(mode: str, sources: list[str], stagger: float | None = None) -> list[tuple]:
    """Each of ``sources`` run as a probe in a sandbox of its own, one after the other, or
    overlapping (``stagger``: seconds between their starts).  [(value, held, swept files)]."""
    if mode == "subreaper":
        from test_fallback import _as_another_user
        results = _as_another_user([sources, stagger], "/nonexistent-bin", uid=0, script=SUBREAPER_SCRIPT)
        for _, held, _, isolation in results:
            assert isolation == "subprocess" and held["subreaper"] and not held["pid_namespace"]
        return [(value, held, swept) for value, held, swept, _ in results]
    out: list = [None] * len(sources)

    def one(k):
        value, run = probe(sources[k], isolation=mode)
        out[k] = (value, run.held, run.swept_files)

    if stagger is None:
        for k in range(len(sources)):
            one(k)
        return out
    threads = []
    for k in range(len(sources)):
        threads.append(threading.Thread(target=one, args=(k,)))
        threads[-1].start()
        time.sleep(stagger)
    for t in threads:
        t.join()
    return out


# ------------------------------------------------------------------- every denied system call

SYSCALLS_PROBE = f"""
import ctypes, os, platform, threading
NUMBERS = {json.dumps(seccomp.SYSCALLS)}
DENIED = {json.dumps(list(seccomp.DENIED))}
LOCKING_NUMBERS = {json.dumps(seccomp.LOCKING)}
def probe():
    nr = NUMBERS[platform.machine()]
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    out = {{}}
    for name in DENIED:                     # zero arguments: harmless, whatever the kernel says
        if name not in nr:                  # a call this architecture does not have
            continue
        ctypes.set_errno(0)
        r = libc.syscall(nr[name], 0, 0, 0, 0, 0, 0)
        out[name] = ctypes.get_errno() if r < 0 else "allowed"
    import fcntl, struct
    shared = open(os.__file__, "rb")        # a file every sandbox reads, bound read-only into each
    for command in ("F_GETLK", "F_SETLK", "F_OFD_GETLK", "F_OFD_SETLK"):
        lock = struct.pack("hhqqi", fcntl.F_RDLCK, 0, 0, 0, 0)
        try:
            fcntl.fcntl(shared, LOCKING_NUMBERS[command], lock)
            out[command] = "allowed"
        except OSError as err:
            out[command] = err.errno
    out["F_GETFL"] = fcntl.fcntl(shared, fcntl.F_GETFL) & 3      # O_RDONLY: fcntl itself still works
    # whether a page of that file is in the page cache, asked, or the page put out of it
    buf = bytearray(4096)
    for name, flags in (("preadv2(RWF_NOWAIT)", os.RWF_NOWAIT), ("preadv2", 0)):
        try:
            out[name] = os.preadv(shared.fileno(), [buf], 0, flags)
        except OSError as err:
            out[name] = err.errno
    import mmap
    mapped = mmap.mmap(shared.fileno(), 4096, prot=mmap.PROT_READ)
    for name, advice in (("MADV_PAGEOUT", 21), ("MADV_COLD", 20), ("MADV_DONTNEED", 4), ("MADV_WILLNEED", 3)):
        try:
            mapped.madvise(advice)
            out[name] = "allowed"
        except OSError as err:
            out[name] = err.errno
    mapped.close()
    out["F_SETFD"] = fcntl.fcntl(shared, fcntl.F_SETFD, fcntl.FD_CLOEXEC)
    ctypes.set_errno(0)
    r = libc.syscall(nr["clone"], 0x10000000 | 17, 0, 0, 0, 0)     # CLONE_NEWUSER | SIGCHLD
    if r == 0:
        os._exit(0)
    out["clone(CLONE_NEWUSER)"] = ctypes.get_errno() if r < 0 else "allowed"
    ctypes.set_errno(0)
    out["clone3"] = ctypes.get_errno() if libc.syscall(nr["clone3"], 0, 0) < 0 else "allowed"
    if platform.machine() == "x86_64":      # getpid through the x32 ABI
        ctypes.set_errno(0)
        out["x32"] = ctypes.get_errno() if libc.syscall(0x40000000 | 39) < 0 else "allowed"
    import socket
    try:
        socket.socket(socket.AF_UNIX).close()
        out["socket"] = "allowed"
    except OSError as err:
        out["socket"] = err.errno
    for name, family in (("vsock", 40), ("netlink", 16), ("packet", 17)):
        try:
            socket.socket(family, socket.SOCK_DGRAM).close()
            out[name] = "allowed"
        except OSError as err:
            out[name] = err.errno
    a, b = socket.socketpair()
    a.close(); b.close()
    # what must keep working: threads (clone without namespace flags), fork, numpy
    box = []
    t = threading.Thread(target=box.append, args=(1,))
    t.start(); t.join()
    pid = os.fork()
    if pid == 0:
        os._exit(7)
    import numpy as np
    out["works"] = [box, os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]),
                    float((np.ones((64, 64)) @ np.ones((64, 64))).sum())]
    return out
"""


@pytest.mark.parametrize("mode", MODES)
def test_every_denied_system_call_gets_eperm_and_threads_forks_and_numpy_still_work(mode):
    [(value, held, _)] = run_probes(mode, [SYSCALLS_PROBE])
    assert held["seccomp"] is True
    for name in seccomp.DENIED + ("clone(CLONE_NEWUSER)",):
        if name in seccomp.SYSCALLS[MACHINE] or "(" in name:
            assert value[name] == errno.EPERM, (name, value[name])
    # no lock on a file another sandbox reads at the same time, not even asking for one
    for command in ("F_GETLK", "F_SETLK", "F_OFD_GETLK", "F_OFD_SETLK"):
        assert value[command] == errno.EPERM, (command, value[command])
    assert value["F_GETFL"] == os.O_RDONLY and value["F_SETFD"] == 0
    # no asking the page cache whether a page of it is there, and no taking one out of it
    assert value["preadv2(RWF_NOWAIT)"] == errno.EOPNOTSUPP and value["preadv2"] == 4096
    assert value["MADV_PAGEOUT"] == value["MADV_COLD"] == errno.EPERM
    assert value["MADV_DONTNEED"] == value["MADV_WILLNEED"] == "allowed"     # what malloc and numpy use
    assert value["clone3"] == errno.ENOSYS               # so that the C library falls back to clone
    if MACHINE == "x86_64":
        assert value["x32"] == errno.EPERM
    # only the fallback without namespaces shares the machine's network: there, no sockets at all
    assert value["socket"] == (errno.EPERM if mode == "subreaper" else "allowed")
    # families a network namespace does not keep apart (vsock's ports are the machine's), or not needed
    assert value["vsock"] == value["netlink"] == value["packet"] == errno.EPERM
    assert value["works"] == [[1], 7, 64.0 * 64 * 64]


# -------------------------------------------------------------- who the submission runs as

IDENTITY_PROBE = """
import os
def probe():
    status = {}
    for line in open("/proc/self/status"):
        key, _, value = line.partition(":")
        status[key] = value.strip()
    return {"uid": os.getuid(), "euid": os.geteuid(), "gid": os.getgid(), "groups": os.getgroups(),
            "caps": [status["CapEff"], status["CapPrm"], status["CapBnd"]], "nnp": status["NoNewPrivs"],
            "seccomp": status["Seccomp"]}
"""


def _account_uids() -> set[int]:
    return {int(line.split(":")[2]) for line in Path("/etc/passwd").read_text().splitlines()
            if line.count(":") >= 2 and line.split(":")[2].isdigit()}


@pytest.mark.parametrize("mode", MODES)
def test_the_submission_runs_as_a_fresh_user_with_nothing(mode):
    (first, held, _), (second, _, _) = run_probes(mode, [IDENTITY_PROBE, IDENTITY_PROBE])
    for value in (first, second):
        if os.geteuid() == 0:
            assert held["own_user"] is True
            assert value["uid"] == value["euid"] == value["gid"] != 0
            assert value["uid"] not in _account_uids() and value["groups"] == []
        assert value["caps"][:2] == ["0000000000000000"] * 2 and value["nnp"] == "1"
        assert value["seccomp"] == "2"
    if os.geteuid() == 0:
        assert first["uid"] != second["uid"]                 # a user of its own in every run


# --------------------------------------------------------------- namespaces, ptrace, io_uring

ESCAPE_PROBE = """
import ctypes, errno, os, platform, subprocess
def probe():
    nr = {"x86_64": (101, 425), "aarch64": (117, 425)}[platform.machine()]
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    out = {}
    ctypes.set_errno(0)
    out["unshare(CLONE_NEWUSER)"] = libc.unshare(0x10000000) == 0 or ctypes.get_errno()
    try:
        cmd = subprocess.run(["unshare", "-U", "--map-root-user", "id", "-u"], capture_output=True, text=True,
                             timeout=10)
        out["unshare -U"] = [cmd.returncode, cmd.stdout.strip(), "Operation not permitted" in cmd.stderr]
    except OSError as err:           # not in the sandbox's view at all (``resident``), or refused
        out["unshare -U"] = [None, "", err.errno in (errno.EPERM, errno.ENOENT)]
    ctypes.set_errno(0)
    out["ptrace the supervisor"] = libc.syscall(nr[0], 16, os.getppid(), 0, 0) == 0 or ctypes.get_errno()
    ctypes.set_errno(0)
    out["ptrace traceme"] = libc.syscall(nr[0], 0, 0, 0, 0) == 0 or ctypes.get_errno()
    try:
        with open(f"/proc/{os.getppid()}/mem", "rb") as f:
            out["supervisor memory"] = len(f.read(1))
    except OSError as err:
        out["supervisor memory"] = err.errno
    params = ctypes.create_string_buffer(120)
    ctypes.set_errno(0)
    out["io_uring_setup"] = libc.syscall(nr[1], 4, params) >= 0 or ctypes.get_errno()
    return out
"""


@pytest.mark.parametrize("mode", MODES)
def test_no_user_namespace_no_ptrace_of_the_supervisor_no_io_uring(mode):
    [(value, _, _)] = run_probes(mode, [ESCAPE_PROBE])
    assert value["unshare(CLONE_NEWUSER)"] == errno.EPERM
    code, stdout, refused = value["unshare -U"]
    assert code != 0 and stdout == "" and refused
    assert value["ptrace the supervisor"] == errno.EPERM and value["ptrace traceme"] == errno.EPERM
    assert value["supervisor memory"] in (errno.EACCES, errno.EPERM)
    assert value["io_uring_setup"] == errno.EPERM


# -------------------------------------------------------------- state between sandboxes

LEAVE_PROBE = """
import ctypes, os, platform
MARK = "__MARK__"
def probe():
    add_key = {"x86_64": 248, "aarch64": 217}[platform.machine()]
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    out = {}
    for folder in ("/tmp", "/dev/shm", "/var/tmp"):
        try:
            os.makedirs(f"{folder}/attack-dir-{MARK}", exist_ok=True)
            with open(f"{folder}/attack-{MARK}", "w") as f:
                f.write("left")
            with open(f"{folder}/attack-dir-{MARK}/inside", "w") as f:
                f.write("left")
            os.chmod(f"{folder}/attack-{MARK}", 0o666)
            out[folder] = "written"
        except OSError as err:
            out[folder] = err.errno
    ctypes.set_errno(0)
    for ring in (-4, -5, -3):          # the user, user-session and session keyrings
        r = libc.syscall(add_key, b"user", f"attack-{MARK}".encode(), b"1", 1, ctypes.c_long(ring))
        out[f"add_key {ring}"] = "added" if r >= 0 else ctypes.get_errno()
    return out
"""

LOOK_PROBE = """
import ctypes, os, platform
MARK = "__MARK__"
def probe():
    keyctl = {"x86_64": 250, "aarch64": 219}[platform.machine()]
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    found = [p for p in (f"{f}/attack-{MARK}" for f in ("/tmp", "/dev/shm", "/var/tmp")) if os.path.exists(p)]
    ctypes.set_errno(0)
    keys = [libc.syscall(keyctl, 10, ctypes.c_long(ring), b"user", f"attack-{MARK}".encode(), 0) >= 0
            or ctypes.get_errno() for ring in (-4, -5, -3)]
    return {"files": found, "keys": keys}
"""


@pytest.mark.parametrize("mode", MODES)
def test_nothing_a_sandbox_leaves_in_tmp_shm_or_a_keyring_reaches_the_next(mode):
    mark = str(870_000 + os.getpid() % 100_000)
    (left, held, swept), (looked, _, _) = run_probes(mode, [LEAVE_PROBE.replace("__MARK__", mark),
                                                            LOOK_PROBE.replace("__MARK__", mark)])
    assert all(left[f"add_key {ring}"] == errno.EPERM for ring in (-4, -5, -3))
    assert looked == {"files": [], "keys": [errno.EPERM] * 3}
    for folder in ("/tmp", "/dev/shm", "/var/tmp"):          # and no trace on the machine
        assert not os.path.exists(f"{folder}/attack-{mark}") and not os.path.exists(f"{folder}/attack-dir-{mark}")
    if mode == "subreaper":      # it wrote to the machine's own folders: the grader removed it all
        written = [f for f in ("/tmp", "/dev/shm", "/var/tmp") if left[f] == "written"]
        assert written and swept == 2 * len(written)
        assert held["private_tmp"] is False
    else:
        assert held["private_tmp"] is True


HOLD_SOCKET_PROBE = """
import socket, time
def probe():
    try:
        server = socket.socket(socket.AF_UNIX)
        server.bind("\\0attack-__MARK__")
        server.listen(1)
    except OSError as err:
        return ["refused", err.errno]
    time.sleep(4)                   # held while the next sandbox looks for it
    return ["held"]
"""

FIND_SOCKET_PROBE = """
import socket
def probe():
    try:
        with socket.socket(socket.AF_UNIX) as s:
            s.connect("\\0attack-__MARK__")
        return ["connected"]
    except OSError as err:
        return ["not found", err.errno]
"""


@pytest.mark.parametrize("mode", MODES)
def test_an_abstract_socket_of_one_sandbox_is_out_of_reach_of_another_running_beside_it(mode):
    mark = str(880_000 + os.getpid() % 100_000)
    (held_it, _, _), (found, _, _) = run_probes(mode, [HOLD_SOCKET_PROBE.replace("__MARK__", mark),
                                                       FIND_SOCKET_PROBE.replace("__MARK__", mark)], stagger=1.5)
    if mode == "subreaper":          # no network namespace: no sockets at all
        assert held_it == ["refused", errno.EPERM] and found == ["not found", errno.EPERM]
    else:                            # a network namespace each: the name is not there
        assert held_it == ["held"] and found == ["not found", errno.ECONNREFUSED]
    assert processes_matching(f"attack-{mark}") == []


# ------------------------------------------------------------------- the program itself

def test_the_filter_denies_each_call_on_both_architectures_and_kills_any_other():
    program = seccomp.instructions()
    eperm = seccomp.RET_ERRNO | errno.EPERM
    for arch, audit in seccomp.ARCHES.items():
        numbers = seccomp.SYSCALLS[arch]
        for name in seccomp.DENIED:
            if name in numbers:
                assert seccomp.run_filter(program, numbers[name], audit) == eperm, (arch, name)
        for command in seccomp.LOCKING.values():
            assert seccomp.run_filter(program, numbers["fcntl"], audit, (3, command)) == eperm, (arch, command)
        for command in (0, 1, 2, 3, 4, 1025, 1030, 1031):   # F_DUPFD, F_GETFD..F_SETFL, F_GETLEASE, ...
            assert seccomp.run_filter(program, numbers["fcntl"], audit, (3, command)) == seccomp.RET_ALLOW, command
        assert seccomp.run_filter(program, numbers["clone3"], audit) == seccomp.RET_ERRNO | errno.ENOSYS
        for advice in (20, 21):                 # MADV_COLD, MADV_PAGEOUT
            assert seccomp.run_filter(program, numbers["madvise"], audit, (0, 4096, advice)) == eperm, advice
        for advice in (0, 3, 4, 8, 14, 15):      # normal, willneed, dontneed, free, (no)hugepage
            assert seccomp.run_filter(program, numbers["madvise"], audit, (0, 4096, advice)) == seccomp.RET_ALLOW
        for call in ("preadv2", "pwritev2"):
            for flags, verdict in ((0, seccomp.RET_ALLOW), (0x1, seccomp.RET_ALLOW), (0x8, seccomp.RET_ERRNO | errno.EOPNOTSUPP),
                                   (0x1 | 0x8, seccomp.RET_ERRNO | errno.EOPNOTSUPP)):
                assert seccomp.run_filter(program, numbers[call], audit, (3, 0, 1, 0, 0, flags)) == verdict, (call, flags)
        for flag in (0x80, 0x20000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000):
            assert seccomp.run_filter(program, numbers["clone"], audit, (flag | 17,)) == eperm, hex(flag)
        thread_flags = 0x3D0F00             # what the C library passes for a thread
        assert seccomp.run_filter(program, numbers["clone"], audit, (thread_flags,)) == seccomp.RET_ALLOW
        assert seccomp.run_filter(program, numbers["socket"], audit, (1,)) == seccomp.RET_ALLOW
        for family in (1, 2, 10):              # AF_UNIX, AF_INET, AF_INET6: what a namespace keeps apart
            for call in ("socket", "socketpair"):
                assert seccomp.run_filter(program, numbers[call], audit, (family, 1)) == seccomp.RET_ALLOW
        for family in (0, 3, 16, 17, 21, 29, 30, 31, 38, 40, 44, 45, 46):   # vsock (40), netlink, packet, ...
            for call in ("socket", "socketpair"):
                assert seccomp.run_filter(program, numbers[call], audit, (family, 1)) == eperm, (call, family)
        assert seccomp.run_filter(seccomp.instructions(no_sockets=True), numbers["socket"], audit, (1,)) == eperm
        for allowed in (0, 1, 3, 9, 60, 63):   # read/write/close/mmap... on x86_64; others on aarch64
            if allowed not in numbers.values():
                assert seccomp.run_filter(program, allowed, audit) == seccomp.RET_ALLOW
    # a name missing from an architecture's table denies nothing there: only the calls it lacks
    assert [n for n in seccomp.DENIED if n not in seccomp.SYSCALLS["x86_64"]] == []
    assert [n for n in seccomp.DENIED if n not in seccomp.SYSCALLS["aarch64"]] == ["inotify_init"]
    x86 = seccomp.SYSCALLS["x86_64"]
    assert seccomp.run_filter(program, 0x40000000 | 39, seccomp.AUDIT_ARCH_X86_64) == eperm       # x32
    assert seccomp.run_filter(program, 20, 0x40000003) == seccomp.RET_KILL_PROCESS               # i386
    assert seccomp.run_filter(program, x86["keyctl"], 0xC0000028) == seccomp.RET_KILL_PROCESS     # arm (32-bit)
    assert len(seccomp.program()) == 8 * len(program)


HEADERS = {"x86_64": ["/usr/include/x86_64-linux-gnu/asm/unistd_64.h", "/usr/include/asm/unistd_64.h"],
           "aarch64": ["/usr/include/asm-generic/unistd.h"]}


@pytest.mark.parametrize("arch", sorted(seccomp.SYSCALLS))
def test_the_filters_numbers_are_the_kernels(arch):
    """The numbers agree with the kernel's headers, where the machine has them (linux-libc-dev)."""
    header = next((Path(p) for p in HEADERS[arch] if Path(p).exists()), None)
    if header is None:
        pytest.skip(f"no kernel header for {arch} here (linux-libc-dev)")
    text = header.read_text()
    defined = {m[0]: int(m[1]) for m in re.findall(r"#define __NR(?:3264)?_(\w+)\s+(\d+)\b", text)}
    for name, number in seccomp.SYSCALLS[arch].items():
        assert defined.get(name) == number, (arch, name, defined.get(name), number)


# ------------------------------------------------------------- what held, from the reports

@pytest.mark.parametrize("mode_class", ["Bubblewrap", "Namespaces", "Subreaper"])
def test_held_comes_from_what_the_harness_process_reported(mode_class):
    """``Run.held`` believes the kernel's answers as the harness's process read them back, not
    the plan: a uid other than the one given, capabilities left, or no seccomp mode 2 each turn
    their claim off."""
    from graders.sandbox import Run, modes
    mode = getattr(modes, mode_class)("test")
    start = {"t": "supervisor", "pid1": mode.contained, "subreaper": not mode.contained, "uid": 123_456,
             "view": {"hidden": ["/work"]} if mode_class == "Namespaces" else None}
    good = {"t": "confined", "uid": 123_456, "euid": 123_456, "caps": 0, "seccomp": 2}
    held = mode.held(Run(supervisor=start, confined=good), 123_456, False)
    assert held["own_user"] and held["seccomp"] and held["supervisor"]
    assert held["no_network"] and held["file_view"] == held["private_tmp"] == mode.contained
    for changed, claim in (({"uid": 0}, "own_user"), ({"caps": 1 << 21}, "own_user"), ({"seccomp": 0}, "seccomp")):
        assert mode.held(Run(supervisor=start, confined={**good, **changed}), 123_456, False)[claim] is False
    nothing = mode.held(Run(supervisor=start), 123_456, False)       # no report: nothing is claimed
    assert not nothing["own_user"] and not nothing["seccomp"]
    if mode_class == "Subreaper":          # its "no network" is the filter's: without it, none
        assert nothing["no_network"] is False


def test_the_sealed_filter_denies_exec_and_becoming_dumpable_and_only_those():
    """The weakest fallback's filter (``sealed``): no exec and no PR_SET_DUMPABLE (the two ways a
    process of the run would make its /proc files, its OOM score among them, its own again);
    every other prctl stays allowed; the other modes' filters allow an exec.  memfd is denied by
    every filter."""
    eperm = seccomp.RET_ERRNO | errno.EPERM
    sealed, plain = seccomp.instructions(no_sockets=True, sealed=True), seccomp.instructions()
    for arch, audit in seccomp.ARCHES.items():
        numbers = seccomp.SYSCALLS[arch]
        for name in ("execve", "execveat"):
            assert seccomp.run_filter(sealed, numbers[name], audit) == eperm, (arch, name)
            assert seccomp.run_filter(plain, numbers[name], audit) == seccomp.RET_ALLOW, (arch, name)
        assert seccomp.run_filter(sealed, numbers["prctl"], audit, (4, 1)) == eperm            # PR_SET_DUMPABLE
        for option in (1, 15, 16, 36, 38):      # PDEATHSIG, SET_NAME, GET_NAME, SUBREAPER, NO_NEW_PRIVS
            assert seccomp.run_filter(sealed, numbers["prctl"], audit, (option, 1)) == seccomp.RET_ALLOW, option
        for program in (sealed, plain):
            for name in ("memfd_create", "memfd_secret", "shmget", "mq_open"):
                assert seccomp.run_filter(program, numbers[name], audit) == eperm, (arch, name)
        assert seccomp.run_filter(sealed, numbers["socket"], audit, (1,)) == eperm
        read = {"x86_64": 0, "aarch64": 63}[arch]
        assert seccomp.run_filter(sealed, read, audit) == seccomp.RET_ALLOW
    assert len(seccomp.program(True, True)) == 8 * len(sealed)
