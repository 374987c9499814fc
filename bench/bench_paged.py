"""bench_paged: the paged KV cache against the contiguous one, measured in one run.

``python -m bench paged`` (or ``make bench``), on a random Llama model of 4 layers, width 256, 8
query heads over 4 key/value heads, a 32,000-token vocabulary (bench_engine's), float32:

1. a decode step, paged against contiguous, at batch 1, 8 and 32 after 512 tokens and at batch
   8 after 2,048 (goal: paged within 1.5x of contiguous); each layout prefills once, then the
   two alternate, best of 5 rounds of 16 steps from the prompts (the cache cropped back);
2. one layer's decode attention alone: the paged cache's gather (one ``np.take`` per step and
   the engine's ``decode_attention``), chapter 8's paged walk (``kvcache.kernel.paged_decode``,
   block by block, no copy) and the contiguous cache, on the same keys: why the cache gathers;
3. KV memory wasted on a workload of 512 requests with the prompt and output lengths of the
   PagedAttention paper's ShareGPT traces (means 161 and 338 tokens), one pool of 2,048 blocks
   of 16, each sequence preallocated to L_max = 2,048, to its own length, or paged (goal: paged
   under 4%, where preallocation wastes 60-80%).  The allocator and the scheduler run for real;
   the forward pass is the bookkeeping stand-in (what is allocated depends on the lengths only);
4. sequences in flight and tokens/s, with the model, on 32 requests of that kind (answers
   averaging 160 tokens), in the same memory (room for 4 sequences of 2,048 positions),
   preallocated against paged;
5. prefix sharing: 32 requests that share a 512-token system prompt, arriving a few steps apart:
   hit rate, prefill tokens saved, and the time of the run with and without sharing.

The machine is shared: every figure depends on its load, printed at the start and the end.
Nothing here is asserted; the engine's tests check that the layouts compute the same thing.
"""
from __future__ import annotations

import os
import time

import numpy as np

CONFIG = dict(vocab_size=32000, hidden_size=256, intermediate_size=688, num_hidden_layers=4,
              num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=4096,
              rms_norm_eps=1e-6, rope_theta=10000.0, tie_word_embeddings=False)
ROUNDS = 5
STEPS = 16


def _load() -> str:
    try:
        return " ".join(open("/proc/loadavg").read().split()[:3])
    except OSError:
        return "unknown"


def _decode_steps(model, cache, tokens, context: int) -> float:
    """Fastest of STEPS decode steps from ``context`` positions (the cache is cropped back to
    the prompt first, so every round decodes the same steps)."""
    cache.crop(context)
    best = float("inf")
    for _ in range(STEPS):
        start = time.perf_counter()
        logits = model.decode(tokens, cache)
        best = min(best, time.perf_counter() - start)
        tokens = np.argmax(logits, axis=-1)
    return best


def decode_steps(model) -> None:
    print(f"\n1. a decode step, paged (blocks of 16) against contiguous: best of {ROUNDS} alternating "
          f"rounds of {STEPS} steps from the same prompts")
    print(f"   {'batch':>5} {'context':>7} {'contiguous ms':>14} {'paged ms':>9} {'paged/contiguous':>17}")
    for batch, context in ((1, 512), (8, 512), (32, 512), (8, 2048)):
        rng = np.random.default_rng(batch * 10000 + context)
        prompts = [rng.integers(0, model.config.vocab_size, context) for _ in range(batch)]
        runs = {}
        for kind in ("contiguous", "paged"):
            cache = model.new_cache(batch, context + STEPS, kind=kind)
            runs[kind] = (cache, np.argmax(model.prefill(prompts, cache), axis=-1))
        best = {kind: float("inf") for kind in runs}
        for _ in range(ROUNDS):
            for kind, (cache, tokens) in runs.items():
                best[kind] = min(best[kind], _decode_steps(model, cache, tokens, context))
        ratio = best["paged"] / best["contiguous"]
        print(f"   {batch:>5} {context:>7} {1e3 * best['contiguous']:>14.2f} {1e3 * best['paged']:>9.2f} "
              f"{ratio:>16.2f}x   (goal <= 1.5x: {'met' if ratio <= 1.5 else 'not met'})")


def attention_alone() -> None:
    from kvcache.cache import ContiguousLayerCache
    from kvcache.kernel import paged_decode
    from kvcache.paged import PagedKVCache
    B, G, d, H, T = 8, 4, 32, 8, 512
    rng = np.random.default_rng(1)
    k = rng.standard_normal((B * T, G, d), dtype=np.float32)
    counts = np.full(B, T)
    paged = PagedKVCache(1, B, G, d, T + 1, dtype="float32", compute_dtype=np.float32)
    paged[0].update(k, k, paged.reserve(counts))
    contiguous = ContiguousLayerCache(B, G, d, T + 1, dtype="float32", compute_dtype=np.float32)
    contiguous.update(k, k, contiguous.reserve(counts))
    ones = np.ones(B, np.int64)
    q = rng.standard_normal((B, H, d), dtype=np.float32)
    new = rng.standard_normal((B, G, d), dtype=np.float32)
    paged_step, contiguous_step = paged.reserve(ones), contiguous.reserve(ones)    # the decode step's plans
    paged[0].update(new, new, paged_step)
    contiguous.update(new, new, contiguous_step)
    layer = paged[0]
    tables = [paged.block_table(b) for b in range(B)]
    lengths = [int(n) for n in paged.lengths]

    def walk():
        return np.stack([paged_decode(q[b], layer.k_pool, layer.v_pool, tables[b], lengths[b])[0]
                         for b in range(B)])

    candidates = {"contiguous cache": lambda: contiguous.attend(q, contiguous_step),
                  "paged cache (gather)": lambda: layer.attend(q, paged_step),
                  "paged walk (kvcache.kernel)": walk}
    best = {name: float("inf") for name in candidates}
    for _ in range(ROUNDS):
        for name, fn in candidates.items():
            for _ in range(4):
                start = time.perf_counter()
                fn()
                best[name] = min(best[name], time.perf_counter() - start)
    gap = float(np.max(np.abs(walk() - layer.attend(q, paged_step))))
    print(f"\n2. one layer's decode attention, {B} sequences of {T + 1} positions, {H} query heads over {G} "
          f"kv heads of {d}: best of {ROUNDS * 4}")
    for name, seconds in best.items():
        print(f"   {name:<28} {1e3 * seconds:8.3f} ms   ({seconds / best['contiguous cache']:.2f}x contiguous)")
    print(f"   the gather and the walk agree to {gap:.1e} (float32)")


