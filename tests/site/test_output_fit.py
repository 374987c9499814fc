"""Outputs a reader can read: they fit the text column, and none is the repr of a course record.

* ``widths.wide_outputs`` finds what does not fit the column (``test_every_page.test_page`` runs it on
  every page, before and after its controls are changed); here it is tried on a page made to
  hold one output of each kind it must find, and outputs that fit;
* no output of a page prints a dataclass of the course as Python writes it
  (``ModelShape(name='1B-class', n_layers=16, ...)``): a record belongs in a table
  (``coursebook.fields_table``) or a sentence.  The course's dataclasses are found by importing
  every module of its packages (the folders of the repository with an ``__init__.py``), so a new
  record is covered as soon as it exists.
"""
from __future__ import annotations

import dataclasses
import importlib
import inspect
import pkgutil
import re
from functools import lru_cache

import pytest

from test_book_pages import _Outputs
from test_every_page import ROOT, site_pages
from widths import wide_outputs

NOT_PACKAGES = {"tests"}


def course_packages() -> list[str]:
    """The repository's top-level Python packages."""
    return sorted(p.parent.name for p in ROOT.glob("*/__init__.py") if p.parent.name not in NOT_PACKAGES)


@lru_cache(maxsize=1)
def course_dataclasses() -> dict[str, type]:
    """{qualified name: class} of every dataclass defined in a module of the course's packages
    whose repr is the one dataclasses writes."""
    found: dict[str, type] = {}
    failed = []
    for package in course_packages():
        root = importlib.import_module(package)
        modules = [root] + [info.name for info in pkgutil.walk_packages(root.__path__, package + ".")
                            if not info.name.endswith(".__main__")]
        for module in modules:
            try:
                module = importlib.import_module(module) if isinstance(module, str) else module
            except Exception as err:  # noqa: BLE001 - reported below, with the module's name
                failed.append(f"{module}: {type(err).__name__}: {err}")
                continue
            for obj in vars(module).values():
                if inspect.isclass(obj) and dataclasses.is_dataclass(obj) and obj.__module__ == module.__name__ \
                        and obj.__dataclass_params__.repr:
                    found[f"{obj.__module__}.{obj.__qualname__}"] = obj
    assert not failed, "modules of the course that do not import:\n" + "\n".join(failed)
    return found


@lru_cache(maxsize=1)
def repr_pattern() -> re.Pattern:
    """A repr as dataclasses writes it: the class's qualified name, "(", its first field "=" (or
    "()" for a class without fields)."""
    alternatives = set()
    for cls in course_dataclasses().values():
        shown = [f.name for f in dataclasses.fields(cls) if f.repr]
        alternatives.add(re.escape(cls.__qualname__) + (rf"\({re.escape(shown[0])}=" if shown else r"\(\)"))
    return re.compile(r"(?<![\w.])(?:" + "|".join(sorted(alternatives)) + ")")


def printed_dataclasses(html: str) -> list[str]:
    """The reprs of course dataclasses in the cell outputs of a page's HTML, each with its context."""
    parser = _Outputs()
    parser.feed(html)
    found = []
    for _, text in parser.blocks:
        text = "".join(text)
        found += [text[max(0, m.start() - 20): m.end() + 40].strip() for m in repr_pattern().finditer(text)]
    return found


def test_the_course_dataclasses_are_found_by_introspection():
    from lessons.memory import ModelShape
    classes = course_dataclasses()
    assert classes[f"{ModelShape.__module__}.ModelShape"] is ModelShape
    assert {c.__module__.split(".")[0] for c in classes.values()} >= {"kvcache", "ga2", "graders"}
    assert len(classes) >= 20


def test_a_printed_dataclass_is_recognized():
    from lessons.memory import MODELS
    shape = MODELS["1B"]

    def output(text):
        return (f'<div class="cell_output docutils container"><div class="output stream highlight-myst-ansi">'
                f'<div class="highlight"><pre>{text}</pre></div></div></div>')

    found = printed_dataclasses(output(f"1B: {shape!r}") + "<p>ModelShape(name= in the prose</p>")
    assert len(found) == 1 and "ModelShape(name='1B-class'" in found[0]
    assert printed_dataclasses(output("a ModelShape (the record) holds n_layers=16")) == []
    assert printed_dataclasses(output("lessons.memory.ModelShape")) == []


@pytest.mark.parametrize("page", site_pages())
def test_no_output_prints_a_course_dataclass(site, page):
    found = printed_dataclasses((site / page).read_text(encoding="utf-8"))
    assert not found, (f"{page} prints the repr of a course dataclass where a table or a sentence belongs "
                       f"(coursebook.fields_table): {found[:3]}")


FIT_PAGE = """<!DOCTYPE html>
<html><head><meta charset="utf-8"><style>
body {{ margin: 0; font: 16px sans-serif; }}
article {{ width: 688px; margin-left: 100px; }}
pre {{ overflow-x: auto; margin: 0; }}
</style></head><body><article>
<div class="cell"><div class="cell_output"><div class="output"><pre>{short}</pre></div></div></div>
<div class="cell"><div class="cell_output"><div class="output"><pre>{long}</pre></div></div></div>
<div class="cell"><div class="cell_output"><div class="output"><table style="width: 900px"><tr><td>wide table</td></tr></table></div></div></div>
<div class="cell"><div class="cell_output"><div class="output"><table><tr><td>a table that fits</td></tr></table>
<select style="width: 5rem"><option>fp16 / bf16 (2 bytes)</option></select>
<select><option>fp16</option><option>int8 (1 byte)</option></select>
<pre style="white-space: pre-wrap">{long}</pre></div></div></div>
</article></body></html>
"""


def test_outputs_wider_than_the_column_are_found(browser, scratch_site):
    folder, url = scratch_site
    (folder / "fit.html").write_text(FIT_PAGE.format(short="x = 1", long="y = 2 + " + "1 + " * 60 + "1"),
                                     encoding="utf-8")
    page = browser.new_page()
    try:
        page.goto(url + "fit.html", wait_until="load")
        found = wide_outputs(page)
    finally:
        page.close()
    assert len(found) == 3, found
    assert found[0].startswith("code cell 2: pre content ") and "in a box of 688 px (it scrolls or is cut)" in found[0]
    assert found[1].startswith("code cell 3: table ") and "px past the 688 px column" in found[1]
    assert found[2].startswith("code cell 4: select a choice 80 px wide whose options need") and \
        found[2].endswith('"fp16 / bf16 (2 bytes)"')
