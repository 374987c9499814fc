"""A small Sphinx extension for the course site (loaded from ``_config.yml``: ``local_extensions``):
every exercise page gets its editor and Run button.

On each exercise's page (``exercises/NAME``, for every exercise the course grades) it adds the
page's module, ``_static/exercise/exercise-page.js`` (with ``data-exercise="NAME"``), and its
stylesheet; no other page loads them.  When the build finishes it writes what those pages read
into ``_static/exercise/``: ``course.zip`` and ``NAME.ipynb`` (``tools/site_exercises.py``).  The
Python runtime itself is vendored by ``make vendor`` (``tools/site_runtime.py``).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import site_exercises

PAGE_MODULE = "exercise/exercise-page.js"
PAGE_STYLE = "exercise/exercise-page.css"


def _exercise_of(pagename: str) -> str | None:
    folder, _, name = pagename.partition("/")
    return name if folder == "exercises" and name in site_exercises.exercise_names() else None


def _add_editor(app: Any, pagename: str, templatename: str, context: dict, doctree: Any) -> None:
    name = _exercise_of(pagename)
    if name is None:
        return
    app.add_css_file(PAGE_STYLE)
    app.add_js_file(PAGE_MODULE, type="module", **{"data-exercise": name})


def _write_files(app: Any, exception: BaseException | None) -> None:
    if exception is not None or app.builder.format != "html":
        return
    site_exercises.write(Path(app.outdir) / "_static" / "exercise")


def setup(app: Any) -> dict:
    app.connect("html-page-context", _add_editor)
    app.connect("build-finished", _write_files)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
