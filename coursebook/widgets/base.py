"""CourseWidget: the base of the course's widgets, live in JupyterLab and on the static site.

A course widget is an anywidget: a Python class whose traits tagged ``sync=True`` are shared
with one ES module that draws the widget and reacts to the reader.  The same module runs in
JupyterLab (anywidget's front end, with the kernel: a notebook sets traits and reads them back)
and on the site (``coursebook/widgets/host.js``, with no kernel: the page holds the traits the
notebook saved, and the module computes in the browser whatever the reader changes)::

    class Meter(CourseWidget):
        _module = "meter.js"           # beside this file; imports only from "course-widgets"
        _stylesheet = "meter.css"      # optional, after library.css
        level = traitlets.Int(3).tag(sync=True)

Subclasses name their module; the class receives ``_esm`` (the module with the library
inlined, see ``coursebook.widgets.module``) and ``_css`` when it is defined.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import ClassVar

import anywidget

from .module import bundle, stylesheet

__all__ = ["CourseWidget"]


def _beside(cls: type, name: str | Path) -> Path:
    path = Path(name)
    if path.is_absolute():
        return path
    return Path(sys.modules[cls.__module__].__file__).resolve().parent / path


class CourseWidget(anywidget.AnyWidget):
    """A widget drawn by its own ES module (``_module``), in JupyterLab and on the site."""

    _module: ClassVar[str | Path | None] = None
    _stylesheet: ClassVar[str | Path | None] = None
    #: traits shown by repr(), in this order (default: every public synced trait that holds a
    #: number, a string or a boolean)
    _repr_traits: ClassVar[tuple[str, ...] | None] = None

    def __init_subclass__(cls, **kwargs) -> None:
        if "_module" in cls.__dict__ and cls._module is not None:
            cls._esm = bundle(_beside(cls, cls._module))
            sheets = [_beside(cls, cls._stylesheet)] if cls.__dict__.get("_stylesheet") else []
            cls._css = stylesheet(*sheets)
        super().__init_subclass__(**kwargs)

    def __repr__(self) -> str:
        names = self._repr_traits
        if names is None:
            names = tuple(n for n in self.keys if not n.startswith("_") and n not in ("layout", "tabbable", "tooltip")
                          and isinstance(getattr(self, n), (bool, int, float, str)))
        args = ", ".join(f"{n}={getattr(self, n)!r}" for n in names)
        return f"{type(self).__name__}({args})"
