"""The parts of GA-2 that a learner builds, and how they go into the machine.

Two functions of the machine are exercises of the course::

    requant          ga2.quant   the requantizer every RQ instruction runs     exercise requant (chapter 9)
    attention_tail   ga2.attn    the attention tail of the decode step         exercise attention_tail (chapter 10)

In the learner's copy of the course (``make release``) both are starters that raise
``NotImplementedError``: the simulator refuses to run an RQ, and ``ga2.attn`` cannot build its
programs, until the learner's own functions are installed.  The chip you program then runs
the requantizer you wrote::

    import ga2
    ga2.install(requant=requant)            # a function of yours, in this kernel
    ga2.install_from("requant.ipynb")       # or the answer cell of your exercise notebook

``install`` puts the function wherever ga2 uses the part (every loaded ``ga2`` module that holds
it by name: ``ga2.quant.requant``, the machine's RQ, the integer reference of ``ga2.checks``),
through an adapter from the exercise's form to the machine's: the exercise's ``requant(acc, m,
s)`` has no ReLU flag, so the adapter applies RQ's ``relu`` after it, and gives it a copy of the
words (it cannot write into the scratchpad); a tail may be a list of instruction dicts, which
the adapter turns into ``Instr``.  ``uninstall()`` puts the machine's own parts back and
``missing()`` names the parts that are still starters.

(In the course's own checkout the machine's parts are complete; installing yours there swaps
them for yours, in that process only.)
"""
from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Callable, NamedTuple

import numpy as np

from .instructions import InstructionFormError, as_instr

if TYPE_CHECKING:       # json and pathlib are for install_from only, imported there: not at every import of ga2
    from pathlib import Path

__all__ = ["Part", "PARTS", "install", "install_from", "uninstall", "installed", "missing"]


# ---------------------------------------------------------------- adapters: the exercise's form -> the machine's
def _machine_requantizer(fn: Callable) -> Callable:
    """RQ's requantizer from the exercise's ``fn(acc, m, s)``: ReLU applied after it, a copy of
    the words given (int64), and a result of the input's shape (a list for a list)."""

    def requantizer(acc, m, s, relu=0):
        if np.ndim(acc) == 0:
            q = fn(int(acc), int(m), int(s))
            q = int(q)
            return max(0, q) if relu else q
        words = np.array(acc, dtype=np.int64)                    # a copy: the scratchpad stays the machine's
        q = np.asarray(fn(words, int(m), int(s)))
        if q.shape != words.shape or q.dtype.kind not in "iu":
            raise ValueError(f"the installed requant returned {q.dtype} values of shape {q.shape} for int "
                             f"words of shape {words.shape}: it must return an int array of the same shape")
        q = q.astype(np.int64)                                   # a copy too: the answer keeps its array
        if relu:
            np.maximum(q, 0, out=q)
        return q.tolist() if isinstance(acc, (list, tuple)) else q

    requantizer.installed = fn
    return requantizer


def _machine_tail(fn: Callable) -> Callable:
    """The tail builder from the exercise's ``fn(L, P)``: its instructions (dicts or ``Instr``) as
    ``Instr``, an instruction that cannot be formed named by its index."""

    def tail_builder(L, P):
        instructions = fn(L, P)
        if not isinstance(instructions, (list, tuple)):
            raise TypeError(f"the installed attention_tail({L}, P) returned a {type(instructions).__name__}, "
                            "not a list of instructions")
        built = []
        for index, item in enumerate(instructions):
            try:
                built.append(as_instr(item))
            except InstructionFormError as err:
                raise ValueError(f"the installed attention_tail({L}, P): instruction {index} of the tail: "
                                 f"{err}") from None
        return built

    tail_builder.installed = fn
    return tail_builder


_PROBE_PARAMS = {"q": (1 << 23, 24), "k": (1 << 23, 24), "v": (1 << 23, 24),
                 "scores": (1 << 23, 24), "weights": (16646144, 33), "out": (1 << 23, 24)}


class Part(NamedTuple):
    """A function of the machine that an exercise builds: where it lives, how the exercise's form
    becomes the machine's, and a call that tells a starter from an answer.  Which exercise builds
    it is the course's catalogue's (the exercise whose counterpart is ``module:name``).
    (Immutable, and a NamedTuple rather than a dataclass: four times cheaper to create at import.)"""

    name: str
    module: str
    adapt: Callable[[Callable], Callable]
    probe: tuple

    def current(self):
        return getattr(sys.modules[self.module], self.name)

    @property
    def exercise(self):
        """The catalogue's entry of the exercise that builds this part."""
        # Imported here: the grader's sandbox holds a copy of ga2 alone, which installs parts
        # and never asks which exercise builds them.
        from course import catalogue
        spec = f"{self.module}:{self.name}"
        return next(entry for entry in catalogue.EXERCISES if spec in entry.counterparts)


