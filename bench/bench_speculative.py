"""bench_speculative: prompt-lookup decoding against plain greedy, tokens/s at batch 1.

On the real model (SmolLM2-135M-Instruct, float32, one BLAS thread), for each prompt, best of
``ROUNDS`` rounds in which ``kvcache.generate.greedy`` and ``kvcache.speculative.greedy``
(drafts of ``DRAFT`` tokens) alternate, ``NEW`` new tokens at most:

* prompts whose reply copies from the prompt (code to repeat, a text to correct): goal at least
  1.5x greedy's tokens/s;
* open-ended prompts, whose reply the prompt does not hold: goal at least 0.95x (a draft that
  finds nothing costs nothing; a draft needs a match of 2 tokens or more, and a sequence whose
  draft was wholly rejected skips steps and then needs a match of 3: ``kvcache.speculative``).

The tokens are checked equal to greedy's in every round.  The machine is shared: the load
average is printed at the start and the end, and every figure belongs to that moment.
"""
from __future__ import annotations

import time

NAME = "smollm2-135m-instruct"
DRAFT = 10
NEW = 64
ROUNDS = 5                      # best of 5: on a shared machine one quiet round in 3 is too few

CODE = "def add(a, b):\n    return a + b\n\ndef mul(a, b):\n    return a * b\n"
COPYING = [
    # the model repeats this code verbatim (a longer function it rewrites rather than copies)
    "Repeat this code exactly, adding a docstring to each function:\n" + CODE,
    "Correct the spelling in this text and write it out in full: The quick brown fox jumpd over the lazy dog. "
    "The dog didnt move, and the fox ran of into the forrest, where it found a smal river and drank from it.",
]
OPEN_ENDED = [
    "Write a short story about a lighthouse keeper.",
    "Explain why the sky is blue to a ten-year-old.",
]


def _load() -> str:
    try:
        return " ".join(open("/proc/loadavg").read().split()[:3])
    except OSError:
        return "unknown"


def _timed(fn):
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def measure(model, ids, eos) -> dict:
    """Best tokens/s of plain and speculative greedy over alternating rounds, and the counts."""
    from kvcache import speculative
    from kvcache.generate import greedy

    best = {"greedy": 0.0, "speculative": 0.0}
    stats: dict = {}
    for _ in range(ROUNDS):
        plain, t_plain = _timed(lambda: greedy(model, [ids], NEW, eos))
        stats = {}
        fast, t_fast = _timed(lambda: speculative.greedy(model, [ids], NEW, eos, num_draft_tokens=DRAFT, stats=stats))
        if fast != plain:
            raise AssertionError("speculative decoding gave other tokens than greedy")
        n = len(plain[0])
        best["greedy"] = max(best["greedy"], n / t_plain)
        best["speculative"] = max(best["speculative"], n / t_fast)
    return {**best, **stats}


def main() -> int:
    from threadpoolctl import threadpool_limits

    from kvcache.models import load_with_tokenizer

    print(f"load average at the start: {_load()}")
    model, tokenizer = load_with_tokenizer(NAME)
    eos = model.config.eos_token_id
    print(f"{NAME}, float32, 1 BLAS thread, batch 1, up to {NEW} new tokens, drafts of up to {DRAFT} tokens, "
          f"best of {ROUNDS} alternating rounds")
    print(f"   {'prompt':<44} {'tokens':>6} {'greedy tok/s':>12} {'lookup tok/s':>12} {'ratio':>6} "
          f"{'accepted':>9} {'tok/pass':>8}")
    verdicts = []
    with threadpool_limits(limits=1, user_api="blas"):
        for kind, prompts, goal in (("copying", COPYING, 1.5), ("open-ended", OPEN_ENDED, 0.95)):
            ratios = []
            for text in prompts:
                r = measure(model, tokenizer.chat_ids(text), eos)
                ratio = r["speculative"] / r["greedy"]
                ratios.append(ratio)
                label = (text[:41] + "...") if len(text) > 44 else text
                print(f"   {label.replace(chr(10), ' '):<44} {r['tokens']:>6} {r['greedy']:>12.2f} "
                      f"{r['speculative']:>12.2f} {ratio:>5.2f}x {r['accepted']:>4}/{r['proposed']:<4} "
                      f"{r['tokens'] / r['forward_passes']:>8.2f}")
            worst = min(ratios)
            verdicts.append(worst >= goal)
            print(f"   {kind}: lowest ratio {worst:.2f}x   (goal >= {goal}x: {'met' if worst >= goal else 'not met'})")
    print(f"load average at the end: {_load()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
