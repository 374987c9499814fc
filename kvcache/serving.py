"""A serving loop over a paged KV cache: requests arrive, run as one batch, finish, and are
preempted when blocks run out.

A request is a prompt, a number of new tokens, an optional EOS and the step it arrives at.
``serve(model, requests, ...)`` is ``Scheduler(model, ...).run(requests)``, whose loop is one
method per numbered part of a step (``_arrive``, ``_make_room``, ``_admit``,
``_forward_and_finish``); it uses the paged cache through its public methods only.  Every step::

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

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from . import validate
from .paged import OutOfBlocks, PagedKVCache, blocks_for, DEFAULT_BLOCK_SIZE
from .prefix import PrefixIndex, PrefixStats, chain_hash

__all__ = ["Request", "StepStats", "ServeResult", "serve", "Scheduler", "sample_requests", "BookkeepingModel",
           "decode_step_seconds",
           "RESERVE_POLICIES"]

RESERVE_POLICIES = ("blocks", "max_len", "request")


@dataclass(frozen=True)
class Request:
    """One generation request: greedy decoding of ``prompt`` for up to ``max_new_tokens``
    tokens, stopping after an ``eos_token_id`` (an id or a list of them), arriving at step
    ``arrival``."""

    prompt: Sequence[int]
    max_new_tokens: int
    eos_token_id: int | Sequence[int] | None = None
    arrival: int = 0

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
        """token_ids as int64 (N,), checked as the model checks them."""
        return validate.token_ids(token_ids, self.config.vocab_size, what)

    def forward(self, tokens, counts, cache) -> np.ndarray:
        """Reserve the step and write zeros as every layer's keys and values; flat logits (B, V)."""
        plan = cache.reserve(counts)
        zeros = np.zeros((plan.tokens, self.config.num_key_value_heads, self.config.head_dim), self.dtype)
        for layer in cache:
            layer.update(zeros, zeros, plan)
        return np.zeros((plan.batch, self.config.vocab_size), self.dtype)


def decode_step_seconds(model, batch: int, context: int, *, kind: str = "paged", steps: int = 8,
                        block_size: int = DEFAULT_BLOCK_SIZE, seed: int = 0) -> float:
    """The fastest of ``steps`` decode steps of ``batch`` sequences that each hold ``context``
    positions (random prompts, prefilled first), in seconds.  The fastest, because other work on
    the machine can only slow a step down.  Memory: batch x (context + steps) positions."""
    batch = validate.whole(batch, "batch", 1)
    context = validate.whole(context, "context", 1)
    steps = validate.whole(steps, "steps", 1)
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


def _reserved_positions(policy: str, prompt_len: int, max_new: int, max_len: int) -> int:
    """Positions a sequence holds from admission on, for a reservation ``policy`` (0: as needed)."""
    return {"blocks": 0, "max_len": max_len, "request": prompt_len + max_new}[policy]


def _check_requests(model, requests) -> tuple[list[_Sequence], list[int]]:
    """The requests as sequences (prompts and EOS ids checked) and their arrival steps; a
    ValueError names the first bad request."""
    try:
        requests = list(requests)
    except TypeError:
        raise ValueError(f"requests must be a list of Request, got {type(requests).__name__}") from None
    seqs, arrivals = [], []
    vocab, limit = model.config.vocab_size, model.config.max_position_embeddings
    for i, r in enumerate(requests):
        if not isinstance(r, Request):
            raise ValueError(f"request {i} is a {type(r).__name__}, not a Request")
        prompt = validate.token_ids(r.prompt, vocab, f"request {i}: prompt")
        if len(prompt) == 0:
            raise ValueError(f"request {i}: the prompt is empty")
        max_new = validate.whole(r.max_new_tokens, f"request {i}: max_new_tokens", 0)
        if len(prompt) + max_new > limit:
            raise ValueError(f"request {i}: {len(prompt)} prompt tokens + {max_new} new ones pass "
                             f"max_position_embeddings ({limit})")
        eos = validate.eos_ids(r.eos_token_id, vocab, f"request {i}: eos_token_id")
        seqs.append(_Sequence(i, prompt, max_new, frozenset(eos.tolist())))
        arrivals.append(validate.whole(r.arrival, f"request {i}: arrival", 0))
    return seqs, arrivals


