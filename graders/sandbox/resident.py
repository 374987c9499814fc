"""The files a sandboxed run sees: a copy, in memory, of only those a run needs (``view()``).

Why a copy.  The machine's page cache is shared by every process: whether a page of a file is in
memory is a bit that any run can set (by reading the page) and read (by timing a read: tens of
microseconds or more from the disk, about one microsecond from memory).  Were the sandbox to show the
machine's ``/usr`` and Python's folders, as a bind of the real folders does, a check could mark
a page of a large library nobody reads and the runs after it, or the one beside it, could see the
mark: a check that learns which builders came before it can judge them by consensus.  So every
file a run can read is copied once per grader into a tmpfs (memory: without swap its pages are
never dropped), and the sandbox binds that copy at the same paths.  Every page a run can read
is then in memory before the first run and stays there; reading it changes nothing another run
can measure through the page cache.

What is copied (``needed_paths``), each path with every symbolic link on its way (``/bin`` to
``usr/bin``, ``.venv/bin/python`` to the interpreter), so that the same names resolve:

- the interpreter and its standard library, without its tests, its site-packages, the parts a
  run never uses (``STDLIB_LEFT_OUT``) and the bytecode compiled for ``python -O``;
- numpy's package folder and its bundled libraries (``numpy.libs``), without numpy's tests;
- every file the interpreter maps once numpy and each compiled module of the standard library are
  imported (``PROBE``, read from ``/proc/self/maps``): the shared libraries, the loader, the
  locale;
- a few commands a notebook's shell line or a hostile run may start (``COMMANDS``) and the
  libraries they load;
- ``/etc``'s loader cache and configuration and the time zone.

Where no tmpfs has room (``_memory_base``), the copy is made in the temporary folder on disk:
its pages were just written and stay cached unless the machine runs short of memory, which the
sandboxes' own limits keep them from causing.  ``View.in_memory`` says which.
"""
from __future__ import annotations

import atexit
import json
import os
import shutil
import stat
import subprocess
import sys
import sysconfig
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

from .interpreter import environment, interpreter, site_dirs
from .folders import remove_stale_folders

STDLIB_LEFT_OUT = ("test", "site-packages", "dist-packages", "idlelib", "tkinter", "turtledemo",
                   "ensurepip", "lib2to3", "distutils", "pydoc_data",
                   "config-")         # "config-": what building C extensions needs
OPTIMIZED = (".opt-1.pyc", ".opt-2.pyc")   # compiled for ``python -O``, which no run is
PACKAGES = ("numpy",)             # of the package folders: those the harness and the checks import
COMMANDS = ("sh", "sleep", "cat", "ls", "env", "true")
ETC = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/localtime")
MEMORY_BASE = "/dev/shm"
ROOM_FACTOR = 2                   # a tmpfs is used when it has twice the copy's size free
PROBE_SECONDS = 60
MAX_LINKS = 40                    # symbolic links followed along one path, as the kernel does

# Run by the sandbox's interpreter, as the sandbox runs it (-I -S -B, the packages' folders on
# sys.path): every file it maps once numpy and the standard library's compiled modules are in.
PROBE = r"""
import importlib, json, os, sys, sysconfig
sys.path[:0] = json.loads(sys.argv[1])
dynload = os.path.join(sysconfig.get_paths()["platstdlib"], "lib-dynload")
for name in sorted(os.listdir(dynload)) if os.path.isdir(dynload) else []:
    module = name.split(".")[0]
    if name.endswith(".so") and module != "_tkinter":
        try:
            importlib.import_module(module)
        except Exception:
            pass
import numpy, numpy.linalg, numpy.fft, numpy.random
mapped = set()
with open("/proc/self/maps") as f:
    for line in f:
        fields = line.split(maxsplit=5)
        if len(fields) == 6 and fields[5].startswith("/"):
            mapped.add(fields[5].rstrip("\n").removesuffix(" (deleted)"))
print(json.dumps(sorted(mapped)))
"""


