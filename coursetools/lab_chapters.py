"""The chapters as a learner reads them in JupyterLab: what the site shows, in a notebook.

The site is built by myst-nb from the chapters and the outputs of their run (``make book`` keeps
the executed notebooks and each one's glued figures in ``_build/jupyter_execute/``).  JupyterLab
renders MyST with ``jupyterlab-myst`` (admonitions, dropdowns, math, links), which does not know
myst-nb's ``{glue:text}`` and ``{glue:md}`` roles: it reads them as the bare name.  Its own inline
expressions (``{eval}``) are evaluated again in the kernel whenever a Markdown cell runs, where a
glued name is not a variable, so a Run All would turn every figure into a ``NameError``.  So a
chapter of the learner's copy gets:

- every glued figure written into its Markdown as the text the site shows (``glued_text``,
  formatted as myst-nb formats it, in bold as the site sets a computed figure); a glued sentence
  as its Markdown;
- the outputs the build computed, cell by cell (``with_build_outputs``), without the glue records
  no renderer shows;
- the cells the site hides folded: a set-up or glue cell (``remove-cell``) and the drawing code
  under a figure (``hide-input``) show a folded input (``jupyter.source_hidden``), as the site's
  "show code" does (``folded_as_on_the_site``).
"""
from __future__ import annotations

import json
import re
from ast import literal_eval
from pathlib import Path

__all__ = ["GLUE_ROLE", "glued_values", "glued_text", "fill_glue", "with_build_outputs",
           "folded_as_on_the_site", "built_notebook"]

#: ``{glue:text}`name```, ``{glue:text}`name:.2f```, ``{glue:md}`name```, ``{glue}`name```.
GLUE_ROLE = re.compile(r"\{glue(?::(?P<kind>text|md|any))?\}`(?P<key>[^`:]+)(?::(?P<fmt>[^`]*))?`")

#: Characters of a figure's text that Markdown or MyST would read as markup.
_MARKUP = re.compile(r"([\\`*_\[\]<>$|{}])")

#: Tags of the site's hidden cells, and the JupyterLab metadata that folds them the same way.
FOLDED_INPUT = ("remove-cell", "remove-input", "hide-input", "hide-cell")
FOLDED_OUTPUT = ("remove-output", "hide-output", "hide-cell")


def built_notebook(build: Path, chapter: Path) -> Path:
    """Where ``make book`` keeps the executed chapter (``_build/jupyter_execute/book/chapters/``)."""
    return Path(build) / "jupyter_execute" / "book" / "chapters" / chapter.name


def glued_values(built: Path) -> dict[str, dict]:
    """{name: the glued output's MIME data} of an executed chapter: the ``.glue.json`` myst-nb
    writes beside it, or the glue records of its outputs."""
    glue_file = built.with_suffix(".glue.json")
    if glue_file.is_file():
        return {name: out.get("data", {}) for name, out in json.loads(glue_file.read_text("utf-8")).items()}
    values = {}
    for cell in json.loads(built.read_text("utf-8")).get("cells", []):
        for out in cell.get("outputs", []) if cell.get("cell_type") == "code" else ():
            record = (out.get("metadata") or {}).get("scrapbook")
            if record:
                prefix = record.get("mime_prefix", "")
                values[record["name"]] = {k[len(prefix):]: v for k, v in out.get("data", {}).items()}
    return values


def _format_plain(text: str, fmt: str) -> str:
    """myst-nb's ``format_plain_text``: the repr read back as a value, then formatted."""
    try:
        value = literal_eval(text)
    except (SyntaxError, ValueError):
        value = text
    if not fmt:
        return str(value)
    kind = fmt[-1]
    if kind == "s":
        value = str(value)
    elif kind in "bcdoxX":
        value = int(value)
    elif kind in "eEfFgGn%":
        value = float(value)
    return format(value, fmt)


