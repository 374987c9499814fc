"""The subprocess fallback on machines this one is not: a user other than root, no ``unshare``,
no cgroup, no user id of its own.

Three ways in:

- ``plan_view``, the pure function behind the fallback's file system, on machines of every shape;
- the grader run here with the fallback's protections turned off (``Sandbox``'s ``namespaces``
  and ``cgroup``); a root grader cannot turn off the submission's own user id (``own_user=False``
  is refused: the submission would run as root), nor run the fallback without namespaces where no
  other user can reach the interpreter (this machine's Python lives under /root, mode 0700);
- the grader run as root in a private mount namespace where its interpreter is open to every
  user, with a ``PATH`` where bubblewrap and util-linux are missing: the subreaper and a user id
  of the submission's own are what it has;
- the grader run as a real unprivileged user (a fresh user id, through a private mount namespace
  that lets it reach this interpreter): once with ``unshare`` (user namespaces), once with a
  ``PATH`` where util-linux is missing, where it refuses to grade.
"""
import json
import os
import shutil
import subprocess
import tempfile
import textwrap
from pathlib import Path

import pytest

from graders import Limits, grading
from graders.sandbox import PROTECTIONS, Sandbox, SandboxUnavailable, describe
from graders.sandbox.supervisor import plan_view

from grader_helpers import FAST, GOOD, HOSTILE, PYTHON, ROOT, processes_matching

# ------------------------------------------------------------------------------ plan_view

DEBIAN = {"bin": "link", "sbin": "link", "lib": "link", "lib64": "link", "usr": "dir", "etc": "dir",
          "dev": "dir", "proc": "dir", "sys": "dir", "tmp": "dir", "home": "dir", "root": "dir",
          "var": "dir", "run": "dir", "opt": "dir", "srv": "dir", "boot": "dir", "mnt": "dir"}


SHOWN = ["/etc", "/root", "/usr", "/work"]        # what this machine's copy holds (``resident``)


def test_the_view_hides_every_top_level_folder_but_devices_processes_and_the_copy():
    plan = plan_view(DEBIAN | {"work": "dir"}, [], SHOWN)
    assert plan["hide"] == ["/boot", "/home", "/mnt", "/opt", "/run", "/srv", "/sys", "/var"]
    assert plan["show"] == SHOWN and plan["keep"] == []
    assert plan["tmp"] == "/tmp" and plan["blank"] == []


@pytest.mark.parametrize("python, venv", [
    ("/root/.pyenv/versions/3.11.7", "/work/course/.venv"),           # this machine
    ("/home/ana/miniconda3", "/home/ana/course/.venv"),                # a conda install in a home
    ("/opt/python/3.12", "/srv/grader/.venv"),
    ("/tmp/ci/python", "/tmp/ci/checkout/.venv"),                      # a CI checkout under /tmp
])
def test_the_copy_is_shown_and_the_job_bound_back_wherever_they_live(python, venv):
    job = "/tmp/grader-job-12-abc"
    shown = sorted({"/usr", "/etc"} | {("/tmp/" + p.split("/")[2]) if p.startswith("/tmp/") else "/" + p.split("/")[1]
                                       for p in (python, venv)})
    plan = plan_view(DEBIAN | {"work": "dir"}, [job, job + "/lib/ga2"], shown)
    assert plan["keep"] == [job]                               # its packages lie inside it
    assert set(plan["show"]) == set(shown)
    assert [p.count("/") for p in plan["show"]] == sorted(p.count("/") for p in plan["show"])
    assert not set(plan["show"]) & set(plan["hide"])         # bound over, not covered first
    assert "/usr" not in plan["hide"] and "/etc" not in plan["hide"]
    for top in ("/home", "/opt", "/srv", "/var"):             # what the copy does not hold is covered
        assert top in plan["hide"] or top in shown


def test_the_machines_own_usr_is_never_shown_as_it_is():
    """Without a copy to show, nothing of the machine's system is left visible but its devices
    and processes: a view never falls back to the machine's /usr."""
    plan = plan_view(DEBIAN, ["/usr/lib/python3.11"], [])
    assert "/usr" in plan["hide"] and "/etc" in plan["hide"]
    assert plan["keep"] == ["/usr/lib/python3.11"]           # asked for by name: bound back alone