def memory_waste() -> None:
    from kvcache.serving import BookkeepingModel, sample_requests, serve
    requests = sample_requests(512, seed=11, vocab_size=CONFIG["vocab_size"], max_len=2048)
    prompts = np.array([len(r.prompt) for r in requests])
    outputs = np.array([r.max_new_tokens for r in requests])
    print(f"\n3. KV memory wasted: {len(requests)} requests, prompts mean {prompts.mean():.0f} (median "
          f"{np.median(prompts):.0f}), outputs mean {outputs.mean():.0f} (median {np.median(outputs):.0f}); "
          "a pool of 2,048 blocks of 16, at most 64 sequences per step")
    stand_in = BookkeepingModel(CONFIG)
    for policy, what in (("max_len", "preallocated to L_max = 2,048"), ("request", "its own prompt + output"),
                         ("blocks", "paged")):
        start = time.perf_counter()
        r = serve(stand_in, requests, block_size=16, num_blocks=2048, max_len=2048, reserve=policy,
                  max_running=64)
        print(f"   {what:<32} wasted {r.kv_waste:6.1%}   sequences per step {r.mean_running:5.1f}   "
              f"steps {len(r.steps):6,}   preemptions {r.preemptions:4}   ({time.perf_counter() - start:.1f} s)")
    print("   goal: paged under 4% (the PagedAttention paper: 60-80% wasted before paging, under 4% with it)")


def in_flight(model) -> None:
    from kvcache.serving import sample_requests, serve
    requests = sample_requests(32, seed=12, vocab_size=CONFIG["vocab_size"], max_len=2048, output_mean=160)
    pool = 4 * 2048 // 16
    print(f"\n4. the same memory ({pool} blocks of 16: 4 sequences of 2,048 positions), the model, "
          f"{len(requests)} requests (answers averaging 160 tokens, to keep the run short)")
    runs = {}
    for policy in ("max_len", "blocks"):
        start = time.perf_counter()
        runs[policy] = serve(model, requests, block_size=16, num_blocks=pool, max_len=2048, reserve=policy)
        r = runs[policy]
        print(f"   {policy:<8} sequences per step {r.mean_running:5.1f} (peak {r.peak_running:3})   steps "
              f"{len(r.steps):5,}   tokens/s {r.tokens_per_second:8,.0f}   preemptions {r.preemptions:3}   "
              f"({time.perf_counter() - start:.1f} s)")
    same = runs["max_len"].outputs == runs["blocks"].outputs
    print(f"   paged/preallocated: {runs['blocks'].mean_running / runs['max_len'].mean_running:.1f}x the sequences "
          f"in flight, {runs['blocks'].tokens_per_second / runs['max_len'].tokens_per_second:.2f}x the tokens/s; "
          f"the same tokens: {same}")


def prefix_sharing(model) -> None:
    from kvcache.serving import sample_requests, serve
    requests = sample_requests(32, seed=13, vocab_size=CONFIG["vocab_size"], max_len=2048, system_prompt=512,
                               prompt_mean=80, output_mean=32, arrival_gap=3)
    print(f"\n5. prefix sharing: {len(requests)} requests sharing a 512-token system prompt, arriving about 3 "
          "steps apart")
    runs = {}
    for sharing in (False, True):
        start = time.perf_counter()
        runs[sharing] = serve(model, requests, block_size=16, prefix_sharing=sharing)
        runs[sharing].wall = time.perf_counter() - start
    plain, shared = runs[False], runs[True]
    print(f"   hit rate {shared.prefix.hit_rate:.1%} of prompt tokens; prefill tokens {plain.prefill_tokens:,} -> "
          f"{shared.prefill_tokens:,} ({shared.prefill_saved:,} saved, "
          f"{shared.prefill_saved / plain.prefill_tokens:.0%})")
    print(f"   the run took {plain.wall:.2f} s without sharing, {shared.wall:.2f} s with "
          f"({plain.wall / shared.wall:.2f}x); the same tokens: {plain.outputs == shared.outputs}")


def main() -> int:
    from threadpoolctl import threadpool_info

    from kvcache.model import Model
    threads = sum(p.get("num_threads", 0) for p in threadpool_info() if p.get("user_api") == "blas")
    print(f"load at start: {_load()} (cores: {os.cpu_count()}, BLAS threads: {threads or 'unknown'})")
    model = Model.random(CONFIG, seed=0, dtype=np.float32)
    decode_steps(model)
    attention_alone()
    memory_waste()
    in_flight(model)
    prefix_sharing(model)
    print(f"\nload at end: {_load()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
