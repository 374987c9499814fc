"""Your answers in the course's engines: what makes the chapters of a learner's copy run on them.

In the learner's copy of a class (``make release``) every function or class an exercise grades
is a starter wherever the engines define it (``kvcache``, ``ga2``...): its signature, which
exercise builds it, and ``raise NotImplementedError``.  A chapter that calls one runs on yours
once it is installed, and says so in one sentence until then::

    import answers
    answers.install_all()                  # every exercise notebook of exercises/ you have written
    answers.install_from("softmax.ipynb")  # or one of them
    answers.missing(["softmax", "attend_step"])   # the ones still starters

``install_from`` runs the answer cell of an exercise notebook (the cell tagged ``answer``) and,
for each function or class it defines that is not itself a starter, puts it in the place of
every starter of that name in the loaded modules of the course's packages (every module is
loaded first, so that a module that imported the starter by name gets yours too).  GA-2's parts
go through ``ga2.install_from``, which adapts them to the machine.  An engine function whose form
differs from the exercise's gets an adapter:

    extra parameters with defaults   yours is called when they are at their defaults
                                     (``softmax(scores, axis=-1)`` from ``softmax(scores)``)
    gqa.causal_attention(q, k, v)    q (T, H, d), k, v (T, G, d): yours, (T, d) for one head, on
                                     each query head h and its key/value head h // (H / G)

In the course's own checkout the engines are complete: installing yours there replaces them in
that process only.
"""
from __future__ import annotations

import importlib
import importlib.util
import inspect
import json
import pkgutil
import sys
from pathlib import Path
from typing import Callable

import numpy as np

from course import catalogue
from course.notebooks import is_starter_object

from .saved import answer_source, defined_names, exercises_folder

__all__ = ["install_from", "install_all", "installed", "missing", "exercises_folder", "say_what_runs", "rebind"]

HERE = Path(__file__).resolve().parent
#: The copy's (or the checkout's) top folder: the packages beside this one are the course's.
ROOT = HERE.parent
#: Packages that are not engines: nothing of theirs is replaced.
NOT_ENGINES = {"answers", "public_checks", "graders", "course", "coursetools", "tests", "solutions", "bench", "tools"}

_INSTALLED: dict[str, str] = {}          # name -> the notebook it came from


# ------------------------------------------------------------------------------ starters


def is_starter(obj) -> bool:
    """An engine's function or class that is still a starter (read from its source file)."""
    return is_starter_object(obj)


# ------------------------------------------------------------------------------ the engines


def _engine_packages() -> list[str]:
    return sorted(p.name for p in ROOT.iterdir() if (p / "__init__.py").is_file() and p.name not in NOT_ENGINES)


def _load_engines() -> list:
    """Every module of the course's engine packages, imported (programs, ``__main__``, and a
    module that cannot be imported here are skipped)."""
    modules = []
    for package in _engine_packages():
        try:
            top = importlib.import_module(package)
        except Exception:  # noqa: BLE001 - a package that cannot load here has nothing to replace
            continue
        modules.append(top)
        for info in pkgutil.walk_packages(top.__path__, f"{package}."):
            if info.name.rsplit(".", 1)[-1] == "__main__":
                continue
            try:
                modules.append(importlib.import_module(info.name))
            except Exception:  # noqa: BLE001 - an optional part (a circuit simulator...) may not load
                continue
    return modules


def _places(name: str) -> list[tuple[object, str, object]]:
    """(module, attribute, starter) for every attribute ``name`` of an engine module that holds a
    starter (the module that defines it and every module that imported it)."""
    found = []
    for module in _load_engines():
        value = vars(module).get(name)
        if value is not None and (inspect.isfunction(value) or inspect.isclass(value)) and is_starter(value):
            found.append((module, name, value))
    return found


# ------------------------------------------------------------------------------ adapters


def _parameters(fn) -> list[inspect.Parameter]:
    try:
        return list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return []


def _per_head(fn: Callable) -> Callable:
    """gqa's causal_attention(q (T, H, d), k, v (T, G, d)) from yours for one head, (T, d)."""

    def per_head(q, k, v):
        T, H, d = q.shape
        G = k.shape[1]
        out = np.empty(q.shape, dtype=np.result_type(q.dtype, np.float32))
        for h in range(H):
            g = h // (H // G)
            out[:, h] = fn(np.ascontiguousarray(q[:, h]), np.ascontiguousarray(k[:, g]),
                           np.ascontiguousarray(v[:, g]))
        return out

    return per_head


