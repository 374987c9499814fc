"""course.catalogue: the one list of what is graded, and every part of the course agreeing with it."""
from __future__ import annotations

import ast
import importlib
import json
from pathlib import Path

import pytest

from course import catalogue
from course.catalogue import Counterpart

ROOT = Path(__file__).resolve().parents[2]


def test_every_exercise_has_its_notebooks_and_its_hidden_tests():
    names = set(catalogue.names())
    assert {p.stem for p in (ROOT / "exercises").glob("*.ipynb")} == names
    assert {p.stem for p in (ROOT / "solutions").glob("*.ipynb")} == names
    hidden = {p.stem for p in (ROOT / "graders" / "exercises").glob("*.py") if not p.stem.startswith("_")}
    assert hidden == names


def test_each_notebook_says_the_chapter_the_catalogue_says():
    for entry in catalogue.EXERCISES:
        for folder in ("exercises", "solutions"):
            meta = json.loads((ROOT / folder / f"{entry.name}.ipynb").read_text(encoding="utf-8"))["metadata"]
            assert meta["kvcourse"] == {"exercise": entry.name, "chapter": entry.chapter}, (folder, entry.name)


def test_names_are_unique_and_every_exercise_grades_something():
    names = [entry.name for entry in catalogue.EXERCISES]
    assert len(names) == len(set(names)) == len(catalogue.names()) >= 15
    functions = [fn for entry in catalogue.EXERCISES for fn in entry.functions]
    assert len(functions) == len(set(functions))             # a graded name belongs to one exercise
    assert all(entry.functions and entry.title and 1 <= entry.chapter for entry in catalogue.EXERCISES)
    assert catalogue.exercise_of("check_builder").name == "mutants" and catalogue.exercise_of("nothing") is None
    with pytest.raises(catalogue.UnknownExercise, match="no exercise named 'nosuch'"):
        catalogue.get("nosuch")


def test_every_function_counterpart_is_where_it_says_and_every_module_one_exists():
    parts = catalogue.counterparts()
    assert {"ga2.quant:requant", "ga2.attn:attention_tail", "ga2.rtl", "ga2.mutants"} <= {c.spec for c in parts}
    for part in parts:
        module = importlib.import_module(part.module)
        assert part.chapter == catalogue.get(part.exercise).chapter
        if part.qualname:
            target = module
            for attr in part.qualname.split("."):
                target = getattr(target, attr)
            assert callable(target), part.spec
    assert catalogue.protected_names() == catalogue.graded_functions() | {"requant", "attention_tail"}


def test_the_grader_s_registry_reads_the_catalogue():
    from graders import registry
    assert registry.names() == catalogue.names()
    for name in registry.names():
        exercise, entry = registry.get(name), catalogue.get(name)
        assert (exercise.chapter, exercise.title, exercise.functions, exercise.counterparts) == \
               (entry.chapter, entry.title, entry.functions, entry.counterparts)


def test_the_machine_s_parts_are_the_catalogue_s_function_counterparts_in_ga2():
    from ga2.parts import PARTS
    in_ga2 = {c.spec: c.exercise for c in catalogue.counterparts() if c.qualname and c.module.startswith("ga2.")}
    assert {f"{p.module}:{p.name}": p.exercise.name for p in PARTS.values()} == in_ga2


def _keyword_strings(tree: ast.AST, keyword: str) -> list:
    return [kw for node in ast.walk(tree) if isinstance(node, ast.Call)
            for kw in node.keywords if kw.arg == keyword]


def test_nothing_else_lists_what_an_exercise_is():
    """The hidden tests' ``Exercise(...)`` says how to grade, never the chapter, the graded
    functions, the title or the counterparts: those are the catalogue's alone."""
    for path in sorted((ROOT / "graders" / "exercises").glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for keyword in ("chapter", "functions", "title", "counterparts"):
            assert not _keyword_strings(tree, keyword), (path.name, keyword)


def test_counterparts_are_parsed_strictly():
    assert Counterpart.parse("ga2.quant:requant", "requant", 9).name == "requant"
    assert Counterpart.parse("pkg.mod:Class.method", "x", 1).name == "method"
    module = Counterpart.parse("ga2.rtl", "requant", 9)
    assert module.covers_module("ga2.rtl.circuit") and module.covers_module("ga2.rtl")
    assert not module.covers_module("ga2.rtlx") and not module.qualname
    for bad in ("", "ga2.quant:", "ga2:quant:requant", "ga2.quant:re-quant", "2ga.quant"):
        with pytest.raises(ValueError, match="counterpart"):
            Counterpart.parse(bad, "x", 1)
