# Attack: keep the process alive after grading: an atexit handler and a non-daemon thread that
# never end.  The answer itself is right, so this one gets full marks, and grading still ends.
import atexit
import threading
import time

import numpy as np


def _forever():
    while True:
        time.sleep(1)


def softmax(scores):
    atexit.register(_forever)
    threading.Thread(target=_forever, daemon=False).start()
    e = np.exp(scores - np.max(scores, axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)
