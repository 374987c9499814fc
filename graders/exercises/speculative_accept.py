"""Hidden tests of ``speculative_accept(draft_tokens, q_probs, p_probs, uniforms)`` (chapter 15).

The acceptance rule of speculative sampling.  A draft proposed k tokens x_0 .. x_{k-1}, token i
drawn from q_probs[i]; the model's distributions at those positions and one more are p_probs
(k + 1 rows).  For i = 0 .. k-1, x_i is accepted while uniforms[i] < p_i(x_i) / q_i(x_i); at the
first rejection i the next token is drawn from r = max(0, p_i - q_i): the smallest j with
cumsum(r)[j] > uniforms[k] * sum(r).  When all k are accepted it is drawn from p_k by the same
rule.  The answer is the accepted prefix and that one token (1 to k + 1 tokens); the inputs are
left as they were.  Averaged over the draft (x_i drawn from q_i) and the uniforms, the first
token returned is distributed exactly as p_0.

The reference below walks the rule with Python floats, one token at a time; it shares no code
with the course's engine or its solution.  Random cases keep every uniform away from the
thresholds it is compared with (a relative margin of 1e-9), so that the ways of writing the
same comparison (``u < p / q`` or ``u * q < p``, a normalised ``r``) all give the same tokens.
"""
from __future__ import annotations

import functools

import numpy as np

from ..checks import Fail, describe, unchanged, with_right_answer
from ..registry import Call, Exercise, Test, case

FN = "speculative_accept"
MARGIN = 1e-9


# ------------------------------------------------------------------------------- reference


def _draw(weights, u):
    """The smallest j whose running sum of ``weights`` exceeds u * (their sum)."""
    total = 0.0
    for w in weights:
        total += w
    threshold, running = u * total, 0.0
    for j, w in enumerate(weights):
        running += w
        if running > threshold:
            return j
    return len(weights) - 1


def accept(draft, q, p, u, *, residual="clamped", which_u="k", bonus=True, keep_rejected=False,
           ratio="p/q", strict=True):
    """The tokens the rule returns.  The keyword arguments describe common mistakes (for the
    diagnosis): the replacement drawn from p itself or by argmax, with uniforms[i] or
    uniforms[i + 1], no token after an all-accepted draft, the rejected token kept, the ratio
    upside down, acceptance on u <= ratio."""
    k = len(draft)
    out = []
    for i in range(k):
        x = int(draft[i])
        pq = float(p[i][x]) / float(q[i][x]) if ratio == "p/q" else float(q[i][x]) / max(float(p[i][x]), 1e-300)
        if (float(u[i]) < pq) if strict else (float(u[i]) <= pq):
            out.append(x)
            continue
        if keep_rejected:
            out.append(x)
        if residual == "clamped":
            weights = [max(0.0, float(a) - float(b)) for a, b in zip(p[i], q[i])]
        else:                                                 # "p": the model's own distribution
            weights = [float(a) for a in p[i]]
        if residual == "argmax":
            weights = [max(0.0, float(a) - float(b)) for a, b in zip(p[i], q[i])]
            return out + [max(range(len(weights)), key=lambda j: weights[j])]
        v = {"k": u[k], "i": u[i], "i+1": u[i + 1]}[which_u]
        return out + [_draw(weights, float(v))]
    if not bonus:
        return out
    return out + [_draw([float(a) for a in p[k]], float(u[k]))]


def _margins(draft, q, p, u):
    """The smallest relative distance between a uniform and the threshold it meets (inf when
    none is met near), so that random cases can keep away from ties."""
    k, gaps = len(draft), []
    for i in range(k):
        x = int(draft[i])
        ratio = float(p[i][x]) / float(q[i][x])
        if ratio < 1:
            gaps.append(abs(float(u[i]) - ratio))
    for row in [np.maximum(0.0, p[i] - q[i]) for i in range(k)] + [p[k]]:
        if row.sum() > 0:
            c = np.cumsum(row) / row.sum()
            gaps.append(float(np.min(np.abs(c - float(u[k])))))
    return min(gaps, default=np.inf)


# ---------------------------------------------------------------------------- diagnosis

MISTAKES = {
    "it matches drawing the replacement token from p_probs[i] itself; after a rejection draw from "
    "max(0, p_probs[i] - q_probs[i]), which is what keeps the output distributed as p": {"residual": "p"},
    "it matches drawing the replacement with uniforms[i], the number that decided the rejection (it is "
    "no longer uniform once you know it rejected): use uniforms[k]": {"which_u": "i"},
    "it matches drawing the replacement with uniforms[i + 1]: use uniforms[k]": {"which_u": "i+1"},
    "it matches returning only the k accepted tokens when the whole draft is accepted: add one drawn "
    "from p_probs[k]": {"bonus": False},
    "it matches keeping the rejected draft token before its replacement": {"keep_rejected": True},
    "it matches taking the argmax of max(0, p - q) instead of drawing from it with uniforms[k]":
        {"residual": "argmax"},
    "it matches accepting when uniforms[i] <= p(x) / q(x): accept only when it is strictly below":
        {"strict": False},
    "it matches accepting when uniforms[i] < q(x) / p(x): the ratio is p(x) / q(x)": {"ratio": "q/p"},
}


