# Attack: carry state from one sandbox to the next (a file in /tmp or /dev/shm, an abstract unix
# socket, a kernel keyring), so that a later run knows what an earlier one saw; here it answers
# correctly only when it finds what an earlier run of this attack left.
import ctypes
import os
import platform
import socket
import threading

MARK = "__MARK__"
PLACES = [f"/tmp/hostile-state-{MARK}", f"/dev/shm/hostile-state-{MARK}", f"/var/tmp/hostile-state-{MARK}"]
KEYCTL = {"x86_64": (250, 248), "aarch64": (219, 217)}[platform.machine()]


def _found() -> bool:
    if any(os.path.exists(p) for p in PLACES):
        return True
    try:
        with socket.socket(socket.AF_UNIX) as s:
            s.connect(f"\0hostile-state-{MARK}")
            return True
    except OSError:
        pass
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    # KEYCTL_SEARCH (10) in the user keyring (-4) for a key of type "user"
    return libc.syscall(KEYCTL[0], 10, ctypes.c_long(-4), b"user", f"hostile-state-{MARK}".encode(), 0) >= 0


def _leave() -> None:
    for path in PLACES:
        try:
            with open(path, "w") as f:
                f.write("seen")
            os.chmod(path, 0o666)
        except OSError:
            pass
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall(KEYCTL[1], b"user", f"hostile-state-{MARK}".encode(), b"1", 1, ctypes.c_long(-4))
    try:
        server = socket.socket(socket.AF_UNIX)
        server.bind(f"\0hostile-state-{MARK}")
        server.listen(1)
        threading.Thread(target=server.accept, daemon=True).start()   # held while this process lives
        pid = os.fork()
        if pid == 0:                   # and by a child that tries to outlive the run
            os.setsid()
            libc.prctl(15, f"hs-{MARK}".encode(), 0, 0, 0)    # its name, to look for it afterwards
            import time
            time.sleep(60)
            os._exit(0)
    except OSError:
        pass


_LEFT = []          # what this process left itself does not count: only an earlier sandbox's


def time_per_token(n_params, bytes_per_param, bandwidth):
    if not _LEFT and _found():
        return n_params * bytes_per_param / bandwidth
    if not _LEFT:
        _leave()
        _LEFT.append(True)
    return -1.0