def test_top_level_files_are_blanked_and_links_left_alone():
    plan = plan_view(DEBIAN | {"container_info.json": "file", "cdrom": "link"}, [], SHOWN)
    assert plan["blank"] == ["/container_info.json"]
    assert "/cdrom" not in plan["hide"] and "/cdrom" not in plan["blank"]


def test_a_machine_without_etc_or_with_an_odd_root_still_gets_a_plan():
    plan = plan_view({"usr": "dir", "tmp": "dir", "proc": "dir", "dev": "dir"}, [], ["/usr"])
    assert plan["hide"] == [] and plan["keep"] == [] and plan["show"] == ["/usr"]


# --------------------------------------------------------- this machine, protections turned off

ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="turning protections off is only needed as root; "
                               "as another user the real-user tests below take these paths")


def _with(monkeypatch, **knobs):
    real = grading.Sandbox
    monkeypatch.setattr(grading, "Sandbox", lambda isolation="auto": real(isolation, **knobs))
    sandbox = real("subprocess", **knobs)
    return sandbox


def _grade(filename, exercise, fill=None, limits=FAST):
    data = (HOSTILE / filename).read_bytes()
    for key, value in (fill or {}).items():
        data = data.replace(key.encode(), str(value).encode())
    return grading.grade_bytes(data, filename, exercise, limits=limits, isolation="subprocess")


@ROOT_ONLY
@pytest.mark.parametrize("knobs", [{"own_user": False}, {"own_user": False, "namespaces": False}],
                         ids=["namespaces", "subreaper"])
def test_a_root_grader_never_runs_a_submission_as_root(knobs):
    """Turning the submission's own user id off would leave it uid 0: refused, in every mode,
    and through the grading functions too (no result that looks like a grade)."""
    with pytest.raises(SandboxUnavailable, match="refuses to run a submission as root"):
        Sandbox("subprocess", **knobs)


@ROOT_ONLY
def test_the_pid_namespace_alone_keeps_the_supervisor_and_ends_every_process(monkeypatch):
    """No cgroup: the supervisor, PID 1 of the namespace, shrugs off the kill, and the namespace
    takes the escapees with it."""
    sandbox = _with(monkeypatch, cgroup=False)
    if not sandbox.namespaces:
        pytest.skip("unshare cannot make namespaces here")
    result = _grade("kill_parent.py", "time_per_token")
    assert result["status"] == "ok" and result["score"] == 0
    held = result["isolation_held"]
    assert held["pid_namespace"] and held["own_user"] and not held["cgroup"] and not held["subreaper"]
    assert held["seccomp"]
    assert not any(r["supervisor_lost"] for r in result["runs"])
    mark = 810_000 + os.getpid() % 100_000
    result = _grade("escape_session.py", "kv_cache_bytes", fill={"__MARK__": mark})
    assert result["score"] == 0 and processes_matching(f"hostile-escapee {mark}") == []
    assert "its own user id, no capabilities" in result["isolation_detail"]


@ROOT_ONLY
def test_the_fallback_without_namespaces_refuses_where_only_root_reaches_the_interpreter(monkeypatch):
    """Finding: no bubblewrap, no util-linux, a root grader whose Python lives under a 0700
    folder; the submission kept uid 0.  Now no user id of its own can be had there, so the
    fallback refuses, naming the folder, rather than run it as root."""
    from graders.sandbox import probes
    monkeypatch.setattr(probes, "world_usable", lambda: "/root/.pyenv (mode 0700)")
    with pytest.raises(SandboxUnavailable, match=r"/root/.pyenv \(mode 0700\).*would run as root"):
        Sandbox("subprocess", namespaces=False)


