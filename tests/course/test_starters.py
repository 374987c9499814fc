"""course.starters: a function's source made its starter, the rest of the module as it was."""
from __future__ import annotations

import ast
import textwrap

import pytest

from course.catalogue import Counterpart
from course.notebooks import is_starter
from course.starters import NoSuchFunction, find_function, starter_source

SOURCE = textwrap.dedent('''\
    import numpy as np


    class Kernel:
        @staticmethod
        def step(x: int, *, scale: float = 1.0) -> int:
            """Scale a step.

            More words.
            """
            return int(x * scale)


    def other():
        return 1
    ''')


def test_the_function_becomes_a_starter_that_names_its_exercise():
    part = Counterpart("kernel_step", 7, "engine.kernel", "Kernel.step")
    made = starter_source(SOURCE, part, "; then install yours")
    tree = ast.parse(made)
    fn = find_function(tree, "Kernel.step")
    assert is_starter(fn) and ast.get_docstring(fn).startswith("Scale a step.")
    assert "More words" not in made
    assert "@staticmethod" in made and "def step(x: int, *, scale: float=1.0) -> int:" in made
    assert "engine.kernel.Kernel.step is the exercise kernel_step of chapter 7" in " ".join(made.split())
    assert "exercises/kernel_step.ipynb; then install yours." in " ".join(made.split())
    assert not is_starter(find_function(tree, "other")) and made.endswith("def other():\n    return 1\n")
    assert made.startswith("import numpy as np\n")


def test_a_missing_function_is_named():
    with pytest.raises(NoSuchFunction, match="no function Kernel.missing in engine.kernel"):
        starter_source(SOURCE, Counterpart("x", 1, "engine.kernel", "Kernel.missing"))
    assert find_function(ast.parse(SOURCE), "Kernel") is None          # a class is not a function
