# Attack: gigabytes of output, to exhaust the grader's memory or disk.
import os
import sys

CHUNK = "x" * (1 << 20)


def time_per_token(n_params, bytes_per_param, bandwidth):
    while True:
        sys.stdout.write(CHUNK)
        os.write(2, CHUNK.encode())
