"""The subprocess fallback on machines this one is not: a user other than root, no ``unshare``,
no cgroup, no user id of its own.

Three ways in:

- ``plan_view``, the pure function behind the fallback's file system, on machines of every shape;
- the grader run here with the fallback's protections turned off one by one (``Sandbox``'s
  ``namespaces``, ``own_user`` and ``cgroup``), so that the PID namespace alone, or the
  subreaper alone, is what holds; only attacks that stay harmless without the rest are graded so;
- the grader run as a real unprivileged user (a fresh user id, through a private mount namespace
  that lets it reach this interpreter): once with ``unshare`` (user namespaces), once with a
  ``PATH`` where util-linux is missing, so the subreaper is all it has.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from graders import Limits, grading
from graders.sandbox import Sandbox, describe
from graders.supervisor import ETC, plan_view

from grader_helpers import FAST, GOOD, HOSTILE, PYTHON, ROOT, grade_text, processes_matching

# ------------------------------------------------------------------------------ plan_view

DEBIAN = {"bin": "link", "sbin": "link", "lib": "link", "lib64": "link", "usr": "dir", "etc": "dir",
          "dev": "dir", "proc": "dir", "sys": "dir", "tmp": "dir", "home": "dir", "root": "dir",
          "var": "dir", "run": "dir", "opt": "dir", "srv": "dir", "boot": "dir", "mnt": "dir"}


def test_the_view_hides_every_top_level_folder_but_the_system():
    plan = plan_view(DEBIAN, ["/usr/lib/python3.11"])
    assert plan["hide"] == ["/boot", "/etc", "/home", "/mnt", "/opt", "/root", "/run", "/srv", "/sys", "/var"]
    assert plan["keep"] == sorted(ETC)              # Python under /usr is visible as it is
    assert plan["tmp"] == "/tmp" and plan["blank"] == []


@pytest.mark.parametrize("python, venv", [
    ("/root/.pyenv/versions/3.11.7", "/work/course/.venv"),           # this machine
    ("/home/ana/miniconda3", "/home/ana/course/.venv"),                # a conda install in a home
    ("/opt/python/3.12", "/srv/grader/.venv"),
    ("/tmp/ci/python", "/tmp/ci/checkout/.venv"),                      # a CI checkout under /tmp
])
def test_the_interpreter_and_the_job_are_bound_back_wherever_they_live(python, venv):
    job = "/tmp/grader-job-12-abc"
    plan = plan_view(DEBIAN | {"work": "dir"}, [python, venv, venv + "/lib/python3.11/site-packages", job])
    assert python in plan["keep"] and venv in plan["keep"] and job in plan["keep"]
    assert venv + "/lib/python3.11/site-packages" not in plan["keep"]    # inside the venv, already there
    assert not any(k.startswith(("/usr/", "/bin")) for k in plan["keep"])
    checkout = venv.rsplit("/", 1)[0]
    hidden_top = "/" + checkout.split("/")[1]
    assert hidden_top in plan["hide"] or hidden_top == "/tmp"        # the checkout itself is not kept
    assert checkout not in plan["keep"]


def test_top_level_files_are_blanked_and_links_left_alone():
    plan = plan_view(DEBIAN | {"container_info.json": "file", "cdrom": "link"}, [])
    assert plan["blank"] == ["/container_info.json"]
    assert "/cdrom" not in plan["hide"] and "/cdrom" not in plan["blank"]


def test_a_machine_without_etc_or_with_an_odd_root_still_gets_a_plan():
    plan = plan_view({"usr": "dir", "tmp": "dir", "proc": "dir", "dev": "dir"}, ["/usr/bin"])
    assert plan["hide"] == [] and plan["keep"] == []


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
def test_the_pid_namespace_alone_keeps_the_supervisor_and_ends_every_process(monkeypatch):
    """No user id of its own and no cgroup (a non-root grader's lot): the supervisor, PID 1 of
    the namespace, shrugs off the kill, and the namespace takes the escapees with it."""
    sandbox = _with(monkeypatch, own_user=False, cgroup=False)
    if not sandbox.namespaces:
        pytest.skip("unshare cannot make namespaces here")
    result = _grade("kill_parent.py", "time_per_token")
    assert result["status"] == "ok" and result["score"] == 0
    held = result["isolation_held"]
    assert held["pid_namespace"] and not held["own_user"] and not held["cgroup"] and not held["subreaper"]
    assert not any(r["supervisor_lost"] for r in result["runs"])
    mark = 810_000 + os.getpid() % 100_000
    result = _grade("escape_session.py", "kv_cache_bytes", fill={"__MARK__": mark})
    assert result["score"] == 0 and processes_matching(f"hostile-escapee {mark}") == []
    assert "the grader's user id, inside namespaces of its own" in result["isolation_detail"]


@ROOT_ONLY
def test_the_subreaper_alone_still_writes_a_result_and_ends_every_process(monkeypatch):
    """No namespaces, no user id of its own, no cgroup: the submission can kill the supervisor
    (its parent, same user), and the result says so; while the supervisor lives, it reaps and
    kills every process below it, sessions left or not."""
    _with(monkeypatch, namespaces=False, own_user=False, cgroup=False)
    result = _grade("kill_parent.py", "time_per_token")
    assert result["status"] == "crashed" and result["score"] == 0
    assert result["isolation_held"]["subreaper"] and not result["isolation_held"]["pid_namespace"]
    assert all(r["supervisor_lost"] for r in result["runs"])
    assert "its parent" in result["tests"][0]["output"]
    assert "could signal the grader" in result["isolation_detail"]
    mark = 820_000 + os.getpid() % 100_000
    result = _grade("escape_session.py", "kv_cache_bytes", fill={"__MARK__": mark})
    assert result["score"] == 0 and processes_matching(f"hostile-escapee {mark}") == []
    assert all(isinstance(r["left_over"], int) and r["left_over"] >= 1 for r in result["runs"][:1])
    again = grade_text(GOOD["time_per_token"], "time_per_token", isolation="subprocess")
    assert again["score"] == again["max_score"]


@ROOT_ONLY
def test_the_fallback_without_a_user_of_its_own_still_counts_processes(monkeypatch):
    """RLIMIT_NPROC means nothing to a sandbox that runs as the grader's own user (root ignores it):
    200 forks all succeeded.  The run's cgroup counts them instead."""
    sandbox = _with(monkeypatch, namespaces=False, own_user=False)
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
    none = dict.fromkeys(("supervisor", "pid_namespace", "subreaper", "own_user", "cgroup", "no_network",
                          "file_view"), False)
    weakest = describe("subprocess", "bubblewrap (bwrap) is not installed", none | {"supervisor": True})
    assert weakest.startswith("subprocess fallback (bubblewrap (bwrap) is not installed)")
    for words in ("process-group kill", "could signal the grader", "per process", "the machine's network",
                  "it can read what its user can read"):
        assert words in weakest
    full = describe("bwrap", "", {k: True for k in none} | {"subreaper": False})
    for words in ("PID 1", "cannot signal the grader", "a cgroup", "no network", "invisible"):
        assert words in full
    assert "could signal" not in full and "subreaper" not in full


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
# mode 0700) is covered with a searchable tmpfs holding its entries bound back.
AS_USER = r"""
import os, stat, sys
from graders.supervisor import MS_BIND, MS_PRIVATE, MS_REC, _libc, _mount
ctypes, libc = _libc()
_mount(libc, ctypes, None, "/", None, MS_REC | MS_PRIVATE)

def open_up(folder):
    entries = {}
    for name in os.listdir(folder):
        path = os.path.join(folder, name)
        mode = os.lstat(path).st_mode
        if stat.S_ISLNK(mode):
            entries[name] = ("link", os.readlink(path))
        elif stat.S_ISDIR(mode) or stat.S_ISREG(mode):
            entries[name] = ("dir" if stat.S_ISDIR(mode) else "file", os.open(path, os.O_PATH))
    _mount(libc, ctypes, "tmpfs", folder, "tmpfs", 0, "mode=0755")
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
            open_up(folder)
uid = int(sys.argv[1])
os.setgroups([])
os.setresgid(uid, uid, uid)
os.setresuid(uid, uid, uid)
os.execve(sys.executable, [sys.executable, *sys.argv[2:]], {**os.environ, "HOME": "/tmp"})
"""


def _as_another_user(cases, path: str) -> list[dict]:
    """Grade ``cases`` (file, exercise, mark) as a user other than the one running the tests."""
    cmd = [PYTHON, "-c", GRADE_SCRIPT, json.dumps(cases), str(HOSTILE)]
    if os.geteuid() == 0:
        uid = 700_000 + os.getpid() % 100_000
        cmd = [shutil.which("unshare"), "--mount", PYTHON, "-c", AS_USER, str(uid)] + cmd[1:]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=240,
                          env={**os.environ, "PATH": path, "PYTHONPATH": str(ROOT)})
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


