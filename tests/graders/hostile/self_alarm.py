# Attack: send the harness's own timer signal (SIGALRM) to itself, from the main thread and from
# another one, to pass a crash off as a timeout (or confuse the harness).  The answer itself is
# right: the signals must change nothing.
import os
import signal
import threading


def kv_cache_bytes(n_layers, n_kv_heads, head_dim, n_tokens, bytes_per_value):
    signal.pthread_kill(threading.main_thread().ident, signal.SIGALRM)
    os.kill(os.getpid(), signal.SIGALRM)
    t = threading.Thread(target=lambda: os.kill(os.getpid(), signal.SIGALRM))
    t.start()
    t.join()
    return 2 * n_layers * n_kv_heads * head_dim * n_tokens * bytes_per_value
