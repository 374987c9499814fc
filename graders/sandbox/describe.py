"""``isolation_detail``: in words, exactly which protections held in a run (``Run.held``, the
names of ``limits.PROTECTIONS``), and why the fallback was used."""
from __future__ import annotations

from .resident import current_view


def describe(mode: str, why: str, held: dict) -> str:
    """The sentence the results carry: one clause per protection, what held or what did not."""
    parts = [_supervisor(held), _processes(held), _user(held), _seccomp(held), _memory(held),
             *_memory_folders(held), _network(held), *_files(held)]
    if mode == "bwrap":
        return "bubblewrap: " + "; ".join(parts)
    return f"subprocess fallback ({why}): " + "; ".join(parts)


def _supervisor(held: dict) -> str:
    if held.get("supervisor"):
        return "a supervisor between the grader and the submission"
    return "no supervisor report (it did not start, or was killed at once)"


def _processes(held: dict) -> str:
    """What ends every process the submission started."""
    if held.get("pid_namespace"):
        return ("own PID namespace with the supervisor as its PID 1 (every process the "
                "submission started ends with it; the grader is out of its reach)")
    if held.get("subreaper"):
        return ("the supervisor a subreaper (it kills every process left below it, new "
                "sessions included), and a final sweep")
    return "no PID namespace and no subreaper: process-group kill and a sweep only"


def _user(held: dict) -> str:
    if held.get("own_user"):
        return "its own user id, no capabilities (it cannot signal the grader or read its files)"
    if held.get("pid_namespace"):
        return "the grader's user id, inside namespaces of its own"
    return "the grader's own user id (it could signal the grader)"


def _seccomp(held: dict) -> str:
    """The filter's denials: exec too where only a subreaper holds the processes, sockets too
    where no network namespace takes the network away."""
    if not held.get("seccomp"):
        return "no seccomp filter"
    weakest = held.get("subreaper") and not held.get("pid_namespace")
    sockets = held.get("no_network") and not held.get("pid_namespace")
    return ("a seccomp filter (no keyrings, namespaces, io_uring, ptrace, mounts, bpf, "
            "file locks, file watches, mincore, memfd" + (", exec" if weakest else "") + ", System V IPC"
            + (", sockets" if sockets else "") + ")")


def _memory(held: dict) -> str:
    if held.get("cgroup"):
        return "one memory limit and process count for all its processes (a cgroup, killed at the end)"
    return "a memory limit per process (no cgroup)"


def _memory_folders(held: dict) -> list[str]:
    """The guard of the fallback at its strongest (a subreaper, a user id of its own, the
    filter): the out-of-memory killer's first choice, and its memory-backed files watched."""
    if held.get("subreaper") and not held.get("pid_namespace") and held.get("own_user") and held.get("seccomp"):
        return ["its processes the kernel's first to kill when memory runs out, which it cannot undo, "
                "and its files in /tmp, /dev/shm and the other memory-backed folders stopped past the "
                "room of a private /tmp and /dev/shm"]
    return []


def _network(held: dict) -> str:
    if held.get("no_network"):
        return "no network" if held.get("pid_namespace") else "no network (sockets denied)"
    return "the machine's network"


def _files(held: dict) -> list[str]:
    """What of the machine's files it sees: a read-only copy of what a run needs, or the
    machine's files as its user sees them (and then whether the answers were checked closed)."""
    if held.get("file_view"):
        copy = current_view()
        where = "in memory" if copy is None or copy.in_memory else "on disk, in the page cache"
        return [f"read-only system and Python (a copy of only what a run needs, {where}), private /tmp and "
                "/dev/shm, the course checkout and the rest of the machine's files invisible"]
    seen = ("the machine's files as any user sees them (it can read what its user can read)"
            + ("; what its user left in /tmp, /dev/shm and the other shared folders removed "
               "after each run" if held.get("own_user") else ""))
    if held.get("answers_closed"):
        return [seen, "checked before grading: the course's answers (solutions/), the grader "
                      "(graders/, its references included) and the ga2 package's folder are "
                      "unreadable to its user"]
    return [seen, "the course's answers and the grader's references not checked closed to it"]