def test_another_user_without_util_linux_has_the_subreaper():
    mark = 840_000 + os.getpid() % 100_000
    no_tools = "/nonexistent-bin"          # no unshare, no setpriv, no bwrap
    kill_parent, escape = _as_another_user([("kill_parent.py", "time_per_token", 0),
                                            ("escape_session.py", "kv_cache_bytes", mark)], no_tools)
    for result in (kill_parent, escape):
        held = result["isolation_held"]
        assert held["subreaper"] and not held["pid_namespace"] and not held["own_user"]
        assert "util-linux" in result["isolation_detail"] and "could signal the grader" in result["isolation_detail"]
    assert kill_parent["status"] == "crashed" and kill_parent["score"] == 0
    assert all(r["supervisor_lost"] for r in kill_parent["runs"])
    assert escape["score"] == 0 and processes_matching(f"hostile-escapee {mark}") == []


@pytest.mark.parametrize("knobs", [{}, {"namespaces": False}, {"namespaces": False, "own_user": False}],
                         ids=["namespaces", "subreaper", "subreaper-same-user"])
def test_a_course_package_a_job_needs_is_importable_and_nothing_next_to_it(knobs):
    """The public checks (and, one day, a package an exercise hands to the learner's function)
    are importable in the sandbox; the rest of the checkout, graders/ first, is not."""
    import public_checks
    from test_grader_sandbox import LIMITS
    sandbox = Sandbox("subprocess", **knobs)
    if knobs == {} and not sandbox.namespaces:
        pytest.skip("unshare cannot make namespaces here")
    if os.geteuid() != 0 and knobs.get("own_user") is False:
        pytest.skip("the same as the case before for a user other than root")
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
