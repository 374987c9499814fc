"""What a sandbox holds of a grading, in both isolation modes: a hidden case reveals nothing about
which case it is (no test id, number, count or place: each run gets its own cases only, under
tokens drawn for that run, in an order drawn for each grading); the course packages a sandbox
gets are the learner's copy (graded parts starters or the grader's own, compiled: no source to
read), in ``grade`` and in ``check``; a ``quiet`` exercise's feedback carries no number the
submission chose; an answer that computes nothing earns nothing, and exceptions are matched by
identity, not by name; ``ga2.machine``'s offset caches are bounded."""
import json
import random
import re
import textwrap

import numpy as np
import pytest

from graders import Limits, check_file, grading, registry
from coursetools.answer_leaks import find_leaks
from graders.job import run_files, test_cases as encoded_cases
from graders.sandbox import Sandbox

from grader_helpers import BWRAP, BWRAP_WHY, FAST, GOOD, ROOT, grade_text

MODES = ["bwrap", "subprocess"]
MUTANTS = Limits()                 # the exercise's own limits (10 s a builder)


@pytest.fixture(params=MODES)
def isolation(request):
    if request.param == "bwrap" and not BWRAP:
        pytest.skip(f"bubblewrap cannot run here: {BWRAP_WHY}")
    return request.param


class Recorder:
    """Every sandbox run of the gradings in a test: its job folder's spec, what it printed."""

    def __init__(self, monkeypatch):
        self.specs, self.outputs, self.kwargs = [], [], []
        real = Sandbox.run

        def run(sandbox, job_dir, limits, test_seconds, **kwargs):
            self.specs.append(json.loads((job_dir / "spec.json").read_text()))
            self.kwargs.append({"test_seconds": dict(test_seconds), **kwargs})
            result = real(sandbox, job_dir, limits, test_seconds, **kwargs)
            self.outputs.append(result.output)
            return result
        monkeypatch.setattr(Sandbox, "run", run)


# ------------------------------------------------------------------ 1. a case says nothing of itself

def test_a_run_holds_only_its_own_cases_under_tokens_of_its_own():
    cases = encoded_cases("mutants", MUTANTS.resolved())
    one = sorted(cases)[20]
    spec, inputs = run_files([("9f8e7d6c5b4a3921", cases[one])], MUTANTS.resolved())
    text = spec.decode()
    assert [c["id"] for c in json.loads(text)["cases"]] == ["9f8e7d6c5b4a3921"]
    assert not re.search(r"\bt\d\d\b", text)                       # no test id anywhere
    with np.load(__import__("io").BytesIO(inputs)) as npz:
        assert npz.files == ["a0"]                                  # its builder, and nothing else


def test_every_sandbox_of_a_grading_gets_its_own_case_only_and_no_id(monkeypatch, isolation):
    seen = Recorder(monkeypatch)
    monkeypatch.setattr(grading, "_chance", random.Random(0))
    grade_text(ACCEPT_ALL, "mutants", limits=MUTANTS, isolation=isolation)
    isolated = [s for s in seen.specs if len(s["cases"]) == 1]
    assert len(isolated) == len(seen.specs) == len(registry.tests("mutants"))     # a sandbox per test
    ids = {t.id for t in registry.tests("mutants")}
    for spec, kwargs in zip(seen.specs, seen.kwargs):
        assert len(spec["cases"]) == 1 and spec["cases"][0]["id"] not in ids
        assert set(kwargs["test_seconds"]) == {spec["cases"][0]["id"]} and kwargs.get("only") is None
    tokens = [s["cases"][0]["id"] for s in seen.specs]
    assert len(set(tokens)) == len(tokens)


def test_the_order_is_drawn_for_each_grading_and_the_result_does_not_depend_on_it(monkeypatch):
    order = []
    real = grading.run_files
    by_case = {id(case): tid for tid, case in encoded_cases("attend_step", FAST.resolved()).items()}

    def recording(cases, limits):
        order.append([by_case[id(case)] for _, case in cases])
        return real(cases, limits)
    monkeypatch.setattr(grading, "run_files", recording)
    results = []
    for draw in (1, 2):
        monkeypatch.setattr(grading, "_chance", random.Random(draw))
        results.append(grade_text(GOOD["attend_step"], "attend_step", limits=FAST))
    assert order[0] != order[1] and sorted(order[0]) == sorted(order[1])
    assert [t["name"] for t in results[0]["tests"]] == [t["name"] for t in results[1]["tests"]] \
        == [t.name for t in registry.tests("attend_step")]
    assert results[0]["score"] == results[1]["score"] == results[0]["max_score"]