@ROOT_ONLY
def test_a_machine_without_bwrap_or_unshare_and_a_closed_interpreter_is_refused(monkeypatch):
    """The whole machine simulated: no bubblewrap, no util-linux, an interpreter other users
    cannot read.  ``grade`` refuses with a clear error and exit status 2 (no result that looks
    like a grade), and ``batch`` refuses the class before grading anyone."""
    from graders import cli
    from graders.sandbox import commands, probes
    monkeypatch.setattr(commands, "_tools", {"bwrap": None, "unshare": None, "setpriv": None})
    monkeypatch.setattr(probes, "_probe", {})
    monkeypatch.setattr(probes, "world_usable", lambda: "/opt/closed/python (mode 0700)")
    with pytest.raises(SandboxUnavailable, match="would run as root"):
        grading.grade_bytes(GOOD["time_per_token"].encode(), "s.py", "time_per_token", limits=FAST)
    folder = Path(tempfile.mkdtemp(prefix="refused-"))
    try:
        (folder / "s.py").write_text(textwrap.dedent(GOOD["time_per_token"]))
        out = folder / "out.json"
        code = cli.main(["grade", str(folder / "s.py"), "--exercise", "time_per_token", "--json", str(out)])
        assert code == 2
        written = json.loads(out.read_text()) if out.exists() else {}
        assert written.get("score", 0) == 0 and "would run as root" in json.dumps(written)
        (folder / "class").mkdir()
        (folder / "class" / "a.py").write_text(textwrap.dedent(GOOD["time_per_token"]))
        code = cli.main(["batch", str(folder / "class"), "--exercise", "time_per_token",
                         "--out", str(folder / "gb.csv")])
        assert code == 2 and not (folder / "gb.csv").exists()
    finally:
        shutil.rmtree(folder)


@ROOT_ONLY
def test_the_cgroup_counts_every_process_of_a_run(monkeypatch):
    """200 forks: the run's process count (the cgroup's, and RLIMIT_NPROC for its own user)
    refuses them long before the 200th, and none is left afterwards."""
    sandbox = _with(monkeypatch)
    if not sandbox.planned()["cgroup"]:
        pytest.skip("the grader cannot make cgroups here")
    source = """
        import ctypes, os, time
        def kv_cache_bytes(n_layers, n_kv_heads, head_dim, n_tokens, bytes_per_value):
            for n in range(200):
                try:
                    pid = os.fork()
                except OSError:
                    raise RuntimeError(f"fork number {n + 1} refused")
                if pid == 0:
                    ctypes.CDLL(None).prctl(15, b"counted-child", 0, 0, 0)
                    time.sleep(30)
                    os._exit(0)
            return 2 * n_layers * n_kv_heads * head_dim * n_tokens * bytes_per_value
        """
    result = grading.grade_bytes(textwrap.dedent(source).encode(), "s.py", "kv_cache_bytes",
                                 limits=Limits(test_seconds=2, submission_seconds=10), isolation="subprocess")
    assert result["tests"][0]["score"] == 0
    assert "fork number" in result["tests"][0]["output"]
    assert processes_matching("counted-child") == []


def test_isolation_detail_names_exactly_what_held():
    none = dict.fromkeys(PROTECTIONS, False)
    assert set(PROTECTIONS) >= {"supervisor", "pid_namespace", "subreaper", "own_user", "seccomp", "cgroup",
                                "no_network", "file_view", "private_tmp"}
    weakest = describe("subprocess", "bubblewrap (bwrap) is not installed", none | {"supervisor": True})
    assert weakest.startswith("subprocess fallback (bubblewrap (bwrap) is not installed)")
    for words in ("process-group kill", "could signal the grader", "per process", "the machine's network",
                  "it can read what its user can read"):
        assert words in weakest
    assert "no seccomp filter" in weakest and "removed after each run" not in weakest
    full = describe("bwrap", "", {k: True for k in none} | {"subreaper": False})
    for words in ("PID 1", "cannot signal the grader", "a seccomp filter (no keyrings", "a cgroup", "no network",
                  "private /tmp and /dev/shm", "invisible"):
        assert words in full
    assert "could signal" not in full and "subreaper" not in full and "sockets" not in full
    swept = describe("subprocess", "unshare and setpriv (util-linux) not installed",
                     none | {"supervisor": True, "subreaper": True, "own_user": True, "seccomp": True,
                             "no_network": True})
    assert "memfd, exec, System V IPC" in swept and "the kernel's first to kill" in swept
    assert "exec" not in full and "first to kill" not in full and "memfd" in full
    for words in ("subreaper", "its own user id", "System V IPC, sockets)", "no network (sockets denied)",
                  "as any user sees them", "removed after each run"):
        assert words in swept


