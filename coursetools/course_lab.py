"""``make lab``: the whole course in JupyterLab, its chapters read as the learner's copy has them.

A chapter's source holds myst-nb's ``{glue:text}`` roles and no outputs: opened as it is, JupyterLab
shows raw roles where the site shows numbers.  So ``make lab`` opens JupyterLab on a reading tree,
``_build/lab``:

- ``book/chapters/*.ipynb``: each chapter as the learner's copy ships it (``lab_chapters``: the
  build's figures written into its text, the build's outputs in its cells, the site's hidden cells
  folded, an id on every cell);
- everything else a link to the course's own file or folder (``exercises/``, ``kvcache/``, ...), so
  an exercise saved here is saved in the course, and the chapters' links and data resolve as they do
  in ``book/chapters``.

A chapter is written again when its source or its build is newer than the copy here, so a reader's
own edits and outputs stay until the chapter changes.  The chapters' sources are edited in
``book/chapters``, never here.  JupyterLab renders the MyST (admonitions, closed dropdowns, math)
with ``jupyterlab-myst`` and the course's settings (``tools/jupyterlab_settings``).
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from course.cell_ids import with_ids

from .lab_chapters import built_notebook, lab_chapter

__all__ = ["LEFT_OUT", "make_lab_tree"]

#: What the reading tree does not link: the builds (it lives in one); hidden entries (the venv, git) neither.
LEFT_OUT = ("_build",)


def _link(target: Path, link: Path) -> None:
    """``link`` -> ``target``, relative (the tree moves with the checkout), replacing what was there."""
    if link.is_symlink() and Path(os.path.realpath(link)) == target.resolve():
        return
    if link.is_symlink() or link.is_file():
        link.unlink()
    elif link.exists():
        raise FileExistsError(f"{link} is a folder, not a link: remove {link.parent} and run 'make lab' again")
    link.symlink_to(os.path.relpath(target, link.parent))


def _mirror(source: Path, tree: Path, keep: str) -> None:
    """``tree`` a folder of links to every entry of ``source`` but ``keep`` (made a real folder)."""
    tree.mkdir(parents=True, exist_ok=True)
    for entry in sorted(source.iterdir()):
        if entry.name == keep or entry.name in LEFT_OUT or entry.name.startswith(".") or entry.name == "__pycache__":
            continue
        _link(entry, tree / entry.name)
    (tree / keep).mkdir(exist_ok=True)


def _stale(copy: Path, *sources: Path) -> bool:
    return not copy.exists() or any(s.exists() and s.stat().st_mtime > copy.stat().st_mtime for s in sources)


def make_lab_tree(root: Path, out: Path) -> list[str]:
    """Write (or bring up to date) the reading tree ``out`` of the course at ``root``; the report."""
    root, out = Path(root).resolve(), Path(out)
    chapters = root / "book" / "chapters"
    _mirror(root, out, "book")
    _mirror(root / "book", out / "book", "chapters")
    target = out / "book" / "chapters"
    written = unbuilt = 0
    for entry in sorted(chapters.iterdir()):
        if entry.suffix != ".ipynb":
            if entry.name not in ("__pycache__", ".ipynb_checkpoints"):
                _link(entry, target / entry.name)
            continue
        built = built_notebook(root / "_build", entry)
        copy = target / entry.name
        if not _stale(copy, entry, built, built.with_suffix(".glue.json")):
            continue
        nb = json.loads(entry.read_text(encoding="utf-8"))
        shown = lab_chapter(nb, built, f"book/chapters/{entry.name}")
        unbuilt += not shown["figures"] and not shown["outputs"]
        with_ids(nb)
        if copy.is_symlink():
            copy.unlink()
        copy.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        written += 1
    report = [f"the course to read in JupyterLab: {out} ({written} chapters written, the others up to date)"]
    if unbuilt:
        report.append(f"{unbuilt} chapters without the build's figures and outputs (not built, or built from an "
                      "older version): run 'make book', then 'make lab' again")
    return report
