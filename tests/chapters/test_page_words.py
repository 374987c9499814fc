"""Words a reader never sees, checked on the sources of every page in the table of contents
(the site test checks the built pages too, but only after a full build): readers never saw
the documents the course was written from, so no page speaks of "the seed", not even as a
keyword argument in a code cell."""
import re
from pathlib import Path

import nbformat
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]


def toc_files() -> list[Path]:
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    names = [toc["root"]] + [c["file"] for part in toc["parts"] for c in part["chapters"]]
    found = []
    for name in names:
        for suffix in (".ipynb", ".md"):
            if (ROOT / (name + suffix)).exists():
                found.append(ROOT / (name + suffix))
    return found


def test_the_toc_lists_every_chapter_and_exercise():
    files = {p.relative_to(ROOT).as_posix() for p in toc_files()}
    on_disk = {p.relative_to(ROOT).as_posix() for p in (ROOT / "book" / "chapters").glob("*.ipynb")}
    on_disk |= {p.relative_to(ROOT).as_posix() for p in (ROOT / "exercises").glob("*.ipynb")}
    assert on_disk <= files, sorted(on_disk - files)


@pytest.mark.parametrize("path", toc_files(), ids=lambda p: p.name)
def test_no_page_source_says_seed(path):
    if path.suffix == ".ipynb":
        texts = [c.source for c in nbformat.read(path, as_version=4).cells]
    else:
        texts = [path.read_text()]
    hits = [line for text in texts for line in text.splitlines()
            if re.search(r"\bseeds?\b", line, flags=re.IGNORECASE)]
    assert not hits, hits


CHAPTERS = sorted((ROOT / "book" / "chapters").glob("*.ipynb"))


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_every_self_check_answer_is_a_toggle_under_its_question(path):
    from chapter_notebooks import self_check_pairs

    nb = nbformat.read(path, as_version=4)
    pairs = self_check_pairs(nb)
    md = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    if "## Self-check questions" not in md:
        pytest.fail(f"{path.name} has no self-check questions")
    assert len(pairs) >= 4, pairs
    assert [n for n, _ in pairs] == list(range(1, len(pairs) + 1)), pairs
    assert all(answered for _, answered in pairs), [n for n, answered in pairs if not answered]
    assert "{dropdown} Answer" not in md          # no answers collected after the questions