PARTS: dict[str, Part] = {
    "requant": Part("requant", "ga2.quant", _machine_requantizer, (0, 1 << 23, 24)),
    "attention_tail": Part("attention_tail", "ga2.attn", _machine_tail, (1, _PROBE_PARAMS)),
}

_ORIGINAL: dict[str, Callable] = {}      # the machine's own parts (starters in the learner's copy)


def _replace_everywhere(old, new) -> int:
    """Every attribute of every loaded ga2 module that is ``old`` becomes ``new``; how many."""
    count = 0
    for module_name, module in list(sys.modules.items()):
        if module is None or not (module_name == "ga2" or module_name.startswith("ga2.")):
            continue
        for attr, value in list(vars(module).items()):
            if value is old:
                setattr(module, attr, new)
                count += 1
    return count


def _part(name: str) -> Part:
    if name not in PARTS:
        raise ValueError(f"GA-2 has no part named {name!r}; the parts you can install: {', '.join(PARTS)}")
    import importlib
    importlib.import_module(PARTS[name].module)
    return PARTS[name]


def install(**functions: Callable) -> None:
    """Put your functions into the machine: ``install(requant=requant, attention_tail=tail)``.

    Each replaces the machine's part of that name wherever ga2 uses it, until ``uninstall()``.
    """
    for name, fn in functions.items():
        part = _part(name)
        if not callable(fn):
            raise TypeError(f"install({name}=...) takes a function, not a {type(fn).__name__}")
        current = part.current()
        _ORIGINAL.setdefault(name, current)
        _replace_everywhere(current, part.adapt(fn))


def uninstall(*names: str) -> None:
    """Put the machine's own parts back (all of them when no name is given)."""
    for name in names or tuple(_ORIGINAL):
        part = _part(name)
        if name in _ORIGINAL:
            _replace_everywhere(part.current(), _ORIGINAL.pop(name))


def installed() -> dict[str, Callable | None]:
    """{part: the function of yours it runs, or None for the machine's own}."""
    return {name: getattr(_part(name).current(), "installed", None) for name in PARTS}


def _is_starter(fn: Callable, probe: tuple) -> bool:
    """The part raises NotImplementedError when called.  Asked of the running function, not of
    its source (``course.notebooks.is_starter``): the grader's sandbox runs ga2 alone, with the
    grader's parts compiled (no source), and still asks which parts are missing."""
    try:
        fn(*probe)
    except NotImplementedError:
        return True
    except Exception:  # noqa: BLE001 - written, if perhaps wrong: not a starter
        return False
    return False


def missing() -> list[str]:
    """The parts that are still starters (raise NotImplementedError): the machine cannot use them."""
    return [name for name, part in PARTS.items() if _is_starter(_part(name).current(), part.probe)]


def install_from(notebook: str | Path, *names: str) -> list[str]:
    """Install the functions of an exercise notebook's answer cell (the cell tagged ``answer``).

    ``names`` default to the parts that notebook's exercise builds (``requant.ipynb``: requant).
    A function that is still the starter is not installed, and the machine keeps its own part;
    one line says what happened.  Returns the names installed.
    """
    import json
    from pathlib import Path

    from course.notebooks import answer_cells      # a learner's call: the sandbox's ga2 has no course

    path = Path(notebook)
    try:
        nb = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise FileNotFoundError(f"no notebook {path} (give the path of your exercise notebook, e.g. "
                                "'requant.ipynb' from the exercises folder)") from None
    exercise = (nb.get("metadata", {}).get("kvcourse", {}) or {}).get("exercise", path.stem)
    names = names or tuple(n for n, p in PARTS.items() if p.exercise.name == exercise)
    if not names:
        raise ValueError(f"{path.name} is the exercise {exercise!r}, which builds no part of GA-2 "
                         f"(the parts: {', '.join(f'{n} ({p.exercise.name}.ipynb)' for n, p in PARTS.items())})")
    namespace: dict = {"__name__": f"answer_of_{path.stem}"}
    for source in answer_cells(nb, every_code_cell_if_untagged=True):
        exec(compile(source, str(path), "exec"), namespace)  # noqa: S102 - the learner's own answer
    done = []
    for name in names:
        part = _part(name)
        fn = namespace.get(name)
        if not callable(fn):
            raise ValueError(f"the answer cell of {path.name} defines no function {name!r}")
        if _is_starter(fn, part.probe):
            own = "a starter too: it cannot run" if _is_starter(part.current(), part.probe) else "its own"
            print(f"{path.name}: {name} still raises NotImplementedError, so it is not installed; "
                  f"the machine keeps {own}. Finish the exercise {part.exercise.name} (chapter "
                  f"{part.exercise.chapter}) first.")
            continue
        install(**{name: fn})
        done.append(name)
        print(f"installed your {name} from {path.name}: the machine now runs it")
    return done
