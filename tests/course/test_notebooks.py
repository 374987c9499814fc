"""course.notebooks: a cell's source whichever form it is stored in, the answer cell, a starter."""
from __future__ import annotations

import ast

from course.notebooks import (answer_cells, cell_source, code_cells, is_starter, is_starter_object, joined,
                              without_magics)


def test_a_cell_s_source_is_one_string_in_either_form():
    assert cell_source({"source": ["a = 1\n", "b = 2"]}) == "a = 1\nb = 2"
    assert cell_source({"source": "a = 1"}) == "a = 1" and cell_source({}) == ""
    assert joined(["x", "y"]) == "xy" and joined("xy") == "xy"


NB = {"cells": [{"cell_type": "markdown", "source": "# title"},
                {"cell_type": "code", "source": ["import numpy\n"], "metadata": {}},
                {"cell_type": "code", "source": "def f(x):\n    return x\n", "metadata": {"tags": ["answer"]}},
                "not a cell"]}


def test_code_cells_and_the_answer_cell():
    assert [src for _, src in code_cells(NB)] == ["import numpy\n", "def f(x):\n    return x\n"]
    assert answer_cells(NB) == ["def f(x):\n    return x\n"]
    untagged = {"cells": NB["cells"][:2]}
    assert answer_cells(untagged) == []
    assert answer_cells(untagged, every_code_cell_if_untagged=True) == ["import numpy\n"]


def test_magics_become_blank_lines():
    assert without_magics("%timeit f()\nx = 1\n  !ls") == "\nx = 1\n"


def _first(source: str):
    return ast.parse(source).body[0]


def test_a_starter_is_one_raise_of_not_implemented_after_a_docstring():
    assert is_starter(_first("def f(x):\n    raise NotImplementedError\n"))
    assert is_starter(_first('def f(x):\n    """Doc."""\n    raise NotImplementedError("write f")\n'))
    assert is_starter(_first("async def f(x):\n    raise NotImplementedError()\n"))
    assert not is_starter(_first("def f(x):\n    return x\n"))
    assert not is_starter(_first("def f(x):\n    x += 1\n    raise NotImplementedError\n"))
    assert not is_starter(_first("def f(x):\n    raise ValueError\n"))
    assert not is_starter(_first("def f(x):\n    raise\n"))
    assert is_starter(_first("class A:\n    def f(self):\n        raise NotImplementedError\n"))
    assert not is_starter(_first("class A:\n    def f(self):\n        raise NotImplementedError\n"
                                 "    def g(self):\n        return 1\n"))
    assert not is_starter(_first("class A:\n    x = 1\n"))             # no method: nothing to write
    assert not is_starter(_first("x = 1"))


def _starter(x):
    """Doc."""
    raise NotImplementedError


def _answer(x):
    return x


def test_an_object_is_a_starter_when_its_source_is_one():
    assert is_starter_object(_starter) and not is_starter_object(_answer)
    assert not is_starter_object(len)                         # no source to read
