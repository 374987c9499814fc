"""bench_engine: the numpy engine's speed, its cache's cost, and transformers on the same model.

Measured in one run (``python -m bench engine``, or ``make bench``), on a random Llama model of
4 layers, width 256, 8 query heads over 4 key/value heads, a 32,000-token vocabulary (Llama 2's),
float32, written once as a safetensors checkpoint that both sides load:

1. decode tokens/s with the KV cache against recomputing every token from scratch, after
   128, 512 and 2,048 tokens of context, with the ratio predicted by counting FLOPs
   (``kvcache.cost``);
2. the same model and batch in transformers (torch, CPU, its own cache, ``torch.inference_mode``)
   against this engine: decode tokens/s at batch 1 and 8 after a 512-token prompt, the same
   number of threads on both sides, one per core and then one (goal: the engine >= 3x
   transformers at batch 1, >= 1x at batch 8).  transformers runs in a worker process, so the
   two thread pools never compete; the sides alternate, best of 5 rounds each.  generate()'s
   own rate is printed too;
3. decode attention's achieved bandwidth (K and V bytes read per second) on a cache of about
   1 GiB, against the machine's copy bandwidth (``lessons.bandwidth.copy_bandwidth``, read +
   write) on as many bytes (goal: >= 75%), for plain multi-head and grouped heads;
4. the cache's storage formats: bytes, decode speed, and the error each costs in the logits;
5. ragged against padded prefill of prompts of different lengths: tokens computed and time;
6. EOS mid-batch: the decode step's time as finished sequences leave the batch;
7. beam search: what expanding and reordering the cache copies.

The machine is shared: every figure depends on the load, printed at the start and the end.
Nothing here is asserted: the numbers belong to the machine and the moment that ran them.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "_build" / "bench" / "engine"
CONFIG = dict(vocab_size=32000, hidden_size=256, intermediate_size=688, num_hidden_layers=4,
              num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=4096,
              rms_norm_eps=1e-6, rope_theta=10000.0, tie_word_embeddings=False,
              model_type="llama", architectures=["LlamaForCausalLM"])
PROMPT = 512          # tokens of context for the transformers comparison
NEW = 32              # decode steps timed
ROUNDS = 5


def _load() -> str:
    try:
        return " ".join(open("/proc/loadavg").read().split()[:3])
    except OSError:
        return "unknown"


def _blas_threads() -> int | None:
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return None
    counts = [p["num_threads"] for p in threadpool_info() if p.get("user_api") == "blas"]
    return counts[0] if counts else None


def write_checkpoint(folder: Path) -> Path:
    """The benchmark model as a save_pretrained-style folder (config.json, model.safetensors)."""
    from safetensors.numpy import save_file
    from kvcache.model import random_state_dict

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(CONFIG, indent=1))
    save_file(random_state_dict(CONFIG, seed=0), str(folder / "model.safetensors"))
    return folder


def _prompts(batch: int, length: int, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, CONFIG["vocab_size"], size=(batch, length))


def engine_decode(model, prompts: np.ndarray, new: int, cache_dtype=None):
    """Prefill, then ``new`` greedy decode steps: (decode seconds, tokens (B, new), last logits)."""
    kv = model.new_cache(len(prompts), prompts.shape[1] + new, dtype=cache_dtype)
    logits = model.prefill(list(prompts), kv)
    tokens = []
    start = time.perf_counter()
    for _ in range(new):
        nxt = logits.argmax(-1)
        tokens.append(nxt)
        logits = model.decode(nxt, kv)
    return time.perf_counter() - start, np.stack(tokens, 1), logits


# ---------------------------------------------------------------------- the transformers worker


def peer_main(folder: str, threads: int) -> None:
    """The worker: transformers' LlamaForCausalLM on the same checkpoint, answering one JSON line
    per request {"prompts", "new", "generate"} with {"decode_s", "tokens", "generate_decode_s"}."""
    import inspect

    import torch
    from transformers import LlamaForCausalLM

    torch.set_num_threads(threads)
    model = LlamaForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    cache_kw = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    print(json.dumps({"ready": True, "torch": torch.__version__, "threads": torch.get_num_threads(),
                      "transformers": __import__("transformers").__version__}), flush=True)
    for line in sys.stdin:
        req = json.loads(line)
        torch.set_num_threads(req.get("threads", threads))
        ids = torch.tensor(req["prompts"])
        new = req["new"]
        with torch.inference_mode():
            out = model(input_ids=ids, use_cache=True)
            cache = getattr(out, "cache", None) or out.past_key_values
            tokens = []
            start = time.perf_counter()
            for _ in range(new):
                nxt = out.logits[:, -1].argmax(-1)
                tokens.append(nxt.tolist())
                out = model(input_ids=nxt[:, None], use_cache=True, **{cache_kw: cache})
                cache = getattr(out, "cache", None) or out.past_key_values
            decode_s = time.perf_counter() - start
            reply = {"decode_s": decode_s, "tokens": np.array(tokens).T.tolist()}
            if req.get("generate"):
                # generate()'s decode time: a run of new + 1 tokens less a run of 1 (the prefill)
                kw = dict(do_sample=False, pad_token_id=0)
                model.generate(ids, max_new_tokens=2, **kw)                 # warm-up
                best = float("inf")
                for _ in range(2):
                    t0 = time.perf_counter()
                    model.generate(ids, max_new_tokens=1, **kw)
                    t1 = time.perf_counter()
                    model.generate(ids, max_new_tokens=new + 1, min_new_tokens=new + 1, **kw)
                    best = min(best, (time.perf_counter() - t1) - (t1 - t0))
                reply["generate_decode_s"] = best
        print(json.dumps(reply), flush=True)


class Peer:
    """The transformers worker process."""

    def __init__(self, folder: Path, threads: int):
        env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads),
                   OPENBLAS_NUM_THREADS=str(threads), TRANSFORMERS_VERBOSITY="error",
                   HF_HUB_OFFLINE="1", PYTHONWARNINGS="ignore")
        self.proc = subprocess.Popen([sys.executable, "-m", "bench.bench_engine", "--transformers-peer",
                                      str(folder), str(threads)], cwd=ROOT, env=env, text=True,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self.info = self._read()

    def _read(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the transformers worker stopped (exit {self.proc.wait()})")
        return json.loads(line)

    def ask(self, **request) -> dict:
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        return self._read()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()


# ---------------------------------------------------------------------- the measurements


def cached_vs_recompute(model) -> None:
    from kvcache.cost import speedup
    print("\n1. cached decoding against recomputing every token (batch 1, float32)")
    print(f"   {'context':>8} {'cached tok/s':>13} {'recompute tok/s':>16} {'measured x':>11} {'FLOPs x':>8}")
    for context in (128, 512, 2048):
        prompt = _prompts(1, context, seed=context)
        cached = min(engine_decode(model, prompt, NEW)[0] for _ in range(5)) / NEW
        seq = list(prompt[0])
        steps = 4 if context < 2048 else 2
        best = float("inf")
        for _ in range(2):
            start = time.perf_counter()
            for i in range(steps):
                seq_i = seq + [1] * i
                model.next_logits(seq_i)
            best = min(best, (time.perf_counter() - start) / steps)
        print(f"   {context:>8,} {1 / cached:>13,.1f} {1 / best:>16,.2f} {best / cached:>11,.1f} "
              f"{speedup(model.config, context + 1):>8,.1f}")


def against_transformers(model, peer: Peer, threads: int) -> dict:
    from threadpoolctl import threadpool_limits

    print(f"\n2. the same model in transformers {peer.info['transformers']} (torch {peer.info['torch']}) and in "
          f"this engine, float32, {PROMPT}-token prompts, {NEW} greedy decode steps timed,")
    print(f"   the same threads on both sides (torch's and numpy's BLAS), best of {ROUNDS} alternating rounds")
    results = {}
    for n_threads in sorted({threads, 1}, reverse=True):
        for batch in (1, 8):
            prompts = _prompts(batch, PROMPT, seed=batch)
            ours, theirs, generate = [], [], []
            same = None
            for r in range(ROUNDS):
                with threadpool_limits(limits=n_threads, user_api="blas"):
                    seconds, tokens, _ = engine_decode(model, prompts, NEW)
                ours.append(seconds)
                time.sleep(0.2)                     # let one side's idle threads go to sleep
                reply = peer.ask(prompts=prompts.tolist(), new=NEW, threads=n_threads, generate=r == 0)
                theirs.append(reply["decode_s"])
                if "generate_decode_s" in reply:
                    generate.append(reply["generate_decode_s"])
                agree = float(np.mean(np.array(reply["tokens"]) == tokens))
                same = agree if same is None else min(same, agree)
                time.sleep(0.2)
            e = batch * NEW / min(ours)
            t = batch * NEW / min(theirs)
            g = f"{batch * NEW / min(generate):,.0f}" if generate and min(generate) > 0 else "n/a (too noisy)"
            goal = 3.0 if batch == 1 else 1.0
            results[(n_threads, batch)] = e / t
            print(f"   {n_threads} thread{'s' if n_threads > 1 else ''}, batch {batch}: engine {e:,.0f} tokens/s, "
                  f"transformers {t:,.0f} tokens/s (its generate(): {g}), ratio {e / t:.2f}x "
                  f"(goal >= {goal:g}x: {'met' if e / t >= goal else 'NOT met'}); "
                  f"same greedy tokens: {100 * same:.0f}%")
    # where an engine decode step goes at batch 1: the output layer reads 32.8 MB of weights
    from kvcache.linear import linear
    from kvcache.norm import rms_norm
    h = np.zeros((1, CONFIG["hidden_size"]), np.float32)
    eps = model.config.rms_norm_eps
    head = min(_timed(lambda: linear(rms_norm(h, model.norm, eps), model.lm_head)) for _ in range(20))
    step = min(engine_decode(model, _prompts(1, PROMPT, seed=1), NEW)[0] for _ in range(2)) / NEW
    print(f"   one engine decode step at batch 1: {1e3 * step:.2f} ms, of which the output layer "
          f"({model.lm_head.nbytes / 1e6:.1f} MB of weights) {1e3 * head:.2f} ms")
    return results


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def attention_bandwidth() -> None:
    from kvcache.gqa import decode_attention
    from lessons.bandwidth import copy_bandwidth
    from lessons.machine_facts import last_level_cache_bytes
    from lessons.memory import GIB, MIB

    llc = last_level_cache_bytes()
    target = max(GIB, 2 * llc) if llc else GIB                  # beyond the last-level cache
    try:
        available = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        target = int(min(target, available // 6))
    except (ValueError, OSError):
        pass
    copy = copy_bandwidth(target // 2 // MIB * MIB, repeats=5)   # as many bytes moved as K and V hold
    print(f"\n3. decode attention against the copy bandwidth ({copy.bandwidth / 1e9:.1f} GB/s, copying "
          f"{copy.nbytes / MIB:,.0f} MiB; last-level cache {'unknown' if llc is None else f'{llc / MIB:,.0f} MiB'})")
    rng = np.random.default_rng(0)
    for name, B, G, r, d in (("multi-head, 32 heads", 1, 32, 1, 128), ("grouped, 32 query / 8 kv heads", 4, 8, 4, 128)):
        T = target // (2 * B * G * d * 4)
        K = rng.random((B, G, T, d), dtype=np.float32)
        V = rng.random((B, G, T, d), dtype=np.float32)
        q = rng.random((B, G * r, d), dtype=np.float32)
        lengths = np.full(B, T)
        decode_attention(q, K, V, lengths)
        seconds = min(_timed(lambda: decode_attention(q, K, V, lengths)) for _ in range(5))
        bw = (K.nbytes + V.nbytes) / seconds
        print(f"   {name}: B={B}, T={T:,}, d={d}: {(K.nbytes + V.nbytes) / MIB:,.0f} MiB in {1e3 * seconds:.1f} ms, "
              f"{bw / 1e9:.1f} GB/s = {100 * bw / copy.bandwidth:.0f}% of copy (goal >= 75%: "
              f"{'met' if bw >= 0.75 * copy.bandwidth else 'NOT met'})")
        del K, V


def cache_formats(model, model64) -> None:
    print("\n4. cache storage formats (batch 4, 512-token prompts, 32 decode steps, float32 model)")
    prompts = _prompts(4, PROMPT, seed=7)
    # the exact logits along the float64 model's own greedy path, then every format on that path
    kv = model64.new_cache(4, PROMPT + NEW)
    logits = model64.prefill(list(prompts), kv)
    path, exact = [], []
    for _ in range(NEW):
        exact.append(logits)
        path.append(logits.argmax(-1))
        logits = model64.decode(path[-1], kv)
    base_tokens = None
    for dtype in ("float32", "float16", "int8"):
        kv = model.new_cache(4, PROMPT + NEW, dtype=dtype)
        logits = model.prefill(list(prompts), kv)
        worst = 0.0
        for step in range(NEW):
            worst = max(worst, float(np.abs(logits - exact[step]).max() / exact[step].std()))
            logits = model.decode(path[step], kv)
        seconds, tokens, _ = min((engine_decode(model, prompts, NEW, cache_dtype=dtype) for _ in range(2)),
                                 key=lambda r: r[0])
        base_tokens = tokens if base_tokens is None else base_tokens
        agree = np.mean(tokens == base_tokens)
        per_token = kv.nbytes // (4 * (PROMPT + NEW))
        print(f"   {dtype:>8}: {per_token:,} bytes per token, {4 * NEW / seconds:,.0f} tokens/s, largest logit "
              f"error {worst:.2e} of the logits' spread (vs float64), greedy tokens as float32: {100 * agree:.0f}%")


def padding_cost(model) -> None:
    rng = np.random.default_rng(11)
    lengths = rng.integers(16, PROMPT + 1, size=8)
    prompts = [rng.integers(0, CONFIG["vocab_size"], size=n) for n in lengths]
    times = {}
    for mode in ("ragged", "padded"):
        best = float("inf")
        for _ in range(3):
            kv = model.new_cache(len(prompts), int(lengths.max()) + 1)
            best = min(best, _timed(lambda: model.prefill(prompts, kv, padded=mode == "padded")))
        times[mode] = best
    tokens = int(lengths.sum())
    padded = len(lengths) * int(lengths.max())
    print(f"\n5. prefill of 8 prompts of {int(lengths.min())} to {int(lengths.max())} tokens: ragged computes "
          f"{tokens:,} tokens in {1e3 * times['ragged']:.0f} ms, padded {padded:,} tokens "
          f"(+{100 * (padded / tokens - 1):.0f}%) in {1e3 * times['padded']:.0f} ms "
          f"(+{100 * (times['padded'] / times['ragged'] - 1):.0f}%)")


def eos_mid_batch(model) -> None:
    from kvcache.generate import greedy
    prompts = list(_prompts(8, 64, seed=3))
    steps = 48
    free = greedy(model, prompts, steps)
    # one EOS id per sequence, a token it emits at steps 4, 9, 14, ...: they finish one by one
    eos = sorted({free[i][4 + 5 * i] for i in range(7)})
    best = {}
    step_time: dict[int, float] = {}          # the fastest decode step seen at each live batch size
    for _ in range(5):
        for label, eos_ids in (("no EOS", None), ("EOS", eos)):
            trace = []
            start = time.perf_counter()
            greedy(model, prompts, steps, eos_token_id=eos_ids, trace=trace)
            best[label] = min(best.get(label, float("inf")), time.perf_counter() - start)
            if label == "EOS":
                generated = sum(len(s["tokens"]) for s in trace)
                for a, b in zip(trace, trace[1:]):
                    step_time[b["cache_batch"]] = min(step_time.get(b["cache_batch"], float("inf")),
                                                      b["time"] - a["time"])
    print(f"\n6. EOS mid-batch (8 sequences, 64-token prompts, up to {steps} new tokens, best of 5 runs): "
          f"{generated} tokens generated with EOS in {best['EOS']:.2f} s, {8 * steps} without in "
          f"{best['no EOS']:.2f} s")
    print("   fastest decode step by live batch: " + ", ".join(
        f"{b}: {1e3 * t:.2f} ms" for b, t in sorted(step_time.items(), reverse=True)))


def beam_copies(model) -> None:
    from kvcache.generate import beam_search
    prompt = _prompts(1, PROMPT, seed=9)[0]
    trace = []
    start = time.perf_counter()
    beam_search(model, prompt, 4, NEW, trace=trace)
    took = time.perf_counter() - start
    expansion = trace[1]["cache_bytes_copied"] if len(trace) > 1 else 0
    total = trace[-1]["cache_bytes_copied"]
    prompt_bytes = trace[0]["cache_used_bytes"]
    print(f"\n7. beam search, 4 beams, {PROMPT}-token prompt, {len(trace)} steps in {took:.2f} s: the prompt is "
          f"prefilled once ({prompt_bytes / 2**20:.1f} MiB of cache); the expansion copies "
          f"{expansion / 2**20:.1f} MiB (3 rows), the {len(trace) - 2} reorders after it "
          f"{(total - expansion) / 2**20:.1f} MiB in all")


def main() -> int:
    from kvcache.model import Model

    print(f"load at start: {_load()} (cores: {os.cpu_count()})")
    folder = write_checkpoint(OUT / "model")
    model = Model.load(folder, dtype=np.float32)
    threads = _blas_threads() or os.cpu_count() or 1
    cached_vs_recompute(model)
    peer = Peer(folder, threads)
    try:
        against_transformers(model, peer, threads)
    finally:
        peer.close()
    attention_bandwidth()
    cache_formats(model, Model.load(folder, dtype=np.float64))
    padding_cost(model)
    eos_mid_batch(model)
    beam_copies(model)
    print(f"\nload at end: {_load()}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--transformers-peer":
        peer_main(sys.argv[2], int(sys.argv[3]))
    else:
        sys.exit(main())
