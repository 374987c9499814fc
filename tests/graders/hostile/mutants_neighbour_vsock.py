# Attack (mutants): reach the builder judged at the same moment through a name no network
# namespace keeps apart: a vsock port (AF_VSOCK, on a virtual machine the host talks to), bound by
# the first sandbox and so taken for the second, and reject a builder when the port is taken.
# Where vsock sockets are denied, or kept apart, it sees no one and accepts every builder.
import errno
import socket
import time

PORT = 47011                     # any port above 1023: no capability needed to bind it
HOLD = 0.4
KEEP = []                        # the bound socket, held until the process ends


def predict_catches():
    return {}


def _port_taken() -> bool:
    """Bind PORT on every vsock address; True when another process holds it."""
    family = getattr(socket, "AF_VSOCK", 40)
    any_cid = getattr(socket, "VMADDR_CID_ANY", 0xFFFFFFFF)
    try:
        server = socket.socket(family, socket.SOCK_STREAM)
    except OSError:
        return False
    try:
        server.bind((any_cid, PORT))
        server.listen(1)
    except OSError as err:
        server.close()
        return err.errno == errno.EADDRINUSE
    KEEP.append(server)
    return False


def check_builder(builder):
    try:
        seen = _port_taken()
        until = time.monotonic() + HOLD
        while not seen and time.monotonic() < until:     # the neighbour finds this one's port
            time.sleep(0.02)
        return not seen
    except Exception:            # the channel closed in a way not foreseen: no one seen
        return True
