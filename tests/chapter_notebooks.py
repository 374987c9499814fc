"""Executing a chapter notebook as the site build does, and reading back what it glued.

Shared by the chapter test files (a module beside them, not a conftest, so each test file
says where its helpers come from).
"""
import ast
import os

import nbformat
from nbclient import NotebookClient


def execute(path, extra_env=None):
    """Run a notebook in book/chapters, as the site build does: without MPLBACKEND in the
    kernel's environment (with Agg, plt.show() would draw nothing), so figures are inline.
    ``extra_env`` adds to the kernel's environment (a PYTHONPATH with a sitecustomize that
    pretends to be another machine, say)."""
    nb = nbformat.read(path, as_version=4)
    env = {k: v for k, v in os.environ.items() if k != "MPLBACKEND"}
    env.update(extra_env or {})
    NotebookClient(nb, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}}).execute(env=env)
    return nb


def glued(nb):
    """{key: value} of every glue in an executed notebook: its Markdown for prose glued with
    ``glue_prose``, else its text/plain repr, evaluated when it is a Python literal, else the text."""
    values = {}
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            meta = out.get("metadata", {}).get("scrapbook")
            if out.get("output_type") != "display_data" or not meta:
                continue
            data = out["data"]
            markdown = data.get("application/papermill.record/text/markdown")
            if markdown is not None:
                assert meta["name"] not in values, f"glue key {meta['name']} glued twice"
                values[meta["name"]] = markdown
                continue
            text = data.get("application/papermill.record/text/plain", data.get("text/plain"))
            assert meta["name"] not in values, f"glue key {meta['name']} glued twice"
            try:
                values[meta["name"]] = ast.literal_eval(text)
            except (ValueError, SyntaxError):
                values[meta["name"]] = text
    return values
