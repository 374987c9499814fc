"""What a sandboxed run sees of the machine: a copy in memory of only the files a run needs
(``graders.sandbox.resident``).

- what the copy holds, read from this machine and checked against what a run needs;
- how it is made (links, permission bits, the folders bound), on a made-up tree;
- where it is made on machines this one is not (no tmpfs, a tmpfs without room);
- a run in each sandbox with a file system of its own: every file it can read outside its own
  job folder lives in memory, what it needs works, and what it does not need is not there.
"""
import os
import stat
import subprocess
import sys
import time

import pytest

from graders.sandbox import folders, resident

from test_sandbox import ISOLATED, probe


@pytest.fixture(scope="module")
def needed():
    return resident.needed_paths()


def test_the_copy_holds_the_interpreter_numpy_and_the_libraries_by_the_names_they_are_linked_by(needed):
    import numpy
    executable = os.path.normpath(os.path.abspath(sys.executable))
    assert executable in needed and os.path.realpath(executable) in needed
    assert os.path.join(os.path.dirname(numpy.__file__), "linalg", "__init__.py") in needed
    assert os.path.join(os.path.dirname(os.__file__), "json", "decoder.py") in needed
    libc = [p for p in needed if os.path.basename(p).startswith("libc.so")]
    assert any(os.path.islink(p) for p in libc) or len(libc) == 1      # found by libc.so.6
    for path in needed:                     # every link leads to something the copy holds
        if os.path.islink(path):
            target = os.path.realpath(path)
            assert any(target == p or p.startswith(target + "/") for p in needed), (path, target)


def test_the_copy_leaves_out_what_no_run_needs(needed):
    stdlib = os.path.dirname(os.__file__)
    for left_out in ("test", "site-packages", "idlelib", "ensurepip"):
        assert not any(p.startswith(os.path.join(stdlib, left_out) + "/") for p in needed), left_out
    assert not any(p.endswith((".opt-1.pyc", ".opt-2.pyc")) for p in needed)
    assert not any("/numpy/" in p and "/tests/" in p for p in needed)
    site = resident.site_dirs()[0]
    packages = {p[len(site) + 1:].split("/")[0] for p in needed if p.startswith(site + "/")}
    assert {name.split("-")[0] for name in packages} <= {"numpy", "numpy.libs"}, packages
    total = sum(os.path.getsize(p) for p in needed if os.path.isfile(p) and not os.path.islink(p))
    assert total < 400 << 20              # the machine's /usr and the venv are gigabytes


def test_a_copy_keeps_links_and_permission_bits_but_no_set_id_bit(tmp_path):
    tree = tmp_path / "machine"
    (tree / "usr" / "bin").mkdir(parents=True)
    (tree / "usr" / "bin" / "tool").write_bytes(b"#!/bin/sh\n")
    os.chmod(tree / "usr" / "bin" / "tool", 0o4755)
    (tree / "usr" / "lib").mkdir()
    (tree / "usr" / "lib" / "libx.so.1.2").write_bytes(b"\x7fELF" + bytes(5000))
    os.chmod(tree / "usr" / "lib" / "libx.so.1.2", 0o640)
    os.symlink("libx.so.1.2", tree / "usr" / "lib" / "libx.so.1")
    os.utime(tree / "usr" / "bin" / "tool", (1_600_000_000, 1_600_000_000))   # a module's compiled form checks it
    (tree / "tmp" / "ci").mkdir(parents=True)
    (tree / "tmp" / "ci" / "pyvenv.cfg").write_text("home = /usr/bin\n")
    memory = tmp_path / "memory"
    memory.mkdir()
    paths = sorted(str(p) for p in tree.rglob("*") if not p.is_dir() or p.is_symlink())
    view = resident.build(paths, base=str(memory))
    copied = view.source(str(tree / "usr" / "bin" / "tool"))
    assert stat.S_IMODE(os.lstat(copied).st_mode) == 0o755
    assert os.stat(copied).st_mtime_ns == os.stat(tree / "usr" / "bin" / "tool").st_mtime_ns
    assert stat.S_IMODE(os.lstat(view.source(str(tree / "usr" / "lib" / "libx.so.1.2"))).st_mode) == 0o640
    assert os.readlink(view.source(str(tree / "usr" / "lib" / "libx.so.1"))) == "libx.so.1.2"
    assert open(view.source(str(tree / "usr" / "lib" / "libx.so.1")), "rb").read(4) == b"\x7fELF"
    assert (view.files, view.bytes) == (3, len(b"#!/bin/sh\n") + 5004 + len("home = /usr/bin\n"))
    parts = str(tmp_path).split("/")
    assert view.folders() == ["/tmp/" + parts[2] if parts[1] == "tmp" else "/" + parts[1]]   # the test's tree
    for top, dirs, _ in os.walk(view.root):
        for name in dirs:
            assert stat.S_IMODE(os.stat(os.path.join(top, name)).st_mode) == 0o755


