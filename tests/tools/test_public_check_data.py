"""The public checks' stored expected values (public_checks/data, written by
tools/public_check_data.py): up to date, one file per registered exercise, in agreement with the
engine on every stored case (two implementations that share no code), and no function of the
public checks computes an answer itself."""
from __future__ import annotations

import importlib
import inspect
import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

from graders import registry
from lessons import attention, memory, roofline

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import public_check_data as tool  # noqa: E402


def data(name):
    return json.loads((ROOT / "public_checks" / "data" / f"{name}.json").read_text())


@pytest.mark.parametrize("name", registry.names())
def test_every_exercise_has_checks_and_current_data(name):
    assert (ROOT / "public_checks" / f"{name}.py").exists()
    path = ROOT / "public_checks" / "data" / f"{name}.json"
    assert path.read_text() == tool.render(name), f"{path} is out of date: run tools/public_check_data.py"
    assert data(name)["exercise"] == name


def test_the_tool_reports_stale_files(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(tool, "DATA", tmp_path)
    monkeypatch.setattr(tool, "ROOT", tmp_path.parent)
    assert tool.main(["--check"]) == 1 and "out of date" in capsys.readouterr().out
    assert tool.main([]) == 0 and tool.main(["--check"]) == 0
    assert sorted(p.stem for p in tmp_path.glob("*.json")) == sorted(registry.names())


def close(a, b):
    return np.allclose(np.asarray(a, float), np.asarray(b, float), rtol=1e-12, atol=1e-13)


def test_softmax_data_agrees_with_the_engine():
    d = data("softmax")
    for case in d["hand_values"] + [d["table"], d["huge"], d["very_negative"]]:
        assert close(attention.softmax(np.array(case["scores"])), case["expected"])


def test_causal_attention_data_agrees_with_the_engine():
    d = data("causal_attention")
    for key in ("three_tokens", "random"):
        case = d[key]
        Q, K, V = (np.array(case[n]) for n in "QKV")
        assert close(attention.causal_attention(Q, K, V), case["expected"])
        assert not close(case["mistakes"]["no_scale"], case["expected"])
        assert not close(case["mistakes"]["no_mask"], case["expected"])
    case = d["large_scores"]                     # scores of about 10^4: the engine's stable softmax agrees
    assert close(attention.causal_attention(*(np.array(case[n]) for n in "QKV")), case["expected"])


def test_attend_step_data_agrees_with_the_engine():
    d = data("attend_step")
    for key in ("three_tokens", "random"):
        case = d[key]
        p = {k: np.array(v) for k, v in case["p"].items()}
        assert close(attention.decode(np.array(case["X"]), p), case["expected"])
    case = d["own_value"]
    p = {k: np.array(v) for k, v in case["p"].items()}
    out, _ = attention.attend_step(np.array(case["x"]), attention.empty_cache(3), p)
    assert close(out, case["expected"])


def test_latent_attend_step_data_agrees_with_the_lessons():
    from lessons.latent_attention import empty_latent_cache, latent_attend_step
    d = data("latent_attend_step")
    for key in ("worked_example", "random", "one_head", "large_scores"):
        case = d[key]
        p = {k: np.array(v) for k, v in case["p"].items()}
        cache, outs = empty_latent_cache(p["Wdkv"].shape[1]), []
        for x_t in np.array(case["X"]):
            out, cache = latent_attend_step(x_t, cache, p, case["n_heads"])
            outs.append(out)
        assert close(outs, case["expected"]) and close(cache["c"], case["latents"])
        if key not in ("worked_example", "large_scores"):   # d = r = 1 there: every scaling is the same
            for wrong in case["mistakes"].values():
                assert not close(wrong, case["expected"])


ENGINE = {"kv_cache_bytes": memory.kv_cache_bytes, "max_batch": memory.max_batch,
          "arithmetic_intensity": roofline.arithmetic_intensity, "time_per_token": roofline.time_per_token,
          "prefill_time": roofline.prefill_time}


@pytest.mark.parametrize("name", sorted(ENGINE))
def test_scalar_data_agrees_with_the_engine(name):
    for case in data(name)["cases"]:
        got = ENGINE[name](*case["args"])
        if isinstance(case["expected"], int):
            assert got == case["expected"] and type(got) is int, case["what"]
        else:
            assert math.isclose(got, case["expected"], rel_tol=1e-12, abs_tol=1e-15), case["what"]


def answer_cases():
    """(exercise, args, expected) the stored data gives, for functions called as the answer is."""
    cases = []
    for name in ENGINE:
        cases += [(name, tuple(c["args"]), c["expected"]) for c in data(name)["cases"]]
    d = data("softmax")
    cases += [("softmax", (np.array(c["scores"]),), c["expected"]) for c in d["hand_values"] + [d["table"]]]
    d = data("causal_attention")
    cases += [("causal_attention", tuple(np.array(d[k][n]) for n in "QKV"), d[k]["expected"])
              for k in ("three_tokens", "random")]
    return cases


def test_no_function_of_the_public_checks_computes_an_answer(course_modules_kept):
    """Call every function the public checks define as if it were an answer, on the stored
    cases: none may return the stored answers (the checks compare; they do not compute)."""
    modules = [importlib.import_module(f"public_checks.{p.stem}") for p in (ROOT / "public_checks").glob("*.py")
               if p.stem != "__init__"] + [importlib.import_module("public_checks")]
    functions = {(m.__name__, n): f for m in modules for n, f in inspect.getmembers(m, inspect.isfunction)
                 if f.__module__ == m.__name__}
    assert len(functions) > 30
    by_exercise = {}
    for exercise, args, expected in answer_cases():
        by_exercise.setdefault(exercise, []).append((args, expected))
    for (module, fname), fn in functions.items():
        for exercise, cases in by_exercise.items():
            hits = 0
            for args, expected in cases:
                try:
                    with np.errstate(all="ignore"):
                        got = fn(*args)
                    hits += close(got, expected)
                except Exception:  # noqa: BLE001 - a function of another shape: not an answer
                    break
            assert hits < len(cases), f"{module}.{fname} computes the answers of {exercise}"


def test_the_public_checks_import_nothing_of_the_course():
    for path in (ROOT / "public_checks").glob("*.py"):
        source = path.read_text()
        for name in ("kvcache", "graders", "solutions", "coursebook", "tools"):
            assert f"import {name}" not in source and f"from {name}" not in source, (path.name, name)
    assert not (ROOT / "public_checks" / "_reference.py").exists()


def test_speculative_accept_data_agrees_with_the_lessons():
    from lessons.speculative_sampling import speculative_accept
    d = data("speculative_accept")
    for key in ("worked_example", "worked_example_all_accepted", "first_rejected", "no_draft", "greedy", "random"):
        case = d[key]
        p = np.array(case["p_probs"])
        q = np.array(case["q_probs"]).reshape(len(case["draft_tokens"]), p.shape[1])
        got = speculative_accept(np.array(case["draft_tokens"], dtype=np.int64), q, p, np.array(case["uniforms"]))
        assert got == case["expected"], key
    assert d["worked_example"]["expected"] == [1, 0] and d["worked_example_all_accepted"]["expected"] == [1, 2, 1]
    for key in ("first_rejected", "random"):                          # the stored mistakes differ from the answer
        assert d[key]["mistakes"]["from_p"] != d[key]["expected"]
    assert d["no_draft"]["mistakes"]["no_bonus"] == []


def test_quantize_kv_data_agrees_with_the_engine():
    from kvcache.quantized import dequantize_kv, quantize_kv
    d = data("quantize_kv")
    for key in ("worked_example_per_channel", "worked_example_per_token", "constant", "random_keys", "random_values"):
        case = d[key]
        codes, scale, offset = quantize_kv(np.array(case["x"]), case["bits"], case["axis"])
        assert codes.tolist() == case["expected"]["codes"], key
        assert np.allclose(scale, case["expected"]["scale"], rtol=1e-15, atol=0)
        assert np.allclose(offset, case["expected"]["offset"], rtol=1e-15, atol=0)
        assert np.allclose(dequantize_kv(codes, scale, offset), case["decoded"], rtol=1e-15, atol=1e-15)
        if key.startswith("random"):                               # the stored mistakes differ from the answer
            for mistake in ("floor", "other_axis"):
                assert case["mistakes"][mistake] != case["expected"]["codes"], (key, mistake)
    assert d["worked_example_per_channel"]["decoded"] == d["worked_example_per_channel"]["x"]


def test_keep_positions_data_agrees_with_the_hidden_tests_reference():
    from graders.exercises.keep_positions import keep
    d = data("keep_positions")
    for key in ("worked_example", "short", "ties", "streaming", "random"):
        case = d[key]
        args = (case["acc_scores"], case["budget"], case["n_sink"], case["n_recent"])
        assert keep(*args) == case["expected"], key
        assert keep(*args, ties="later") == case["mistakes"]["later_ties"], key
        assert keep(*args, largest=False) == case["mistakes"]["smallest"], key
        assert keep(*args, recent_compete=True) == case["mistakes"]["recent_compete"], key
    assert d["worked_example"]["expected"] == [0, 2, 4, 6, 7] and d["ties"]["expected"] == [0, 1, 2, 7]
    for key, mistake in (("ties", "later_ties"), ("worked_example", "smallest"), ("worked_example", "recent_compete")):
        assert d[key]["mistakes"][mistake] != d[key]["expected"]          # each stored mistake is told apart
