"""Which graded functions a chapter calls, read from the course's code: the ones it names and the
ones it reaches through the engine (chapter 2's decode runs causal attention)."""
from __future__ import annotations

import json
from pathlib import Path

from coursetools.chapter_calls import CallGraph, chapter_calls
from coursetools.release import _graded_exercises

ROOT = Path(__file__).resolve().parents[2]


GRAPH = CallGraph(ROOT, ["kvcache", "lessons", "coursebook", "ga2"])


def _calls(name: str) -> set[str]:
    nb = json.loads((ROOT / "book" / "chapters" / name).read_text())
    sources = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]
    return chapter_calls(sources, GRAPH, set(_graded_exercises()))


def test_a_chapter_names_what_it_reaches_through_the_engine():
    assert _calls("01_attention_by_hand.ipynb") == {"causal_attention", "softmax"}
    assert _calls("02_decode_step.ipynb") == {"attend_step", "causal_attention", "softmax"}
    assert _calls("03_cache_memory.ipynb") == {"kv_cache_bytes", "max_batch"}
    assert _calls("09_ga2_machine.ipynb") == {"requant"}


def test_a_call_through_an_imported_function_and_a_module_alias():
    sources = ["from lessons.attention import prefill\nimport kvcache.cache as c", "prefill\nc.reorder_cache"]
    assert chapter_calls(sources, GRAPH, set(_graded_exercises())) == {"causal_attention", "softmax", "reorder_cache"}
    assert chapter_calls(["x = 1"], GRAPH, set(_graded_exercises())) == set()
