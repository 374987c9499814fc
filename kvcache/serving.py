"""A serving loop over a paged KV cache: requests arrive, run as one batch, finish, and are
preempted when blocks run out.

A request is a prompt, a number of new tokens, an optional EOS and the step it arrives at.  Every
step of ``serve``::

    1. arrivals join the waiting queue (first come, first served)
    2. room for the running batch: its next token may need a block each; while the free blocks
       do not cover that, the newest running sequence is preempted: its blocks are freed and it
       goes back to the front of the queue, to be recomputed from its tokens when it is admitted
       again (vLLM's default, recompute).  With preempt=False, OutOfBlocks is raised instead,
       before anything is written
    3. admission, unless step 2 just preempted: the head of the queue joins while the blocks
       it needs for all its tokens so far (minus those found in the prefix cache) are free, with
       a watermark (a share of the pool) left over for the running sequences to grow into
    4. one forward pass: one token for each running sequence, the whole uncached prompt (or
       prompt and tokens so far) for each admitted one (``Model.forward`` with ragged counts)
    5. greedy choice; a sequence whose token is EOS, or that has made max_new_tokens, finishes
       and frees its blocks.  Newly full blocks enter the prefix cache.

A request that could never fit (more positions than the whole pool holds) is refused before the
first step: it would be preempted forever.  Since the oldest running sequence is never preempted
while a newer one runs, and it always fits alone, every request finishes.

``reserve`` chooses what a sequence holds while it runs, to compare layouts with one engine:

* "blocks" (paging): one block at a time, as positions arrive;
* "max_len": max_len positions from admission on, what a contiguous cache preallocated to L_max
  reserves per sequence;
* "request": its own prompt + max_new_tokens from admission on (a contiguous cache that knows
  every request's output budget in advance).

Every step records ``StepStats``: sequences running and waiting, admissions, finishes,
preemptions, blocks in use, positions cached and the share of the reserved memory that holds no
token (``kv_waste``).  With ``prefix_sharing`` the full blocks of earlier requests are reused
(``kvcache.prefix``), and the result reports the hit rate and the prefill tokens saved.
"""
from __future__ import annotations

import numbers
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from .paged import OutOfBlocks, PagedKVCache, blocks_for, DEFAULT_BLOCK_SIZE
from .prefix import PrefixIndex, PrefixStats, chain_hash

__all__ = ["Request", "StepStats", "ServeResult", "serve", "Scheduler", "sample_requests", "BookkeepingModel",
           "decode_step_seconds",
           "RESERVE_POLICIES"]

RESERVE_POLICIES = ("blocks", "max_len", "request")


@dataclass(frozen=True, init=False)
class Request:
    """One generation request: greedy decoding of ``prompt`` for up to ``max_new_tokens``
    tokens, stopping after an ``eos_token_id`` (an id or a list of them; ``eos=`` says the
    same), arriving at step ``arrival`` (or ``arrival_step=``)."""

    prompt: Sequence[int]
    max_new_tokens: int
    eos_token_id: int | Sequence[int] | None
    arrival: int

    def __init__(self, prompt, max_new_tokens, eos_token_id=None, arrival=0, *, eos=None, arrival_step=None):
        if eos is not None and eos_token_id is not None and eos != eos_token_id:
            raise ValueError("give eos_token_id or eos, not two different ones")
        object.__setattr__(self, "prompt", prompt)
        object.__setattr__(self, "max_new_tokens", max_new_tokens)
        object.__setattr__(self, "eos_token_id", eos_token_id if eos is None else eos)
        object.__setattr__(self, "arrival", arrival if arrival_step is None else arrival_step)

    @property
    def eos(self):
        return self.eos_token_id


@dataclass
class StepStats:
    """What one step of ``serve`` did and held (memory figures after its forward pass)."""

    step: int
    running: int            # sequences in this step's forward pass
    waiting: int            # arrived, not running (queued, or preempted), after admission
    admitted: int
    finished: int
    preempted: int
    blocks_used: int        # live blocks of the pool
    tokens_cached: int      # distinct positions holding a key and a value
    kv_waste: float         # share of the live blocks' positions holding nothing
    prefill_tokens: int     # tokens computed for the sequences admitted this step
    cached_tokens: int      # their tokens found in the prefix cache instead
    seconds: float

    @property
    def preemptions(self) -> int:
        return self.preempted


