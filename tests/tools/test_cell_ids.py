"""tools/cell_ids.py: every notebook the course ships has a unique id on every cell (nbformat 4.5),
so JupyterLab opens it unchanged; a missing or repeated id is written once and then kept."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _tool():
    spec = importlib.util.spec_from_file_location("cell_ids", ROOT / "tools" / "cell_ids.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_notebook_the_course_ships_has_an_id_on_every_cell():
    tool = _tool()
    paths = tool.notebooks()
    assert len(paths) >= 40, "chapters, exercises and solutions are all found"
    for path in paths:
        nb = json.loads(path.read_text())
        ids = [cell.get("id") for cell in nb["cells"]]
        assert nb["nbformat"] == 4 and nb["nbformat_minor"] >= 5, path.name
        assert all(ids), f"{path.name}: a cell has no id (python tools/cell_ids.py)"
        assert len(set(ids)) == len(ids), f"{path.name}: two cells share an id"


def test_missing_and_repeated_ids_are_written_and_existing_ones_kept(tmp_path):
    tool = _tool()
    nb = {"cells": [
        {"cell_type": "markdown", "id": "intro", "metadata": {}, "source": ["# Title\n"]},
        {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [], "source": ["x = 1\n"]},
        {"cell_type": "code", "id": "intro", "metadata": {}, "execution_count": None, "outputs": [],
         "source": ["y = 2\n"]},
    ], "metadata": {}, "nbformat": 4, "nbformat_minor": 4}
    path = tmp_path / "n.ipynb"
    path.write_text(json.dumps(nb, indent=1) + "\n")
    assert tool.missing_ids(nb) == [1, 2]
    assert tool.add_ids(path) is True
    written = json.loads(path.read_text())
    ids = [c["id"] for c in written["cells"]]
    assert ids[0] == "intro"
    assert ids[1].startswith("cell-01-") and ids[2].startswith("cell-02-")
    assert len(set(ids)) == 3 and written["nbformat_minor"] == 5
    assert [c["source"] for c in written["cells"]] == [c["source"] for c in nb["cells"]]
    first = path.read_text()
    assert tool.add_ids(path) is False and path.read_text() == first, "a second run changes nothing"