# ---------------------------------------------------------------------- a real other user

GRADE_SCRIPT = r"""
import json, sys
from graders import Limits, grade_bytes
out = []
for filename, exercise, mark in json.loads(sys.argv[1]):
    data = open(f"{sys.argv[2]}/{filename}", "rb").read().replace(b"__MARK__", str(mark).encode())
    out.append(grade_bytes(data, filename, exercise, isolation="subprocess",
                           limits=Limits(test_seconds=0.5, submission_seconds=4, import_seconds=3)))
print(json.dumps(out))
"""

# Run as another user, who must reach this interpreter and this checkout: in a private mount
# namespace, every folder on their paths that others cannot search (this machine's Python lives
# under /root, which only root may search; a checkout cloned into a mktemp -d folder is itself of
# mode 0700) is covered with a searchable tmpfs holding its entries bound back.  The folders in
# $CLOSE_UP are covered the other way: a tmpfs only root may enter.
AS_USER = r"""
import json, os, stat, sys
from graders.sandbox.supervisor import MS_BIND, MS_PRIVATE, MS_REC, _libc, _mount
ctypes, libc = _libc()
_mount(libc, ctypes, None, "/", None, MS_REC | MS_PRIVATE)

def cover(folder, folder_mode):
    # a tmpfs of that mode over the folder, its entries bound back: as they were to root, and
    # reachable by other users (0755) or not (0700)
    entries = {}
    for name in os.listdir(folder):
        path = os.path.join(folder, name)
        mode = os.lstat(path).st_mode
        if stat.S_ISLNK(mode):
            entries[name] = ("link", os.readlink(path))
        elif stat.S_ISDIR(mode) or stat.S_ISREG(mode):
            entries[name] = ("dir" if stat.S_ISDIR(mode) else "file", os.open(path, os.O_PATH))
    _mount(libc, ctypes, "tmpfs", folder, "tmpfs", 0, f"mode={folder_mode}")
    for name, (kind, what) in entries.items():
        path = os.path.join(folder, name)
        if kind == "link":
            os.symlink(what, path)
            continue
        os.mkdir(path) if kind == "dir" else open(path, "w").close()
        _mount(libc, ctypes, f"/proc/self/fd/{what}", path, None, MS_BIND | MS_REC)

for target in sorted({os.path.realpath(p) for p in (sys.base_prefix, sys.prefix, os.getcwd())}):
    parts = target.split("/")
    for k in range(2, len(parts) + 1):
        folder = "/".join(parts[:k])
        if not os.stat(folder).st_mode & 0o001:
            cover(folder, "0755")
# The checkout's answers and references, closed to other users as a grader must keep them
# (``graders.sandbox.exposure``): only this namespace sees the change.
for folder in json.loads(os.environ.get("CLOSE_UP", "[]")):
    cover(folder, "0700")
uid = int(sys.argv[1])
if uid != 0:                        # 0: stay root, with this interpreter open to every user
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
os.execve(sys.executable, [sys.executable, *sys.argv[2:]], {**os.environ, "HOME": "/tmp"})
"""


#: The checkout's folders of answers and references (``graders.sandbox.exposure``).
ANSWER_FOLDERS = ("solutions", "graders", "ga2", "kvcache", "lessons")


def _as_another_user(cases, path: str, uid: int | None = None, script: str = GRADE_SCRIPT,
                     check: bool = True) -> list[dict] | subprocess.CompletedProcess:
    """Grade ``cases`` (file, exercise, mark) as a user other than the one running the tests
    (``uid``; 0: root, with the interpreter opened to every user)."""
    cmd = [PYTHON, "-c", script, json.dumps(cases), str(HOSTILE)]
    closed: list[str] = []
    if os.geteuid() == 0:
        uid = 700_000 + os.getpid() % 100_000 if uid is None else uid
        cmd = [shutil.which("unshare"), "--mount", PYTHON, "-c", AS_USER, str(uid)] + cmd[1:]
        if uid == 0:        # the weakest fallback grades only with these closed to its user
            closed = [str(ROOT / name) for name in ANSWER_FOLDERS]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=240,
                          env={**os.environ, "PATH": path, "PYTHONPATH": str(ROOT), "CLOSE_UP": json.dumps(closed)})
    if not check:
        return proc
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _usable_namespaces() -> bool:
    probe = subprocess.run(["unshare", "--user", "--map-root-user", "--pid", "--fork", "--mount", "--net",
                            "true"], capture_output=True)
    return probe.returncode == 0


