"""graders.notebook: reading submissions defensively (no sandbox involved)."""
import json

import pytest

from graders.notebook import Unreadable, extract, infer_exercise
from graders import registry


def notebook(*cells, metadata=None, nbformat=4) -> bytes:
    nb = {"cells": [{"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [],
                     "source": src} if isinstance(src, (str, list)) else src for src in cells],
          "metadata": metadata if metadata is not None else {}, "nbformat": nbformat, "nbformat_minor": 5}
    return json.dumps(nb).encode()


def run(extracted, name):
    """Execute the extracted source (trusted test input) and return ``name`` from it."""
    env = {}
    exec(compile(extracted.source, "submission.py", "exec"), env)
    return env[name]


def test_keeps_definitions_and_drops_top_level_calls():
    ex = extract(notebook("import numpy as np\nEPS = 1e-12\n",
                          "def f(x):\n    return x + EPS\n",
                          "print('scratch')\nf(3)\nfor i in range(10**12):\n    pass\n",
                          "from public_checks import run_checks\nrun_checks('f', f)\n"), "f.ipynb", ("f",))
    assert "print" not in ex.source and "run_checks" not in ex.source and "range(10**12)" not in ex.source
    assert run(ex, "f")(1) == 1 + 1e-12
    assert set(ex.definitions) >= {"np", "EPS", "f"}


def test_last_definition_wins_and_duplicated_cells_are_fine():
    first = "def f(x):\n    raise NotImplementedError\n"
    second = "def f(x):\n    return 2 * x\n"
    ex = extract(notebook(first, second, second, first.replace("raise NotImplementedError", "return 3 * x")),
                 "f.ipynb", ("f",))
    assert run(ex, "f")(1) == 3
    ex = extract(notebook(first, second), "f.ipynb", ("f",))
    assert run(ex, "f")(1) == 2


def test_magic_and_shell_lines_are_dropped():
    ex = extract(notebook(["%%bash\n", "rm -rf /\n"],
                          ["%load_ext autoreload\n", "!pip install something\n", "files = !ls\n",
                           "import math\n", "math.sqrt?\n"],
                          ["%%time\n", "def f(x):\n", "    %time y = 1\n", "    return math.sqrt(x)\n"]),
                 "f.ipynb", ("f",))
    assert "rm -rf" not in ex.source and "pip" not in ex.source and "%" not in ex.source
    assert run(ex, "f")(9) == 3.0


def test_a_cell_with_a_syntax_error_keeps_what_parses():
    ex = extract(notebook("def helper(x):\n    return x +\n\ndef f(x):\n    return 2 * x\n"), "f.ipynb", ("f",))
    assert run(ex, "f")(2) == 4
    assert any("syntax error" in n and "cell 1, line 2" in n for n in ex.notes)
    assert "helper" not in ex.definitions


def test_a_python_file_with_a_syntax_error_elsewhere():
    src = b"import math\n\ndef broken(:\n    pass\n\n@staticmethod\ndef g(x):\n    return x\n\ndef f(x):\n    return math.floor(x)\n"
    ex = extract(src, "f.py", ("f",))
    assert run(ex, "f")(2.5) == 2
    assert "g" in ex.definitions and "broken" not in ex.definitions


def test_wrong_kernelspec_missing_metadata_and_nbformat_3():
    ex = extract(notebook("def f(x):\n    return x\n", metadata={"kernelspec": {"name": "ir", "language": "R"}}),
                 "f.ipynb", ("f",))
    assert ex.exercise is None and "f" in ex.definitions
    v3 = {"worksheets": [{"cells": [{"cell_type": "code", "input": "def f(x):\n    return -x\n"}]}],
          "metadata": {}, "nbformat": 3}
    ex = extract(json.dumps(v3).encode(), "f.ipynb", ("f",))
    assert run(ex, "f")(1) == -1


def test_metadata_and_file_names_name_the_exercise():
    ex = extract(notebook("x = 1\n", metadata={"kvcourse": {"exercise": "softmax", "chapter": 1}}), "hw.ipynb")
    assert ex.exercise == "softmax"
    known = registry.names()
    assert infer_exercise("hw.ipynb", "softmax", known) == "softmax"
    assert infer_exercise("attend_step (1).ipynb", None, known) == "attend_step"
    assert infer_exercise("jdoe-kv_cache_bytes.py", None, known) == "kv_cache_bytes"
    assert infer_exercise("Prefill-Time.py", None, known) == "prefill_time"
    assert infer_exercise("homework.py", None, known) is None


@pytest.mark.parametrize("data, words", [
    (b"", "empty"),
    (b"   \n\n", "empty"),
    (b'{"cells": [', "invalid JSON"),
    (b"[1, 2, 3]", "not a notebook"),
    (b'{"metadata": {}}', "no list of cells"),
    (b"PK\x03\x04\x00\x00binary", "not a text file"),
    (b"\xff\xfe\xfa not utf8", "not UTF-8"),
])
def test_unreadable_files_say_why(data, words):
    name = "sub.ipynb" if not data.startswith(b"\xff") else "sub.py"
    with pytest.raises(Unreadable, match=words):
        extract(data, name)


def test_missing_and_misnamed_functions_get_a_suggestion():
    ex = extract(b"def atend_step(x, c, p):\n    return 0\n\ndef _h():\n    pass\n", "a.py", ("attend_step",))
    assert ex.missing(("attend_step",)) == ["attend_step"]
    assert "atend_step" in ex.suggestion("attend_step")
    ex = extract(b"import numpy as np\n", "a.py", ("attend_step",))
    assert "defines" in ex.suggestion("attend_step")