def test_folders_under_tmp_are_bound_one_by_one(tmp_path):
    """A checkout under /tmp (a CI clone): the copy's /tmp is not bound over the sandbox's own
    /tmp, its folders are."""
    root = tmp_path / "copy"
    for folder in ("usr/lib", "tmp/ci-1/repo/.venv", "tmp/ci-2", "etc"):
        (root / folder).mkdir(parents=True)
    os.symlink("usr/lib", root / "lib")
    view = resident.View(root=str(root), in_memory=True)
    assert view.folders() == ["/etc", "/tmp/ci-1", "/tmp/ci-2", "/usr"]


def test_the_grader_files_a_sandbox_binds_keep_their_times(tmp_path):
    """A compiled module is used only while its source's time matches: the copies of the
    harness and its compiled form keep the originals' times, and follow a change."""
    source = tmp_path / "harness.py"
    source.write_text("x = 1\n")
    view = resident.View(root=str(tmp_path / "copy"), in_memory=True)
    held = view.holding(source, "harness.py")
    assert open(held).read() == "x = 1\n"
    assert os.stat(held).st_mtime_ns == os.stat(source).st_mtime_ns
    later = time.time() + 10
    source.write_text("x = 2\n")
    os.utime(source, (later, later))
    assert open(view.holding(source, "harness.py")).read() == "x = 2\n"
    assert ".grader" not in " ".join(view.folders())


@pytest.mark.parametrize("machine, expected", [
    ({"/dev/shm": "tmpfs", "tmp": "ext4"}, ("/dev/shm", True)),          # this machine
    ({"/dev/shm": None, "tmp": "ext4"}, ("tmp", False)),                 # no /dev/shm at all
    ({"/dev/shm": "ext4", "tmp": "tmpfs"}, ("tmp", True)),               # /tmp is the tmpfs
    ({"/dev/shm": "tmpfs", "tmp": "ext4", "small": True}, ("tmp", False)),   # a container's 64 MiB /dev/shm
])
def test_the_copy_goes_to_memory_where_a_tmpfs_has_room(monkeypatch, tmp_path, machine, expected):
    shm = tmp_path / "shm"
    shm.mkdir()
    tmp = str(tmp_path / "tmp")
    kinds = {str(shm): machine["/dev/shm"], tmp: machine["tmp"]}
    monkeypatch.setattr(resident, "MEMORY_BASE", str(shm))
    monkeypatch.setattr(resident.tempfile, "gettempdir", lambda: tmp)
    monkeypatch.setattr(resident, "_fs_type", lambda folder: kinds[folder])
    free = os.statvfs(shm).f_bavail * os.statvfs(shm).f_frsize
    size = free if machine.get("small") else 1 << 20
    where, in_memory = resident._memory_base(size)
    assert (where, in_memory) == ({"/dev/shm": str(shm), "tmp": tmp}[expected[0]], expected[1])


