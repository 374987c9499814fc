"""Read a checkpoint folder as transformers' ``save_pretrained`` writes it.

    folder/config.json                      the model's sizes (``kvcache.config``)
    folder/model.safetensors                all tensors in one file, or
    folder/model.safetensors.index.json     {"weight_map": {tensor name: shard file}} and the shards
    folder/tokenizer.json                   (optional) the tokenizer, for text in and out

Tensors are read with the ``safetensors`` package's numpy API.  numpy has no bfloat16, the format
many checkpoints ship in, and safetensors' numpy API refuses it; such a tensor is read as its raw
16-bit words from the file and viewed as ``ml_dtypes``' bfloat16 (``kvcache.half``): the same bits,
2 bytes a value, no float32 copy.  The model then keeps them (a bfloat16 model) or widens them
exactly (a bfloat16 is the top half of a float32).
"""
from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np

from .half import bfloat16

__all__ = ["CheckpointError", "read_config", "read_state_dict", "read_tensors"]

INDEX = "model.safetensors.index.json"
SINGLE = "model.safetensors"


class CheckpointError(ValueError):
    """The folder is not a readable safetensors checkpoint (what is wrong is in the message)."""


def read_config(folder) -> dict:
    """The parsed config.json of ``folder``."""
    path = Path(folder) / "config.json"
    if not Path(folder).is_dir():
        raise CheckpointError(f"{folder} is not a folder")
    if not path.is_file():
        raise CheckpointError(f"{folder} has no config.json")
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as err:
        raise CheckpointError(f"{path} is not valid JSON: {err}") from None
    if not isinstance(config, dict):
        raise CheckpointError(f"{path} does not hold a JSON object")
    return config


def _bfloat16_tensor(path: Path, name: str) -> np.ndarray:
    """A BF16 tensor of a safetensors file as a bfloat16 array of its bits, from the file's
    header and raw bytes.

    The format: 8 bytes (little-endian length n), n bytes of JSON header mapping each name to
    {"dtype", "shape", "data_offsets": [begin, end]}, offsets counted from the end of the header.
    """
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        entry = json.loads(f.read(n))[name]
        begin, end = entry["data_offsets"]
        f.seek(8 + n + begin)
        words = np.fromfile(f, dtype="<u2", count=(end - begin) // 2)   # read straight into the array
    return words.view(bfloat16).reshape(entry["shape"])


def read_tensors(path, names=None) -> dict[str, np.ndarray]:
    """The tensors ``names`` (all when None) of one .safetensors file, as numpy arrays."""
    from safetensors import safe_open

    path = Path(path)
    out = {}
    try:
        with safe_open(str(path), framework="numpy") as f:
            keys = list(f.keys())
            missing = [n for n in (names or []) if n not in keys]
            if missing:
                raise CheckpointError(f"{path.name} lacks {', '.join(missing)} (named in {INDEX})")
            for name in (keys if names is None else names):
                if f.get_slice(name).get_dtype() == "BF16":
                    out[name] = _bfloat16_tensor(path, name)
                else:
                    out[name] = f.get_tensor(name)
    except CheckpointError:
        raise
    except Exception as err:          # safetensors reports a damaged file with its own error types
        raise CheckpointError(f"cannot read {path}: {err}") from None
    return out


def read_state_dict(folder) -> dict[str, np.ndarray]:
    """Every tensor of the checkpoint in ``folder``, single file or sharded."""
    folder = Path(folder)
    index = folder / INDEX
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
        except (ValueError, KeyError, TypeError) as err:
            raise CheckpointError(f"{index} has no readable weight_map: {err}") from None
        by_shard: dict[str, list[str]] = {}
        for name, shard in weight_map.items():
            by_shard.setdefault(shard, []).append(name)
        state = {}
        for shard, names in sorted(by_shard.items()):
            path = folder / shard
            if Path(shard).name != shard or not path.is_file():
                raise CheckpointError(f"{INDEX} names shard {shard!r}, which is not a file in {folder}")
            state.update(read_tensors(path, names))
        return state
    if (folder / SINGLE).is_file():
        return read_tensors(folder / SINGLE)
    others = sorted(p.name for p in folder.glob("*.bin")) + sorted(p.name for p in folder.glob("*.pt*"))
    hint = f" (found {', '.join(others)}: only safetensors checkpoints are read)" if others else ""
    raise CheckpointError(f"{folder} has neither {SINGLE} nor {INDEX}{hint}")
