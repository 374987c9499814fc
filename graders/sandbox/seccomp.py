"""The sandbox's seccomp filter: a classic BPF program, built here with ``struct``, that the
kernel runs on every system call of the submission's processes.

bubblewrap installs it (``--seccomp FD``) just before it starts the supervisor; the fallback's
supervisor installs it (``prctl(PR_SET_SECCOMP)``) in the harness's process once its privileges
are dropped, before the submission is loaded.  Every child inherits it and none can remove it.

The program, on ``struct seccomp_data {int nr; u32 arch; u64 ip; u64 args[6]}``::

    load arch                      x86_64 or aarch64, else kill the process (an i386 int 0x80
                                   call arrives with arch i386 and other numbers)
    load nr
    x86_64: nr >= 0x40000000       the x32 ABI: EPERM
    nr in DENIED                   EPERM
    nr == madvise                  MADV_COLD or MADV_PAGEOUT (args[2]): EPERM
    nr == preadv2, pwritev2        RWF_NOWAIT in the flags (args[5]): EOPNOTSUPP
    nr == fcntl                    a lock, lease or directory notice (args[1] in LOCKING): EPERM
    nr == clone                    flags (args[0], low 32 bits) & any CLONE_NEW*: EPERM
    nr == clone3                   ENOSYS (its flags are in memory the filter cannot read; the
                                   C library then falls back to clone, whose flags it can)
    nr == socket (``no_sockets``)  EPERM: the fallback without namespaces shares the machine's
                                   network and abstract socket names
    nr == execve, execveat         EPERM (``sealed``: the fallback without namespaces), and
    nr == prctl                    PR_SET_DUMPABLE (args[0]): EPERM, likewise; see below
    nr == socket, socketpair       a family other than AF_UNIX, AF_INET, AF_INET6 (args[0]): EPERM
                                   (vsock, for one, has one table of ports for the whole machine,
                                   whatever the network namespace)
    otherwise                      allow

DENIED: kernel keyrings (a counter that outlives the sandbox), namespaces (``unshare``,
``setns``), io_uring, ptrace and cross-process memory, every mount call, bpf,
perf_event_open, userfaultfd, module and kexec loading, swap, System V IPC and POSIX message
queues (state shared with other sandboxes where there is no IPC namespace), and what would let two
sandboxes that run at once signal each other through a file both can read (the system's and
Python's, bound read-only into each): ``flock``, ``fcntl``'s record locks, leases and directory
notices, inotify and fanotify watches, and ``mincore``, which tells which pages of a file are in
the machine's page cache (one sandbox reading a page would mark it for another), with the other
ways to ask it (``preadv2``/``pwritev2`` with ``RWF_NOWAIT``: EOPNOTSUPP) or to take a page out
of it (``fadvise64``, ``madvise``'s ``MADV_COLD`` and ``MADV_PAGEOUT``, ``process_madvise``);
how long a read takes says nothing, as every file a sandbox sees is a copy in memory
(``resident``); and the
machine-wide counts a call can raise or read: ``io_setup`` (AIO events, counted and capped for
the whole machine) and ``sysinfo`` (the machine's process count and free memory); and memory that
no process's resident size counts, which a run could hold past every per-process limit (where no
cgroup counts it, the kernel would then kill the largest process of the machine, the grader):
``memfd_create`` and ``memfd_secret`` (System V shared memory and message queues are denied
above; a file in a memory-backed folder is the grader's guard's, ``guard``).

``sealed`` (the fallback without namespaces, where no cgroup may hold the run): every process of
the run has ``oom_score_adj`` 1000 (the supervisor sets it; raising one's own needs no
capability), so that when memory runs out the kernel kills the run's processes before any other.
Lowering it back needs only write access to one's own ``/proc/PID/oom_score_adj`` (down to the
floor the grader had, 0, without ``CAP_SYS_RESOURCE``): the run's processes are kept not dumpable,
which makes their /proc files root's, and the filter denies the two ways back to dumpable,
``prctl(PR_SET_DUMPABLE)`` and an exec (which makes a process dumpable again).  The rest of
what the machine counts is covered in the sandbox's /proc (``supervisor.MACHINE_WIDE_PROC_FILES``).  Threads (clone
without namespace flags), fork, and everything numpy and the harness use stay allowed.
"""
from __future__ import annotations