@dataclass
class ServeResult:
    """Each request's new tokens (in request order) and how the run went."""

    outputs: list[list[int]]
    steps: list[StepStats]
    block_size: int
    num_blocks: int
    prefix: PrefixStats | None = None
    seconds: float = 0.0
    preempted_requests: list[int] = field(default_factory=list)   # request of each preemption
    prefill_per_request: list[int] = field(default_factory=list)  # tokens each computed by prefill
    cached_per_request: list[int] = field(default_factory=list)   # tokens each found cached

    @property
    def preemptions(self) -> int:
        return sum(s.preempted for s in self.steps)

    @property
    def tokens_generated(self) -> int:
        return sum(len(o) for o in self.outputs)

    @property
    def tokens_per_second(self) -> float:
        return self.tokens_generated / self.seconds if self.seconds > 0 else float("nan")

    @property
    def prefill_tokens(self) -> int:
        """Tokens computed by prefill (recomputation after preemption included)."""
        return sum(s.prefill_tokens for s in self.steps)

    @property
    def prefill_saved(self) -> int:
        """Prompt tokens taken from the prefix cache instead of computed."""
        return sum(s.cached_tokens for s in self.steps)

    prefill_tokens_saved = prefill_saved

    @property
    def hit_rate(self) -> float:
        """Share of the looked-up prompt tokens found in the prefix cache (0 without sharing)."""
        return self.prefix.hit_rate if self.prefix is not None else 0.0

    @property
    def mean_running(self) -> float:
        busy = [s.running for s in self.steps if s.running]
        return float(np.mean(busy)) if busy else 0.0

    @property
    def peak_running(self) -> int:
        return max((s.running for s in self.steps), default=0)

    @property
    def kv_waste(self) -> float:
        """Share of the reserved positions that held no token, over the whole run (every step's
        reserved and cached positions summed)."""
        reserved = sum(s.blocks_used for s in self.steps) * self.block_size
        cached = sum(s.tokens_cached for s in self.steps)
        return 1.0 - cached / reserved if reserved else 0.0


class _Sequence:
    """A request in flight: its tokens so far (prompt, then generated), how many are new."""

    __slots__ = ("index", "tokens", "prompt_len", "max_new", "eos", "registered")

    def __init__(self, index: int, prompt: np.ndarray, max_new: int, eos: frozenset):
        self.index, self.prompt_len, self.max_new, self.eos = index, len(prompt), max_new, eos
        self.tokens = [int(t) for t in prompt]
        self.registered = 0                 # full blocks already offered to the prefix cache

    @property
    def generated(self) -> int:
        return len(self.tokens) - self.prompt_len


class BookkeepingModel:
    """A stand-in for a model in ``serve``: every layer's keys and values are written as zeros
    and the logits are flat (greedy decoding then picks token 0 every time).

    What ``serve`` allocates, admits and preempts depends only on the requests' lengths, never on
    the numbers a model computes (without an EOS, a request runs for exactly max_new_tokens), so
    with this stand-in the allocator, the block tables and the scheduler run exactly as with the
    model, at the cost of their bookkeeping alone: the memory of a large workload is measured in
    a second.  ``config`` is a model's config (a dict or ``ModelConfig``).
    """

    def __init__(self, config):
        from .config import ModelConfig
        self.config = ModelConfig.from_dict(config) if not isinstance(config, ModelConfig) else config
        self.dtype = np.dtype(np.float32)

    def check_tokens(self, token_ids, what: str = "token ids") -> np.ndarray:
        arr = np.asarray(token_ids)
        if arr.ndim != 1 or (arr.size and not np.issubdtype(arr.dtype, np.integer)):
            raise ValueError(f"{what} must be a 1-d sequence of integers")
        arr = arr.astype(np.int64)
        bad = np.flatnonzero((arr < 0) | (arr >= self.config.vocab_size))
        if len(bad):
            raise ValueError(f"{what}: token id {int(arr[bad[0]])} at position {int(bad[0])} is outside the "
                             f"vocabulary (0 .. {self.config.vocab_size - 1})")
        return arr

    def forward(self, tokens, counts, cache) -> np.ndarray:
        counts = cache.reserve(counts)
        zeros = np.zeros((int(counts.sum()), self.config.num_key_value_heads, self.config.head_dim), self.dtype)
        for layer in cache:
            layer.update(zeros, zeros, counts)
        return np.zeros((len(counts), self.config.vocab_size), self.dtype)


