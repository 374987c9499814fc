"""What holds for every chapter notebook: the glue its text names is glued (with its chapter's
prefix, so no two chapters share a key), the stored notebooks carry no outputs, and words a reader
never sees, checked on the sources of every page in the table of contents (the site test checks the
built pages too, but only after a full build): readers never saw the documents the course was
written from, so no page speaks of "the seed", not even as a keyword argument in a code cell."""
import re
from pathlib import Path

import nbformat
import pytest
import yaml

from chapter_notebooks import (CHAPTER_NAMES, ROOT, assert_glue_references_resolve, chapter_path, executed,
                               glue_prefix, self_check_pairs)


@pytest.mark.parametrize("name", CHAPTER_NAMES)
def test_every_glue_reference_is_glued_and_prefixed(name):
    nb, g = executed(chapter_path(name))
    assert_glue_references_resolve(nb, g)
    prefix = glue_prefix(name)
    assert all(key.startswith(prefix) for key in g), [key for key in g if not key.startswith(prefix)]


def test_glue_keys_are_unique_across_the_chapters():
    seen = {}
    for name in CHAPTER_NAMES:
        for key in executed(chapter_path(name))[1]:
            assert key not in seen, f"{key} glued by {seen[key]} and {name}"
            seen[key] = name


STORED = [chapter_path(name) for name in CHAPTER_NAMES] + sorted(
    p for folder in ("exercises", "solutions") for p in (ROOT / folder).glob("*.ipynb"))


@pytest.mark.parametrize("path", STORED, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_notebooks_are_stored_without_outputs(path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None


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


@pytest.mark.parametrize("name", CHAPTER_NAMES)
def test_every_self_check_answer_is_a_toggle_under_its_question(name):
    path = chapter_path(name)
    nb = nbformat.read(path, as_version=4)
    pairs = self_check_pairs(nb)
    md = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    if "## Self-check questions" not in md:
        pytest.fail(f"{path.name} has no self-check questions")
    assert len(pairs) >= 4, pairs
    assert [n for n, _ in pairs] == list(range(1, len(pairs) + 1)), pairs
    assert all(answered for _, answered in pairs), [n for n, answered in pairs if not answered]
    assert "{dropdown} Answer" not in md          # no answers collected after the questions