import errno
import functools
import os
import struct

# classic BPF opcodes (linux/filter.h)
LD_W_ABS = 0x20                 # BPF_LD | BPF_W | BPF_ABS
JEQ_K, JGE_K, JSET_K = 0x15, 0x35, 0x45
RET_K = 0x06

RET_KILL_PROCESS = 0x80000000
RET_ERRNO = 0x00050000
RET_ALLOW = 0x7FFF0000

NR_OFFSET, ARCH_OFFSET, ARGS_OFFSET = 0, 4, 16      # struct seccomp_data (little-endian on both)

AUDIT_ARCH_X86_64 = 0xC000003E
AUDIT_ARCH_AARCH64 = 0xC00000B7
X32_SYSCALL_BIT = 0x40000000

# CLONE_NEWTIME, NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET
CLONE_NAMESPACES = 0x80 | 0x20000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000

# The system calls denied, by name: the same list on every architecture.
DENIED = ("keyctl", "add_key", "request_key",
          "unshare", "setns",
          "io_uring_setup", "io_uring_enter", "io_uring_register",
          "ptrace", "process_vm_readv", "process_vm_writev",
          "mount", "umount2", "pivot_root", "move_mount", "open_tree", "fsopen", "fsconfig", "fsmount",
          "fspick", "mount_setattr",
          "bpf", "perf_event_open", "userfaultfd",
          "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
          "swapon", "swapoff",
          "shmget", "msgget", "semget", "mq_open",
          "flock", "inotify_init", "inotify_init1", "fanotify_init", "mincore",
          "io_setup", "sysinfo", "fadvise64", "process_madvise",
          "memfd_create", "memfd_secret")

# The weakest fallback's filter (``sealed``: no namespaces, no cgroup may hold the run) also denies
# what would let a run lower its place in the kernel's choice of what to kill when memory runs
# out: its processes are not dumpable, so their /proc files (``oom_score_adj`` among them) are
# root's; PR_SET_DUMPABLE would make them its own again, and so would an exec.
SEALED = ("execve", "execveat")
PR_SET_DUMPABLE = 4

# A page of a file leaves the page cache on request: MADV_COLD and MADV_PAGEOUT (madvise's third
# argument) on a mapping of it; and preadv2/pwritev2 with RWF_NOWAIT (their sixth) fail at once
# on a page that is not there, which says whether it is.
EVICTING_ADVICE = {"MADV_COLD": 20, "MADV_PAGEOUT": 21}
RWF_NOWAIT = 0x8

# The socket families a network namespace keeps apart and that a submission may want (a
# loopback server of its own, a socketpair); every other family is denied.
SOCKET_FAMILIES = {"AF_UNIX": 1, "AF_INET": 2, "AF_INET6": 10}

# fcntl's commands that reach beyond the calling process's own descriptors: record locks (POSIX
# and open-file-description, F_GETLK included: it reports another process's lock), leases and
# dnotify (F_NOTIFY signals accesses to a folder's files).
LOCKING = {"F_GETLK": 5, "F_SETLK": 6, "F_SETLKW": 7, "F_OFD_GETLK": 36, "F_OFD_SETLK": 37,
           "F_OFD_SETLKW": 38, "F_SETLEASE": 1024, "F_NOTIFY": 1026}

