"""The BlockAllocator exercise: a class graded through scripts of method calls.

* the harness's ``methods``: steps run on the object a call returned, each outcome (a value or
  an exception, with the names of its classes) sent back as data, later steps naming earlier
  ones, the case's timer still in force;
* the hidden tests against the engine's own allocator (``kvcache.paged.BlockAllocator``, written
  apart from the grader's model of reference counts): it passes every one;
* common mistakes lose points with feedback that names the mistake;
* the public checks and their stored scripts.
"""
from __future__ import annotations

import json
import textwrap
import types

import pytest

from graders import Limits, registry
from graders.checks import CallResult, Fail
from graders.exercises import BlockAllocator as exercise
from graders.job import job_files
from graders.harness import _run_case, _run_methods, decode, encode
from graders.registry import Call, Step
from public_checks import evaluate

from grader_helpers import ROOT, failed_outputs, grade_text

GOOD = (ROOT / "solutions" / "BlockAllocator.ipynb")


def solution_source() -> str:
    nb = json.loads(GOOD.read_text())
    return next("".join(c["source"]) for c in nb["cells"] if "answer" in c["metadata"].get("tags", []))


def module_of(source: str) -> types.ModuleType:
    module = types.ModuleType("submission")
    exec(compile(textwrap.dedent(source), "submission.py", "exec"), module.__dict__)
    return module


# ---------------------------------------------------------------------- the harness's methods


def test_steps_run_in_order_and_exceptions_are_answers():
    class Counter:
        def __init__(self):
            self.n = 0

        @property
        def value(self):
            return self.n

        def add(self, k):
            if k < 0:
                raise ValueError("negative")
            self.n += k
            return self.n

    steps = [{"name": "add", "args": [encode(2)]}, {"name": "value", "args": None},
             {"name": "add", "args": [{"$ref": [0]}]}, {"name": "add", "args": [encode(-1)]},
             {"name": "add", "args": [{"$ref": [3]}]}, {"name": "missing", "args": []},
             {"name": "add", "args": [{"$ref": [9]}]}]
    out = decode(json.loads(json.dumps(encode(_run_methods(Counter(), steps, None, "x.py")))))
    assert [o["ok"] for o in out] == [True, True, True, False, False, False, False]
    assert [o.get("value") for o in out[:3]] == [2, 2, 4]
    assert out[3]["error"]["type"] == "ValueError" and out[3]["error"]["message"] == "negative"
    assert "ValueError" in out[3]["error"]["bases"] and "Exception" in out[3]["error"]["bases"]
    assert out[4]["error"]["type"] == "InputError"            # it needed the step that raised
    assert out[5]["error"]["type"] == "AttributeError"
    assert out[6]["error"]["type"] == "InputError"            # no such step


def test_a_call_with_methods_returns_every_outcome_and_the_timer_still_ends_it():
    module = module_of("""
        class Slow:
            def __init__(self, n):
                self.n = n
            def hang(self):
                while True:
                    pass
            def get(self):
                return self.n
        """)
    case = {"id": "t01", "timeout": 0.3, "calls": [
        {"fn": "Slow", "args": [encode(5)], "methods": [{"name": "get", "args": []}]}]}
    result = _run_case(case, module, {}, "submission.py")
    assert decode(result["calls"][0]["value"]) == [{"ok": True, "value": 5}]
    case["calls"][0]["methods"].append({"name": "hang", "args": []})
    result = _run_case(case, module, {}, "submission.py")
    assert result.get("timeout") and result["calls"] == []


def test_steps_travel_as_references_to_their_own_call():
    call = Call("BlockAllocator", (3,), methods=(("allocate", ()), ("fork", (Step(0),)), ("num_free", None)))
    assert call.methods[1][1][0] == Step(0)
    spec = json.loads(job_files("BlockAllocator", Limits().resolved())[0])
    first = spec["cases"][1]["calls"][0]
    assert first["fn"] == "BlockAllocator" and first["methods"][0] == {"name": "allocate", "args": []}
    assert {"name": "refcount", "args": [{"$ref": [0]}]} in first["methods"]
    assert any(m["args"] is None for m in first["methods"])           # num_free, read as a property


# ---------------------------------------------------------------------- the hidden tests


def run_in_process(cls) -> list[tuple[str, str | None]]:
    """Every hidden test run here on ``cls`` (as the harness would run it): (name, failure)."""
    spec = json.loads(job_files("BlockAllocator", Limits().resolved())[0])
    out = []
    for test, case in zip(registry.tests("BlockAllocator"), spec["cases"]):
        results = []
        for call in case["calls"]:
            value = _run_methods(cls(decode(call["args"][0])), call["methods"], None, "submission.py")
            results.append(CallResult(decode(json.loads(json.dumps(encode(value))))))
        try:
            test.check(results)
            out.append((test.name, None))
        except Fail as fail:
            out.append((test.name, str(fail)))
    return out