@dataclass(frozen=True)
class _Admission:
    """A sequence admitted this step: the tokens it computes now, the blocks it found cached."""

    seq: _Sequence
    new_tokens: int
    shared: list[int]


class Scheduler:
    """The serving loop over one paged pool (see the module docstring), its options kept:
    ``Scheduler(model, num_blocks=..., ...).run(requests)``; ``serve`` is that call.

    ``num_blocks`` sizes the pool (default: enough for every request at its longest at once);
    ``max_len`` bounds a sequence (default: the longest prompt + max_new_tokens); ``reserve`` is
    "blocks", "max_len" or "request"; ``max_running`` caps the batch; ``watermark`` is the share
    of the pool admission leaves free for the running sequences to grow into (vLLM keeps 1%:
    admitting up to the last block means preempting at the next step); ``hash_fn`` names blocks
    for the prefix cache (a weak one shows collisions handled).  ``on_step(stats, rows, tokens,
    cache)`` is called after every step that ran, with the request of each row of the step, the
    token each made, and the cache as the step left it (its finished sequences still in it).
    """

    def __init__(self, model, *, block_size: int = DEFAULT_BLOCK_SIZE, num_blocks: int | None = None,
                 max_len: int | None = None, preempt: bool = True, prefix_sharing: bool = False,
                 reserve: str = "blocks", cache_dtype=None, max_running: int | None = None,
                 watermark: float = 0.01, hash_fn: Callable = chain_hash,
                 on_step: Callable[[StepStats, list, list, PagedKVCache], None] | None = None):
        if reserve not in RESERVE_POLICIES:
            raise ValueError(f"reserve must be one of {', '.join(RESERVE_POLICIES)}, got {reserve!r}")
        if not validate.is_number(watermark) or not 0 <= watermark < 1:
            raise ValueError(f"watermark must be a share of the pool, from 0 to below 1, got {watermark!r}")
        self.model = model
        self.block_size = validate.whole(block_size, "block_size", 1)
        self.max_running = None if max_running is None else validate.whole(max_running, "max_running", 1)
        self.num_blocks, self.max_len, self.reserve, self.watermark = num_blocks, max_len, reserve, watermark
        self.preempt, self.prefix_sharing, self.cache_dtype = preempt, prefix_sharing, cache_dtype
        self.hash_fn, self.on_step = hash_fn, on_step

    # ------------------------------------------------------------------ the loop

    def run(self, requests: Sequence[Request]) -> ServeResult:
        """Serve ``requests`` to the end: every step makes room, admits, runs one forward pass
        and lets the finished sequences go."""
        self._start(requests)
        while self._pending or self._waiting or self._running:
            started = time.perf_counter()
            self._arrive()
            preempted = self._make_room()
            admitted = [] if preempted else self._admit()
            if self._running or admitted:
                self._forward_and_finish(admitted, preempted, started)
            else:                               # nothing to run before the next arrival
                self._idle(preempted, started)
            self._step += 1
        return ServeResult(self._outputs, self._steps, self.block_size, self._kv.num_blocks,
                           self._prefix.stats if self._prefix is not None else None,
                           time.perf_counter() - self._started, self._preempted_requests,
                           self._prefilled, self._found)

    # ------------------------------------------------------------------ before the first step

    def _start(self, requests) -> None:
        """Check the requests, size the pool, refuse a request that could never fit, and set
        up the queues."""
        seqs, self._arrivals = _check_requests(self.model, requests)
        self._max_len = self._sequence_room(seqs)
        num_blocks = self.num_blocks
        if num_blocks is None:
            num_blocks = max(1, sum(self._blocks_at_longest(s) for s in seqs))
        num_blocks = validate.whole(num_blocks, "num_blocks", 1)
        for s in seqs:
            if s.max_new and self._blocks_at_longest(s) > num_blocks:
                raise OutOfBlocks(self._blocks_at_longest(s), num_blocks,
                                  f"request {s.index} ({s.prompt_len} prompt tokens + {s.max_new} new) can "
                                  f"never fit in a pool of {num_blocks} blocks of {self.block_size}")
        # reservations made at admission never grow: only paging needs the watermark
        self._keep_free = int(self.watermark * num_blocks) if self.reserve == "blocks" else 0
        cfg, model = self.model.config, self.model
        self._kv = PagedKVCache(cfg.num_hidden_layers, 0, cfg.num_key_value_heads, cfg.head_dim, self._max_len,
                                dtype=model.dtype.name if self.cache_dtype is None else self.cache_dtype,
                                compute_dtype=getattr(model, "compute_dtype", model.dtype), block_size=self.block_size, num_blocks=num_blocks)
        self._prefix = PrefixIndex(self._kv.pool, self.hash_fn) if self.prefix_sharing else None
        order = sorted(range(len(seqs)), key=lambda i: (self._arrivals[i], i))
        self._pending = deque(seqs[i] for i in order if seqs[i].max_new > 0)
        self._waiting: deque[_Sequence] = deque()
        self._running: list[_Sequence] = []          # row r of the cache is running[r], oldest first
        self._outputs: list[list[int]] = [[] for _ in seqs]
        self._steps: list[StepStats] = []
        self._preempted_requests: list[int] = []
        self._prefilled, self._found = [0] * len(seqs), [0] * len(seqs)
        self._step, self._started = 0, time.perf_counter()

    def _sequence_room(self, seqs: list[_Sequence]) -> int:
        """max_len: the option, or the longest request (the model's limit to reserve max_len)."""
        limit = self.model.config.max_position_embeddings
        longest = max((s.prompt_len + s.max_new for s in seqs), default=1)
        max_len = self.max_len
        if max_len is None:
            max_len = longest if self.reserve != "max_len" else limit
        max_len = validate.whole(max_len, "max_len", 1)
        if longest > max_len:
            raise ValueError(f"a request of {longest} positions passes max_len ({max_len})")
        if max_len > limit:
            raise ValueError(f"max_len ({max_len}) passes max_position_embeddings ({limit})")
        return max_len

    def _blocks_at_longest(self, s: _Sequence) -> int:
        """Blocks the sequence holds at its longest (its last token is never written)."""
        most = max(s.prompt_len + s.max_new - 1, 1)
        return blocks_for(max(most, self._reservation(s)), self.block_size)

    def _reservation(self, s: _Sequence) -> int:
        """Positions the sequence holds from admission on (0: as they arrive)."""
        return _reserved_positions(self.reserve, s.prompt_len, s.max_new, self._max_len)

    # ------------------------------------------------------------------ the steps of a step

    def _arrive(self) -> None:
        """Requests whose arrival step has come join the waiting queue."""
        while self._pending and self._arrivals[self._pending[0].index] <= self._step:
            self._waiting.append(self._pending.popleft())

    def _make_room(self) -> int:
        """Room for every running sequence's next token: preempt the newest while the free
        blocks do not cover it (its blocks freed, back to the front of the queue, recomputed when
        admitted again).  Returns how many were preempted; with preempt=False, OutOfBlocks."""
        kv, running = self._kv, self._running
        preempted = 0
        while running and kv.blocks_needed(np.ones(len(running), np.int64)) > kv.num_free:
            if not self.preempt:
                raise OutOfBlocks(kv.blocks_needed(np.ones(len(running), np.int64)), kv.num_free,
                                  f"step {self._step}: the next token of {len(running)} running sequences "
                                  "(preempt=False)")
            victim = running.pop()              # the newest: recomputed when admitted again
            kv.free(len(running))
            victim.registered = 0
            self._waiting.appendleft(victim)
            self._preempted_requests.append(victim.index)
            preempted += 1
        return preempted

    def _admit(self) -> list[_Admission]:
        """The head of the queue joins while the blocks it needs (minus those found in the prefix
        cache) are free, beside the running sequences' next tokens and the watermark."""
        kv, prefix, waiting = self._kv, self._prefix, self._waiting
        need = kv.blocks_needed(np.ones(len(self._running), np.int64)) if self._running else 0
        admitted: list[_Admission] = []
        while waiting and (self.max_running is None or len(self._running) + len(admitted) < self.max_running):
            seq = waiting[0]
            shared = prefix.lookup(seq.tokens) if prefix is not None else []
            new_blocks = max(blocks_for(len(seq.tokens), self.block_size),
                             blocks_for(self._reservation(seq), self.block_size)) - len(shared)
            revived = prefix.blocks_to_take_from_free(shared) if shared else 0
            spare = self._keep_free if self._running or admitted else 0   # an empty batch always takes one
            if need + new_blocks + revived + spare > kv.num_free:
                break                           # the head of the queue waits, and so do the rest
            waiting.popleft()
            admitted.append(self._join(seq, shared, new_blocks))
            if self.reserve == "blocks":
                need += new_blocks              # taken by the forward pass
        return admitted

    def _join(self, seq: _Sequence, shared: list[int], new_blocks: int) -> _Admission:
        """Give an admitted sequence its row: the cached blocks it shares, and its whole
        reservation now unless it pages."""
        kv, prefix = self._kv, self._prefix
        if prefix is not None:
            prefix.record(seq.tokens, shared)
            prefix.take(shared)
        row = kv.add_sequence(shared, len(shared) * self.block_size)
        if self.reserve != "blocks":
            kv.reserve_blocks(row, new_blocks)
        cached = len(shared) * self.block_size
        self._prefilled[seq.index] += len(seq.tokens) - cached
        self._found[seq.index] += cached
        return _Admission(seq, len(seq.tokens) - cached, shared)

    def _forward_and_finish(self, admitted: list[_Admission], preempted: int, started: float) -> None:
        """One forward pass (the running rows decode, the admitted ones prefill what is not
        cached), then the next tokens, the step's statistics, and the finished sequences out."""
        kv = self._kv
        tokens = [s.tokens[-1] for s in self._running]
        counts = [1] * len(self._running)
        for a in admitted:
            tokens += a.seq.tokens[len(a.seq.tokens) - a.new_tokens:]
            counts.append(a.new_tokens)
        self._running += [a.seq for a in admitted]
        logits = self.model.forward(np.asarray(tokens, np.int64), np.asarray(counts, np.int64), kv)
        tokens_cached, blocks_used = kv.filled_slots(), kv.num_used
        chosen = np.argmax(logits, axis=-1)
        rows = [s.index for s in self._running]
        keep = self._emit(chosen)
        reserved = blocks_used * self.block_size
        stats = StepStats(step=self._step, running=len(rows), waiting=len(self._waiting),
                          admitted=len(admitted), finished=len(rows) - len(keep), preempted=preempted,
                          blocks_used=blocks_used, tokens_cached=tokens_cached,
                          kv_waste=1.0 - tokens_cached / reserved if reserved else 0.0,
                          prefill_tokens=sum(a.new_tokens for a in admitted),
                          cached_tokens=sum(len(a.shared) for a in admitted) * self.block_size,
                          seconds=time.perf_counter() - started)
        self._steps.append(stats)
        if self.on_step is not None:
            self.on_step(stats, rows, chosen.tolist(), kv)
        if len(keep) < len(rows):
            kv.select(keep)
            self._running = [self._running[r] for r in keep]

    def _emit(self, chosen: np.ndarray) -> list[int]:
        """Append each running sequence's token (newly full blocks enter the prefix cache first);
        returns the rows that go on (no EOS, under max_new_tokens)."""
        keep = []
        bs = self.block_size
        for r, seq in enumerate(self._running):
            if self._prefix is not None:
                cached = len(seq.tokens)        # every token so far is in the cache now
                if cached // bs > seq.registered:
                    self._prefix.register(self._kv.block_table(r), seq.tokens[:cached])
                    seq.registered = cached // bs
            token = int(chosen[r])
            seq.tokens.append(token)
            self._outputs[seq.index].append(token)
            if token not in seq.eos and seq.generated < seq.max_new:
                keep.append(r)
        return keep

    def _idle(self, preempted: int, started: float) -> None:
        """A step with nothing to run (the next request has not arrived): recorded all the same."""
        self._steps.append(StepStats(step=self._step, running=0, waiting=len(self._waiting), admitted=0,
                                     finished=0, preempted=preempted, blocks_used=self._kv.num_used,
                                     tokens_cached=0, kv_waste=0.0, prefill_tokens=0, cached_tokens=0,
                                     seconds=time.perf_counter() - started))


def serve(model, requests: Sequence[Request], **options) -> ServeResult:
    """Serve ``requests`` with greedy decoding over one paged pool (see the module docstring):
    ``Scheduler(model, **options).run(requests)``, whose options it takes."""
    return Scheduler(model, **options).run(requests)
