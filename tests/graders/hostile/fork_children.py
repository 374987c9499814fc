# Attack: leave processes behind that outlive the grading: a forked child, a detached `sleep`,
# and a double-forked daemon in its own session.
import ctypes
import os
import subprocess
import time


def _name(comm):
    try:
        ctypes.CDLL(None).prctl(15, comm, 0, 0, 0)        # PR_SET_NAME: /proc/PID/comm
    except Exception:
        pass


def _linger(comm):
    _name(comm)
    time.sleep(600)
    os._exit(0)


def kv_cache_bytes(n_layers, n_kv_heads, head_dim, n_tokens, bytes_per_value):
    if os.fork() == 0:
        _linger(b"hostile-child")
    try:
        subprocess.Popen(["sleep", "987654"], start_new_session=True)
    except OSError:
        pass
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            _linger(b"hostile-daemon")
        os._exit(0)
    return None