def _diagnose(args, actual):
    for text, mistake in MISTAKES.items():
        try:
            if accept(*args, **mistake) == actual:
                return text
        except (IndexError, ZeroDivisionError):
            continue
    return None


# ------------------------------------------------------------------------------ checking


def tokens(value, what="the answer") -> list[int]:
    """The returned tokens as a list of ints: a list, tuple or 1-D integer array of whole numbers."""
    if isinstance(value, np.ndarray):
        if value.ndim != 1:
            raise Fail(f"{what} is {describe(value)}; expected a list of token ids")
        if value.dtype.kind not in "iuf":
            raise Fail(f"{what} has dtype {value.dtype}; expected token ids (whole numbers)")
        value = value.tolist()
    if not isinstance(value, (list, tuple)):
        raise Fail(f"{what} is {describe(value)}; expected a list of token ids")
    out = []
    for n, item in enumerate(value):
        if isinstance(item, (bool, np.bool_)) or not isinstance(item, (int, float, np.integer, np.floating)):
            raise Fail(f"item {n} of {what} is {describe(item)}; expected a token id (an int)")
        if isinstance(item, (float, np.floating)) and not float(item).is_integer():
            raise Fail(f"item {n} of {what} is {describe(item)} that is not a whole number; expected a token id")
        out.append(int(item))
    return out


def _expect(args, value, what="the output"):
    """The tokens of one call are the reference's, with the mistake named when one matches."""
    got, want = tokens(value, what), accept(*args)
    if got == want:
        return
    k = len(args[0])
    if not 1 <= len(got) <= k + 1:
        raise Fail(f"{what} has {len(got)} tokens; with k = {k} draft tokens it has from 1 to k + 1 = "
                   f"{k + 1}: the accepted prefix and one token more")
    hint = _diagnose(args, got)
    raise Fail(f"{what} should be {want}, got {got}" + (f"; {hint}" if hint else ""))


def _one(args, results):
    _expect(args, results[0].value)


def _many(cases, results):
    """Each call's tokens are the reference's (the first that differs is reported)."""
    for number, (args, result) in enumerate(zip(cases, results), start=1):
        _expect(args, result.value, f"case {number} of {len(cases)}")


def _untouched(args, results):
    names = ("draft_tokens", "q_probs", "p_probs", "uniforms")
    for name, before, after in zip(names, args, results[0].args_after):
        unchanged(before, after, name)


def _with_right_answer(prop, args, results):
    return with_right_answer(functools.partial(prop, args), functools.partial(_one, args))(results)


def _first_token_distribution(draft_weights, grid, p0, calls_args, results):
    """Over every draft token x (weighted by q_0(x)) and a grid of uniforms, the first token
    returned has exactly the distribution p_0."""
    freq = np.zeros(len(p0))
    for (args, weight), result in zip(calls_args, results):
        got = tokens(result.value)
        if not got:
            raise Fail("an answer returned no token; it returns at least one")
        if not 0 <= got[0] < len(p0):
            raise Fail(f"a first token {got[0]} is not a token id of a vocabulary of {len(p0)}")
        freq[got[0]] += weight / len(grid)
    if np.allclose(freq, p0, rtol=0, atol=1e-9):
        return
    rounded = [round(float(f), 4) for f in freq]
    hint = None
    for text, mistake in MISTAKES.items():
        guess = np.zeros(len(p0))
        for args, weight in calls_args:
            guess[accept(*args, **mistake)[0]] += weight / len(grid)
        if np.allclose(freq, guess, atol=1e-9):
            hint = text
            break
    raise Fail(f"over the draft token x drawn from q_probs[0] and {len(grid)} pairs (uniforms[0], uniforms[k]) "
               f"spread evenly over [0, 1)^2, the first token returned should be distributed as p_probs[0] = "
               f"{[float(v) for v in p0]}; it is distributed as {rounded}" + (f": {hint}" if hint else ""))


# ------------------------------------------------------------------------------ the inputs


def _dist(rng, V, spread=1.0):
    w = rng.gamma(spread, size=V)
    return w / w.sum()


