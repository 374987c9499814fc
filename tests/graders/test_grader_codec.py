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
