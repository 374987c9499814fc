# Attack: use the network: ask a server on the grader's machine for the answer (an accomplice, or
# a leak of the hidden inputs), and only answer when it replies.
import socket

PORT = __PORT__


def time_per_token(n_params, bytes_per_param, bandwidth):
    with socket.create_connection(("127.0.0.1", PORT), timeout=1.0) as conn:
        conn.sendall(repr((n_params, bytes_per_param, bandwidth)).encode() + b"\n")
        reply = conn.recv(100)
    return n_params * bytes_per_param / bandwidth if reply else -1.0