@dataclass
class View:
    """A copy of the files a run needs, at ``root`` + each file's own path."""

    root: str
    in_memory: bool
    files: int = 0
    bytes: int = 0
    links: dict[str, str] = field(default_factory=dict)     # the image's top-level links: path -> target

    def folders(self) -> list[str]:
        """The folders to bind from the copy, each at its own path: every top-level folder of it
        but ``/tmp``, whose children are bound one by one (a sandbox's ``/tmp`` is its own)."""
        out = []
        for entry in sorted(os.scandir(self.root), key=lambda e: e.name):
            if entry.is_symlink() or not entry.is_dir() or entry.name == ".grader":
                continue
            if entry.name == "tmp":
                out += [f"/tmp/{child.name}" for child in sorted(os.scandir(entry.path), key=lambda e: e.name)]
            else:
                out.append(f"/{entry.name}")
        return out

    def source(self, path: str) -> str:
        """Where ``path`` of the sandbox lies in the copy."""
        return self.root + path

    def holding(self, source: Path, name: str) -> str:
        """A copy of the grader's file ``source`` (the harness, the supervisor, their compiled
        forms) kept beside the system's as ``name``, outside what ``folders`` binds: the
        sandbox binds it where it wants it.  Its times are the source's, so that a compiled
        module still matches its source."""
        target = os.path.join(self.root, ".grader", name)
        info = os.stat(source)
        with _lock:
            if not os.path.exists(target) or os.stat(target).st_mtime_ns != info.st_mtime_ns:
                os.makedirs(os.path.dirname(target), 0o755, exist_ok=True)
                partial = f"{target}.{os.getpid()}.{threading.get_ident()}"
                shutil.copy2(source, partial)
                os.chmod(partial, 0o644)
                os.replace(partial, target)
        return target


_view: list[View] = []
_lock = threading.RLock()


def view() -> View:
    """This grader's copy, made on the first call and removed when the grader exits (its size and
    the time it takes to make: ``python -m bench grader``, its first line after the mutants)."""
    with _lock:
        if not _view:
            _view.append(build(needed_paths()))
        return _view[0]


def current_view() -> View | None:
    """This grader's copy if it has been made, else None (nothing is made)."""
    return _view[0] if _view else None


def needed_paths() -> list[str]:
    """Every path a run needs (see the module's docstring), links on the way included."""
    probe = _start_probe()                  # it runs while the folders are walked
    wanted: list[str] = []
    executable = interpreter()
    wanted.append(executable)
    venv_config = Path(sys.prefix) / "pyvenv.cfg"
    if venv_config.is_file():
        wanted.append(str(venv_config))
    wanted += _tree(sysconfig.get_paths()["stdlib"], left_out=STDLIB_LEFT_OUT)
    if sysconfig.get_paths()["platstdlib"] != sysconfig.get_paths()["stdlib"]:
        wanted += _tree(sysconfig.get_paths()["platstdlib"], left_out=STDLIB_LEFT_OUT)
    for site in site_dirs():
        for entry in sorted(os.listdir(site)):
            if entry in PACKAGES or entry.endswith(".libs") and entry[:-5] in PACKAGES:
                wanted += _tree(os.path.join(site, entry), left_out=("tests",))
    libraries = []
    for command in COMMANDS:
        path = shutil.which(command, path="/usr/bin:/bin")
        if path:
            wanted.append(path)
            libraries += _loaded_by(path)
    wanted += _with_names(_mapped_by_python(probe) + libraries)
    wanted += [path for path in ETC if os.path.lexists(path)]
    out: set[str] = set()
    for path in wanted:
        out.update(_resolution(path))
    return sorted(out)


def _tree(folder: str, left_out: tuple[str, ...]) -> list[str]:
    """The files and links below ``folder`` (links not followed), without the entries whose
    name is one of ``left_out`` or starts with one ending in "-"."""
    def out_of(name: str) -> bool:
        return (name.endswith(OPTIMIZED)
                or any(name == x or x.endswith("-") and name.startswith(x) for x in left_out))

    found = []
    for top, dirs, files in os.walk(folder):
        dirs[:] = [d for d in dirs if not out_of(d) and not os.path.islink(os.path.join(top, d))]
        found += [os.path.join(top, name) for name in files if not out_of(name)]
        found += [os.path.join(top, d) for d in os.listdir(top)
                  if os.path.islink(os.path.join(top, d)) and os.path.isdir(os.path.join(top, d)) and not out_of(d)]
    return found


def _start_probe() -> subprocess.Popen:
    """The sandbox's interpreter running ``PROBE``."""
    return subprocess.Popen([interpreter(), "-I", "-S", "-B", "-c", PROBE,
                             json.dumps(site_dirs())], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=environment("/"), cwd="/", stdin=subprocess.DEVNULL)


def _mapped_by_python(probe: subprocess.Popen) -> list[str]:
    """The files the sandbox's interpreter maps with numpy and the standard library loaded."""
    try:
        stdout, stderr = probe.communicate(timeout=PROBE_SECONDS)
    except subprocess.TimeoutExpired:
        probe.kill()
        probe.communicate()
        raise OSError(f"the interpreter's files could not be listed in {PROBE_SECONDS} s") from None
    if probe.returncode != 0:
        raise OSError(f"the interpreter's files could not be listed: "
                      f"{stderr.decode(errors='replace').strip()[-300:] or probe.returncode}")
    return [p for p in json.loads(stdout) if os.path.isfile(p)]


