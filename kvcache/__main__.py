"""The engine's command line: ``python -m kvcache generate ...``.

    python -m kvcache generate --model smollm2-135m-instruct --chat --prompt "What is a KV cache?"
    python -m kvcache generate --random --prompt-ids 1 2 3 --prompt-ids 4 5
    python -m kvcache generate --model PATH --prompt "The cache" --beams 4
    python -m kvcache generate --random --prompt-ids 7 8 9 --cache-dtype int8 --max-new-tokens 64
    python -m kvcache generate --model smollm2-135m-instruct --chat --prompt "Hi" --cache-dtype int4
    python -m kvcache generate --model smollm2-135m-instruct --chat --prompt "Repeat: ..." --prompt-lookup 10
    python -m kvcache generate --model smollm2-135m-instruct --prompt "..." --cache window --window 252 --sinks 4
    python -m kvcache generate --model smollm2-135m-instruct --prompt "..." --cache h2o --budget 256 --recent 64

``--model`` takes the name of an installed model (``kvcache.models``), a GGUF file, or a folder
written by transformers' ``save_pretrained`` (config.json and safetensors).  With a tokenizer
(the GGUF file's own, or a tokenizer.json in the folder), ``--prompt`` takes text and the output
is decoded back to text; ``--chat`` makes each prompt a user turn of the model's chat template
(``--system`` adds a system turn), and generation stops at the template's end-of-turn token,
the model's EOS.  ``--random`` builds a random Llama model (sizes from the flags).  Each
``--prompt-ids`` or ``--prompt`` is one sequence of the batch.  A single text prompt decoded
greedily is printed as it is generated, token by token.  Printed: the new tokens of each
prompt, the prefill and decode speed in tokens per second, and the cache's bytes (allocated for
L_max positions, and used: for int4 and int2, the codes, scales, offsets and full-precision
window really kept).  ``--prompt-lookup K`` decodes greedily with drafts of up to K
tokens looked up in the text so far (``kvcache.speculative``): the same tokens, and printed
with them the acceptance (draft tokens accepted / proposed, tokens per forward pass) and the
tokens/s.  ``--json`` prints the same as one JSON object.
"""
from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

from .layouts import CACHE_KINDS
from .cache_dtypes import CACHE_DTYPES
from .checkpoint import CheckpointError
from .config import UnsupportedConfig
from .generate import beam_search, greedy
from .gguf_file import GGUFError
from .speculative import greedy as speculative_greedy
from .model import Model, StateDictError
from .models import load_with_tokenizer
from .tokenizer import TokenizerError


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m kvcache", description="The course's numpy engine.")
    sub = parser.add_subparsers(dest="command", required=True)
    gen = sub.add_parser("generate", help="generate tokens with the KV cache",
                         description="Greedy decoding (or beam search with --beams) with the KV cache.")
    source = gen.add_mutually_exclusive_group(required=True)
    source.add_argument("--model", metavar="NAME|PATH",
                        help="an installed model's name (smollm2-135m-instruct), a .gguf file, or a "
                             "save_pretrained folder (config.json, safetensors)")
    source.add_argument("--random", action="store_true", help="a random Llama model (see the size flags)")
    gen.add_argument("--prompt-ids", metavar="ID", type=int, nargs="+", action="append", default=[],
                     help="token ids of one prompt (repeat the flag for a batch)")
    gen.add_argument("--prompt", action="append", default=[],
                     help="a prompt as text (needs the model's tokenizer; repeatable)")
    gen.add_argument("--chat", action="store_true",
                     help="each --prompt is a user turn of the model's chat template")
    gen.add_argument("--system", default=None, help="with --chat: a system turn before each prompt")
    gen.add_argument("--max-new-tokens", type=int, default=32)
    gen.add_argument("--beams", type=int, default=1, help="beam search with this many beams (1: greedy)")
    gen.add_argument("--prompt-lookup", type=int, default=None, metavar="K",
                     help="greedy decoding with drafts of up to K tokens found in the prompt and the "
                          "text so far (speculative decoding: the same tokens, fewer forward passes)")
    gen.add_argument("--length-penalty", type=float, default=1.0)
    gen.add_argument("--early-stopping", choices=("true", "false", "never"), default="false")
    gen.add_argument("--eos", default=None,
                     help="EOS token id ('none' for no EOS; default: the model's eos_token_id)")
    gen.add_argument("--cache", default="contiguous", choices=sorted(CACHE_KINDS), help="cache layout")
    gen.add_argument("--window", type=int, default=None, metavar="W",
                     help="with --cache window: the recent positions each sequence keeps")
    gen.add_argument("--sinks", type=int, default=None, metavar="S",
                     help="with --cache window or h2o: the first positions kept for ever (default 0)")
    gen.add_argument("--budget", type=int, default=None, metavar="B",
                     help="with --cache h2o: the positions each sequence keeps")
    gen.add_argument("--recent", type=int, default=None, metavar="R",
                     help="with --cache h2o: of the budget, the newest positions always kept")
    gen.add_argument("--cache-dtype", default=None, choices=sorted(CACHE_DTYPES),
                     help="cache storage (default: the model's dtype)")
    gen.add_argument("--dtype", default="float32", choices=("float32", "float64", "float16", "bfloat16"),
                     help="model dtype: float16 and bfloat16 store the weights at 2 bytes a value")
    gen.add_argument("--json", action="store_true", help="print one JSON object")
    sizes = gen.add_argument_group("random model sizes (with --random)")
    sizes.add_argument("--seed", type=int, default=0)
    sizes.add_argument("--vocab-size", type=int, default=32000)
    sizes.add_argument("--hidden-size", type=int, default=256)
    sizes.add_argument("--intermediate-size", type=int, default=688)
    sizes.add_argument("--layers", type=int, default=4)
    sizes.add_argument("--heads", type=int, default=8)
    sizes.add_argument("--kv-heads", type=int, default=4)
    sizes.add_argument("--max-positions", type=int, default=4096)
    return parser


