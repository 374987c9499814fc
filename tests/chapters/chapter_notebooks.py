"""Executing a chapter notebook as the site build does, and reading back what it glued.

Shared by the chapter test files (a module beside them, not a conftest, so each test file
says where its helpers come from).
"""
import ast
import os

import nbformat
import importlib.util
from pathlib import Path

from nbclient import NotebookClient

_spec = importlib.util.spec_from_file_location(
    "sphinx_execution", Path(__file__).resolve().parents[2] / "tools" / "sphinx_execution.py")
sphinx_execution = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sphinx_execution)


def execute(path, extra_env=None):
    """Run a notebook in book/chapters, as the site build does: without MPLBACKEND in the
    kernel's environment (with Agg, plt.show() would draw nothing), so figures are inline.
    ``extra_env`` adds to the kernel's environment (a PYTHONPATH with a sitecustomize that
    pretends to be another machine, say)."""
    nb = nbformat.read(path, as_version=4)
    env = {k: v for k, v in os.environ.items() if k != "MPLBACKEND"}
    env.update(extra_env or {})
    NotebookClient(nb, timeout=600, kernel_name="python3", iopub_timeout=sphinx_execution.OUTPUT_WAIT,
                   raise_on_iopub_timeout=True,
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


SELF_CHECK = "## Self-check questions"


def self_check_pairs(nb):
    """[(question number, answered right below it)] of a chapter's self-check questions: the
    Markdown from "## Self-check questions" to the next heading of its level, read as a sequence
    of numbered questions ("3. ...") and answer toggles (an ``{admonition} Answer`` with
    ``:class: dropdown``, chapter 1's form).  A question is answered right below when the next
    thing after it is its toggle, before the next question; answers collected after all the
    questions ("{dropdown} Answer 3") count for none."""
    import re

    md = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    if SELF_CHECK not in md:
        return []
    section = md.split(SELF_CHECK, 1)[1]
    end = re.search(r"^## ", section, flags=re.M)
    section = section[:end.start()] if end else section
    events = []
    for m in re.finditer(r"^(\d+)\. |^```+\{admonition\} Answer\s*\n:class: dropdown\s*$", section, flags=re.M):
        events.append(int(m.group(1)) if m.group(1) else "answer")
    pairs = []
    for i, event in enumerate(events):
        if event != "answer":
            pairs.append((event, i + 1 < len(events) and events[i + 1] == "answer"))
    return pairs