def test_the_file_system_type_is_read_as_the_kernel_reports_it():
    for folder in ("/", "/proc", "/dev/shm", "/tmp"):
        if os.path.isdir(folder):
            said = subprocess.run(["stat", "-f", "-c", "%T", folder], capture_output=True, text=True).stdout.strip()
            kind = resident._fs_type(folder)
            assert kind == said or (said, kind) in {("ext2/ext3", "ext4"), ("ext2/ext3", "ext3")}, (folder, said, kind)


def test_copies_left_by_a_killed_grader_are_removed(tmp_path):
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = tmp_path / f"grader-view-{dead.pid}-abc"
    (stale / "usr").mkdir(parents=True)
    old = time.time() - 3600
    os.utime(stale, (old, old))
    folders.remove_stale_folders(tmp_path)
    assert not stale.exists()


RUN_SEES = """
import importlib, os, sys
def probe():
    found = {}
    for name in ("sqlite3", "ssl", "ctypes", "decimal", "lzma", "bz2", "zlib", "json", "numpy.linalg", "numpy.fft"):
        try:
            importlib.import_module(name)
            found[name] = True
        except Exception as err:
            found[name] = repr(err)
    top = {}                     # each mount point's topmost mount, if a path reaches it
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            top[fields[4]] = (tuple(int(n) for n in fields[2].split(":")), fields[fields.index("-") + 1])
    mounts = []
    for point, (device, kind) in top.items():
        try:
            info = os.stat(point)
        except OSError:
            continue
        if (os.major(info.st_dev), os.minor(info.st_dev)) == device:
            mounts.append((point, kind))
    return {"imports": found, "mounts": mounts, "torch": importlib.util.find_spec("torch") is not None,
            "libs": sorted(os.listdir("/usr/lib/" + os.uname().machine + "-linux-gnu"))
                    if os.path.isdir("/usr/lib/" + os.uname().machine + "-linux-gnu") else [],
            "shell": os.system("sleep 0 && true") == 0}
"""


@pytest.mark.parametrize("isolation", ISOLATED)
def test_every_file_a_run_reads_outside_its_own_job_is_in_memory(isolation):
    """In bubblewrap and in the fallback with namespaces: outside the machine's devices and
    processes, every mount a run can reach is a tmpfs (the copy, its private /tmp and /dev/shm)
    or a device covering a file, but for its own job folder (and the fallback's root folder,
    whose entries are all covered or links); everything a run needs works from it (compiled
    modules of the standard library, numpy, a shell line), and what it does not need is not
    there."""
    seen, run = probe(RUN_SEES, isolation, timeout=20)
    assert isinstance(seen, dict), seen
    assert all(ok is True for ok in seen["imports"].values()), seen["imports"]
    assert seen["shell"] and not seen["torch"]
    on_disk = [(point, kind) for point, kind in seen["mounts"]
               if kind not in ("tmpfs", "devtmpfs") and not point.startswith(("/dev", "/proc"))]
    job = [(p, k) for p, k in on_disk if p == "/sandbox/in" or os.path.basename(p).startswith("probe-")]
    # the fallback's root is the machine's own, every entry of it covered or a link into the copy
    root = [(p, k) for p, k in on_disk if p == "/" and isolation == "subprocess"]
    assert sorted(on_disk) == sorted(job + root) and len(job) == 1, seen["mounts"]
    machine = os.listdir(f"/usr/lib/{os.uname().machine}-linux-gnu")
    assert 0 < len(seen["libs"]) < len(machine) / 4, (len(seen["libs"]), len(machine))


def test_the_results_say_where_the_copy_is(monkeypatch):
    """``isolation_detail`` says what held: a copy on disk is in the page cache, not in memory."""
    from graders.sandbox import describe
    held = {"file_view": True, "pid_namespace": True, "supervisor": True}
    monkeypatch.setattr(resident, "_view", [resident.View(root="/nowhere", in_memory=False)])
    assert "(a copy of only what a run needs, on disk, in the page cache)" in describe("bwrap", "", held)
    monkeypatch.setattr(resident, "_view", [resident.View(root="/nowhere", in_memory=True)])
    assert "(a copy of only what a run needs, in memory)" in describe("bwrap", "", held)