def _eos(arg, model):
    if arg is None:
        return model.config.eos_token_id
    if arg.lower() == "none":
        return None
    try:
        return int(arg)
    except ValueError:
        raise ValueError(f"--eos takes a token id or 'none', got {arg!r}") from None


class _StreamingTrace(list):
    """A greedy run's trace that shows each step's token as text as soon as the step is recorded
    (one sequence: each step holds its one new token)."""

    def __init__(self, stream, show):
        super().__init__()
        self.stream, self.show = stream, show

    def append(self, step):
        super().append(step)
        for token in step["tokens"]:
            self.show(self.stream.push(token))


def _show(text: str) -> None:
    print(text, end="", flush=True)


def _model_and_tokenizer(args):
    """A model of random weights (no tokenizer) or the one ``--model`` names, with its tokenizer."""
    if not args.random:
        return load_with_tokenizer(args.model, dtype=args.dtype)
    config = {"vocab_size": args.vocab_size, "hidden_size": args.hidden_size,
              "intermediate_size": args.intermediate_size, "num_hidden_layers": args.layers,
              "num_attention_heads": args.heads, "num_key_value_heads": args.kv_heads,
              "max_position_embeddings": args.max_positions}
    return Model.random(config, seed=args.seed, dtype=args.dtype), None


def _prompts(args, tokenizer) -> list[list[int]]:
    """The prompts' token ids: ``--prompt-ids`` as given, then ``--prompt``'s texts encoded (as
    chat turns with ``--chat``)."""
    if args.prompt and tokenizer is None:
        raise ValueError("--prompt needs a tokenizer.json in the --model folder (or a GGUF file, which "
                         "holds its tokenizer); use --prompt-ids")
    if args.chat and not args.prompt:
        raise ValueError("--chat takes its turns from --prompt (text)")
    if args.system is not None and not args.chat:
        raise ValueError("--system needs --chat")
    prompts = [list(p) for p in args.prompt_ids]
    if tokenizer is not None:
        prompts += [tokenizer.chat_ids(text, args.system) if args.chat else tokenizer.encode(text)
                    for text in args.prompt]
    if not prompts:
        raise ValueError("give at least one --prompt-ids (or --prompt with a tokenizer)")
    return prompts


# The options each cache layout takes from the command line (flag -> keyword of the layout).
CACHE_FLAGS = {"window": {"window": "window", "sinks": "sinks"},
               "h2o": {"budget": "budget", "recent": "recent", "sinks": "sinks"}}


