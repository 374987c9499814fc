"""coursebook.widgets: interactive figures that work in JupyterLab and on the static site.

One definition per widget: a Python class (``CourseWidget``, an anywidget) whose synced traits
a notebook sets and reads, and one ES module that draws the widget and recomputes it in the
browser.  JupyterLab runs the module through anywidget's front end; the built site runs the
same module through ``host.js`` (no kernel, no network), from the state the chapter saved.

* ``CourseWidget``: the base class (``_module = "name.js"``, optional ``_stylesheet``).
* ``SeriesExplorer``: precomputed series over x (a slider), a choice of series, stacked bars
  of their parts at x, the ratio of two series, the cumulative sum up to x, and a line chart.
* ``calculator.CacheCalculator``: chapter 3's cache calculator (imported from its module, which
  computes with ``lessons.memory``).
* ``library.js`` ("course-widgets"): the numbers, controls and charts every module imports.
* ``save_page``: an offline HTML page holding widgets, drawn by the site's host (for tests and
  for looking at a widget without building the book).

CONTRIBUTING.md ("Widgets") says how a chapter adds one and how it is tested.
"""
from __future__ import annotations

from .base import CourseWidget
from .module import WidgetModuleError, bundle, library_exports
from .page import HOST_JS, save_page
from .series import SeriesExplorer

__all__ = ["CourseWidget", "SeriesExplorer", "WidgetModuleError", "bundle", "library_exports", "save_page",
           "HOST_JS"]