# Their numbers (arch/x86/entry/syscalls/syscall_64.tbl; include/uapi/asm-generic/unistd.h for
# aarch64), with fcntl, clone, clone3 and socket, which the program treats apart.  A call an
# architecture does not have (inotify_init on aarch64, where only inotify_init1 exists) is absent.
SYSCALLS = {
    "x86_64": {"keyctl": 250, "add_key": 248, "request_key": 249, "unshare": 272, "setns": 308,
               "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
               "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311,
               "mount": 165, "umount2": 166, "pivot_root": 155, "move_mount": 429, "open_tree": 428,
               "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433, "mount_setattr": 442,
               "bpf": 321, "perf_event_open": 298, "userfaultfd": 323,
               "kexec_load": 246, "kexec_file_load": 320, "init_module": 175, "finit_module": 313,
               "delete_module": 176, "swapon": 167, "swapoff": 168,
               "shmget": 29, "msgget": 68, "semget": 64, "mq_open": 240,
               "flock": 73, "inotify_init": 253, "inotify_init1": 294, "fanotify_init": 300, "mincore": 27,
               "io_setup": 206, "sysinfo": 99, "fadvise64": 221, "process_madvise": 440, "madvise": 28,
               "memfd_create": 319, "memfd_secret": 447, "execve": 59, "execveat": 322, "prctl": 157,
               "preadv2": 327, "pwritev2": 328, "fcntl": 72, "socketpair": 53, "clone": 56, "clone3": 435, "socket": 41},
    "aarch64": {"keyctl": 219, "add_key": 217, "request_key": 218, "unshare": 97, "setns": 268,
                "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
                "ptrace": 117, "process_vm_readv": 270, "process_vm_writev": 271,
                "mount": 40, "umount2": 39, "pivot_root": 41, "move_mount": 429, "open_tree": 428,
                "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433, "mount_setattr": 442,
                "bpf": 280, "perf_event_open": 241, "userfaultfd": 282,
                "kexec_load": 104, "kexec_file_load": 294, "init_module": 105, "finit_module": 273,
                "delete_module": 106, "swapon": 224, "swapoff": 225,
                "shmget": 194, "msgget": 186, "semget": 190, "mq_open": 180,
                "flock": 32, "inotify_init1": 26, "fanotify_init": 262, "mincore": 232,
                "io_setup": 0, "sysinfo": 179, "fadvise64": 223, "process_madvise": 440, "madvise": 233,
                "memfd_create": 279, "memfd_secret": 447, "execve": 221, "execveat": 281, "prctl": 167,
                "preadv2": 286, "pwritev2": 287, "fcntl": 25, "socketpair": 199, "clone": 220, "clone3": 435, "socket": 198},
}
ARCHES = {"x86_64": AUDIT_ARCH_X86_64, "aarch64": AUDIT_ARCH_AARCH64}


def _op(code: int, k: int, jt: int = 0, jf: int = 0) -> tuple[int, int, int, int]:
    return (code, jt, jf, k)


def _arch_block(arch: str, no_sockets: bool, sealed: bool = False) -> list[tuple]:
    """The instructions for one architecture, from loading ``nr`` to a return on every path."""
    numbers = SYSCALLS[arch]
    eperm, enosys = RET_ERRNO | errno.EPERM, RET_ERRNO | errno.ENOSYS
    block = [_op(LD_W_ABS, NR_OFFSET)]
    if arch == "x86_64":
        block += [_op(JGE_K, X32_SYSCALL_BIT, 0, 1), _op(RET_K, eperm)]
    for name in DENIED:
        if name in numbers:
            block += [_op(JEQ_K, numbers[name], 0, 1), _op(RET_K, eperm)]
    block += [_op(JEQ_K, numbers["clone3"], 0, 1), _op(RET_K, enosys)]
    if no_sockets:
        block += [_op(JEQ_K, numbers["socket"], 0, 1), _op(RET_K, eperm)]
    if sealed:
        for name in SEALED:
            block += [_op(JEQ_K, numbers[name], 0, 1), _op(RET_K, eperm)]
        # prctl: the option is the first argument; every path of this part returns
        block += [_op(JEQ_K, numbers["prctl"], 0, 4), _op(LD_W_ABS, ARGS_OFFSET),
                  _op(JEQ_K, PR_SET_DUMPABLE, 0, 1), _op(RET_K, eperm), _op(RET_K, RET_ALLOW)]
    # socket and socketpair: the family is the first argument; allowed ones return at once
    families = list(SOCKET_FAMILIES.values())
    for call in ("socket", "socketpair"):
        block += [_op(JEQ_K, numbers[call], 0, len(families) + 3), _op(LD_W_ABS, ARGS_OFFSET)]
        block += [_op(JEQ_K, family, len(families) - k, 0) for k, family in enumerate(families)]
        block += [_op(RET_K, eperm), _op(RET_K, RET_ALLOW)]
    # madvise: the advice is the third argument; preadv2 and pwritev2: the flags are the sixth
    block += [_op(JEQ_K, numbers["madvise"], 0, 2 * len(EVICTING_ADVICE) + 2), _op(LD_W_ABS, ARGS_OFFSET + 16)]
    for advice in EVICTING_ADVICE.values():
        block += [_op(JEQ_K, advice, 0, 1), _op(RET_K, eperm)]
    block += [_op(RET_K, RET_ALLOW)]
    for call in ("preadv2", "pwritev2"):
        block += [_op(JEQ_K, numbers[call], 0, 4), _op(LD_W_ABS, ARGS_OFFSET + 40), _op(JSET_K, RWF_NOWAIT, 0, 1),
                  _op(RET_K, RET_ERRNO | errno.EOPNOTSUPP), _op(RET_K, RET_ALLOW)]
    # fcntl: its command is the second argument; every path of this part returns, so loading it
    # over nr leaves nothing below looking at the wrong word
    block += [_op(JEQ_K, numbers["fcntl"], 0, 2 * len(LOCKING) + 2), _op(LD_W_ABS, ARGS_OFFSET + 8)]
    for command in LOCKING.values():
        block += [_op(JEQ_K, command, 0, 1), _op(RET_K, eperm)]
    block += [_op(RET_K, RET_ALLOW)]
    # clone: the flags are its first argument; the last instructions, so the load of args[0]
    # replaces nr only where nothing looks at nr again
    block += [_op(JEQ_K, numbers["clone"], 0, 3),
              _op(LD_W_ABS, ARGS_OFFSET),
              _op(JSET_K, CLONE_NAMESPACES, 0, 1),
              _op(RET_K, eperm),
              _op(RET_K, RET_ALLOW)]
    return block