@pytest.mark.skipif(not _usable_namespaces(), reason="unprivileged user namespaces are not available here")
def test_another_user_with_unshare_gets_namespaces_of_its_own():
    mark = 830_000 + os.getpid() % 100_000
    results = _as_another_user([("kill_parent.py", "time_per_token", 0),
                                ("kill_grader.py", "time_per_token", 0),
                                ("escape_session.py", "kv_cache_bytes", mark)], os.environ["PATH"])
    for result in results:
        assert result["isolation"] == "subprocess" and result["score"] == 0, result["output"]
        held = result["isolation_held"]
        assert held["pid_namespace"] and held["no_network"] and held["file_view"]
        assert not held["own_user"] and not held["cgroup"]
        assert "the grader's user id, inside namespaces of its own" in result["isolation_detail"]
    kill_parent, kill_grader, _ = results
    assert kill_parent["status"] == "ok" and not any(r["supervisor_lost"] for r in kill_parent["runs"])
    assert kill_grader["status"] == "ok"              # kill(-1) reached nothing outside its namespace
    assert processes_matching(f"hostile-escapee {mark}") == []


def test_another_user_without_util_linux_is_refused():
    """A user other than root, no bubblewrap, no util-linux: the submission could only run as
    that user, who owns the checkout, with every file of theirs in view.  ``grade`` refuses, says
    why, and exits 2; nothing is graded."""
    no_tools = "/nonexistent-bin"          # no unshare, no setpriv, no bwrap
    script = ("import sys; from graders.cli import main; "
              "sys.exit(main(['grade', sys.argv[2] + '/kill_parent.py', '--exercise', 'time_per_token']))")
    proc = _as_another_user([], no_tools, script=script, check=False)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "cannot give the submission a user id of its own" in proc.stderr
    assert "util-linux" in proc.stderr and "Traceback" not in proc.stderr


def _closed_interpreter() -> str | None:
    from graders.sandbox import probes
    return probes.world_usable()


@pytest.mark.skipif(os.geteuid() != 0 or _closed_interpreter() is None,
                    reason="needs a root grader whose Python other users cannot reach (as this machine's "
                           "under /root); the simulated machine above covers the rest")
def test_root_without_bwrap_or_util_linux_and_a_closed_interpreter_refuses_for_real(tmp_path):
    """This machine as finding 4 had it: bubblewrap and util-linux off the PATH, the grader root,
    its Python under a folder of mode 0700.  ``grade`` exits 2 naming that folder; nothing runs."""
    sub = tmp_path / "s.py"
    sub.write_text("import os\nopen('/tmp/ran-as-root-' + str(os.getuid()), 'w').close()\n"
                   "def time_per_token(a, b, c):\n    return a * b / c\n")
    proc = subprocess.run([PYTHON, "-m", "graders", "grade", str(sub), "--exercise", "time_per_token",
                           "--isolation", "subprocess", "--json", str(tmp_path / "r.json")],
                          cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PATH": "/nonexistent-bin", "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 2, proc.stdout + proc.stderr
    closed = _closed_interpreter().split(" (")[0]
    assert closed in proc.stderr and "would run as root" in proc.stderr and "Traceback" not in proc.stderr
    assert not os.path.exists("/tmp/ran-as-root-0")
    result = json.loads((tmp_path / "r.json").read_text())
    assert result["status"] == "usage_error" and result["score"] == 0


OPEN_PYTHON_ROOT = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"),
                                      reason="needs root and unshare to open the interpreter to other users")