def _engine_allocator(cls: type) -> type:
    """The paged cache's allocator from your class of the exercise: the engine reads counts as
    properties (``num_free``, ``num_used``, ``num_shared``), hands blocks out in groups, tells its
    prefix cache when a block is handed out again (``on_evict``); all of it from your
    ``allocate``, ``fork``, ``free``, ``refcount`` and ``num_free``.  Taking a freed block back
    with its contents (``revive``, the prefix cache's) is not part of the exercise: it says so.
    Your ``OutOfBlocks`` (the exercise defines its own) becomes the engine's, which the engine and
    the chapters catch."""

    class EngineAllocator:
        def __init__(self, num_blocks: int, on_evict=None):
            self.mine = cls(num_blocks)
            self.num_blocks = int(num_blocks)
            self.on_evict = on_evict

        @property
        def num_free(self) -> int:
            count = self.mine.num_free
            return int(count() if callable(count) else count)

        @property
        def num_used(self) -> int:
            return self.num_blocks - self.num_free

        @property
        def _refs(self) -> list[int]:
            return [int(self.mine.refcount(b)) for b in range(self.num_blocks)]

        @property
        def num_shared(self) -> int:
            return sum(n > 1 for n in self._refs)

        def refcount(self, block) -> int:
            return int(self.mine.refcount(block))

        def is_free(self, block) -> bool:
            return self.refcount(block) == 0

        def allocate(self) -> int:
            try:
                block = int(self.mine.allocate())
            except Exception as err:
                if type(err).__name__ != "OutOfBlocks":
                    raise
                from kvcache.paged import OutOfBlocks     # the engine's, which its callers catch
                raise OutOfBlocks(1, 0, "allocate") from err
            if self.on_evict is not None:
                self.on_evict(block)
            return block

        def allocate_many(self, n: int) -> list[int]:
            if n > self.num_free:
                from kvcache.paged import OutOfBlocks
                raise OutOfBlocks(n, self.num_free, "allocate_many")
            return [self.allocate() for _ in range(n)]

        def fork(self, block) -> int:
            return int(self.mine.fork(block))

        def free(self, block) -> None:
            self.mine.free(block)

        def free_blocks(self) -> list[int]:
            return [b for b in range(self.num_blocks) if self.refcount(b) == 0]

        def revive(self, block) -> int:
            raise NotImplementedError("the engine's prefix cache takes freed blocks back (revive), which "
                                      "the BlockAllocator exercise does not ask for: run this cell with the "
                                      "prefix cache off")

        def check(self) -> None:
            refs = self._refs
            assert all(n >= 0 for n in refs), "a negative reference count"
            assert self.num_free == sum(n == 0 for n in refs), "num_free is not the count of free blocks"

    EngineAllocator.__qualname__ = EngineAllocator.__name__ = f"EngineAllocator({cls.__name__})"
    return EngineAllocator


#: Engine functions whose form is not the exercise's, by the last name of the module that defines
#: the starter and its name.
ADAPTERS: dict[tuple[str, str], Callable[[Callable], Callable]] = {("gqa", "causal_attention"): _per_head,
                                                                  ("paged", "BlockAllocator"): _engine_allocator}


def _defaults_only(fn: Callable, starter: Callable) -> Callable | None:
    """Yours in the place of an engine function that takes the same parameters and more, each
    with a default: called with the ones it knows while the others are at their defaults."""
    mine, theirs = _parameters(fn), _parameters(starter)
    if [p.name for p in mine] == [p.name for p in theirs]:
        return fn
    if [p.name for p in theirs[:len(mine)]] != [p.name for p in mine]:
        return None
    extra = theirs[len(mine):]
    if any(p.default is inspect.Parameter.empty for p in extra):
        return None

    def adapted(*args, **kwargs):
        for k, p in enumerate(extra, start=len(mine)):
            value = args[k] if k < len(args) else kwargs.get(p.name, p.default)
            if not (value is p.default or (isinstance(value, int) and value == p.default)):
                raise NotImplementedError(f"your {fn.__name__} is the exercise's form; the engine called it "
                                          f"with {p.name}={value!r}")
        return fn(*args[:len(mine)], **{k: v for k, v in kwargs.items() if k not in {p.name for p in extra}})

    adapted.__name__ = fn.__name__
    return adapted


def _adapt(fn, module, starter):
    """Yours, in the form the engine calls at that place (None when it cannot be)."""
    key = (starter.__module__.rsplit(".", 1)[-1], starter.__name__)
    if key in ADAPTERS:
        return ADAPTERS[key](fn)
    if inspect.isclass(starter):
        return fn if inspect.isclass(fn) else None
    return _defaults_only(fn, starter) if callable(fn) else None


