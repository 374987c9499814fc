"""What the hidden tests of a one-step decode exercise share (``attend_step``, ``latent_attend_step``):
``FN(x_t, cache, p, ...) -> (out, new_cache)``, the cache a dict of arrays with one row per token
so far, decoded token by token from an empty cache.

An exercise describes itself once, in a ``DecodeStep`` (its function's name, its cache's keys, its
reference, its diagnosis of common mistakes); every check here takes that description as its first
input, bound in the row of the table like the call's inputs (``registry.case``), and is called
``check(step, args, results)``.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable

from ..checks import Fail, check_array, describe, unchanged, with_right_answer
from ..registry import Call, Ref, Test, case


@dataclass(frozen=True)
class DecodeStep:
    """One decode-step exercise as its checks see it.

    ``step(*args)`` is the reference's ``(out, {key: new array})`` of one call; ``rows(X, p, ...)``
    the outputs of decoding the tokens X one by one; ``empty_cache(p)`` the cache of no token for
    the parameters p; ``diagnose(*args, actual)`` names a common mistake ``actual`` matches."""

    fn: str
    keys: tuple[str, ...]
    step: Callable
    rows: Callable
    empty_cache: Callable
    diagnose: Callable


def unpack(ex: DecodeStep, value, what: str | None = None):
    """(out, new_cache) of a returned value, or a Fail that says what came back instead."""
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        raise Fail(f"{what or ex.fn} should return a pair (out, new_cache); it returned {describe(value)}")
    out, new_cache = value
    if not isinstance(new_cache, dict) or any(key not in new_cache for key in ex.keys):
        wanted = " and ".join(repr(key) for key in ex.keys)
        raise Fail(f"the new cache should be a dict with {wanted}; it is {describe(new_cache)}")
    return out, new_cache


def output(ex: DecodeStep, args, results, what="the output"):
    """The output of one step from ``args`` is the reference's."""
    out, _ = unpack(ex, results[0].value)
    check_array(out, ex.step(*args)[0], what, hint=functools.partial(ex.diagnose, *args))


def right_answer(ex: DecodeStep, args, results):
    """The output and every new cache array of one step are the reference's."""
    got, new = unpack(ex, results[0].value)
    out, arrays = ex.step(*args)
    check_array(got, out, "the output", hint=functools.partial(ex.diagnose, *args))
    for key in ex.keys:
        check_array(new[key], arrays[key], f"new_cache[{key!r}]")


def _with_right_answer(ex: DecodeStep, prop, args, results):
    """``prop`` (a check of a property: the inputs left as they were, the shapes) counting only
    together with the right answer on the same call: an answer that computes nothing leaves its
    inputs alone too."""
    return with_right_answer(functools.partial(prop, ex, args), functools.partial(right_answer, ex, args))(results)


def dict_unchanged(ex: DecodeStep, args, results):
    """The input cache dict keeps its keys and its arrays' shapes, then its arrays."""
    cache, after = args[1], results[0].args_after[1]
    unchanged({k: v.shape for k, v in cache.items()},
              {k: getattr(v, "shape", v) for k, v in after.items()} if isinstance(after, dict) else after,
              "the input cache")
    unchanged(cache, after, "the input cache")


def arrays_unchanged(ex: DecodeStep, args, results):
    """No input array is modified in place (even when the dict's entries were replaced)."""
    original = results[0].originals_after
    unchanged(args[1], original[1], "the input cache")
    unchanged(args[0], original[0], "x_t")
    unchanged(args[2], original[2], "the parameters p")


def decoded_rows(ex: DecodeStep, runs, expected_rows, results):
    """A test made of one or more decoding runs laid end to end (``runs``: (X, p, ...) in call
    order): each step's output must be the matching row of the reference's decoding."""
    k = 0
    for number, ((X, p, *rest), rows) in enumerate(zip(runs, expected_rows), start=1):
        label = f"sequence {number} of {len(runs)}, " if len(runs) > 1 else ""
        cache = ex.empty_cache(p)
        for t in range(X.shape[0]):
            where = f"{label}step {t + 1} of {X.shape[0]}"
            out, _ = unpack(ex, results[k].value, f"{where}: {ex.fn}")
            check_array(out, rows[t], f"{where}: the output",
                        hint=functools.partial(ex.diagnose, X[t], cache, p, *rest))
            cache = ex.step(X[t], cache, p, *rest)[1]
            k += 1


def _decode_calls(ex: DecodeStep, runs):
    """Token-by-token decoding, run after run: step t gets the cache that step t - 1 returned."""
    calls = []
    for X, p, *rest in runs:
        first = len(calls)
        calls.append(Call(ex.fn, (X[0], ex.empty_cache(p), p, *rest)))
        calls += [Call(ex.fn, (X[t], Ref(first + t - 1, (1,)), p, *rest)) for t in range(1, X.shape[0])]
    return calls


def decoding(ex: DecodeStep, name, points, runs) -> Test:
    """The test that decodes ``runs`` token by token, each from an empty cache."""
    return case(name, points, _decode_calls(ex, runs), decoded_rows, ex, runs, [ex.rows(*run) for run in runs])


def one_call(ex: DecodeStep, name, points, args, check, capture_args=False) -> Test:
    """The test of one call on ``args``, checked by ``check(ex, args, results)``."""
    return case(name, points, [Call(ex.fn, args, capture_args)], check, ex, args)


def also_right(ex: DecodeStep, name, points, args, prop, capture_args=False) -> Test:
    """The test of a property of one call, counting only together with the right answer."""
    return case(name, points, [Call(ex.fn, args, capture_args)], _with_right_answer, ex, prop, args)
