"""Vendor the site's JavaScript so the built course reads offline (``make vendor``).

The site needs three things that Sphinx and myst-nb would otherwise load from a CDN:

* MathJax 3 (npm ``mathjax``): the combined ``es5/tex-chtml.js`` component, the CHTML woff-v2
  fonts, the TeX extensions that ``autoload`` fetches on demand (``\\color``, ``\\cancel``, ...),
  and the accessibility components the MathJax menu loads when a reader turns them on.
* RequireJS (npm ``requirejs``): ``require.js``, which the widget manager needs.
* The ipywidgets HTML manager (npm ``@jupyter-widgets/html-manager`` 1.0.x, the line that
  renders ipywidgets 8 state: ``@jupyter-widgets/controls`` model version 2.0.0):
  ``dist/embed-amd.js`` and the FontAwesome font files its CSS points at.

Each package is fetched once with ``npm pack`` (a single tarball: no dependency tree, no install
scripts), checked against the pinned sha512 integrity below, and unpacked into
``_build/.npm-vendor``.  The files the site needs are then copied to ``book/_static/vendor/``
(generated, gitignored).  Running it again does nothing unless a pin or the file list changed.

``vendor/jupyter-widgets/offline.js`` is written by this script (see ``OFFLINE_JS``).  It runs
just before ``embed-amd.js`` and (1) makes the manager load its font files from the vendored
folder, (2) points the manager's fallback "CDN" for widget modules it does not bundle at a local
folder, so an unknown widget fails loudly (a 404 on the local server) instead of silently
fetching code from the internet, and (3) lets the widgets' MathJax 2 calls reach MathJax 3.

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
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / "_build" / ".npm-vendor"
DEST = ROOT / "book" / "_static" / "vendor"
STAMP = DEST / ".vendored.json"

# name -> (version, sha512 integrity of the registry tarball)
PACKAGES: dict[str, tuple[str, str]] = {
    "mathjax": (
        "3.2.2",
        "sha512-Bt+SSVU8eBG27zChVewOicYs7Xsdt40qm4+UpHyX7k0/O9NliPc+x77k1/FEsPsjKPZGJvtRZM1vO+geW0OhGw==",
    ),
    "requirejs": (
        "2.3.8",
        "sha512-7/cTSLOdYkNBNJcDMWf+luFvMriVm7eYxp4BcFCsAX0wF421Vyce5SXP17c+Jd5otXKGNehIonFlyQXSowL6Mw==",
    ),
    "@jupyter-widgets/html-manager": (
        "1.0.15",
        "sha512-5thBIV6ymNgmPVOHvzx+gGy8ZSKmSazhtGw4/c4xJDVzRhG9PTeQsRjF3FUTopvFi//SABeNz1yp47bCrJ3CQA==",
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
    ("requirejs", "require.js", "requirejs/require.js"),  # its MIT notice is in the file header
    ("@jupyter-widgets/html-manager", "dist/embed-amd.js", "jupyter-widgets/embed-amd.js"),
    # the package ships no LICENSE file: package.json names it (BSD-3-Clause), and the bundled
    # third-party notices are in embed.js.LICENSE.txt (the same bundle as embed-amd.js)
    ("@jupyter-widgets/html-manager", "package.json", "jupyter-widgets/package.json"),
    ("@jupyter-widgets/html-manager", "dist/embed.js.LICENSE.txt", "jupyter-widgets/THIRD-PARTY-NOTICES.txt"),
]
# font files referenced by the widget manager's CSS (FontAwesome 5): every font in dist/
WIDGET_FONT_SUFFIXES = (".woff2", ".woff", ".ttf", ".eot", ".svg")

OFFLINE_JS = """\
/* Written by tools/vendor_assets.py.  Loaded after require.js and before embed-amd.js, only on
 * pages whose notebook saved widget state.  It keeps the widget manager off the network:
 * 1. embed-amd.js derives the URL of its CSS assets (FontAwesome fonts) from the RequireJS URL
 *    of its own modules; map those modules to this folder so the fonts load from here (an
 *    absolute URL, so it works at any page depth and from file://).
 * 2. Modules it does not bundle (third-party widgets) would be looked up next to the page and
 *    then on a CDN (data-jupyter-widgets-cdn, read from the page's script tags): point both at
 *    a local folder, so an unknown widget shows up as a local 404, never as a CDN request.
 * 3. The widget views typeset their labels with the MathJax 2 API (MathJax.Hub.Queue); the site
 *    runs MathJax 3, so give MathJax 3 a small Hub.Queue that calls typesetPromise instead.
 */
(function () {
  var script = document.currentScript;
  var src = script && script.src ? script.src.split("?")[0] : "";
  var base = src.slice(0, src.lastIndexOf("/") + 1);
  window.__jupyter_widgets_assets_path__ = base;
  if (script) {
    script.setAttribute("data-jupyter-widgets-cdn", base + "modules/");
  }
  if (window.requirejs && window.requirejs.config) {
    window.requirejs.config({
      baseUrl: base + "modules/",
      paths: {
        "@jupyter-widgets/html-manager": base + "html-manager",
        "@jupyter-widgets/html-manager/dist/libembed-amd": base + "libembed-amd"
      }
    });
  }
  function mathjax2Shim() {
    var mj = window.MathJax;
    if (!mj || mj.Hub || typeof mj.typesetPromise !== "function") {
      return;
    }
    mj.Hub = {
      Queue: function () {
        Array.prototype.forEach.call(arguments, function (job) {
          if (!Array.isArray(job) || job[0] !== "Typeset") {
            return;
          }
          var ready = mj.startup && mj.startup.promise ? mj.startup.promise : Promise.resolve();
          ready.then(function () {
            return mj.typesetPromise(job[2] ? [job[2]] : undefined);
          }).catch(function (err) {
            console.warn("MathJax could not typeset a widget label:", err);
          });
        });
      }
    };
  }
  // MathJax 3 is loaded with "defer": its global object exists by DOMContentLoaded, and the
  // widgets render on "load", after this listener has run.
  document.addEventListener("DOMContentLoaded", mathjax2Shim);
  window.addEventListener("load", mathjax2Shim);
})();
"""


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
            "npm is not installed (or not on PATH). The site vendors MathJax and the widget manager "
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
    dist = roots["@jupyter-widgets/html-manager"] / "dist"
    for f in sorted(dist.iterdir()):
        if f.suffix in WIDGET_FONT_SUFFIXES:
            pairs.append((f, DEST / "jupyter-widgets" / f.name))
    return pairs


def _wanted_stamp() -> dict:
    return {
        "packages": {name: list(pin) for name, pin in PACKAGES.items()},
        "copies": [list(c) for c in COPIES],
        "offline_js": hashlib.sha256(OFFLINE_JS.encode()).hexdigest(),
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
    offline = DEST / "jupyter-widgets" / "offline.js"
    offline.write_text(OFFLINE_JS)
    files = sorted(str(t.relative_to(DEST)) for _, t in pairs) + [str(offline.relative_to(DEST))]
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