# ------------------------------------------------------------------------------ installing


def _ga2_parts(exercise: str) -> bool:
    """The exercise builds a part of GA-2 (which ``ga2.install_from`` puts into the machine), and
    this copy has the machine."""
    builds = any(c.exercise == exercise and c.qualname and c.module.split(".")[0] == "ga2"
                 for c in catalogue.counterparts())
    return builds and importlib.util.find_spec("ga2") is not None


def install_from(notebook: str | Path, quiet: bool = False) -> list[str]:
    """Install what the answer cell of an exercise notebook defines, where the engines have a
    starter of that name; returns the names installed (one line each, unless ``quiet``)."""
    path = Path(notebook)
    if not path.is_absolute() and not path.exists():
        path = exercises_folder() / path
    try:
        nb = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise FileNotFoundError(f"no notebook {notebook} (give an exercise notebook, e.g. 'softmax.ipynb' "
                                f"from {exercises_folder()})") from None
    exercise = (nb.get("metadata", {}).get("kvcourse", {}) or {}).get("exercise", path.stem)
    if _ga2_parts(exercise):
        import ga2
        done = ga2.install_from(path)
        _INSTALLED.update({name: path.name for name in done})
        return done
    source = answer_source(nb)
    wanted = [name for name, starter in defined_names(source).items() if not starter and _places(name)]
    if not wanted:
        return []
    namespace: dict = {"__name__": f"answer_of_{path.stem}"}
    exec(compile(source, str(path), "exec"), namespace)  # noqa: S102 - the learner's own answer
    done = []
    for name in wanted:
        fn = namespace.get(name)
        made: dict[int, object] = {}          # one adapted object per starter, whatever the places
        places = [(module, attr, made.setdefault(id(starter), _adapt(fn, module, starter)))
                  for module, attr, starter in _places(name)]
        for module, attr, adapted in places:
            if adapted is not None:
                setattr(module, attr, adapted)
        if any(adapted is not None for _, _, adapted in places):
            done.append(name)
            _INSTALLED[name] = path.name
            if not quiet:
                print(f"installed your {name} from {path.name}")
    return done


def install_all(folder: str | Path | None = None, quiet: bool = True) -> list[str]:
    """Install every answer written so far in the exercise notebooks of ``folder`` (this copy's
    ``exercises/``); the names installed."""
    done = []
    for path in sorted(Path(folder or exercises_folder()).glob("*.ipynb")):
        try:
            defined = defined_names(answer_source(json.loads(path.read_text(encoding="utf-8"))))
        except (OSError, ValueError):
            defined = {}
        if defined and all(defined.values()):       # not written yet: nothing to install, nothing to say
            continue
        try:
            done += install_from(path, quiet=quiet)
        except Exception as err:  # noqa: BLE001 - one broken answer does not stop the others
            print(f"{path.name}: your answer could not be installed ({type(err).__name__}: {err})")
    return done


def installed() -> dict[str, str]:
    """{name: the notebook it was installed from}."""
    return dict(_INSTALLED)


def missing(names) -> list[str]:
    """The names among ``names`` that some engine module still holds as a starter."""
    return [name for name in names if _places(name)]


def rebind(namespace: dict) -> list[str]:
    """Names of ``namespace`` (a notebook's globals) that hold a starter the engine has replaced
    since they were imported get the replacement; the names rebound."""
    rebound = []
    for key, value in list(namespace.items()):
        if not (inspect.isfunction(value) or inspect.isclass(value)) or key.startswith("_"):
            continue
        module = sys.modules.get(getattr(value, "__module__", "") or "")
        current = getattr(module, getattr(value, "__name__", ""), value) if module else value
        if current is not value and is_starter(value):
            namespace[key] = current
            rebound.append(key)
    return rebound


def say_what_runs(names: dict[str, str], namespace: dict | None = None) -> list[str]:
    """Install every answer written so far and say, in one paragraph, what a chapter that calls
    ``names`` ({function: its exercise}) runs on: each exercise written or not, saved when, passing
    its public checks or not (``answers.chapter``); the names still starters.  ``namespace`` (the
    notebook's ``globals()``) gets the installed ones in place of starters it imported before, and
    the cells run after this one stop in one line, not a traceback, on an answer not written yet."""
    from . import chapter
    install_all()
    if namespace is not None:
        rebind(namespace)
    left = missing(list(names))
    if names:
        chapter.introduce(names)
        chapter.guard_cells(names)
    return left


def _join(items: list[str]) -> str:
    items = list(items)
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]
