# Attack (mutants): judge each builder against the runs before it (or the run beside it) through
# the machine's page cache, which every sandbox shares: whether one page of a file every sandbox
# can read is in memory is a bit any process can set (by reading the page) and read.  ``mincore``
# is denied; __CHANNEL__ reads the bit another way: "nowait" reads the page with
# ``preadv2(RWF_NOWAIT)``, which fails with EAGAIN rather than wait for the disk (and starts
# bringing the page in: reading the bit sets it); "timing" times a read of the page against a
# read of a page at random further on that no run has read (from the disk, tens of microseconds
# or more; from memory, about one microsecond): much faster, and the page was there; "cachestat" asks
# ``cachestat(2)`` how many of the page's pages are cached (then reads the page, to set it).
# Page __PAGE__ of __FILE__ (the largest file in a sandbox's view; the test has just dropped the
# machine's copy of it from the cache) is the mark: a run that finds it in memory rejects the
# builder, as one that came after another; the first accepts.  Runs that share nothing see no
# mark, accept every builder and catch nothing.
import ctypes
import os
import random
import time

CHANNEL = "__CHANNEL__"
FILE = "__FILE__"
PAGE = 4096
OFFSET = int("__PAGE__") * PAGE
READ_AHEAD = 64                      # pages: what the kernel may have read after the mark
REFERENCES = 5                       # pages no run has read, timed
MUCH_FASTER = 5                      # a read this many times faster than one from the disk hit memory
CACHESTAT = {"x86_64": 451, "aarch64": 451}


def predict_catches():
    return {}


def _seen_nowait(fd):
    try:
        os.preadv(fd, [bytearray(PAGE)], OFFSET, os.RWF_NOWAIT)
        return True
    except BlockingIOError:
        return False
    except OSError:
        return False


def _read_seconds(fd, offset):
    began = time.perf_counter()
    os.pread(fd, PAGE, offset)
    return time.perf_counter() - began


def _seen_timing(fd):
    pages = os.fstat(fd).st_size // PAGE
    os.pread(fd, PAGE, 0)                # the first read of a process pays for more than the read
    unread = [PAGE * random.randrange(OFFSET // PAGE + READ_AHEAD, pages) for _ in range(REFERENCES)]
    reference = min(_read_seconds(fd, offset) for offset in unread)      # a slow one by chance is no read from the disk
    return _read_seconds(fd, OFFSET) * MUCH_FASTER < reference


def _seen_cachestat(fd):
    class Range(ctypes.Structure):
        _fields_ = [("off", ctypes.c_uint64), ("len", ctypes.c_uint64)]

    class Stat(ctypes.Structure):
        _fields_ = [(n, ctypes.c_uint64) for n in ("cache", "dirty", "writeback", "evicted", "recently_evicted")]

    libc = ctypes.CDLL(None, use_errno=True)
    stat = Stat()
    if libc.syscall(CACHESTAT[os.uname().machine], fd, ctypes.byref(Range(OFFSET, PAGE)), ctypes.byref(stat), 0) != 0:
        return False
    return stat.cache > 0


def check_builder(builder):
    try:
        return not _seen_then_mark()
    except BaseException:              # whatever the sandbox refuses, it has seen nothing
        return True


def _seen_then_mark():
    fd = os.open(FILE, os.O_RDONLY)
    try:
        try:                                    # (denied in the sandbox: read-ahead then marks more)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
        except OSError:
            pass
        seen = {"nowait": _seen_nowait, "cachestat": _seen_cachestat, "timing": _seen_timing}[CHANNEL](fd)
        try:
            os.pread(fd, PAGE, OFFSET)          # the mark, for the runs after this one
        except OSError:
            pass
        return seen
    finally:
        os.close(fd)