def glued_text(data: dict, kind: str | None, fmt: str | None) -> str:
    """The Markdown that stands for one glue role: a figure in bold, escaped; a sentence as is."""
    if kind == "md":
        if "text/markdown" not in data:
            raise KeyError("no text/markdown in the glued data")
        return str(data["text/markdown"]).strip()
    if "text/plain" not in data:
        raise KeyError("no text/plain in the glued data")
    text = _format_plain(str(data["text/plain"]), fmt or "")
    escaped = _MARKUP.sub(r"\\\1", text)
    return f"**{escaped}**" if text.strip() else text


def fill_glue(source: str, values: dict[str, dict], where: str = "") -> str:
    """``source`` (a Markdown cell) with every glue role replaced by what the site shows; a role
    whose name the build did not glue is an error naming it."""
    def replace(match: re.Match) -> str:
        key = match["key"].strip()
        if key not in values:
            raise KeyError(f"{where}: {match[0]} names no figure the build glued")
        try:
            return glued_text(values[key], match["kind"], match["fmt"])
        except (KeyError, ValueError, TypeError) as err:
            raise KeyError(f"{where}: {match[0]}: {err}") from None
    return GLUE_ROLE.sub(replace, source)


def _text(source) -> str:
    return "".join(source) if isinstance(source, list) else str(source)


def _shown(output: dict) -> bool:
    """An output JupyterLab can show: not a glue record (a MIME type of its own, display=False)."""
    return not (output.get("metadata") or {}).get("scrapbook")


def with_build_outputs(nb: dict, built: dict) -> int:
    """Give each code cell of ``nb`` the outputs of the same cell of the executed ``built``
    (same position and same source; a cell that differs keeps none); the cells filled."""
    filled = 0
    built_cells = built.get("cells", [])
    for k, cell in enumerate(nb.get("cells", [])):
        if cell.get("cell_type") != "code":
            continue
        cell["outputs"], cell["execution_count"] = [], None
        other = built_cells[k] if k < len(built_cells) else None
        if other is None or other.get("cell_type") != "code" or _text(other["source"]) != _text(cell["source"]):
            continue
        cell["outputs"] = [out for out in other.get("outputs", []) if _shown(out)]
        cell["execution_count"] = other.get("execution_count")
        filled += bool(cell["outputs"])
    return filled


def folded_as_on_the_site(nb: dict) -> int:
    """Fold in JupyterLab what the site hides (a cell's ``jupyter.source_hidden`` and
    ``jupyter.outputs_hidden``, with nbformat's ``collapsed``); the cells folded."""
    folded = 0
    for cell in nb.get("cells", []):
        tags = set((cell.get("metadata") or {}).get("tags", []))
        meta = cell.setdefault("metadata", {})
        if cell.get("cell_type") == "code" and tags & set(FOLDED_INPUT):
            meta.setdefault("jupyter", {})["source_hidden"] = True
            folded += 1
        if cell.get("cell_type") == "code" and tags & set(FOLDED_OUTPUT):
            meta.setdefault("jupyter", {})["outputs_hidden"] = True
            meta["collapsed"] = True
    return folded


def lab_chapter(nb: dict, built_path: Path | None, where: str = "") -> dict:
    """``nb`` (a chapter's source) as the copy ships it: the build's figures in its Markdown and
    the build's outputs in its code cells when ``built_path`` exists and glued every figure the
    chapter states (a build of an older version is not used), the site's hidden cells folded.  Returns a report {"figures": n, "outputs": n, "folded": n}."""
    figures = outputs = 0
    values = glued_values(built_path) if built_path is not None and built_path.is_file() else None
    markdown = [c for c in nb.get("cells", []) if c.get("cell_type") == "markdown"]
    try:
        filled = [fill_glue(_text(c["source"]), values, where) for c in markdown] if values is not None else None
    except KeyError:            # built from an older version of the chapter: none of it is used
        filled = None
    if filled is not None:
        for cell, source in zip(markdown, filled):
            figures += len(GLUE_ROLE.findall(_text(cell["source"])))
            cell["source"] = source
        outputs = with_build_outputs(nb, json.loads(built_path.read_text("utf-8")))
    else:
        for cell in nb.get("cells", []):
            if cell.get("cell_type") == "code":
                cell["outputs"], cell["execution_count"] = [], None
    return {"figures": figures, "outputs": outputs, "folded": folded_as_on_the_site(nb)}