ACCEPT_ALL = """
    def predict_catches():
        return {}

    def check_builder(builder):
        return True
    """

# The attack of the finding: accept only what the grader's own words say is a correct builder
# (test ids t02..t15, the first 15 places), from argv, the harness's frames, the job's files and
# the environment; reject everything else.
KNOWS_ITS_PLACE = """
    import os
    import re
    import sys


    def predict_catches():
        return {}


    def _number():
        text = " ".join(sys.argv)
        found = re.search(r"--only t(\\d+)", text)
        if found:
            return int(found.group(1))
        frame = sys._getframe()
        while frame is not None:
            case = frame.f_locals.get("case")
            if isinstance(case, dict) and isinstance(case.get("id"), str):
                found = re.fullmatch(r"t(\\d+)", case["id"])
                if found:
                    return int(found.group(1))
            spec = frame.f_locals.get("spec")
            if isinstance(spec, dict) and isinstance(spec.get("cases"), list) and len(spec["cases"]) > 1:
                return 1 + len(spec["cases"])          # where it stands among the cases it was handed
            frame = frame.f_back
        for key, value in os.environ.items():
            found = re.search(r"t(\\d\\d)", value)
            if found:
                return int(found.group(1))
        return None


    def check_builder(builder):
        number = _number()
        return number is not None and 2 <= number <= 15
    """


def test_a_check_that_tells_a_case_by_its_id_or_place_scores_nothing(isolation):
    result = grade_text(KNOWS_ITS_PLACE, "mutants", limits=MUTANTS, isolation=isolation)
    part2 = {t["name"].split(":")[0] + t["name"][6:13]: t for t in result["tests"] if t["name"].startswith("part 2")}
    assert result["status"] == "ok"
    assert sum(t["score"] for t in result["tests"] if t["name"].startswith("part 2")) == 0, part2
    text = json.dumps(result)
    assert "14 correct" not in text and not re.search(r"\b14 of\b", text.replace("(14 of them)", ""))


# ------------------------------------------------------------------ 2. no graded body in any sandbox

DUMP = '''
    import inspect as _inspect
    import os as _os
    import sys as _sys

    _DONE = []


    def _dump():
        """Every file under ga2 and every function's source: printed, once."""
        if _DONE:
            return
        _DONE.append(1)
        chunks = []
        try:
            import ga2
            for name in ("quant", "machine", "checks", "parts", "attn", "mutants", "plan", "softmax"):
                try:
                    __import__("ga2." + name)
                except Exception:
                    pass
            roots = list(ga2.__path__)
        except Exception:
            roots = []
        for root in roots:
            for folder, _, files in _os.walk(root):
                for name in files:
                    path = _os.path.join(folder, name)
                    try:
                        with open(path, errors="replace") as f:
                            chunks.append(("FILE " + path, f.read()))
                    except OSError:
                        pass
        for mod_name, module in list(_sys.modules.items()):
            if not mod_name.startswith(("ga2", "public_checks", "builder")) or module is None:
                continue
            for attr, value in list(vars(module).items()):
                for fn in (value, getattr(value, "installed", None), getattr(value, "__wrapped__", None)):
                    if callable(fn):
                        try:
                            chunks.append(("SOURCE " + mod_name + "." + attr, _inspect.getsource(fn)))
                        except (OSError, TypeError):
                            pass
        for title, text in chunks:
            print("\\n=====CHUNK " + title + "\\n" + text)
    '''

LEAKY = {
    "attention_tail": DUMP + '''

    def attention_tail(L, P):
        _dump()
        return []
    ''',
    "mutants": DUMP + '''

    def predict_catches():
        _dump()
        return {}


    def check_builder(builder):
        _dump()
        for attr, value in list(vars(builder).items()):
            if callable(value):
                try:
                    print("\\n=====CHUNK SOURCE builder." + attr + "\\n" + _inspect.getsource(value))
                except (OSError, TypeError):
                    pass
        return True
    ''',
}

