"""``isolation_detail``: in words, exactly which protections held in a run (``Run.held``, the
names of ``limits.PROTECTIONS``), and why the fallback was used."""
from __future__ import annotations

from .resident import current_view


def describe(mode: str, why: str, held: dict) -> str:
    """The sentence the results carry: one clause per protection, what held or what did not."""
    parts = []
    if held.get("supervisor"):
        parts.append("a supervisor between the grader and the submission")
    else:
        parts.append("no supervisor report (it did not start, or was killed at once)")
    if held.get("pid_namespace"):
        parts.append("own PID namespace with the supervisor as its PID 1 (every process the "
                     "submission started ends with it; the grader is out of its reach)")
    elif held.get("subreaper"):
        parts.append("the supervisor a subreaper (it kills every process left below it, new "
                     "sessions included), and a final sweep")
    else:
        parts.append("no PID namespace and no subreaper: process-group kill and a sweep only")
    if held.get("own_user"):
        parts.append("its own user id, no capabilities (it cannot signal the grader or read its files)")
    elif held.get("pid_namespace"):
        parts.append("the grader's user id, inside namespaces of its own")
    else:
        parts.append("the grader's own user id (it could signal the grader)")
    if held.get("seccomp"):
        weakest = held.get("subreaper") and not held.get("pid_namespace")
        parts.append("a seccomp filter (no keyrings, namespaces, io_uring, ptrace, mounts, bpf, "
                     "file locks, file watches, mincore, memfd" + (", exec" if weakest else "") + ", System V IPC"
                     + (", sockets" if held.get("no_network") and not held.get("pid_namespace") else "") + ")")
    else:
        parts.append("no seccomp filter")
    if held.get("cgroup"):
        parts.append("one memory limit and process count for all its processes (a cgroup, killed at the end)")
    else:
        parts.append("a memory limit per process (no cgroup)")
    if held.get("subreaper") and not held.get("pid_namespace") and held.get("own_user") and held.get("seccomp"):
        parts.append("its processes the kernel's first to kill when memory runs out, which it cannot undo, "
                     "and its files in /tmp, /dev/shm and the other memory-backed folders stopped past the "
                     "room of a private /tmp and /dev/shm")
    if held.get("no_network"):
        parts.append("no network" if held.get("pid_namespace") else "no network (sockets denied)")
    else:
        parts.append("the machine's network")
    if held.get("file_view"):
        copy = current_view()
        where = "in memory" if copy is None or copy.in_memory else "on disk, in the page cache"
        parts.append(f"read-only system and Python (a copy of only what a run needs, {where}), private /tmp and "
                     "/dev/shm, the course checkout and the rest of the machine's files invisible")
    else:
        parts.append("the machine's files as any user sees them (it can read what its user can read)"
                     + ("; what its user left in /tmp, /dev/shm and the other shared folders removed "
                        "after each run" if held.get("own_user") else ""))
        if held.get("answers_closed"):
            parts.append("checked before grading: the course's answers (solutions/), the grader "
                         "(graders/, its references included) and the ga2 package's folder are "
                         "unreadable to its user")
        else:
            parts.append("the course's answers and the grader's references not checked closed to it")
    if mode == "bwrap":
        return "bubblewrap: " + "; ".join(parts)
    return f"subprocess fallback ({why}): " + "; ".join(parts)
