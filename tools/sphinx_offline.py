"""A small Sphinx extension for the course site (loaded from ``_config.yml``: ``local_extensions``).

Jupyter Book 1 loads ``sphinx_thebe`` whether or not a book uses it.  This course has no thebe
(the exercises are worked locally with ``make lab``), and on Sphinx 7 sphinx-thebe's inline
configuration script is emitted twice on every page (it is registered after the builder starts,
and Sphinx's asset de-duplication tells ``None`` and ``""`` file names apart), so each page
logged ``SyntaxError: Identifier 'THEBE_JS_URL' has already been declared``.  The script also
names a CDN URL and a Binder repository that the site must not point at.

This extension takes sphinx-thebe's event handlers and stylesheet out, and drops any duplicate
inline script Sphinx would still write into a page.
"""
from __future__ import annotations

from typing import Any

THEBE_MODULE = "sphinx_thebe"


def _drop_thebe(app: Any) -> None:
    for name, listeners in list(app.events.listeners.items()):
        for listener in list(listeners):
            if getattr(listener.handler, "__module__", "") == THEBE_MODULE and name != "builder-inited":
                app.disconnect(listener.id)
    app.registry.css_files[:] = [
        (filename, attrs) for filename, attrs in app.registry.css_files
        if filename != "sphinx-thebe.css"
    ]


def _dedupe_scripts(app: Any, pagename: str, templatename: str, context: dict, doctree: Any) -> None:
    scripts = context.get("script_files")
    if not scripts:
        return
    seen: set = set()
    unique = []
    for script in scripts:
        filename = getattr(script, "filename", script) or ""
        attributes = getattr(script, "attributes", {}) or {}
        key = (filename, tuple(sorted((k, str(v)) for k, v in attributes.items())))
        if key in seen:
            continue
        seen.add(key)
        unique.append(script)
    scripts[:] = unique


def setup(app: Any) -> dict:
    if THEBE_MODULE in app.extensions:
        _drop_thebe(app)
    # run last, after every extension has added its page-specific scripts
    app.connect("html-page-context", _dedupe_scripts, priority=1000)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