GRADED_LINES = ("(p + (1 << s >> 1) - (p < 0)) >> s",        # the course's requantizer, ga2/quant.py
                "requantize(SP_S8, SP_S, L, P[\"scores\"])")    # the course's tail, ga2/attn.py


def assert_no_graded_body(printed: str, tmp_path, course_files=("attn.py", "mutants.py", "quant.py")):
    chunks = printed.split("\n=====CHUNK ")[1:]
    assert chunks, "the submission printed nothing: the test did not run"
    for k, chunk in enumerate(chunks):
        title, _, text = chunk.partition("\n")
        (tmp_path / f"chunk{k:03d}.py").write_text(text)
        assert not title.endswith(".v"), title
    assert find_leaks(tmp_path) == []
    assert not any(line in printed for line in GRADED_LINES)
    for name in course_files:
        real = (ROOT / "ga2" / name).read_text()
        assert real not in printed


@pytest.mark.parametrize("exercise", sorted(LEAKY))
def test_a_submission_that_reads_all_of_its_ga2_finds_no_graded_body(exercise, isolation, monkeypatch, tmp_path):
    seen = Recorder(monkeypatch)
    limits = Limits(output_bytes=16 << 20, test_seconds=30, submission_seconds=600)    # reading it all takes a while
    monkeypatch.setattr(grading, "_chance", random.Random(0))
    grade_text(LEAKY[exercise], exercise, limits=limits, isolation=isolation)
    assert_no_graded_body("".join(seen.outputs), tmp_path)


@pytest.mark.parametrize("exercise", sorted(LEAKY))
def test_check_runs_beside_the_learners_copy_of_ga2_only(exercise, isolation, tmp_path):
    path = tmp_path / f"{exercise}.py"
    path.write_text(textwrap.dedent(LEAKY[exercise]))
    report = check_file(path, exercise, isolation=isolation,
                        limits=Limits(output_bytes=16 << 20, test_seconds=30, submission_seconds=120))
    out = tmp_path / "got"
    out.mkdir()
    assert report["isolation"] == isolation
    assert_no_graded_body(report["printed"], out)


# ------------------------------------------------------------------ 3. quiet: pass or fail, no number

QUIET_NUMBERS = {
    "exit status": """
        import os

        def predict_catches():
            os._exit(53)

        def check_builder(builder):
            os._exit(53)
        """,
    "signal": """
        import os
        import signal

        def predict_catches():
            os.kill(os.getpid(), signal.SIGUSR2)

        def check_builder(builder):
            os.kill(os.getpid(), signal.SIGUSR2)
        """,
    "exception type and line": """
        def predict_catches():
            raise UnicodeTranslateError("x", 1, 2, "53")

        def check_builder(builder):
            raise UnicodeTranslateError("x", 1, 2, "53")
        """,
    "while loading": """
        import os

        def predict_catches(code=os._exit(53)):
            return {}

        def check_builder(builder):
            return True
        """,
}


@pytest.mark.parametrize("how", sorted(QUIET_NUMBERS))
def test_a_quiet_exercise_says_pass_or_fail_and_no_number_the_submission_chose(how, isolation, monkeypatch):
    monkeypatch.setattr(grading, "_chance", random.Random(0))
    result = grade_text(QUIET_NUMBERS[how], "mutants", limits=Limits(test_seconds=10), isolation=isolation)
    assert result["score"] == 0
    feedback = json.dumps([result["output"]] + [t["output"] for t in result["tests"]])
    for number in ("53", "exit status", "SIGUSR2", "signal 12", "killed by", "UnicodeTranslateError", "line "):
        assert number not in feedback, (number, feedback)


# ------------------------------------------------------------------ 4. doing nothing earns nothing

DO_NOTHING = {
    "None": "return None",
    "an empty list": "return []",
    "zero": "return 0",
    "its first argument": "return args[0] if args else None",
    "zeros of the first array's shape": ("arrays = [a for a in args if isinstance(a, np.ndarray)]\n"
                                         "    return np.zeros_like(arrays[0], dtype=float) if arrays else 0.0"),
}