def decode_step_seconds(model, batch: int, context: int, *, kind: str = "paged", steps: int = 8,
                        block_size: int = DEFAULT_BLOCK_SIZE, seed: int = 0) -> float:
    """The fastest of ``steps`` decode steps of ``batch`` sequences that each hold ``context``
    positions (random prompts, prefilled first), in seconds.  The fastest, because other work on
    the machine can only slow a step down.  Memory: batch x (context + steps) positions."""
    batch = _check_int(batch, "batch", 1)
    context = _check_int(context, "context", 1)
    steps = _check_int(steps, "steps", 1)
    rng = np.random.default_rng(seed)
    prompts = [rng.integers(0, model.config.vocab_size, context) for _ in range(batch)]
    options = {"block_size": block_size} if kind == "paged" else {}
    cache = model.new_cache(batch, context + steps, kind=kind, **options)
    tokens = np.argmax(model.prefill(prompts, cache), axis=-1)
    best = float("inf")
    for _ in range(steps):
        start = time.perf_counter()
        logits = model.decode(tokens, cache)
        best = min(best, time.perf_counter() - start)
        tokens = np.argmax(logits, axis=-1)
    return best


def sample_requests(n: int, seed: int = 0, *, vocab_size: int, prompt_mean: float = 161.0,
                    output_mean: float = 338.0, sigma: float = 0.9, max_len: int = 2048,
                    system_prompt: int = 0, arrival_gap: float = 0.0) -> list[Request]:
    """``n`` requests with varied prompt and output lengths, drawn from lognormal distributions
    with the given means (``sigma`` the spread of their logarithms): by default the means the
    PagedAttention paper reports for its ShareGPT conversations (161 prompt tokens, 338 output
    tokens).  Every length is at least 1, and prompt + output fits in ``max_len``.  With
    ``system_prompt`` > 0 every prompt starts with the same that many tokens; ``arrival_gap`` > 0
    spaces arrivals by that many steps on average (exponential gaps, a Poisson process).
    Token ids are random (the model's output does not depend on what they mean)."""
    rng = np.random.default_rng(seed)

    def lognormal(mean):
        return rng.lognormal(np.log(mean) - sigma ** 2 / 2, sigma, n)

    prompts = np.maximum(1, np.rint(lognormal(prompt_mean))).astype(int)
    outputs = np.maximum(1, np.rint(lognormal(output_mean))).astype(int)
    prompts = np.minimum(prompts, max_len - system_prompt - 1)
    outputs = np.minimum(outputs, max_len - system_prompt - prompts)
    head = [int(t) for t in rng.integers(0, vocab_size, system_prompt)]
    gaps = rng.exponential(arrival_gap, n) if arrival_gap > 0 else np.zeros(n)
    arrivals = np.floor(np.cumsum(gaps) - gaps[0]).astype(int)
    return [Request(head + [int(t) for t in rng.integers(0, vocab_size, p)], int(o), arrival=int(a))
            for p, o, a in zip(prompts, outputs, arrivals)]