def test_the_engine_allocator_passes_every_hidden_test():
    from kvcache.paged import BlockAllocator as EngineAllocator
    assert [name for name, failure in run_in_process(EngineAllocator) if failure] == []
    assert [name for name, failure in run_in_process(module_of(solution_source()).BlockAllocator) if failure] == []


def test_the_scripts_only_name_blocks_whose_fate_does_not_depend_on_the_choice_of_block():
    """Two correct allocators that choose blocks in opposite orders pass alike."""
    fifo = module_of(solution_source().replace("block = self._free.pop()", "block = self._free.pop(0)"))
    assert "pop(0)" in solution_source().replace("block = self._free.pop()", "block = self._free.pop(0)")
    assert [n for n, failure in run_in_process(fifo.BlockAllocator) if failure] == []


def test_a_random_script_ends_with_every_block_free_and_the_pool_handed_out_again():
    import numpy as np
    script = exercise.random_script(np.random.default_rng(0), 5, 100)
    kinds = [op[0] for op in script.ops]
    assert kinds[-8:] == ["num_free"] + ["allocate"] * 6 + ["num_free"]    # 5 blocks, and one too many
    assert {"fork", "free", "refcount", "allocate"} <= set(kinds)


MISTAKES = [
    ("self._counts[self._live(block, \"free\")] -= 1\n        if self._counts[block] == 0:\n            self._free.append(block)",
     "self._counts[self._live(block, \"free\")] = 0\n        self._free.append(block)",
     "which is still live"),                                        # free ignores the other references
    ("        if self._counts[block] == 0:\n            raise ValueError(f\"{what} of block {block}, which is free\")\n",
     "", "a double free"),                                          # no check for a free block
    ("        self._counts[self._live(block, \"fork\")] += 1\n        return block",
     "        self._live(block, \"fork\")\n        return self.allocate()", "should return the same block"),
    ("        if not self._free:\n            raise OutOfBlocks(1, 0)\n", "",
     "should raise OutOfBlocks (all 3 blocks are live); it raised IndexError"),
    ("    @property\n    def num_free(self):", "    def num_free(self):", "make it a property"),
    ("        self._counts[self._live(block, \"fork\")] += 1\n", "        self._live(block, \"fork\")\n",
     "has 2 references at this point"),                             # fork forgets to count
    ("            raise OutOfBlocks(1, 0)\n        block", "            return None\n        block",
     "should raise OutOfBlocks (all 3 blocks are live); it returned None"),
]


@pytest.mark.parametrize("old, new, words", MISTAKES, ids=[m[2][:30] for m in MISTAKES])
def test_common_mistakes_lose_points_with_a_diagnosis(old, new, words):
    source = solution_source()
    assert old in source, old
    result = grade_text(source.replace(old, new), "BlockAllocator")
    assert result["status"] == "ok" and result["score"] < result["max_score"]
    assert any(words in out for out in failed_outputs(result)), failed_outputs(result)


def test_the_solution_gets_full_marks_in_the_sandbox():
    result = grade_text(solution_source(), "BlockAllocator")
    assert result["score"] == result["max_score"] == 22, failed_outputs(result)


# ---------------------------------------------------------------------- the public checks


def test_public_checks_pass_the_solution_and_the_engine_and_name_mistakes():
    from kvcache.paged import BlockAllocator as EngineAllocator
    for cls in (module_of(solution_source()).BlockAllocator, EngineAllocator):
        outcomes = evaluate("BlockAllocator", cls)
        assert [o.status for o in outcomes] == ["passed"] * 6, outcomes
    for old, new, words in MISTAKES[:4] + MISTAKES[6:]:
        cls = module_of(solution_source().replace(old, new)).BlockAllocator
        assert any(o.status == "failed" for o in evaluate("BlockAllocator", cls)), words
    starter = json.loads((ROOT / "exercises" / "BlockAllocator.ipynb").read_text())
    source = next("".join(c["source"]) for c in starter["cells"] if "answer" in c["metadata"].get("tags", []))
    assert {o.status for o in evaluate("BlockAllocator", module_of(source).BlockAllocator)} == {"not implemented"}


# ---------------------------------------------------------------------- no page gives the class away

CLASSES = frozenset({"BlockAllocator"})


def _class_verdicts(source: str, names=CLASSES) -> list[tuple[str, bool]]:
    """(name, is a starter) of each definition of a graded class in Python ``source``: a starter
    class is one whose methods are all starters (one ``raise NotImplementedError``) or bare
    signatures (a body of ``...``, as a statement shows them)."""
    import ast

    from coursetools.answer_leaks import is_starter

    def signature(fn) -> bool:
        body = fn.body[1:] if fn.body and isinstance(fn.body[0], ast.Expr) and \
            isinstance(fn.body[0].value, ast.Constant) and isinstance(fn.body[0].value.value, str) else fn.body
        return all(isinstance(b, ast.Expr) and isinstance(b.value, ast.Constant) and b.value.value is Ellipsis
                   for b in body)
    tree = ast.parse(source)
    return [(node.name, all(is_starter(f) or signature(f) for f in node.body
                            if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))))
            for node in ast.walk(tree) if isinstance(node, ast.ClassDef) and node.name in names]


