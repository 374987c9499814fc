"""graders.harness's codec: what crosses the sandbox's boundary is plain data, both ways."""
import base64
import io
import json

import numpy as np
import pytest

from graders.harness import MAX_ARRAY_BYTES, Opaque, decode, encode


def roundtrip(value):
    return decode(json.loads(json.dumps(encode(value))))


def test_plain_values_round_trip_exactly():
    value = {"k": np.arange(6.0).reshape(2, 3), "n": 2 ** 80, "x": 0.1, "nan": float("nan"),
             "s": "text", "t": (1, [2, None, True]), "i32": np.int32(7), "f": np.float64(2.5)}
    back = roundtrip(value)
    assert np.array_equal(back["k"], value["k"]) and back["k"].dtype == np.float64
    assert back["n"] == 2 ** 80 and type(back["n"]) is int
    assert back["x"] == 0.1 and np.isnan(back["nan"])
    assert back["t"] == (1, [2, None, True]) and isinstance(back["t"], tuple)
    assert type(back["i32"]) is np.int32 and back["i32"] == 7
    assert type(back["f"]) is np.float64


def test_objects_travel_as_their_type_name_only():
    class Sneaky(float):
        def __eq__(self, other):
            return True
    class Subset(set):
        pass
    back = roundtrip([Sneaky(1.0), object(), np.array([object()], dtype=object), Subset({1, 2})])
    assert all(isinstance(v, Opaque) for v in back)
    assert back[0].type_name.endswith("Sneaky") and "object" in back[2].type_name
    assert back[3].type_name.endswith("Subset")


def test_sets_of_plain_values_travel_as_sets():
    back = roundtrip({"b": {"b", "d"}, "none": set(), "f": frozenset({1, 2.5, ("x", 3)})})
    assert back == {"b": {"b", "d"}, "none": set(), "f": frozenset({1, 2.5, ("x", 3)})}
    assert type(back["b"]) is set and type(back["f"]) is frozenset
    class Liar:
        def __eq__(self, other):
            return True
        def __hash__(self):
            return 0
    odd = roundtrip({Liar(), "c"})
    assert "c" in odd and all(isinstance(v, (str, Opaque)) for v in odd)   # the item is a type name
    with pytest.raises(ValueError):
        decode({"$set": [{"$npy": encode(np.zeros(2))["$npy"]}]})       # an array is no set item


def test_a_module_node_is_made_only_inside_the_sandbox():
    """What comes back from the sandbox is never run: a ``$module`` node decodes only with the
    harness's own ``modules``, which only its inputs get."""
    node = {"$module": {"name": "m", "package": "", "code": {"$nd": "a0"}}}
    with pytest.raises(ValueError, match="module"):
        decode(node)
    with pytest.raises(ValueError, match="module"):
        decode({"$list": [node]}, load=lambda n: b"")
    assert decode({"$list": [node]}, modules=lambda n: "made") == ["made"]