def _cache_options(args) -> dict:
    """The keywords of ``--cache``'s layout from its flags; a flag given to a layout that does not
    take it, or a layout's required flag left out, is an error naming it."""
    taken = CACHE_FLAGS.get(args.cache, {})
    given = {flag: getattr(args, flag) for flag in ("window", "sinks", "budget", "recent")
             if getattr(args, flag) is not None}
    stray = sorted(set(given) - set(taken))
    if stray:
        raise ValueError(f"--cache {args.cache} takes no {', '.join('--' + f for f in stray)}")
    required = {"window": ("window",), "h2o": ("budget", "recent")}.get(args.cache, ())
    missing = [f for f in required if f not in given]
    if missing:
        raise ValueError(f"--cache {args.cache} needs {' and '.join('--' + f for f in missing)}")
    return {taken[flag]: value for flag, value in given.items()}


def _decode(args, model, prompts, eos, stream, show) -> tuple[list, list[list]]:
    """The outputs, and a trace per run: one greedy run of every prompt (shown as it goes when
    ``stream`` is given), or a beam search per prompt."""
    if args.beams == 1:
        trace: list = _StreamingTrace(stream, show) if stream is not None else []
        outputs = greedy(model, prompts, args.max_new_tokens, eos, args.cache, cache_dtype=args.cache_dtype,
                         trace=trace, **_cache_options(args))
        return outputs, [trace]
    early = {"true": True, "false": False, "never": "never"}[args.early_stopping]
    outputs, traces = [], []
    for p in prompts:
        trace = []
        outputs.append(beam_search(model, p, args.beams, args.max_new_tokens, eos, args.length_penalty,
                                   early, args.cache, cache_dtype=args.cache_dtype, trace=trace,
                                   **_cache_options(args)))
        traces.append(trace)
    return outputs, traces


def _phase_times(traces: list[list], start: float) -> tuple[float, float, int]:
    """(prefill seconds, decode seconds, decoded tokens): the prefill from the start to each run's
    first step; the decode the steps after it."""
    prefill_s, decode_s, decode_tokens = 0.0, 0.0, 0
    run_start = start
    for trace in traces:
        if not trace:
            continue
        prefill_s += trace[0]["time"] - run_start
        decode_s += trace[-1]["time"] - trace[0]["time"]
        decode_tokens += sum(len(step["tokens"]) for step in trace[1:])
        run_start = trace[-1]["time"]
    return prefill_s, decode_s, decode_tokens


def generate_command(args, show=None) -> dict:
    """Run ``generate``; returns what is printed (a dict).  ``show(text)``, when given, receives
    the reply of a single text prompt piece by piece as greedy decoding produces it."""
    model, tokenizer = _model_and_tokenizer(args)
    prompts = _prompts(args, tokenizer)
    eos = _eos(args.eos, model)
    if args.prompt_lookup is not None:
        return _prompt_lookup_command(args, model, tokenizer, prompts, eos)
    return _decode_command(args, show, model, tokenizer, prompts, eos)


def _decode_command(args, show, model, tokenizer, prompts, eos) -> dict:
    """``generate`` by greedy decoding or beam search, timed from its traces."""
    streaming = show is not None and tokenizer is not None and args.beams == 1 and len(prompts) == 1 \
        and bool(args.prompt)
    start = time.perf_counter()
    outputs, traces = _decode(args, model, prompts, eos, tokenizer.stream() if streaming else None, show)
    total = time.perf_counter() - start
    prefill_s, decode_s, decode_tokens = _phase_times(traces, start)
    cache_bytes = max((s["cache_bytes"] for t in traces for s in t), default=0)
    used = max((s["cache_used_bytes"] for t in traces for s in t), default=0)
    result = {
        "outputs": outputs,
        "prompt_tokens": sum(len(p) for p in prompts),
        "new_tokens": sum(len(o) for o in outputs),
        "seconds": total,
        "prefill_tokens_per_s": sum(len(p) for p in prompts) / prefill_s if prefill_s > 0 else None,
        "decode_tokens_per_s": decode_tokens / decode_s if decode_s > 0 else None,
        "tokens_per_s": sum(len(o) for o in outputs) / total if total > 0 else None,
        "cache": args.cache, "cache_dtype": args.cache_dtype or model.dtype.name,
        "cache_bytes": int(cache_bytes), "cache_used_bytes": int(used),
        "beams": args.beams, "eos_token_id": eos,
    }
    if tokenizer is not None:
        result["texts"] = [tokenizer.decode(o) for o in outputs]
    result["streamed"] = streaming
    return result


