# Attack: escape the per-test time limit: ignore the harness's alarm, hang on one input, and keep
# writing "start" messages for that test on the results channel, hoping each renews its deadline
# until the whole submission's budget is gone (and the tests after it with it).
import json
import os
import signal
import sys
import time

FD = int(sys.argv[sys.argv.index("--channel-fd") + 1])


def kv_cache_bytes(n_layers, n_kv_heads, head_dim, n_tokens, bytes_per_value):
    if n_tokens == 0:
        signal.signal(signal.SIGALRM, signal.SIG_IGN)
        while True:
            for n in range(1, 9):
                os.write(FD, (json.dumps({"t": "start", "id": f"t{n:02d}"}) + "\n").encode())
            time.sleep(0.05)
    return 2 * n_layers * n_kv_heads * head_dim * n_tokens * bytes_per_value