def _class_leaks_in_text(text: str, names=CLASSES) -> list[str]:
    """Leaks in text that may not parse as a whole (printed source, a fragment): each ``class
    NAME`` line is cut out with the lines indented under it and judged alone; a cut that does
    not parse counts as a leak."""
    import re
    lines = text.splitlines()
    found = []
    for i, line in enumerate(lines):
        match = re.match(r"^(\s*)class\s+([A-Za-z_]\w*)\b", line)
        if not match or match[2] not in names:
            continue
        depth = len(match[1])
        block = [line]
        for follower in lines[i + 1:]:
            if follower.strip() and len(follower) - len(follower.lstrip()) <= depth:
                break
            block.append(follower)
        try:
            verdicts = _class_verdicts(textwrap.dedent("\n".join(block)), names)
        except SyntaxError:
            verdicts = [(match[2], False)]
        found += [f"line {i + 1}: {name}" for name, starter in verdicts if not starter]
    return found


def class_leaks(path) -> list[str]:
    """Every implementation of a graded class in a file or a folder a learner can read: Python
    files, notebooks (code, fenced code in Markdown, outputs), Markdown, HTML <pre> blocks."""
    import html
    import re
    from pathlib import Path

    from coursetools.answer_leaks import _FENCE, _output_texts, _PreBlocks
    path = Path(path)
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    leaks = []
    for file in files:
        suffix = file.suffix.lower()
        if suffix not in (".py", ".ipynb", ".md", ".html", ".htm"):
            continue
        text = file.read_text(encoding="utf-8", errors="replace")
        pieces = []
        if suffix == ".py":
            pieces = [text]
        elif suffix == ".md":
            pieces = [f["body"] for f in _FENCE.finditer(text)]
        elif suffix == ".ipynb":
            nb = json.loads(text)
            for cell in nb.get("cells", []):
                source = "".join(cell.get("source", ""))
                if cell.get("cell_type") == "markdown":
                    pieces += [f["body"] for f in _FENCE.finditer(source)]
                else:
                    pieces.append("\n".join("" if l.lstrip().startswith(("%", "!")) else l
                                            for l in source.splitlines()))
                pieces += [html.unescape(re.sub(r"<[^>]+>", "", t)) for t in _output_texts(cell)]
        else:
            parser = _PreBlocks()
            parser.feed(text)
            parser.close()
            pieces = parser.blocks
        for piece in pieces:
            leaks += [f"{file}: {leak}" for leak in _class_leaks_in_text(piece)]
    return leaks


def test_the_class_scanner_tells_a_starter_from_an_implementation():
    starter = json.loads((ROOT / "exercises" / "BlockAllocator.ipynb").read_text())
    source = next("".join(c["source"]) for c in starter["cells"] if "answer" in c["metadata"].get("tags", []))
    assert _class_leaks_in_text(source) == []
    assert _class_leaks_in_text(solution_source()) == ["line 8: BlockAllocator"]
    printed = "Out: class BlockAllocator:\n    def allocate(self):\n        return self._free.pop()\n"
    assert _class_leaks_in_text(printed.split("Out: ", 1)[1]) == ["line 1: BlockAllocator"]
    assert _class_leaks_in_text("class BlockAllocator:\n    def allocate(self:\n") == ["line 1: BlockAllocator"]
    assert _class_leaks_in_text("class BlockAllocatorTest:\n    x = 1\n") == []
    assert _class_leaks_in_text("class BlockAllocator:\n    def allocate(self): ...\n") == []
    assert _class_leaks_in_text("class BlockAllocator:\n    def allocate(self):\n        pass\n")


def test_no_copy_a_learner_reads_holds_the_allocator_and_the_engine_and_solution_do(tmp_path):
    """What coursetools.answer_leaks does for graded functions, for the graded class: nothing a learner
    reads (the exercises, the public checks, the chapters, the helpers, and the release with the
    built site in it when it has been built) implements it; the solution and the engine do."""
    from coursetools.release import make_release
    for folder in ("exercises", "public_checks", "book", "coursebook"):
        assert class_leaks(ROOT / folder) == [], folder
    assert class_leaks(ROOT / "solutions" / "BlockAllocator.ipynb")
    assert class_leaks(ROOT / "kvcache" / "paged.py")
    make_release(tmp_path / "release")
    assert class_leaks(tmp_path / "release") == []
