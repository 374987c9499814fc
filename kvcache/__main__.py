"""The engine's command line: ``python -m kvcache generate ...``.

    python -m kvcache generate --random --prompt-ids 1 2 3 --prompt-ids 4 5
    python -m kvcache generate --model PATH --prompt "The cache" --beams 4
    python -m kvcache generate --random --prompt-ids 7 8 9 --cache-dtype int8 --max-new-tokens 64

``--model`` reads a folder written by transformers' ``save_pretrained`` (config.json and
safetensors); with a tokenizer.json beside them, ``--prompt`` takes text and the output is
decoded back to text.  ``--random`` builds a random Llama model (sizes from the flags).  Each
``--prompt-ids`` or ``--prompt`` is one sequence of the batch.  Printed: the new tokens of each
prompt, the prefill and decode speed in tokens per second, and the cache's bytes (allocated for
L_max positions, and used).  ``--json`` prints the same as one JSON object.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from .cache import CACHE_KINDS
from .cache_dtypes import CACHE_DTYPES
from .checkpoint import CheckpointError
from .config import UnsupportedConfig
from .generate import beam_search, greedy
from .model import Model, StateDictError


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m kvcache", description="The course's numpy engine.")
    sub = parser.add_subparsers(dest="command", required=True)
    gen = sub.add_parser("generate", help="generate tokens with the KV cache",
                         description="Greedy decoding (or beam search with --beams) with the KV cache.")
    source = gen.add_mutually_exclusive_group(required=True)
    source.add_argument("--model", metavar="PATH", help="a save_pretrained folder (config.json, safetensors)")
    source.add_argument("--random", action="store_true", help="a random Llama model (see the size flags)")
    gen.add_argument("--prompt-ids", metavar="ID", type=int, nargs="+", action="append", default=[],
                     help="token ids of one prompt (repeat the flag for a batch)")
    gen.add_argument("--prompt", action="append", default=[],
                     help="a prompt as text (needs tokenizer.json in the model folder; repeatable)")
    gen.add_argument("--max-new-tokens", type=int, default=32)
    gen.add_argument("--beams", type=int, default=1, help="beam search with this many beams (1: greedy)")
    gen.add_argument("--length-penalty", type=float, default=1.0)
    gen.add_argument("--early-stopping", choices=("true", "false", "never"), default="false")
    gen.add_argument("--eos", default=None,
                     help="EOS token id ('none' for no EOS; default: the model's eos_token_id)")
    gen.add_argument("--cache", default="contiguous", choices=sorted(CACHE_KINDS), help="cache layout")
    gen.add_argument("--cache-dtype", default=None, choices=sorted(CACHE_DTYPES),
                     help="cache storage (default: the model's dtype)")
    gen.add_argument("--dtype", default="float32", choices=("float32", "float64"), help="model dtype")
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


def _tokenizer(folder):
    """The folder's tokenizer.json as a ``tokenizers.Tokenizer``, or None when there is none."""
    if folder is None or not (Path(folder) / "tokenizer.json").is_file():
        return None
    from tokenizers import Tokenizer
    return Tokenizer.from_file(str(Path(folder) / "tokenizer.json"))


def _eos(arg, model):
    if arg is None:
        return model.config.eos_token_id
    if arg.lower() == "none":
        return None
    try:
        return int(arg)
    except ValueError:
        raise ValueError(f"--eos takes a token id or 'none', got {arg!r}") from None


def generate_command(args) -> dict:
    """Run ``generate``; returns what is printed (a dict)."""
    if args.random:
        config = {"vocab_size": args.vocab_size, "hidden_size": args.hidden_size,
                  "intermediate_size": args.intermediate_size, "num_hidden_layers": args.layers,
                  "num_attention_heads": args.heads, "num_key_value_heads": args.kv_heads,
                  "max_position_embeddings": args.max_positions}
        model = Model.random(config, seed=args.seed, dtype=args.dtype)
        tokenizer = None
    else:
        model = Model.load(args.model, dtype=args.dtype)
        tokenizer = _tokenizer(args.model)
    if args.prompt and tokenizer is None:
        raise ValueError("--prompt needs a tokenizer.json in the --model folder; use --prompt-ids")
    prompts = [list(p) for p in args.prompt_ids]
    if tokenizer is not None:
        prompts += [tokenizer.encode(text).ids for text in args.prompt]
    if not prompts:
        raise ValueError("give at least one --prompt-ids (or --prompt with a tokenizer)")
    eos = _eos(args.eos, model)
    early = {"true": True, "false": False, "never": "never"}[args.early_stopping]
    start = time.perf_counter()
    traces: list[list] = []
    if args.beams == 1:
        trace: list = []
        outputs = greedy(model, prompts, args.max_new_tokens, eos, args.cache, cache_dtype=args.cache_dtype,
                         trace=trace)
        traces.append(trace)
    else:
        outputs = []
        for p in prompts:
            trace = []
            outputs.append(beam_search(model, p, args.beams, args.max_new_tokens, eos, args.length_penalty,
                                       early, args.cache, cache_dtype=args.cache_dtype, trace=trace))
            traces.append(trace)
    total = time.perf_counter() - start
    # prefill: from the start to each run's first step; decode: the steps after it
    prefill_s, decode_s, decode_tokens = 0.0, 0.0, 0
    run_start = start
    for trace in traces:
        if not trace:
            continue
        prefill_s += trace[0]["time"] - run_start
        decode_s += trace[-1]["time"] - trace[0]["time"]
        decode_tokens += sum(len(step["tokens"]) for step in trace[1:])
        run_start = trace[-1]["time"]
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
    return result


def _print(result: dict) -> None:
    for i, out in enumerate(result["outputs"]):
        print(f"prompt {i}: {len(out)} new tokens: {' '.join(map(str, out))}")
        if "texts" in result:
            print(f"  text: {result['texts'][i]}")

    def rate(x):
        return "n/a" if x is None else f"{x:,.1f}"

    print(f"prefill: {result['prompt_tokens']} tokens, {rate(result['prefill_tokens_per_s'])} tokens/s")
    print(f"decode: {rate(result['decode_tokens_per_s'])} tokens/s "
          f"({result['new_tokens']} new tokens in {result['seconds']:.3f} s, "
          f"{rate(result['tokens_per_s'])} tokens/s overall)")
    print(f"cache: {result['cache_bytes']:,} bytes allocated, {result['cache_used_bytes']:,} bytes used "
          f"({result['cache']}, {result['cache_dtype']})")


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    try:
        result = generate_command(args)
    except (ValueError, TypeError, UnsupportedConfig, StateDictError, CheckpointError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(result, default=lambda o: o.item() if isinstance(o, np.generic) else str(o)))
    else:
        _print(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
