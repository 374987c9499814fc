"""bench_model: decode speed on the real model, SmolLM2-135M-Instruct, engine against transformers.

Measured in one run (``python -m bench model``, or ``make bench``):

* both sides read the installed GGUF file (``kvcache.models``) and run its float32 dequantized
  weights: the engine through ``kvcache.gguf_file``, transformers 5 through
  ``from_pretrained(..., gguf_file=...)`` in a worker process (so the two thread pools never
  compete), one thread each (numpy's BLAS and torch);
* a prompt of ``PROMPT`` real tokens (a fixed English text, its tokens repeated), then ``NEW``
  greedy decode steps at batch 1, timed; the two sides alternate, best of ``ROUNDS`` rounds;
* beam search with ``BEAMS`` beams: the time of one step against a greedy step of a batch of
  ``BEAMS`` rows (``beam_step_cost``);
* decode at batch 1 reads every weight once per token, so its floor is weight bytes / memory
  bandwidth: the fraction of the machine's copy bandwidth (``lessons.bandwidth.copy_bandwidth``,
  read + write) each side achieves is weight bytes x tokens/s / bandwidth.

The machine is shared: the load is printed at the start and the end, and nothing is asserted.
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
NAME = "smollm2-135m-instruct"
PROMPT = 512
NEW = 32
ROUNDS = 3
TEXT = ("The key and value vectors of every earlier token are kept in a cache, so that each new token "
        "attends to them without computing them again. The cache grows by one row per layer and head "
        "at every step, and reading it costs memory bandwidth. ")


def _load() -> str:
    try:
        return " ".join(open("/proc/loadavg").read().split()[:3])
    except OSError:
        return "unknown"


def prompt_ids(tokenizer, length: int = PROMPT) -> list[int]:
    """``length`` real token ids: the tokens of TEXT repeated."""
    ids = tokenizer.encode(TEXT)
    return (ids * (length // len(ids) + 1))[:length]


def engine_decode(model, prompt: list[int], new: int) -> tuple[float, list[int]]:
    """Prefill, then ``new`` greedy steps at batch 1: (decode seconds, tokens)."""
    kv = model.new_cache(1, len(prompt) + new)
    logits = model.prefill([np.asarray(prompt)], kv)
    tokens = []
    start = time.perf_counter()
    for _ in range(new):
        nxt = logits.argmax(-1)
        tokens.append(int(nxt[0]))
        logits = model.decode(nxt, kv)
    return time.perf_counter() - start, tokens


def peer_main(path: str) -> None:
    """The worker: transformers on the GGUF file, one thread, answering one JSON line per request
    {"prompt", "new"} with {"decode_s", "tokens"}."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(1)
    p = Path(path)
    model = AutoModelForCausalLM.from_pretrained(str(p.parent), gguf_file=p.name, dtype=torch.float32).eval()
    print(json.dumps({"ready": True, "torch": torch.__version__,
                      "transformers": __import__("transformers").__version__}), flush=True)
    for line in sys.stdin:
        req = json.loads(line)
        with torch.inference_mode():
            out = model(input_ids=torch.tensor([req["prompt"]]), use_cache=True)
            cache = out.past_key_values
            tokens = []
            start = time.perf_counter()
            for _ in range(req["new"]):
                nxt = out.logits[:, -1].argmax(-1)
                tokens.append(int(nxt[0]))
                out = model(input_ids=nxt[:, None], use_cache=True, past_key_values=cache)
                cache = out.past_key_values
            reply = {"decode_s": time.perf_counter() - start, "tokens": tokens}
        print(json.dumps(reply), flush=True)