def test_imports_that_fail_do_not_sink_the_file():
    ex = extract(b"import numpy as np\nimport no_such_module_here\nfrom kvcache.attention import softmax as s2\n"
                 b"def f(x):\n    return np.abs(x)\n", "f.py", ("f",))
    env = {}
    exec(compile(ex.source, "submission.py", "exec"), env)
    assert env["f"](-2) == 2
    assert any("no_such_module_here" in k for k in env["__grader_import_failures__"])


def test_aliases_constants_and_assignments_to_required_names_are_kept():
    ex = extract(b"import numpy as np\nSCALE = np.sqrt(4.0)\nN = int(1e3)\nLIMIT = max(1, 2)\n"
                 b"def _impl(x):\n    return x * SCALE + N + LIMIT\nf = _impl\nresult = _impl(3)\n"
                 b"g = make_something()\n", "f.py", ("f",))
    assert run(ex, "f")(1) == 2.0 + 1000 + 2
    assert "result" not in ex.definitions and "g" not in ex.definitions


def test_line_numbers_point_into_the_learners_cells():
    ex = extract(notebook("x = 1\n", "import numpy as np\n\n\ndef f(x):\n    return 1 / 0\n"), "f.ipynb", ("f",))
    line = next(i for i, text in enumerate(ex.source.splitlines(), start=1) if "1 / 0" in text)
    assert ex.locate(line) == "cell 2, line 5"


@pytest.mark.parametrize("bad", [
    "x = " + "-" * 200_000 + "1\n",                                  # MemoryError in the parser
    "y = 1 + " + "1 + " * 150_000 + "1\n",                          # RecursionError building the tree
])
def test_code_nested_too_deeply_for_the_parser_is_a_note_not_a_crash(bad):
    """Both used to escape extract() and end as grader_error ("the grader itself failed")."""
    ex = extract(("def f(x):\n    return x + 1\n" + bad).encode(), "f.py", ("f",))
    assert run(ex, "f")(1) == 2
    assert any("could not be read as Python" in n for n in ex.notes)


def test_json_nested_too_deeply_is_unreadable_not_a_crash():
    with pytest.raises(Unreadable, match="nested too deeply"):
        extract(b"[" * 100_000, "f.ipynb")


def test_megabytes_of_code_are_refused_with_a_message_not_parsed():
    """The parsing happens in the grader's own process: 50 MB of code once took it 10 GB and
    minutes.  Big outputs are fine (a notebook with a large image still reads)."""
    with pytest.raises(Unreadable, match="MB of code"):
        extract(notebook("x = 1\n" * 400_000, "def f(x):\n    return x\n"), "f.ipynb", ("f",))
    nb = json.loads(notebook("def f(x):\n    return x\n"))
    nb["cells"][0]["outputs"] = [{"output_type": "display_data", "metadata": {},
                                  "data": {"image/png": "A" * (20 << 20)}}]
    assert "f" in extract(json.dumps(nb).encode(), "f.ipynb", ("f",)).definitions


def test_a_function_defined_under_the_main_guard_is_named_as_such():
    ex = extract(b"import numpy as np\nif __name__ == '__main__':\n    def f(x):\n        return x\n"
                 b"    f(3)\n", "f.py", ("f",))
    assert ex.missing(("f",)) == ["f"]
    assert 'if __name__ == "__main__":' in ex.suggestion("f") and "line 3" in ex.suggestion("f")
    ex = extract(b"if __name__ == '__main__':\n    def f(x):\n        return 0\ndef f(x):\n    return x\n",
                 "f.py", ("f",))
    assert ex.missing(("f",)) == [] and run(ex, "f")(4) == 4


# ------------------------------------------------------------- the budget before decoding


def test_a_notebook_of_empty_objects_is_refused_before_any_object_is_built(monkeypatch):
    """A notebook of ``{}`` (120 MB of them once cost the grader 3.1 GB): weighed on its bytes,
    refused with a message, and ``json.loads`` never called."""
    from graders import notebook as nbmod
    monkeypatch.setattr(nbmod.json, "loads", lambda *a, **k: pytest.fail("decoded a notebook over budget"))
    data = b'{"cells": [' + b"{}," * nbmod.MAX_JSON_ITEMS + b'{}], "metadata": {}}'
    with pytest.raises(Unreadable, match="more than 1,000,000 items"):
        extract(data, "f.ipynb", ("f",))
    strings = b'{"cells": [' + b'"",' * (nbmod.MAX_JSON_STRINGS + 1) + b'""]}'
    with pytest.raises(Unreadable, match="more than 1,000,000 strings"):
        extract(strings, "f.ipynb", ("f",))


def test_commas_inside_strings_do_not_count_and_base64_outputs_are_never_decoded(monkeypatch):
    """What a printed output holds (commas in text) is not structure; an image's base64 is dropped
    before decoding, so the text ``json.loads`` receives is the notebook without it."""
    from graders import notebook as nbmod
    nb = json.loads(notebook("def f(x):\n    return x\n"))
    nb["cells"][0]["outputs"] = [
        {"output_type": "stream", "name": "stdout", "text": ["1, " * (nbmod.MAX_JSON_ITEMS + 10)]},
        {"output_type": "display_data", "metadata": {}, "data": {"image/png": "iVBORw0K" * (1 << 20) + "\n"}}]
    data = json.dumps(nb).encode()
    decoded = []
    real = nbmod.json.loads
    monkeypatch.setattr(nbmod.json, "loads", lambda text, *a, **k: decoded.append(len(text)) or real(text, *a, **k))
    assert "f" in extract(data, "f.ipynb", ("f",)).definitions
    assert len(data) > 11_000_000 and decoded == [len(data) - (8 << 20) - len(r'\n')]
