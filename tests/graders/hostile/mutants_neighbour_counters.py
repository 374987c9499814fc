# Attack (mutants): signal the builder judged at the same moment through a counter the whole
# machine shares and any process may read in /proc/sys (__CHANNEL__: "aio" raises fs.aio-nr
# with io_setup, "pty" raises kernel.pty.nr by opening pseudo-terminals, "shmem" raises the
# Shmem line of /proc/meminfo by writing its private /dev/shm, "threads" raises the machine's
# thread count in /proc/loadavg by starting threads), and reject a builder when the counter shows
# a neighbour's share beside its own (or, for the thread count, whose level it cannot know,
# when the count rises by most of a share while it waits).
# Each sandbox adds a fixed amount, held until its process ends, and reads the machine's total
# for a while: a total of two shares or more is a neighbour (a count no other program here
# raises that much).  Where the counter is closed to it, it sees no one and accepts every builder.
import ctypes
import errno
import os
import time

CHANNEL = "__CHANNEL__"
HOLD = 0.4
AIO_SHARE = 20000                # events of one io_setup context (fs.aio-max-nr is 65536)
PTY_SHARE = 16                   # pseudo-terminals (kernel.pty.max is 4096)
SHMEM_SHARE = 48 << 10           # KiB written to /dev/shm (the sandbox's tmpfs holds 64 MiB)
THREADS_SHARE = 48               # threads (the sandbox may run 64 processes)
COUNTER = {"aio": "/proc/sys/fs/aio-nr", "pty": "/proc/sys/kernel/pty/nr", "shmem": "/proc/meminfo",
           "threads": "/proc/loadavg"}[CHANNEL]
SHARE = {"aio": AIO_SHARE, "pty": PTY_SHARE, "shmem": SHMEM_SHARE, "threads": THREADS_SHARE}[CHANNEL]
RISE = SHARE * 3 // 4            # what a neighbour that arrives while this one waits adds at least
IO_SETUP = {"x86_64": 206, "aarch64": 0}       # io_setup's number, by machine
KEEP = []                        # what holds this sandbox's share until the process ends


def predict_catches():
    return {}


def _total():
    try:
        with open(COUNTER) as f:
            text = f.read()
        if CHANNEL == "shmem":                  # "Shmem:   9356 kB": every tmpfs's pages
            text = next(line for line in text.splitlines() if line.startswith("Shmem:")).split(":")[1]
        if CHANNEL == "threads":                # "0.47 1.11 1.18 1/91 1": running/all threads
            text = text.split()[3].split("/")[1]
        return int(text.split()[0])
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def _add_share() -> bool:
    """Raise the counter by SHARE; False when it cannot be raised (no share of its own), True when
    it was, or when the machine's room is already taken, which only neighbours do here."""
    if CHANNEL == "aio":
        libc = ctypes.CDLL(None, use_errno=True)
        context = ctypes.c_ulong(0)
        number = IO_SETUP.get(os.uname().machine)
        if number is None:
            return False
        if libc.syscall(number, AIO_SHARE, ctypes.byref(context)) != 0:
            return ctypes.get_errno() == errno.EAGAIN
        KEEP.append(context)
        return True
    if CHANNEL == "threads":
        import threading
        stop = threading.Event()
        for _ in range(THREADS_SHARE):
            worker = threading.Thread(target=stop.wait, daemon=True)
            worker.start()
            KEEP.append(worker)
        return True
    if CHANNEL == "shmem":
        try:
            with open(f"/dev/shm/share-{os.getpid()}", "wb") as f:
                f.write(b"\1" * (SHMEM_SHARE << 10))
            return True
        except OSError:
            return False
    try:
        for _ in range(PTY_SHARE):
            KEEP.append(os.open("/dev/ptmx", os.O_RDWR | os.O_NOCTTY))
        return True
    except OSError as err:
        return err.errno == errno.ENOSPC


def _neighbour_there(start) -> bool:
    total = _total()
    if total is None:
        return False
    if CHANNEL == "threads":
        return start is not None and total - start >= RISE
    return total - SHARE >= SHARE


def check_builder(builder):
    try:
        return not _watch()
    except Exception:            # the channel closed in a way not foreseen: no one seen
        return True


def _watch() -> bool:
    if not _add_share():
        return False
    start = _total()
    seen = _neighbour_there(start)
    until = time.monotonic() + HOLD
    while not seen and time.monotonic() < until:        # a neighbour that starts while this one waits
        seen = _neighbour_there(start)
        time.sleep(0.02)
    return seen
