"""lessons.circuit_check: the sentence about GA-2's programs on the circuit, on made-up counts
both ways (a circuit run, none), and the comparison on a machine without a simulator."""
import pytest

from lessons.circuit_check import circuit_sentence, compare_on_the_circuit


def test_every_program_agreeing():
    assert circuit_sentence(10, 53_292, 53_292, 12.34, 10) == (
        "The circuit ran the 10 programs in 12.3 s (building included, on the machine that built this page), "
        "53,292 cycles in total. For every one of them its five counters equal the model's, and so does every "
        "word of EXT and SPAD it leaves: the model's cycle counts are the circuit's.")


def test_some_programs_disagreeing():
    said = circuit_sentence(10, 53_292, 53_300, 3.0, 7)
    assert "in 3.0 s" in said and "53,300 cycles in total" in said
    assert "For only 7 of 10 of them its five counters equal the model's" in said


def test_no_circuit_run():
    said = circuit_sentence(4, 1_234)
    assert said.startswith("No Icarus Verilog was installed on the machine that built this page")
    assert "1,234 cycles in total for the 4 programs" in said and "make system-deps" in said


def test_a_circuit_run_without_its_time_is_refused():
    with pytest.raises(ValueError):
        circuit_sentence(4, 100, 100)


def test_without_a_simulator_the_comparison_holds_the_models_runs(monkeypatch):
    from ga2 import rtl
    monkeypatch.setattr(rtl, "available", lambda: [])
    programs = rtl.attention_programs()[:2]
    check = compare_on_the_circuit(programs)
    assert check.runs is None and check.agreeing is None and len(check.models) == 2
    assert check.model_cycles == sum(m.counters.total for m in check.models) > 0
    assert check.sentence().startswith("No Icarus Verilog")
    shown = check.table()
    assert shown.caption == "the model's counters" and "same as the model" not in shown.header