def random_case(rng, k, V, *, agree=0.5, tries=200):
    """A draft of k tokens drawn from q, the model's p (closer to q when ``agree`` is larger),
    and uniforms, kept away from every threshold."""
    for _ in range(tries):
        q = np.array([_dist(rng, V) for _ in range(k)]).reshape(k, V)
        p = np.array([_dist(rng, V) for _ in range(k + 1)])
        p[:k] = agree * q + (1 - agree) * p[:k]
        draft = np.array([rng.choice(V, p=row) for row in q], dtype=np.int64)
        u = rng.random(k + 1)
        if _margins(draft, q, p, u) > MARGIN:
            return draft, q, p, u
    raise RuntimeError("no case away from the thresholds")


def _onehot(V, index):
    row = np.zeros(V)
    row[index] = 1.0
    return row


def greedy_case(rng, k, V):
    """Greedy verification: the draft's distributions and the model's are one-hot (the draft's
    tokens and the model's argmaxes); the answer must keep the tokens greedy would."""
    draft = rng.integers(0, V, size=k)
    agree = rng.integers(0, 3, size=k + 1) > 0
    model = np.where(agree[:k], draft, rng.integers(0, V, size=k))
    model = np.append(model, rng.integers(0, V))
    q = np.array([_onehot(V, t) for t in draft]).reshape(k, V)
    p = np.array([_onehot(V, t) for t in model])
    return draft.astype(np.int64), q, p, rng.random(k + 1)


# The statement's worked example: three tokens, a draft of two; the second is rejected.
WORKED_EXAMPLE = (np.array([1, 2]),
                  np.array([[0.2, 0.5, 0.3], [0.1, 0.2, 0.7]]),
                  np.array([[0.1, 0.6, 0.3], [0.3, 0.3, 0.4], [0.5, 0.25, 0.25]]),
                  np.array([0.9, 0.7, 0.5]))

# Cases built so that each branch of the rule decides, with exact binary fractions.
REJECT_FIRST = (np.array([0, 3]),
                np.array([[0.5, 0.25, 0.125, 0.125], [0.25, 0.25, 0.25, 0.25]]),
                np.array([[0.125, 0.25, 0.375, 0.25], [0.25, 0.25, 0.25, 0.25], [0.25, 0.25, 0.25, 0.25]]),
                np.array([0.5, 0.0, 0.7]))                        # 0.5 >= 1/4: rejected; r = (0, 0, 1/4, 1/8)
ALL_ACCEPTED = (np.array([2, 0, 1]),
                np.array([[0.25, 0.25, 0.5], [0.5, 0.25, 0.25], [0.25, 0.5, 0.25]]),
                np.array([[0.25, 0.25, 0.5], [0.75, 0.125, 0.125], [0.25, 0.25, 0.5], [0.125, 0.125, 0.75]]),
                np.array([0.99, 0.999, 0.49, 0.2]))               # ratios 1, 1.5, 0.5 > 0.49; p_3 drawn at 0.2
EQUAL_RATIO = (np.array([0, 0]),
               np.array([[0.5, 0.5], [0.5, 0.5]]),
               np.array([[0.25, 0.75], [0.5, 0.5], [0.5, 0.5]]),
               np.array([0.5, 0.1, 0.5]))                          # u = p/q = 1/2 exactly: rejected
EQUAL_RATIO_MIRRORED = (np.array([1, 1]), EQUAL_RATIO[1], EQUAL_RATIO[2][:, ::-1].copy(), EQUAL_RATIO[3])
EDGES_OF_THE_DRAW = (np.array([0]),
                     np.array([[0.75, 0.0, 0.25, 0.0]]),
                     np.array([[0.25, 0.0, 0.25, 0.5], [0.25, 0.25, 0.25, 0.25]]),
                     np.array([0.5, 0.0]))                         # r = (0, 0, 0, 1/2): u = 0 skips the zeros
ON_A_BOUNDARY = (np.array([0]),
                 np.array([[0.75, 0.0, 0.0, 0.25]]),
                 np.array([[0.25, 0.25, 0.25, 0.25], [0.25, 0.25, 0.25, 0.25]]),
                 np.array([0.5, 0.5]))                             # r = (0, 1/4, 1/4, 0): cumsum 1/4 = u sum: j = 2
PROB_ABOVE = (np.array([2, 2, 2]),
              np.array([[0.5, 0.25, 0.25], [0.125, 0.125, 0.75], [0.25, 0.25, 0.5]]),
              np.array([[0.25, 0.25, 0.5], [0.125, 0.125, 0.75], [0.0, 0.25, 0.75], [0.5, 0.5, 0.0]]),
              np.array([0.999999, 0.999999, 0.999999, 0.75]))  # p >= q at every draft token: all kept
NO_DRAFT = (np.zeros(0, dtype=np.int64), np.zeros((0, 4)), np.array([[0.125, 0.5, 0.125, 0.25]]),
            np.array([0.7]))                                       # k = 0: one token from p_0



