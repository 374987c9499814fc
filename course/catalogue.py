"""The course's exercises: the one list of what is graded.

Each exercise has a name (its notebook is ``exercises/NAME.ipynb``), the chapter that teaches it,
a title, the functions (or the class) it grades, and its ``counterparts``: what in the course's own
packages implements (or quotes) the answer, so that no page prints it and the learner's copy ships
none of it.  A counterpart is ``"package.module:function"`` (``"module:Class.method"``), turned
into a starter in the learner's copy, or ``"package.module"`` (a module or a whole sub-package),
left out of it.

Everything that needs to know what is graded reads it here: the grader's registry, the
answer-leak scan, the learner's-copy builder, ``answers``, ``ga2.parts``, ``coursebook`` and the
site's exercises.  Adding an exercise is adding its line here and its hidden tests in
``graders/exercises/NAME.py``.
"""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Entry", "Counterpart", "EXERCISES", "names", "get", "graded_functions", "exercise_of",
           "counterparts", "protected_names", "UnknownExercise"]


@dataclass(frozen=True)
class Entry:
    """One exercise as the whole course knows it."""

    name: str
    chapter: int
    title: str
    functions: tuple[str, ...]
    counterparts: tuple[str, ...] = ()


EXERCISES: tuple[Entry, ...] = (
    Entry("causal_attention", 1, "Causal attention over a whole sequence (prefill)", ("causal_attention",)),
    Entry("softmax", 1, "A numerically stable softmax", ("softmax",)),
    Entry("attend_step", 2, "One decode step with a KV cache", ("attend_step",)),
    Entry("kv_cache_bytes", 3, "The size of the KV cache in bytes", ("kv_cache_bytes",)),
    Entry("max_batch", 3, "How many sequences fit beside the weights", ("max_batch",)),
    Entry("arithmetic_intensity", 4, "Arithmetic intensity of standard attention", ("arithmetic_intensity",)),
    Entry("prefill_time", 4, "Prefill time of a compute-bound prompt", ("prefill_time",)),
    Entry("time_per_token", 4, "Time per token of memory-bound decoding", ("time_per_token",)),
    Entry("batched_decode_step", 5, "One decode step for a batch of sequences of different lengths",
          ("batched_decode_step",)),
    Entry("BlockAllocator", 6, "A block allocator with reference counts", ("BlockAllocator",)),
    Entry("reorder_cache", 7, "Reorder a beam search's cache by parent beam", ("reorder_cache",)),
    Entry("blocked_decode", 8, "Blockwise decode over a fixed buffer with a runtime length", ("blocked_decode",)),
    Entry("requant", 9, "GA-2's requantizer, bit for bit", ("requant",),
          counterparts=("ga2.quant:requant", "ga2.rtl")),
    Entry("attention_tail", 10, "The attention tail as GA-2 instructions", ("attention_tail",),
          counterparts=("ga2.attn:attention_tail", "ga2.mutants")),
    Entry("mutants", 11, "Testing the tests of the program builder", ("predict_catches", "check_builder")),
    Entry("latent_attend_step", 12, "One decode step of latent attention, absorbed", ("latent_attend_step",)),
    Entry("quantize_kv", 13, "Quantize keys and values to b bits, and back", ("quantize_kv", "dequantize_kv")),
    Entry("keep_positions", 14, "The positions an eviction policy keeps", ("keep_positions",)),
    Entry("speculative_accept", 15, "The acceptance rule of speculative sampling", ("speculative_accept",)),
)


class UnknownExercise(KeyError):
    def __str__(self) -> str:
        return str(self.args[0])


def names() -> tuple[str, ...]:
    """Every exercise's name, in name order."""
    return tuple(sorted(entry.name for entry in EXERCISES))


_BY_NAME = {entry.name: entry for entry in EXERCISES}


def get(name: str) -> Entry:
    """The exercise ``name``; ``UnknownExercise`` names the ones there are."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise UnknownExercise(f"no exercise named {name!r}; the course has: {', '.join(names())}") from None


def graded_functions() -> frozenset[str]:
    """Every function (or class) name an exercise grades."""
    return frozenset(fn for entry in EXERCISES for fn in entry.functions)


def exercise_of(function: str) -> Entry | None:
    """The exercise that grades ``function``, or None."""
    return next((entry for entry in EXERCISES if function in entry.functions), None)


@dataclass(frozen=True)
class Counterpart:
    """What in the course's packages implements an exercise's answer.

    ``module`` is a dotted module name; ``qualname`` the function in it (``"requant"``,
    ``"Class.method"``), or "" when the whole module (or sub-package) is the counterpart.
    """

    exercise: str
    chapter: int
    module: str
    qualname: str = ""

    @property
    def name(self) -> str:
        """The function's own name (the last part of ``qualname``), "" for a module."""
        return self.qualname.rsplit(".", 1)[-1]

    @property
    def spec(self) -> str:
        return f"{self.module}:{self.qualname}" if self.qualname else self.module

    def covers_module(self, module: str) -> bool:
        """A module counterpart covers its module and everything below it."""
        return not self.qualname and (module == self.module or module.startswith(self.module + "."))

    @classmethod
    def parse(cls, spec: str, exercise: str, chapter: int) -> "Counterpart":
        module, _, qualname = spec.partition(":")
        parts = module.split(".") + (qualname.split(".") if qualname else [])
        if not module or not all(p.isidentifier() for p in parts) or spec.count(":") > 1 or spec.endswith(":"):
            raise ValueError(f"exercise {exercise}: counterpart {spec!r} is not 'package.module' "
                             "or 'package.module:function'")
        return cls(exercise, chapter, module, qualname)


def counterparts() -> tuple[Counterpart, ...]:
    """Every exercise's counterparts."""
    return tuple(Counterpart.parse(spec, entry.name, entry.chapter)
                 for entry in sorted(EXERCISES, key=lambda e: e.name) for spec in entry.counterparts)


def protected_names() -> frozenset[str]:
    """The graded functions and the engines' implementations of them (function counterparts):
    the names whose definitions must be starters wherever a learner reads them."""
    return graded_functions() | {c.name for c in counterparts() if c.qualname}