def instructions(no_sockets: bool = False, sealed: bool = False) -> list[tuple[int, int, int, int]]:
    """The filter as (code, jt, jf, k) instructions (``no_sockets``: socket() denied too;
    ``sealed``: exec and PR_SET_DUMPABLE denied too)."""
    program = [_op(LD_W_ABS, ARCH_OFFSET)]
    for arch, audit in ARCHES.items():
        block = _arch_block(arch, no_sockets, sealed)
        if len(block) > 255:                       # a conditional jump reaches 255 instructions
            raise ValueError(f"the {arch} block is too long for one jump ({len(block)})")
        program += [_op(JEQ_K, audit, 0, len(block))] + block
    program.append(_op(RET_K, RET_KILL_PROCESS))
    return program


@functools.lru_cache(maxsize=4)
def program(no_sockets: bool = False, sealed: bool = False) -> bytes:
    """The filter as the kernel reads it: an array of ``struct sock_filter {u16 code; u8 jt;
    u8 jf; u32 k}``, in this machine's byte order."""
    return b"".join(struct.pack("=HBBI", *ins) for ins in instructions(no_sockets, sealed))


def program_fd(no_sockets: bool = False, sealed: bool = False) -> int:
    """A descriptor to read the program from, at its start (bubblewrap's ``--seccomp FD``,
    the supervisor's ``--seccomp-fd``): an anonymous file, nothing on any disk."""
    fd = os.memfd_create("kvgrader-seccomp", 0)
    os.write(fd, program(no_sockets, sealed))
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def run_filter(prog: list[tuple], nr: int, arch: int, args: tuple = ()) -> int:
    """What the kernel would return for a call: the program interpreted, for the tests (and for
    anyone reading it: the few instructions the filter uses, nothing more)."""
    data = struct.pack("=iIQ6Q", nr, arch, 0, *(list(args) + [0] * 6)[:6])
    acc, pc = 0, 0
    while True:
        code, jt, jf, k = prog[pc]
        if code == LD_W_ABS:
            acc = struct.unpack_from("=I", data, k)[0]
            pc += 1
        elif code == RET_K:
            return k
        else:
            taken = {JEQ_K: acc == k, JGE_K: acc >= k, JSET_K: bool(acc & k)}[code]
            pc += 1 + (jt if taken else jf)
