"""An offline HTML page holding widgets, drawn as the course site draws them.

``save_page("meter.html", widget)`` writes the widgets' saved state and one view of each, in
the markup myst-nb writes into a chapter's page (a widget-state script, and each view in a
``div.cell_output``), with the site's host script inlined: open the file in a browser, with no
kernel and no network, and the widgets work as they will on the site.  The site test uses it to
try widgets that no chapter shows yet.
"""
from __future__ import annotations

import html
import json
from pathlib import Path

from ipywidgets.embed import embed_data

__all__ = ["HOST_JS", "save_page", "page_html"]

HOST_JS = Path(__file__).resolve().parent / "host.js"


def _script_text(data) -> str:
    return json.dumps(data).replace("</", "<\\/")


def page_html(*widgets, title: str = "Widgets") -> str:
    """The page's HTML (see ``save_page``)."""
    if not widgets:
        raise ValueError("save_page needs at least one widget")
    data = embed_data(views=list(widgets), drop_defaults=False)
    views = "\n".join(
        f'<div class="cell_output"><script type="application/vnd.jupyter.widget-view+json">{_script_text(spec)}'
        f"</script></div>" for spec in data["view_specs"])
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{html.escape(title)}</title>
<script type="application/vnd.jupyter.widget-state+json">{_script_text(data["manager_state"])}</script>
<script>{HOST_JS.read_text(encoding="utf-8")}</script>
<style>body {{ font-family: sans-serif; max-width: 52rem; margin: 1rem auto; padding: 0 1rem; }}</style>
</head>
<body>
<h1>{html.escape(title)}</h1>
{views}
</body>
</html>
"""


def save_page(path: str | Path, *widgets, title: str = "Widgets") -> Path:
    """Write an offline page showing ``widgets`` to ``path``; returns the path."""
    path = Path(path)
    path.write_text(page_html(*widgets, title=title), encoding="utf-8")
    return path
