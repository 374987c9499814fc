"""A chapter as the copy ships it for JupyterLab: the build's glued figures written into its text as
the site shows them, the build's outputs in its cells, the site's hidden cells folded."""
from __future__ import annotations

import pytest

from coursetools.lab_chapters import fill_glue, folded_as_on_the_site, glued_text, with_build_outputs

VALUES = {"dots": {"text/plain": "'[1.0, 0.5]'"}, "ratio": {"text/plain": "0.123456"},
          "cost": {"text/plain": "'$5 *per* token'"},
          "said": {"text/plain": "<Markdown>", "text/markdown": "the step read **14 GB/s**"}}


def test_figures_read_as_on_the_site():
    text = "Dots {glue:text}`dots`, ratio {glue:text}`ratio:.2f`, {glue:md}`said`; {glue:text}`cost`."
    assert fill_glue(text, VALUES) == r"Dots **\[1.0, 0.5\]**, ratio **0.12**, the step read **14 GB/s**; **\$5 \*per\* token**."


def test_a_figure_the_build_did_not_glue_is_named():
    with pytest.raises(KeyError, match="nowhere"):
        fill_glue("{glue:text}`nowhere`", VALUES, "book/chapters/01.ipynb")
    with pytest.raises(KeyError, match="text/markdown"):
        glued_text(VALUES["dots"], "md", None)


def test_outputs_come_from_the_same_cell_of_the_build():
    nb = {"cells": [{"cell_type": "code", "source": "x = 1\nx", "outputs": [], "metadata": {}},
                    {"cell_type": "code", "source": "glue_all(a=1)", "outputs": [], "metadata": {}},
                    {"cell_type": "code", "source": "changed", "outputs": [], "metadata": {}}]}
    record = {"output_type": "display_data", "data": {"application/papermill.record/text/plain": "1"},
              "metadata": {"scrapbook": {"name": "a"}}}
    result = {"output_type": "execute_result", "data": {"text/plain": "1"}, "metadata": {}, "execution_count": 1}
    built = {"cells": [{"cell_type": "code", "source": ["x = 1\n", "x"], "outputs": [result], "execution_count": 1},
                       {"cell_type": "code", "source": "glue_all(a=1)", "outputs": [record], "execution_count": 2},
                       {"cell_type": "code", "source": "before", "outputs": [result], "execution_count": 3}]}
    assert with_build_outputs(nb, built) == 1
    assert [c["outputs"] for c in nb["cells"]] == [[result], [], []]


def test_the_sites_hidden_cells_are_folded():
    nb = {"cells": [{"cell_type": "code", "source": "", "metadata": {"tags": ["remove-cell"]}},
                    {"cell_type": "code", "source": "", "metadata": {"tags": ["hide-input"]}},
                    {"cell_type": "code", "source": "", "metadata": {"tags": ["hide-output"]}},
                    {"cell_type": "code", "source": "", "metadata": {}}]}
    assert folded_as_on_the_site(nb) == 2
    meta = [c["metadata"] for c in nb["cells"]]
    assert meta[0]["jupyter"] == {"source_hidden": True} and meta[1]["jupyter"] == {"source_hidden": True}
    assert meta[2]["jupyter"] == {"outputs_hidden": True} and meta[2]["collapsed"] is True
    assert "jupyter" not in meta[3]