def _with_uniforms(args, uniforms):
    """The same case with other uniforms."""
    return (*args[:3], np.array(uniforms))


# The distribution test: q_0 and p_0 in eighths, residual (0, 0, 1/4, 1/8); a 12 x 12 grid of
# midpoints gives each region a whole number of points, so the frequencies are exact.
Q0 = np.array([0.5, 0.25, 0.125, 0.125])
P0 = np.array([0.125, 0.25, 0.375, 0.25])
GRID = [((a + 0.5) / 12, (b + 0.5) / 12) for a in range(12) for b in range(12)]


def _distribution_calls():
    """For every draft token x and every grid point: draft (x, 3), uniforms (a, b, b)."""
    q = np.vstack([Q0, np.full(4, 0.25)])
    p = np.vstack([P0, [0.1, 0.2, 0.3, 0.4], [0.25, 0.25, 0.25, 0.25]])
    out = []
    for x in range(4):
        for a, b in GRID:
            out.append(((np.array([x, 3]), q, p, np.array([a, b, b])), float(Q0[x])))
    return out


def _random_cases(seed, sizes, agree=0.5):
    rng = np.random.default_rng(seed)
    return [random_case(rng, k, V, agree=agree) for k, V in sizes]


def one_call(name, points, args, check=_one, capture_args=False) -> Test:
    return case(name, points, [Call(FN, args, capture_args)], check, args)


def many_calls(name, points, cases) -> Test:
    return case(name, points, [Call(FN, args) for args in cases], _many, cases)


def also_right(name, points, args, prop) -> Test:
    return case(name, points, [Call(FN, args, True)], _with_right_answer, prop, args)


def distribution(name, points) -> Test:
    calls_args = _distribution_calls()
    return case(name, points, [Call(FN, args) for args, _ in calls_args], _first_token_distribution,
                Q0, GRID, P0, calls_args, timeout=20.0)


# --------------------------------------------------------------------------------- the tests


def make_tests() -> list[Test]:
    rng = np.random.default_rng(3101)
    return [
        many_calls("the worked example of the statement: the second token rejected, then the whole draft "
                   "accepted", 2, [WORKED_EXAMPLE, _with_uniforms(WORKED_EXAMPLE, [0.9, 0.5, 0.5])]),
        many_calls("the first draft token rejected: the token drawn from max(0, p - q) with uniforms[k]", 1,
                   [REJECT_FIRST, _with_uniforms(REJECT_FIRST, [0.5, 0.0, 0.2])]),
        one_call("all k draft tokens accepted: k + 1 tokens, the last drawn from p_probs[k]", 2, ALL_ACCEPTED),
        many_calls("k = 0, no draft: one token drawn from p_probs[0]", 1,
                   [NO_DRAFT, _with_uniforms(NO_DRAFT, [0.1])]),
        many_calls("a draft token is rejected when uniforms[i] equals p/q (accepted only strictly below)", 1,
                   [EQUAL_RATIO, EQUAL_RATIO_MIRRORED]),
        one_call("p(x) >= q(x) at every draft token: all accepted, whatever the uniforms", 1, PROB_ABOVE),
        many_calls("the draw: u = 0 skips tokens of probability 0, and a running sum equal to u sum(r) "
                   "is not past it", 1, [EDGES_OF_THE_DRAW, ON_A_BOUNDARY]),
        many_calls("one-hot distributions (greedy verification): the tokens greedy decoding keeps", 2,
                   [greedy_case(rng, k, V) for k, V in ((1, 5), (3, 7), (5, 4), (8, 20), (0, 6), (4, 3),
                                                        (6, 11), (2, 2), (10, 50), (7, 9))]),
        distribution("the first output token is distributed as p_probs[0] (over the draft token drawn from "
                     "q_probs[0] and 144 pairs of uniforms)", 3),
        also_right("the inputs are not modified", 1, random_case(np.random.default_rng(3102), 4, 6), _untouched),
        many_calls("twelve random cases (k from 1 to 9, a vocabulary of 2 to 40 tokens)", 3,
                   _random_cases(3103, [(1, 2), (2, 3), (3, 5), (4, 8), (5, 13), (6, 40), (7, 6), (8, 9),
                                        (9, 17), (3, 31), (5, 4), (2, 25)])),
        many_calls("draft and model in close agreement: long accepted prefixes (k = 8, 10, 12)", 1,
                   _random_cases(3104, [(8, 12), (10, 7), (12, 30)], agree=0.95)),
        many_calls("a vocabulary of 4,096 tokens (k = 5)", 1, _random_cases(3105, [(5, 4096), (3, 4096)])),
    ]


EXERCISE = Exercise(name="speculative_accept", make_tests=make_tests)
