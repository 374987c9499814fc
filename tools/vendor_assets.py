"""Vendor the site's JavaScript so the built course reads offline (``make vendor``).

The site needs two things that Sphinx and myst-nb would otherwise load from a CDN:

* MathJax 3 (npm ``mathjax``): the combined ``es5/tex-chtml.js`` component, the CHTML woff-v2
  fonts, the TeX extensions that ``autoload`` fetches on demand (``\\color``, ``\\cancel``, ...),
  and the accessibility components the MathJax menu loads when a reader turns them on.
* The widget host (``coursebook/widgets/host.js``, the course's own file): it draws the widgets a
  chapter saved, from their own ES modules, with no kernel.  myst-nb adds it (``nb_ipywidgets_js``
  in ``_config.yml``) only to pages whose notebook saved widget state, in place of its CDN
  defaults (RequireJS and the ipywidgets HTML manager, 3.7 MB that the course's widgets do not
  need: see CONTRIBUTING.md, "Widgets").

Each npm package is fetched once with ``npm pack`` (a single tarball: no dependency tree, no
install scripts), checked against the pinned sha512 integrity below, and unpacked into
``_build/.npm-vendor``.  The files the site needs are then copied to ``book/_static/vendor/``
(generated, gitignored).  Running it again does nothing unless a pin, the file list or a
course file changed.

The script also makes sure the ``python3`` kernel that ``make book`` executes the chapters with
is this virtual environment's ipykernel.

Usage: ``python tools/vendor_assets.py [--check]`` (``--check``: only report whether the vendored
files are complete; exit 1 if not).
"""
from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))      # tools/site_runtime.py
CACHE = ROOT / "_build" / ".npm-vendor"
DEST = ROOT / "book" / "_static" / "vendor"
STAMP = DEST / ".vendored.json"

# name -> (version, sha512 integrity of the registry tarball)
PACKAGES: dict[str, tuple[str, str]] = {
    "mathjax": (
        "3.2.2",
        "sha512-Bt+SSVU8eBG27zChVewOicYs7Xsdt40qm4+UpHyX7k0/O9NliPc+x77k1/FEsPsjKPZGJvtRZM1vO+geW0OhGw==",
    ),
}

# (package, path in the package, path under book/_static/vendor/); a path ending in "/" is a folder.
COPIES: list[tuple[str, str, str]] = [
    ("mathjax", "es5/tex-chtml.js", "mathjax/tex-chtml.js"),
    ("mathjax", "es5/output/chtml/fonts/woff-v2/", "mathjax/output/chtml/fonts/woff-v2/"),
    ("mathjax", "es5/input/tex/extensions/", "mathjax/input/tex/extensions/"),
    # loaded only when a reader switches on an accessibility option in MathJax's menu
    # (the explorer loads the MathML input jax and the speech-rule engine with its maps)
    ("mathjax", "es5/a11y/", "mathjax/a11y/"),
    ("mathjax", "es5/sre/", "mathjax/sre/"),
    ("mathjax", "es5/input/mml.js", "mathjax/input/mml.js"),
    ("mathjax", "es5/input/mml/", "mathjax/input/mml/"),
    ("mathjax", "es5/ui/", "mathjax/ui/"),
    ("mathjax", "LICENSE", "mathjax/LICENSE"),
]

# The exercise pages' libraries, installed with ``npm ci`` from the lock file in tools/site_npm
# (exact versions and integrity; node_modules stays in _build): each package's ES module entry
# copied under book/_static/vendor/<folder>/, its imports of the other packages made relative, so
# the browser loads them with no bundler and no import map.  Its license goes to vendor/licenses/.
SITE_NPM = ROOT / "tools" / "site_npm"
#: Whether to vendor the exercise pages' Python (tools/site_runtime.py): a test of the copying alone
#: turns it off.
RUNTIME = True
#: package -> (folder under vendor/, the files of the package to copy: its ES modules)
ES_MODULES: dict[str, tuple[str, tuple[str, ...]]] = {
    "@bjorn3/browser_wasi_shim": ("wasi-shim", ("dist/index.js", "dist/wasi.js", "dist/wasi_defs.js", "dist/fd.js",
                                                "dist/fs_mem.js", "dist/fs_opfs.js", "dist/strace.js", "dist/debug.js")),
    "@codemirror/autocomplete": ("codemirror", ("dist/index.js",)),
    "@codemirror/commands": ("codemirror", ("dist/index.js",)),
    "@codemirror/lang-python": ("codemirror", ("dist/index.js",)),
    "@codemirror/language": ("codemirror", ("dist/index.js",)),
    "@codemirror/state": ("codemirror", ("dist/index.js",)),
    "@codemirror/streamparser": ("codemirror", ("dist/index.js",)),
    "@codemirror/view": ("codemirror", ("dist/index.js",)),
    "@lezer/common": ("codemirror", ("dist/index.js",)),
    "@lezer/highlight": ("codemirror", ("dist/index.js",)),
    "@lezer/lr": ("codemirror", ("dist/index.js",)),
    "@lezer/python": ("codemirror", ("dist/index.js",)),
    "@marijn/find-cluster-break": ("codemirror", ("src/index.js",)),
    "crelt": ("codemirror", ("index.js",)),
    "style-mod": ("codemirror", ("src/style-mod.js",)),
    "w3c-keyname": ("codemirror", ("index.js",)),
}