def _with_names(files: list[str]) -> list[str]:
    """``files`` and the links beside each that name it: a library is mapped from its own file
    (``libz.so.1.2.13``) but found by the name it is linked against (``libz.so.1``)."""
    wanted = {os.path.realpath(f) for f in files}
    stems = {os.path.basename(f).split(".so")[0] for f in wanted}     # libz of libz.so.1.2.13
    out = list(files)
    for folder in sorted({os.path.dirname(f) for f in files}):
        for entry in os.scandir(folder):
            if (entry.name.split(".so")[0] in stems and entry.is_symlink()
                    and os.path.realpath(entry.path) in wanted):
                out.append(entry.path)
    return out


def _loaded_by(command: str) -> list[str]:
    """The shared libraries ``command`` loads (the dynamic loader's own list: it prints them
    instead of running the command when ``LD_TRACE_LOADED_OBJECTS`` is set)."""
    try:
        proc = subprocess.run([command], capture_output=True, timeout=PROBE_SECONDS, stdin=subprocess.DEVNULL,
                              env={"LD_TRACE_LOADED_OBJECTS": "1", "PATH": "/usr/bin:/bin"})
    except OSError:
        return []
    found = []
    for line in proc.stdout.decode(errors="replace").splitlines():
        found += [word for word in line.split() if word.startswith("/") and os.path.isfile(word)]
    return found


def _resolution(path: str, depth: int = 0) -> list[str]:
    """``path`` and every symbolic link met on the way to what it names, in order."""
    if depth > MAX_LINKS:
        return []
    parts = Path(path).parts[1:]
    current = "/"
    for k, part in enumerate(parts):
        step = os.path.join(current, part)
        if os.path.islink(step):
            target = os.path.normpath(os.path.join(current, os.readlink(step), *parts[k + 1:]))
            return [step] + _resolution(target, depth + 1)
        current = step
    return [current] if os.path.lexists(current) else []


def build(paths: list[str], base: str | None = None) -> View:
    """Copy ``paths`` (files, links, folders: a folder is made, not filled) into a fresh folder
    of a tmpfs (or of the temporary folder, see ``_memory_base``), each at its own path; folders
    0755, files with their own permission bits (set-id bits dropped) and times."""
    size = sum(os.lstat(p).st_size for p in paths if os.path.isfile(p) and not os.path.islink(p))
    base, in_memory = (base, True) if base else _memory_base(size)
    remove_stale_folders(Path(base))
    root = tempfile.mkdtemp(prefix=f"grader-view-{os.getpid()}-", dir=base)
    os.chmod(root, 0o755)
    owner = os.getpid()
    atexit.register(lambda: os.getpid() == owner and shutil.rmtree(root, ignore_errors=True))
    view = View(root=root, in_memory=in_memory)
    for path in paths:
        target = root + path
        os.makedirs(os.path.dirname(target), 0o755, exist_ok=True)
        info = os.lstat(path)
        if stat.S_ISLNK(info.st_mode):
            if not os.path.lexists(target):
                os.symlink(os.readlink(path), target)
            if os.path.dirname(path) == "/":
                view.links[path] = os.readlink(path)
        elif stat.S_ISDIR(info.st_mode):
            os.makedirs(target, 0o755, exist_ok=True)
        elif stat.S_ISREG(info.st_mode):
            shutil.copyfile(path, target)
            os.chmod(target, stat.S_IMODE(info.st_mode) & 0o777)
            # a module's compiled form is used only while its source's time is the one it records
            os.utime(target, ns=(info.st_atime_ns, info.st_mtime_ns))
            view.files += 1
            view.bytes += info.st_size
    return view


def _memory_base(size: int) -> tuple[str, bool]:
    """Where the copy goes: ``MEMORY_BASE`` when it is a tmpfs with room for it, else the
    temporary folder; and whether that is memory."""
    if _fs_type(MEMORY_BASE) == "tmpfs" and os.access(MEMORY_BASE, os.W_OK):
        free = os.statvfs(MEMORY_BASE)
        if free.f_bavail * free.f_frsize >= ROOM_FACTOR * size:
            return MEMORY_BASE, True
    tmp = tempfile.gettempdir()
    return tmp, _fs_type(tmp) == "tmpfs"


def _fs_type(folder: str) -> str | None:
    """The file system type of the mount ``folder`` is on, from mountinfo."""
    best, kind = "", None
    try:
        with open("/proc/self/mountinfo") as f:
            for line in f:
                fields = line.split()
                point = fields[4]
                tail = fields[fields.index("-") + 1]
                if (folder == point or folder.startswith(point.rstrip("/") + "/")) and len(point) >= len(best):
                    best, kind = point, tail
    except (OSError, ValueError, IndexError):
        return None
    return kind