def _check_int(value, name: str, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    return int(value)


def _eos(model, eos, what: str) -> frozenset:
    if eos is None:
        return frozenset()
    ids = [eos] if isinstance(eos, numbers.Integral) and not isinstance(eos, bool) else eos
    try:
        arr = model.check_tokens(list(ids), f"{what}: eos_token_id")
    except TypeError:
        raise ValueError(f"{what}: eos_token_id must be a token id or a list of them, got {eos!r}") from None
    if len(arr) == 0:
        raise ValueError(f"{what}: eos_token_id is an empty list (use None for no EOS)")
    return frozenset(int(t) for t in arr)


def _reserved_positions(policy: str, prompt_len: int, max_new: int, max_len: int) -> int:
    """Positions a sequence holds from admission on, for a reservation ``policy`` (0: as needed)."""
    return {"blocks": 0, "max_len": max_len, "request": prompt_len + max_new}[policy]


def serve(model, requests: Sequence[Request], *, block_size: int = DEFAULT_BLOCK_SIZE,
          num_blocks: int | None = None, max_len: int | None = None, preempt: bool = True,
          prefix_sharing: bool = False, reserve: str = "blocks", cache_dtype=None,
          max_running: int | None = None, watermark: float = 0.01, hash_fn: Callable = chain_hash,
          on_step: Callable[[StepStats, list, list, PagedKVCache], None] | None = None) -> ServeResult:
    """Serve ``requests`` with greedy decoding over one paged pool (see the module docstring).

    ``num_blocks`` sizes the pool (default: enough for every request at its longest at once);
    ``max_len`` bounds a sequence (default: the longest prompt + max_new_tokens); ``reserve`` is
    "blocks", "max_len" or "request"; ``max_running`` caps the batch; ``watermark`` is the share
    of the pool admission leaves free for the running sequences to grow into (vLLM keeps 1%:
    admitting up to the last block means preempting at the next step); ``hash_fn`` names blocks
    for the prefix cache (a weak one shows collisions handled).  ``on_step(stats, rows, tokens,
    cache)`` is called after every step that ran, with the request of each row of the step, the
    token each made, and the cache as the step left it (its finished sequences still in it).
    """
    if reserve not in RESERVE_POLICIES:
        raise ValueError(f"reserve must be one of {', '.join(RESERVE_POLICIES)}, got {reserve!r}")
    block_size = _check_int(block_size, "block_size", 1)
    if max_running is not None:
        max_running = _check_int(max_running, "max_running", 1)
    try:
        requests = list(requests)
    except TypeError:
        raise ValueError(f"requests must be a list of Request, got {type(requests).__name__}") from None
    seqs, arrivals = [], []
    limit = model.config.max_position_embeddings
    for i, r in enumerate(requests):
        if not isinstance(r, Request):
            raise ValueError(f"request {i} is a {type(r).__name__}, not a Request")
        prompt = model.check_tokens(r.prompt, f"request {i}: prompt")
        if len(prompt) == 0:
            raise ValueError(f"request {i}: the prompt is empty")
        max_new = _check_int(r.max_new_tokens, f"request {i}: max_new_tokens", 0)
        if len(prompt) + max_new > limit:
            raise ValueError(f"request {i}: {len(prompt)} prompt tokens + {max_new} new ones pass "
                             f"max_position_embeddings ({limit})")
        seqs.append(_Sequence(i, prompt, max_new, _eos(model, r.eos_token_id, f"request {i}")))
        arrivals.append(_check_int(r.arrival, f"request {i}: arrival", 0))
    longest = max((s.prompt_len + s.max_new for s in seqs), default=1)
    if max_len is None:
        max_len = longest if reserve != "max_len" else limit
    max_len = _check_int(max_len, "max_len", 1)
    if longest > max_len:
        raise ValueError(f"a request of {longest} positions passes max_len ({max_len})")
    if max_len > limit:
        raise ValueError(f"max_len ({max_len}) passes max_position_embeddings ({limit})")

    def holds(s: _Sequence) -> int:
        """Blocks the sequence holds at its longest."""
        most = max(s.prompt_len + s.max_new - 1, 1)
        return blocks_for(max(most, _reserved_positions(reserve, s.prompt_len, s.max_new, max_len)), block_size)

    if num_blocks is None:
        num_blocks = max(1, sum(holds(s) for s in seqs))
    num_blocks = _check_int(num_blocks, "num_blocks", 1)
    if isinstance(watermark, bool) or not isinstance(watermark, numbers.Real) or not 0 <= watermark < 1:
        raise ValueError(f"watermark must be a share of the pool, from 0 to below 1, got {watermark!r}")
    keep_free = int(watermark * num_blocks) if reserve == "blocks" else 0   # reservations never grow
    for s in seqs:                              # refused up front: it would never fit
        if s.max_new and holds(s) > num_blocks:
            raise OutOfBlocks(holds(s), num_blocks,
                              f"request {s.index} ({s.prompt_len} prompt tokens + {s.max_new} new) can never "
                              f"fit in a pool of {num_blocks} blocks of {block_size}")

    kv = PagedKVCache(model.config.num_hidden_layers, 0, model.config.num_key_value_heads,
                      model.config.head_dim, max_len, dtype=model.dtype.name if cache_dtype is None else cache_dtype,
                      compute_dtype=model.dtype, block_size=block_size, num_blocks=num_blocks)
    prefix = PrefixIndex(kv.pool, hash_fn) if prefix_sharing else None
    outputs: list[list[int]] = [[] for _ in seqs]
    order = sorted(range(len(seqs)), key=lambda i: (arrivals[i], i))
    pending = deque(seqs[i] for i in order if seqs[i].max_new > 0)
    waiting: deque[_Sequence] = deque()
    running: list[_Sequence] = []               # row r of kv is running[r], oldest first
    steps: list[StepStats] = []
    preempted_requests: list[int] = []
    prefilled, found = [0] * len(seqs), [0] * len(seqs)
    start = time.perf_counter()
    step = 0
    while pending or waiting or running:
        t0 = time.perf_counter()
        while pending and arrivals[pending[0].index] <= step:
            waiting.append(pending.popleft())

        # 2. room for every running sequence's next token
        preempted = 0
        ones = np.ones(len(running), np.int64)
        while running and kv.blocks_needed(ones) > kv.num_free:
            if not preempt:
                raise OutOfBlocks(kv.blocks_needed(ones), kv.num_free,
                                  f"step {step}: the next token of {len(running)} running sequences "
                                  "(preempt=False)")
            victim = running.pop()              # the newest: recomputed when admitted again
            kv.free(len(running))
            victim.registered = 0
            waiting.appendleft(victim)
            preempted_requests.append(victim.index)
            preempted += 1
            ones = ones[:-1]
        need = kv.blocks_needed(ones) if running else 0

        # 3. admission
        admitted: list[tuple[_Sequence, int, list[int]]] = []
        while not preempted and waiting and (max_running is None or len(running) + len(admitted) < max_running):
            seq = waiting[0]
            shared = prefix.lookup(seq.tokens) if prefix is not None else []
            total = max(blocks_for(len(seq.tokens), block_size),
                        blocks_for(_reserved_positions(reserve, seq.prompt_len, seq.max_new, max_len), block_size))
            new_blocks = total - len(shared)
            revived = prefix.blocks_to_take_from_free(shared) if shared else 0
            spare = keep_free if running or admitted else 0     # an empty batch always takes one
            if need + new_blocks + revived + spare > kv.num_free:
                break                           # the head of the queue waits, and so do the rest
            waiting.popleft()
            if prefix is not None:
                prefix.record(seq.tokens, shared)
                prefix.take(shared)
            row = kv.add_sequence(shared, len(shared) * block_size)
            if reserve == "blocks":
                need += new_blocks              # taken by the forward pass
            else:                               # the whole reservation, taken now
                kv.tables[row].extend(kv.allocator.allocate() for _ in range(new_blocks))
            admitted.append((seq, len(seq.tokens) - len(shared) * block_size, shared))
            prefilled[seq.index] += len(seq.tokens) - len(shared) * block_size
            found[seq.index] += len(shared) * block_size

        if not running and not admitted:        # nothing to run before the next arrival
            steps.append(StepStats(step, 0, len(waiting), 0, 0, preempted, kv.allocator.num_used, 0, 0.0, 0, 0,
                                   time.perf_counter() - t0))
            step += 1
            continue

        # 4. one forward pass: decode for the running rows, prefill for the admitted ones
        tokens = [s.tokens[-1] for s in running]
        counts = [1] * len(running)
        for seq, n, _ in admitted:
            tokens += seq.tokens[len(seq.tokens) - n:]
            counts.append(n)
        running += [seq for seq, _, _ in admitted]
        logits = model.forward(np.asarray(tokens, np.int64), np.asarray(counts, np.int64), kv)
        tokens_cached = kv.filled_slots()
        blocks_used = kv.allocator.num_used

        # 5. the next tokens; finished sequences leave
        chosen = np.argmax(logits, axis=-1)
        keep, finished = [], 0
        rows = [s.index for s in running]
        for r, seq in enumerate(running):
            if prefix is not None:
                cached = len(seq.tokens)        # every token so far is in the cache now
                if cached // block_size > seq.registered:
                    prefix.register(kv.tables[r], seq.tokens[:cached])
                    seq.registered = cached // block_size
            token = int(chosen[r])
            seq.tokens.append(token)
            outputs[seq.index].append(token)
            if token in seq.eos or seq.generated == seq.max_new:
                finished += 1
            else:
                keep.append(r)
        reserved = blocks_used * block_size
        stats = StepStats(step, len(rows), len(waiting), len(admitted), finished, preempted, blocks_used,
                          tokens_cached, 1.0 - tokens_cached / reserved if reserved else 0.0,
                          sum(n for _, n, _ in admitted), sum(len(sh) for _, _, sh in admitted) * block_size,
                          time.perf_counter() - t0)
        steps.append(stats)
        if on_step is not None:
            on_step(stats, rows, chosen.tolist(), kv)
        if finished:
            kv.select(keep)
            running = [running[r] for r in keep]
        step += 1
    return ServeResult(outputs, steps, block_size, num_blocks, prefix.stats if prefix is not None else None,
                       time.perf_counter() - start, preempted_requests, prefilled, found)


class Scheduler:
    """``serve`` with its options kept: ``Scheduler(model, num_blocks=..., ...).run(requests)``."""

    def __init__(self, model, **options):
        self.model, self.options = model, options

    def run(self, requests) -> ServeResult:
        return serve(self.model, requests, **self.options)