# The course's own files the site loads: (file in the repository, path under book/_static/vendor/).
COURSE_FILES: list[tuple[str, str]] = [
    ("coursebook/widgets/host.js", "widgets/host.js"),
]


class VendorError(RuntimeError):
    """A step of vendoring failed; the message says what to do."""


def _log(msg: str) -> None:
    print(f"vendor: {msg}", flush=True)


def _integrity(path: Path) -> str:
    return "sha512-" + base64.b64encode(hashlib.sha512(path.read_bytes()).digest()).decode()


def _tarball_name(name: str, version: str) -> str:
    return f"{name.lstrip('@').replace('/', '-')}-{version}.tgz"


def _npm() -> str:
    npm = shutil.which("npm")
    if npm is None:
        raise VendorError(
            "npm is not installed (or not on PATH). The site vendors MathJax "
            "from the npm registry so it reads offline; install Node.js and npm "
            "(Debian: apt-get install nodejs npm) and run 'make vendor' again.")
    return npm


def fetch(name: str, version: str, integrity: str) -> Path:
    """The unpacked package folder in the cache, fetching it with ``npm pack`` when missing."""
    unpacked = CACHE / "packages" / f"{name.lstrip('@').replace('/', '-')}-{version}"
    marker = unpacked / ".integrity"
    if marker.is_file() and marker.read_text().strip() == integrity:
        return unpacked
    tarballs = CACHE / "tarballs"
    tarballs.mkdir(parents=True, exist_ok=True)
    tarball = tarballs / _tarball_name(name, version)
    if not tarball.is_file() or _integrity(tarball) != integrity:
        _npm_pack(name, version, integrity, tarball)
    if unpacked.exists():
        shutil.rmtree(unpacked)
    tmp = unpacked.with_name(unpacked.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    with tarfile.open(tarball) as tar:
        members = [m for m in tar.getmembers()
                   if (m.isfile() or m.isdir()) and m.name.startswith("package/")
                   and ".." not in Path(m.name).parts]
        for m in members:
            m.name = m.name[len("package/"):]
        tar.extractall(tmp, members=[m for m in members if m.name])
    (tmp / ".integrity").write_text(integrity + "\n")
    tmp.rename(unpacked)
    return unpacked


def _npm_pack(name: str, version: str, integrity: str, tarball: Path) -> None:
    """Fetch the package's tarball with ``npm pack`` into ``tarball``'s folder, and check it
    against the pinned integrity (a tarball that differs is deleted)."""
    tarballs = tarball.parent
    _log(f"fetching {name}@{version} from the npm registry")
    cmd = [_npm(), "pack", f"{name}@{version}", "--pack-destination", str(tarballs),
           "--loglevel=error", "--fetch-retries=1", "--fetch-timeout=60000"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300,
                              cwd=tarballs, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise VendorError(
            f"'npm pack {name}@{version}' did not finish in 5 minutes: the npm registry "
            f"(npm config get registry) looks unreachable. Check the network or the proxy "
            f"settings and run 'make vendor' again.") from None
    if proc.returncode != 0 or not tarball.is_file():
        detail = (proc.stderr or proc.stdout).strip().splitlines()
        raise VendorError(
            f"could not fetch {name}@{version} from the npm registry (is it reachable? "
            f"'npm config get registry' says where npm looks):\n    "
            + "\n    ".join(detail[:12] or ["(npm printed nothing)"]))
    got = _integrity(tarball)
    if got != integrity:
        tarball.unlink()
        raise VendorError(f"{name}@{version}: the downloaded tarball's integrity {got} is not the "
                          f"pinned {integrity}; refusing to use it")


def _lock_digest() -> str:
    return hashlib.sha256((SITE_NPM / "package-lock.json").read_bytes()).hexdigest()


def npm_ci() -> Path:
    """node_modules of tools/site_npm, installed by ``npm ci`` (the lock's versions and integrity,
    no install scripts) into the cache, once per lock file."""
    folder = CACHE / "site_npm"
    marker = folder / ".lock-sha256"
    digest = _lock_digest()
    if marker.is_file() and marker.read_text().strip() == digest and (folder / "node_modules").is_dir():
        return folder / "node_modules"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    for name in ("package.json", "package-lock.json"):
        shutil.copyfile(SITE_NPM / name, folder / name)
    _log("installing the exercise pages' libraries (npm ci, tools/site_npm/package-lock.json)")
    cmd = [_npm(), "ci", "--ignore-scripts", "--no-audit", "--no-fund", "--loglevel=error",
           "--fetch-retries=1", "--fetch-timeout=60000"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=folder,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise VendorError("'npm ci' for tools/site_npm did not finish in 10 minutes: the npm registry looks "
                          "unreachable. Check the network or the proxy settings and run 'make vendor' again.") from None
    if proc.returncode != 0:
        detail = (proc.stderr or proc.stdout).strip().splitlines()
        raise VendorError("'npm ci' for tools/site_npm failed:\n    " + "\n    ".join(detail[:12] or ["(no message)"]))
    marker.write_text(digest + "\n")
    return folder / "node_modules"


def flat_name(package: str) -> str:
    """The file name of a one-file package under its vendor folder: @codemirror/state -> codemirror-state.js."""
    return package.lstrip("@").replace("/", "-") + ".js"


_IMPORT = re.compile(r"""(\b(?:from|import)\s*)(["'])([^"'\s]+)\2""")


def es_module_text(package: str, text: str) -> str:
    """A package's module with its imports of the other vendored packages made relative."""
    folder = ES_MODULES[package][0]

    def relative(match: re.Match) -> str:
        spec = match[3]
        if spec not in ES_MODULES:
            return match[0]
        target_folder, files = ES_MODULES[spec]
        if target_folder != folder or len(files) != 1:
            raise VendorError(f"{package} imports {spec}, which is not a one-file package of vendor/{folder}")
        return f"{match[1]}{match[2]}./{flat_name(spec)}{match[2]}"

    return _IMPORT.sub(relative, text)


def _es_modules(dest: Path) -> list[Path]:
    """Write the exercise pages' libraries under ``dest``; the files written."""
    if not ES_MODULES:
        return []
    modules = npm_ci()
    lock = json.loads((SITE_NPM / "package-lock.json").read_text())
    locked = {key.removeprefix("node_modules/") for key in lock.get("packages", {}) if key}
    unknown = locked - set(ES_MODULES)
    if unknown:
        raise VendorError(f"tools/site_npm's lock holds packages vendor_assets.py does not copy: {sorted(unknown)}")
    written = []
    for package, (folder, files) in ES_MODULES.items():
        root = modules / package
        for rel in files:
            text = es_module_text(package, (root / rel).read_text(encoding="utf-8"))
            target = dest / folder / (flat_name(package) if len(files) == 1 else Path(rel).name)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
            written.append(target)
        license_file = next((root / n for n in ("LICENSE", "LICENSE.md", "LICENSE.txt", "LICENSE-MIT")
                             if (root / n).is_file()), None)
        if license_file is None:
            raise VendorError(f"{package} has no LICENSE file to ship with the site")
        target = dest / "licenses" / (flat_name(package)[:-3] + ".txt")
        target.parent.mkdir(parents=True, exist_ok=True)
        version = json.loads((root / "package.json").read_text())["version"]
        target.write_text(f"{package} {version}\n\n" + license_file.read_text(encoding="utf-8"), encoding="utf-8")
        written.append(target)
    return written


def _runtime(dest: Path) -> list[Path]:
    """The Python of the exercise pages (tools/site_runtime.py), under ``dest``/runtime."""
    if not RUNTIME:
        return []
    import site_runtime
    try:
        site_runtime.build(dest / "runtime")
    except site_runtime.RuntimeBuildError as err:
        raise VendorError(str(err)) from None
    return [dest / "runtime" / name for name in site_runtime.OUTPUTS]


def _runtime_key() -> str:
    import site_runtime
    try:
        return site_runtime._key()
    except site_runtime.RuntimeBuildError as err:
        raise VendorError(str(err)) from None


def _plan() -> list[tuple[Path, Path]]:
    """(source file, destination file) for every vendored file."""
    pairs: list[tuple[Path, Path]] = []
    roots = {name: fetch(name, version, integrity)
             for name, (version, integrity) in PACKAGES.items()}
    for package, src, dst in COPIES:
        source = roots[package] / src
        if src.endswith("/"):
            if not source.is_dir():
                raise VendorError(f"{package}: expected a folder {src} in the package")
            for f in sorted(p for p in source.rglob("*") if p.is_file()):
                pairs.append((f, DEST / dst / f.relative_to(source)))
        else:
            if not source.is_file():
                raise VendorError(f"{package}: expected a file {src} in the package")
            pairs.append((source, DEST / dst))
    for src, dst in COURSE_FILES:
        pairs.append((ROOT / src, DEST / dst))
    return pairs


def _wanted_stamp() -> dict:
    return {
        "packages": {name: list(pin) for name, pin in PACKAGES.items()},
        "copies": [list(c) for c in COPIES],
        "course_files": {src: hashlib.sha256((ROOT / src).read_bytes()).hexdigest() for src, _ in COURSE_FILES},
        "es_modules": {"lock": _lock_digest(), "copies": {k: [v[0], list(v[1])] for k, v in ES_MODULES.items()},
                       "script": hashlib.sha256(Path(__file__).read_bytes()).hexdigest()} if ES_MODULES else None,
        "runtime": _runtime_key() if RUNTIME else None,
    }


def _complete() -> bool:
    """True when DEST holds exactly what this version of the script would write."""
    try:
        stamp = json.loads(STAMP.read_text())
    except (OSError, ValueError):
        return False
    if stamp.get("wanted") != _wanted_stamp():
        return False
    return all((DEST / rel).is_file() for rel in stamp.get("files", []))


def vendor() -> None:
    if _complete():
        _log(f"up to date ({DEST.relative_to(ROOT)})")
        return
    pairs = _plan()
    if DEST.exists():
        shutil.rmtree(DEST)
    for source, target in pairs:
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
    made = [t for _, t in pairs] + _es_modules(DEST) + _runtime(DEST)
    files = sorted(str(t.relative_to(DEST)) for t in made)
    STAMP.write_text(json.dumps({"wanted": _wanted_stamp(), "files": files}, indent=1) + "\n")
    size = sum((DEST / f).stat().st_size for f in files)
    _log(f"copied {len(files)} files ({size / 2**20:.1f} MiB) into {DEST.relative_to(ROOT)}: "
         + ", ".join(f"{n}@{v}" for n, (v, _) in PACKAGES.items()))


def ensure_kernel() -> None:
    """Make sure kernel ``python3`` runs this interpreter (the project's .venv)."""
    try:
        from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel
    except ImportError:
        raise VendorError("jupyter_client is not installed in this environment; "
                          "run 'make venv' first") from None
    manager = KernelSpecManager()
    try:
        spec = manager.get_kernel_spec("python3")
    except NoSuchKernel:
        _log("no python3 kernelspec found: installing this environment's (ipykernel --sys-prefix)")
        subprocess.run([sys.executable, "-m", "ipykernel", "install", "--sys-prefix"], check=True,
                       stdout=subprocess.DEVNULL)
        spec = KernelSpecManager().get_kernel_spec("python3")
    exe = spec.argv[0] if spec.argv else ""
    # jupyter_client replaces a bare "python"/"python3" by the running interpreter
    bare = {"python", f"python{sys.version_info[0]}", "python%d.%d" % sys.version_info[:2]}
    if exe in bare:
        return
    if Path(exe).is_absolute() and Path(os.path.realpath(exe)) == Path(os.path.realpath(sys.executable)):
        return
    if Path(exe).is_absolute() and Path(exe).resolve().is_relative_to(Path(sys.prefix).resolve()):
        return
    raise VendorError(
        f"the 'python3' Jupyter kernel found first ({spec.resource_dir}) runs {exe}, not this "
        f"environment's Python ({sys.executable}); the chapters would execute outside .venv. "
        f"Remove that kernelspec (jupyter kernelspec remove python3) or run 'make book', which "
        f"puts .venv's kernels first on JUPYTER_PATH.")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        if "--check" in argv:
            ok = _complete()
            _log("complete" if ok else "missing or out of date: run 'make vendor'")
            return 0 if ok else 1
        vendor()
        ensure_kernel()
    except VendorError as err:
        print(f"vendor: error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
