# Attack (mutants): remember the builders it has judged (in memory, in /tmp, in a process left
# running) and judge each one against the first it saw, which is the correct builder.  Each
# builder is judged in a sandbox of its own, so every one is the first it sees: it accepts them
# all (and so catches nothing).
import os
import socket
import time

SEEN = []
MARK = "/tmp/mutants-memory"
ADDRESS = "\0mutants-memory-__MARK__"


def predict_catches():
    return {}


def _remembered():
    seen = bool(SEEN) or os.path.exists(MARK)
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.connect(ADDRESS)
            seen = True
    except OSError:
        pass
    return seen


def _remember():
    SEEN.append(1)
    with open(MARK, "w") as f:
        f.write("seen")
    if os.fork() == 0:                       # a keeper that outlives the call, holding the address
        os.setsid()
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(ADDRESS)
        server.listen(8)
        time.sleep(600)
        os._exit(0)
    time.sleep(0.05)


def check_builder(builder):
    if _remembered():
        return False           # not the first builder: a "mutant", by this check's reckoning
    _remember()
    return True