class Peer:
    """The transformers worker process."""

    def __init__(self, path: Path):
        env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
                   TRANSFORMERS_VERBOSITY="error", HF_HUB_OFFLINE="1", PYTHONWARNINGS="ignore",
                   TQDM_DISABLE="1")
        self.proc = subprocess.Popen([sys.executable, "-m", "bench.bench_model", "--transformers-peer", str(path)],
                                     cwd=ROOT, env=env, text=True, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
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
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def weight_bytes(model) -> int:
    """Bytes of weights one decode step reads: every layer's matrices and the output layer (the
    embedding lookup reads one row of its table, left out; tied, the table is the output layer)."""
    arrays = [model.norm, model.lm_head]
    for w in model.layers:
        arrays += [w.attn_norm, w.wqkv, w.wo, w.mlp_norm, w.w_gate_up, w.w_down]
    return sum(a.nbytes for a in arrays)


BEAMS = 4
BEAM_STEPS = 16


def decode_rows_step(model, prompt: list[int], rows: int, steps: int) -> float:
    """The median time of a greedy decode step of ``rows`` sequences holding the prompt (prefilled
    once, then expanded to the rows, as beam search does), in seconds."""
    kv = model.new_cache(1, len(prompt) + steps + 1, capacity=rows)
    logits = model.prefill([np.asarray(prompt)], kv)
    kv.reorder(np.zeros(rows, np.int64))
    logits = np.repeat(logits, rows, axis=0)
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        logits = model.decode(logits.argmax(-1), kv)
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def beam_step(model, prompt: list[int], cache: str, steps: int) -> tuple[float, float]:
    """(the median time of one step of beam search with BEAMS beams, its cache's bytes copied per
    step): a step is the reorder, the decode of BEAMS rows and the choice of the next beams, timed
    between consecutive trace records (the prefill and its expansion left out)."""
    from kvcache.generate import beam_search

    trace = []
    beam_search(model, prompt, BEAMS, steps + 2, cache=cache, trace=trace)
    times = np.diff([t["time"] for t in trace])[1:]
    copied = (trace[-1]["cache_bytes_copied"] - trace[1]["cache_bytes_copied"]) / (len(trace) - 2)
    return float(np.median(times)), float(copied)


def beam_step_cost(model, tokenizer) -> None:
    """Beam search with BEAMS beams on one prompt costs about BEAMS decode rows per step: the
    time of a beam step (contiguous and paged caches) against a greedy step of a batch of BEAMS,
    alternating, best of ROUNDS rounds, after the same PROMPT-token prompt."""
    from threadpoolctl import threadpool_limits

    prompt = prompt_ids(tokenizer)
    batch, contiguous, paged, copied = [], [], [], {}
    with threadpool_limits(limits=1, user_api="blas"):
        for _ in range(ROUNDS):
            batch.append(decode_rows_step(model, prompt, BEAMS, BEAM_STEPS))
            seconds, copied["contiguous"] = beam_step(model, prompt, "contiguous", BEAM_STEPS)
            contiguous.append(seconds)
            seconds, copied["paged"] = beam_step(model, prompt, "paged", BEAM_STEPS)
            paged.append(seconds)
    d = min(batch)
    print(f"beam search, {BEAMS} beams on one {PROMPT}-token prompt, against a greedy decode step of "
          f"{BEAMS} rows (median step, best of {ROUNDS} alternating rounds, 1 thread):")
    print(f"  decode, batch {BEAMS}     {d * 1e3:7.1f} ms per step")
    for name, times in (("contiguous", contiguous), ("paged", paged)):
        b = min(times)
        print(f"  beam step, {name:10s} {b * 1e3:7.1f} ms per step   {b / d:.2f}x the batch-{BEAMS} step; "
              f"cache bytes copied per step {copied[name] / 1e6:,.1f} MB")


def main() -> int:
    from threadpoolctl import threadpool_limits

    from lessons.bandwidth import copy_bandwidth
    from kvcache.models import load_with_tokenizer, model_path

    print(f"load average at the start: {_load()}")
    path = model_path(NAME)
    start = time.perf_counter()
    model, tokenizer = load_with_tokenizer(NAME)
    print(f"{NAME}: {path.name}, read and dequantized to float32 in {time.perf_counter() - start:.1f} s")
    peer = Peer(path)
    try:
        prompt = prompt_ids(tokenizer)
        ours, theirs, same = [], [], True
        for _ in range(ROUNDS):
            with threadpool_limits(limits=1, user_api="blas"):
                seconds, tokens = engine_decode(model, prompt, NEW)
            ours.append(seconds)
            time.sleep(0.2)
            reply = peer.ask(prompt=prompt, new=NEW)
            theirs.append(reply["decode_s"])
            same = same and reply["tokens"] == tokens
            time.sleep(0.2)
    finally:
        peer.close()
    with threadpool_limits(limits=1, user_api="blas"):
        bandwidth = copy_bandwidth().bandwidth
    nbytes = weight_bytes(model)
    e, t = NEW / min(ours), NEW / min(theirs)
    print(f"decode at batch 1 after a {PROMPT}-token prompt, {NEW} greedy steps, 1 thread each, best of "
          f"{ROUNDS} alternating rounds (transformers {peer.info['transformers']}, torch {peer.info['torch']}):")
    print(f"  engine       {e:7.1f} tokens/s")
    print(f"  transformers {t:7.1f} tokens/s   engine / transformers: {e / t:.2f}x; "
          f"same greedy tokens: {'yes' if same else 'no'}")
    print(f"  weights read per token: {nbytes / 1e6:,.0f} MB (float32); copy bandwidth {bandwidth / 1e9:.1f} GB/s")
    print(f"  share of the bandwidth floor: engine {nbytes * e / bandwidth:.0%}, "
          f"transformers {nbytes * t / bandwidth:.0%}")
    beam_step_cost(model, tokenizer)
    print(f"load average at the end: {_load()}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--transformers-peer":
        peer_main(sys.argv[2])
    else:
        sys.exit(main())