def do_nothing(exercise: str, body: str) -> str:
    """A submission whose every graded function (or class) does only ``body``."""
    lines = ["import numpy as np", ""]
    for fn in registry.get(exercise).functions:
        if fn[0].isupper():           # a class: every method and attribute does nothing
            lines += ["class OutOfBlocks(Exception):", "    pass", "",
                      f"class {fn}:", "    def __init__(self, *args):", "        pass", "",
                      "    def __getattr__(self, name):", "        def method(*args):", f"            {body.replace(chr(10), chr(10) + '        ')}",
                      "        return method", ""]
        else:
            lines += [f"def {fn}(*args):", f"    {body}", ""]
    return "\n".join(lines)


@pytest.mark.parametrize("exercise", [n for n in registry.names() if n != "mutants"])
def test_an_answer_that_computes_nothing_earns_nothing(exercise, isolation):
    earned = {}
    for what, body in DO_NOTHING.items():
        result = grade_text(do_nothing(exercise, body), exercise, limits=FAST, isolation=isolation)
        earned[what] = [(t["name"], t["score"]) for t in result["tests"] if t["score"]]
    assert earned == {what: [] for what in DO_NOTHING}


LOOK_ALIKE = """
    class OutOfBlocks(Exception):
        pass


    class ValueError(Exception):
        __module__ = "builtins"          # and it says so


    class BlockAllocator:
        def __init__(self, num_blocks):
            self.refs = {}
            self.free_list = list(range(num_blocks))

        def allocate(self):
            if not self.free_list:
                raise OutOfBlocks("none free")
            block = self.free_list.pop()
            self.refs[block] = 1
            return block

        def fork(self, block):
            if self.refs.get(block, 0) == 0:
                raise ValueError("not live")
            self.refs[block] += 1
            return block

        def free(self, block):
            if self.refs.get(block, 0) == 0:
                raise ValueError("not live")
            self.refs[block] -= 1
            if self.refs[block] == 0:
                del self.refs[block]
                self.free_list.append(block)

        def refcount(self, block):
            if not isinstance(block, int) or block < 0 or block >= len(self.refs) + len(self.free_list):
                raise ValueError("not in the pool")
            return self.refs.get(block, 0)

        @property
        def num_free(self):
            return len(self.free_list)
    """


def test_a_look_alike_value_error_is_not_a_value_error(isolation):
    honest = grade_text(LOOK_ALIKE.replace("class ValueError(Exception):\n        __module__ = \"builtins\"          "
                                           "# and it says so\n", ""), "BlockAllocator", limits=FAST,
                        isolation=isolation)
    look_alike = grade_text(LOOK_ALIKE, "BlockAllocator", limits=FAST, isolation=isolation)
    value_error_tests = [t["name"] for t in honest["tests"] if "raises ValueError" in t["name"]]
    assert value_error_tests
    passed = {t["name"]: t["status"] == "passed" for t in look_alike["tests"]}
    assert all(passed[name] is False for name in value_error_tests), look_alike["tests"]
    assert any("not Python's" in t["output"] for t in look_alike["tests"] if t["name"] in value_error_tests)
    assert look_alike["score"] < honest["score"]


# ------------------------------------------------------------------ 5. the machine's caches

def test_crafted_strides_do_not_grow_the_machines_caches():
    from ga2 import machine
    for stride in range(1, 5 * machine.OFFSET_CACHE_ENTRIES):
        machine._low_bytes(4, 4, stride, 1)
        machine._offsets(4, 4, 1, stride)
    assert machine._low_bytes.cache_info().currsize <= machine.OFFSET_CACHE_ENTRIES
    assert machine._offsets.cache_info().currsize <= machine.OFFSET_CACHE_ENTRIES
    assert machine._offsets(2, 3, 5, 1).tolist() == [[0, 1, 2], [5, 6, 7]]        # and they still work


def test_test_names_speak_to_learners():
    """A test's name is a line of feedback and a gradebook column: it never says "seed"."""
    for name in registry.names():
        for item in registry.items(name):
            assert "seed" not in item.name.lower(), (name, item.name)