def test_oversized_arrays_are_refused_not_sent():
    big = np.zeros(MAX_ARRAY_BYTES // 8 + 1)
    node = encode(big)
    assert "$obj" in node and "too large" in node["why"]


def test_decoding_refuses_pickles_and_malformed_data():
    buf = io.BytesIO()
    np.save(buf, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    pickled = {"$npy": base64.b64encode(buf.getvalue()).decode()}
    with pytest.raises(ValueError):
        decode(pickled)
    for bad in ({"$npy": "not base64!!"}, {"$int": "12x"}, {"$dict": [[1]]}, {"$list": {}}, {"weird": 1},
                [1, 2], {"$ref": [0]}, {"$nd": "a0"}, {"$int": "9" * 5000}):
        with pytest.raises((ValueError, TypeError)):
            decode(bad)


def test_deep_or_huge_containers_are_cut():
    nested = []
    for _ in range(100):
        nested = [nested]
    node = json.dumps(encode(nested))
    assert "too large" in node
    assert "too large" in json.dumps(encode(list(range(200_000))))


def test_a_huge_container_is_cut_without_walking_it():
    """A list of ten million items was walked item by item (each encoded as "too large") until the
    test's time ran out; it is now refused at once, by its length."""
    node = encode([[0] * 10_000_000, [1]])
    assert node["$list"][0] == {"$obj": "list of 10000000 items", "why": "too large"}
    assert decode(node["$list"][1]) == [1]


# ------------------------------------------------------------ the channel, within a budget

from graders.sandbox import transcript as tr  # noqa: E402
from graders.results import clean, clean_text, write_json, write_text  # noqa: E402


def _lines(*messages) -> list[bytes]:
    return [json.dumps(m).encode() for m in messages]


def _started(tests=("t01", "t02")) -> tr.Transcript:
    t = tr.Transcript(tests=frozenset(tests))
    for line in _lines({"t": "hello"}, {"t": "import_start"}, {"t": "import", "ok": True}):
        t.feed(line)
    return t


def test_the_channel_parses_at_most_a_budget_of_messages_and_counts_the_rest():
    t = _started()
    for _ in range(tr.MAX_MESSAGES + 500):
        t.feed(b'{"t": "noise"}')
    assert t.parsed == tr.MAX_MESSAGES and t.dropped == 503
    t.feed(b'{"t": "start", "id": "t01"}')           # past the budget even the harness is not heard
    assert t.phase == "between" and t.dropped == 504


def test_a_heavy_line_is_never_parsed(monkeypatch):
    t = _started()
    t.feed(b'{"t": "start", "id": "t01"}')
    monkeypatch.setattr(tr.json, "loads", lambda *a, **k: pytest.fail("parsed a line over the budget"))
    heavy = b'{"t": "result", "id": "t01", "calls": [' + b"{}," * tr.MESSAGE_TOKENS + b"{}]}"
    t.feed(heavy)
    assert t.results == {} and t.dropped == 1 and t.parsed == 4
    assert t.too_large == {"t01"}                    # the running test's answer: too large, not lost


def test_the_results_kept_by_a_run_weigh_at_most_its_budget():
    t = _started(("t01", "t02", "t03"))
    text = "x" * (tr.KEPT_BYTES + tr.KEPT_BYTES // 4)         # a test and a quarter's worth each
    for tid in ("t01", "t02", "t03"):
        t.feed(json.dumps({"t": "start", "id": tid}).encode())
        t.feed(json.dumps({"t": "result", "id": tid, "calls": [{"ok": True, "value": text}]}).encode())
    assert sorted(t.results) == ["t01", "t02"] and t.dropped == 1 and t.too_large == {"t03"}
    assert t.kept_bytes <= 3 * tr.KEPT_BYTES and t.kept_tokens <= 3 * tr.KEPT_TOKENS
    smaller = _started(("t01",))                     # a result sent again replaces the old one's weight
    smaller.feed(b'{"t": "start", "id": "t01"}')
    for _ in range(50):
        smaller.feed(json.dumps({"t": "result", "id": "t01", "value": "y" * (1 << 20)}).encode())
    assert list(smaller.results) == ["t01"] and smaller.kept_bytes < 2 << 20 and smaller.dropped == 0


def test_a_forged_import_message_keeps_only_what_the_grader_reads():
    t = tr.Transcript(tests=frozenset({"t01"}))
    t.feed(b'{"t": "import_start"}')
    t.feed(json.dumps({"t": "import", "ok": False, "padding": "p" * 100_000,
                       "error": {"type": "ValueError", "message": "m" * 50_000, "extra": [1] * 1000}}).encode())
    assert set(t.imported) == {"t", "ok", "timeout", "error"} and set(t.imported["error"]) == {"type", "message"}
    assert len(t.imported["error"]["message"]) == tr.MAX_TEXT * 5


# ------------------------------------------------------------- results from untrusted text


def test_lone_surrogates_are_escaped_and_strings_bounded():
    assert clean_text("a\udc80b") == "a\\udc80b"
    assert clean_text("\ud800" * 10, limit=40).endswith("[... cut short]")
    data = clean({"k\udcff": ["\udc80", float("nan"), (1, 2), {3}], "n": np.float32(1.5), "i": np.int64(3)})
    assert data == {"k\\udcff": ["\\udc80", None, [1, 2], [3]], "n": 1.5, "i": 3.0}


def test_a_result_with_surrogates_is_written_as_valid_utf8_json(tmp_path):
    write_json(tmp_path / "r.json", {"output": "boom \udc80", "tests": [{"name": "\udcff", "score": float("inf")}]})
    text = (tmp_path / "r.json").read_bytes().decode("utf-8")      # strict: it is valid UTF-8
    assert json.loads(text) == {"output": "boom \\udc80", "tests": [{"name": "\\udcff", "score": None}]}
    write_text(tmp_path / "g.csv", "name,\udc80\n")
    assert (tmp_path / "g.csv").read_text(encoding="utf-8") == "name,\\udc80\n"
