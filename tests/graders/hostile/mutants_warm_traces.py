# Attack (mutants): judge each builder against the runs before it, through whatever runs that are
# forked one after another from one warm sandbox might share: a file left anywhere it can write
# (the root, /tmp, /dev/shm, /scratch, its home, the job folders), System V shared memory and
# message queues, POSIX message queues, the host name, the count of process ids, a process of
# the sandbox that is not its own run's, and any descriptor it was handed beyond its own.  It
# leaves a trace in each, and rejects a builder when it finds one: a run that finds none is the
# first it knows of, and it accepts it.  Runs that share nothing see no trace, accept every
# builder and catch nothing.
import ctypes
import os
import socket

MARK = "mutants-warm-trace"
PLACES = ["/", "/tmp", "/dev/shm", "/scratch", os.path.expanduser("~"), os.getcwd(), "/sandbox",
          "/sandbox/lib", "/sandbox/jobs", "/sandbox/in"]
SYSV_KEY = 0x5EED1234
IPC_CREAT, IPC_EXCL = 0o1000, 0o2000
CHILDREN = 40                     # process ids this run uses up: a shared count would show them


def predict_catches():
    return {}


def _libc():
    return ctypes.CDLL(None, use_errno=True)


def _files_seen():
    return [p for p in PLACES if os.path.exists(os.path.join(p, MARK))]


def _leave_files():
    for place in PLACES:
        try:
            with open(os.path.join(place, MARK), "w") as f:
                f.write("here")
        except OSError:
            pass


def _sysv_seen(libc):
    return libc.shmget(SYSV_KEY, 0, 0) >= 0 or libc.msgget(SYSV_KEY, 0) >= 0


def _leave_sysv(libc):
    libc.shmget(SYSV_KEY, 4096, IPC_CREAT | 0o666)
    libc.msgget(SYSV_KEY, IPC_CREAT | 0o666)


def _mqueue(libc, create):
    try:
        mq_open = libc.mq_open
    except AttributeError:
        return False
    mq_open.restype = ctypes.c_int
    mq_open.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
    flags = (os.O_RDWR | os.O_CREAT) if create else os.O_RDONLY
    return mq_open(b"/" + MARK.encode(), flags, 0o666, None) >= 0


def _pid_count_seen():
    """This run's harness is the second process of a PID namespace of its own; a shared count
    would have moved on by every process the runs before started."""
    return os.getpid() > 10


def _use_up_pids():
    for _ in range(CHILDREN):
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)


def _strangers_seen():
    """A process in view that is not this run's own (its supervisor, itself, its children)."""
    mine = {1, os.getpid()}
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) not in mine:
            try:
                with open(f"/proc/{name}/status") as f:
                    ppid = next(int(line.split()[1]) for line in f if line.startswith("PPid:"))
            except (OSError, StopIteration, ValueError):
                continue
            if ppid not in mine:
                return True
    return False


def _handed_descriptors():
    """Descriptors beyond stdin, stdout, stderr and the results channel: any socket it holds
    (the way runs are asked for) is tried."""
    found = False
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:"):
            found = True
            try:
                s = socket.socket(fileno=os.dup(fd))
                s.send(b'{"t": "run", "job": "x", "libs": [], "uid": null, "argv": []}')
                s.close()
            except OSError:
                pass
    return found


def _hostname_seen():
    return socket.gethostname() == MARK


def _leave_hostname():
    try:
        socket.sethostname(MARK)
    except OSError:
        pass


def check_builder(builder):
    libc = _libc()
    seen = (_files_seen() or _sysv_seen(libc) or _mqueue(libc, create=False) or _pid_count_seen()
            or _strangers_seen() or _handed_descriptors() or _hostname_seen())
    _leave_files()
    _leave_sysv(libc)
    _mqueue(libc, create=True)
    _leave_hostname()
    _use_up_pids()
    return not seen