def _prompt_lookup_command(args, model, tokenizer, prompts, eos) -> dict:
    """``generate --prompt-lookup K``: speculative greedy decoding, with its counts."""
    if args.beams != 1:
        raise ValueError("--prompt-lookup drafts for greedy decoding: it does not combine with --beams")
    lookup: dict = {}
    start = time.perf_counter()
    outputs = speculative_greedy(model, prompts, args.max_new_tokens, eos, args.cache,
                                 num_draft_tokens=args.prompt_lookup, stats=lookup, cache_dtype=args.cache_dtype,
                                 **_cache_options(args))
    total = time.perf_counter() - start
    prefill_s, decode_s = lookup["prefill_seconds"], lookup["decode_seconds"]
    decode_tokens = max(0, lookup["tokens"] - len(prompts))          # the prefill's tokens aside
    lookup["num_draft_tokens"] = args.prompt_lookup
    lookup["tokens_per_forward_pass"] = lookup["tokens"] / lookup["forward_passes"] if lookup["forward_passes"] else None
    result = {
        "outputs": outputs,
        "prompt_tokens": sum(len(p) for p in prompts),
        "new_tokens": sum(len(o) for o in outputs),
        "seconds": total,
        "prefill_tokens_per_s": sum(len(p) for p in prompts) / prefill_s if prefill_s > 0 else None,
        "decode_tokens_per_s": decode_tokens / decode_s if decode_s > 0 else None,
        "tokens_per_s": sum(len(o) for o in outputs) / total if total > 0 else None,
        "cache": args.cache, "cache_dtype": args.cache_dtype or model.dtype.name,
        "cache_bytes": int(lookup["cache_bytes"]), "cache_used_bytes": None,
        "beams": 1, "eos_token_id": eos, "prompt_lookup": lookup,
    }
    if tokenizer is not None:
        result["texts"] = [tokenizer.decode(o) for o in outputs]
    result["streamed"] = False
    return result


def _print(result: dict) -> None:
    if result["streamed"]:
        print("\n")                            # end the streamed reply, then a blank line
    for i, out in enumerate(result["outputs"]):
        print(f"prompt {i}: {len(out)} new tokens: {' '.join(map(str, out))}")
        if "texts" in result and not result["streamed"]:
            print(f"  text: {result['texts'][i]}")

    def rate(x):
        return "n/a" if x is None else f"{x:,.1f}"

    print(f"prefill: {result['prompt_tokens']} tokens, {rate(result['prefill_tokens_per_s'])} tokens/s")
    print(f"decode: {rate(result['decode_tokens_per_s'])} tokens/s "
          f"({result['new_tokens']} new tokens in {result['seconds']:.3f} s, "
          f"{rate(result['tokens_per_s'])} tokens/s overall)")
    lookup = result.get("prompt_lookup")
    if lookup is not None:
        share = f" ({lookup['accepted'] / lookup['proposed']:.0%})" if lookup["proposed"] else ""
        per_pass = "n/a" if lookup["tokens_per_forward_pass"] is None else f"{lookup['tokens_per_forward_pass']:.2f}"
        print(f"prompt lookup: {lookup['accepted']}/{lookup['proposed']} draft tokens accepted{share}, "
              f"{per_pass} tokens per forward pass ({lookup['tokens']} tokens in {lookup['forward_passes']} "
              f"passes), {rate(result['tokens_per_s'])} tokens/s")
    used = result["cache_used_bytes"]
    print(f"cache: {result['cache_bytes']:,} bytes allocated"
          + ("" if used is None else f", {used:,} bytes used")
          + f" ({result['cache']}, {result['cache_dtype']})")


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    try:
        result = generate_command(args, show=None if args.json else _show)
    except (ValueError, TypeError, UnsupportedConfig, StateDictError, CheckpointError, GGUFError,
            TokenizerError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(result, default=lambda o: o.item() if isinstance(o, np.generic) else str(o)))
    else:
        _print(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
