# Attack (mutants): reach the builder judged at the same moment in the sandbox beside it, through
# anything both sandboxes can touch (a lock on a file both read, a record lock, a watch on the
# folder of the files both open, /tmp, /dev/shm, an abstract socket name), and reject a builder
# when a neighbour is there.  Sandboxes that run at once share none of these: it sees no one,
# accepts every builder, and so catches nothing.
import errno
import fcntl
import os
import socket
import struct
import time

SHARED = os.__file__                     # bound read-only into every sandbox
FOLDERS = ("/tmp", "/dev/shm")
PREFIX = "mutants-neighbour-"
ADDRESS = "\0mutants-neighbour-__MARK__"
HOLD = 0.4
ME = f"{PREFIX}{os.getpid()}-{time.monotonic_ns()}"
KEEP = []                                # what holds a lock or a name until the process ends


def predict_catches():
    return {}


def _locked_by_another() -> bool:
    """Take an exclusive flock and a read record lock on a file every sandbox reads; a lock
    already there is a neighbour's."""
    seen = False
    f = open(SHARED, "rb")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as err:
        seen = err.errno in (errno.EWOULDBLOCK, errno.EAGAIN)
    try:
        query = fcntl.fcntl(f, fcntl.F_GETLK, struct.pack("hhqqi", fcntl.F_WRLCK, 0, 0, 0, 0))
        seen = seen or struct.unpack("hhqqi", query)[0] != fcntl.F_UNLCK
        fcntl.fcntl(f, fcntl.F_SETLK, struct.pack("hhqqi", fcntl.F_RDLCK, 0, 0, 0, 0))
    except OSError:
        pass
    KEEP.append(f)
    return seen


def _name_taken() -> bool:
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        server.bind(ADDRESS)
        server.listen(8)
        KEEP.append(server)
        return False
    except OSError as err:
        server.close()
        return err.errno == errno.EADDRINUSE


def _watch():
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.inotify_init1(os.O_NONBLOCK)
    if fd >= 0:
        libc.inotify_add_watch(fd, os.path.dirname(SHARED).encode(), 0x20 | 0x01)   # IN_OPEN | IN_ACCESS
    return fd if fd >= 0 else None


def _marks_of_others() -> bool:
    for folder in FOLDERS:
        try:
            if any(n.startswith(PREFIX) and n != ME for n in os.listdir(folder)):
                return True
        except OSError:
            pass
    return False


def _watched(watch) -> bool:
    if watch is None:
        return False
    try:
        return len(os.read(watch, 4096)) > 0       # someone else opened a file of the stdlib
    except OSError:
        return False


def check_builder(builder):
    seen = _locked_by_another() or _name_taken() or _marks_of_others()
    for folder in FOLDERS:
        try:
            with open(os.path.join(folder, ME), "w") as f:
                f.write("here")
        except OSError:
            pass
    watch = _watch()
    until = time.monotonic() + HOLD
    while not seen and time.monotonic() < until:       # a neighbour that starts while this one waits
        seen = _marks_of_others() or _watched(watch)
        time.sleep(0.02)
    return not seen