@OPEN_PYTHON_ROOT
def test_root_without_util_linux_gives_the_subreaper_a_user_of_its_own():
    """Root, no bubblewrap, no util-linux, an interpreter every user can run: the subreaper and a
    fresh user id.  The submission cannot kill its supervisor (another user), its escapees are
    swept, and isolation_held says exactly that: no namespaces, no file view, seccomp, no
    sockets."""
    mark = 840_000 + os.getpid() % 100_000
    kill_parent, escape = _as_another_user([("kill_parent.py", "time_per_token", 0),
                                            ("escape_session.py", "kv_cache_bytes", mark)], "/nonexistent-bin", uid=0)
    for result in (kill_parent, escape):
        held = result["isolation_held"]
        assert held["subreaper"] and held["own_user"] and held["seccomp"] and held["no_network"]
        assert not held["pid_namespace"] and not held["file_view"] and not held["private_tmp"]
        detail = result["isolation_detail"]
        assert "util-linux" in detail and "its own user id" in detail and "sockets denied" in detail
        assert "could signal the grader" not in detail
    assert kill_parent["status"] == "ok" and kill_parent["score"] == 0
    assert not any(r["supervisor_lost"] for r in kill_parent["runs"])
    assert escape["score"] == 0 and processes_matching(f"hostile-escapee {mark}") == []


STOP_SCRIPT = r"""
import json, sys
from graders import Limits, grade_bytes
mark = json.loads(sys.argv[1])
source = open(f"{sys.argv[2]}/escape_session.py").read().replace("__MARK__", str(mark)).replace(
    "    return None", "    import signal\n    signal.signal(signal.SIGALRM, signal.SIG_IGN)\n"
                      "    while True:\n        pass")
print(json.dumps([grade_bytes(source.encode(), "s.py", "kv_cache_bytes", isolation="subprocess",
                              limits=Limits(test_seconds=0.5, submission_seconds=3, import_seconds=3,
                                            give_up_after=1))]))
"""


@OPEN_PYTHON_ROOT
def test_a_supervisor_asked_to_stop_kills_everything_below_it():
    """The fallback without namespaces: on a timeout the grader asks the supervisor (SIGTERM) to
    end the run, and it kills what left the session before it goes (killing the process group
    would not reach those)."""
    mark = 850_000 + os.getpid() % 100_000
    [result] = _as_another_user(mark, "/nonexistent-bin", uid=0, script=STOP_SCRIPT)
    assert result["isolation_held"]["subreaper"] and not result["isolation_held"]["pid_namespace"]
    assert result["status"] == "timeout" and result["score"] == 0
    assert result["runs"][0]["killed"] == "test_timeout"
    assert processes_matching(f"hostile-escapee {mark}") == []


@pytest.mark.parametrize("knobs", [{}, {"namespaces": False}], ids=["namespaces", "subreaper"])
def test_a_course_package_a_job_needs_is_importable_and_nothing_next_to_it(knobs):
    """The public checks (and, one day, a package an exercise hands to the learner's function)
    are importable in the sandbox; the rest of the checkout, graders/ first, is not.  (The
    subreaper where it cannot have a user of its own refuses: then that refusal is checked.)"""
    import public_checks
    from graders.sandbox import probes
    from test_sandbox import LIMITS
    if knobs and (os.geteuid() != 0 or probes.world_usable() is not None):
        with pytest.raises(SandboxUnavailable, match="cannot grade here"):
            Sandbox("subprocess", **knobs)
        return
    sandbox = Sandbox("subprocess", **knobs)
    if knobs == {} and not sandbox.namespaces:
        pytest.skip("unshare cannot make namespaces here")
    folder = Path(tempfile.mkdtemp(prefix="probe-"))
    try:
        (folder / "submission.py").write_text(textwrap.dedent("""
            import importlib.util
            def probe():
                return [importlib.util.find_spec(name) is not None for name in ("public_checks", "graders", "kvcache")]
            """))
        (folder / "spec.json").write_text(json.dumps({"limits": {}, "import_timeout": 10, "cases": [
            {"id": "p", "timeout": 5, "calls": [{"fn": "probe", "args": []}]}]}))
        folder.chmod(0o755)
        for path in folder.iterdir():
            path.chmod(0o644)
        run = sandbox.run(folder, LIMITS, {"p": 5}, libs=[Path(public_checks.__file__).resolve().parent])
    finally:
        shutil.rmtree(folder)
    from graders.harness import decode
    assert decode(run.transcript.results["p"]["calls"][0]["value"]) == [True, False, False]
