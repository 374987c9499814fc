"""A stable, unique id for every cell of a notebook (nbformat 4.5).

JupyterLab marks a notebook without cell ids as changed the moment it opens it, and nbformat warns
(MissingIDFieldWarning).  A cell that already has an id keeps it; a cell without one, or with an id
an earlier cell has, gets ``cell-NN-xxxxxx``: its position and six hex digits of its source's
SHA-256, so the same notebook always gets the same ids.
"""
from __future__ import annotations

import hashlib

from .notebooks import cell_source

__all__ = ["missing_ids", "new_id", "with_ids"]


def missing_ids(nb: dict) -> list[int]:
    """Indexes of the cells with no id, or with an id an earlier cell already has."""
    seen, bad = set(), []
    for i, cell in enumerate(nb["cells"]):
        cid = cell.get("id")
        if not cid or cid in seen:
            bad.append(i)
        seen.add(cid)
    return bad


def new_id(index: int, source: str, taken: set[str]) -> str:
    """``cell-NN-xxxxxx``: the position and six hex digits of the source's hash, unique in ``taken``."""
    digest = hashlib.sha256(source.encode()).hexdigest()
    for start in range(0, len(digest) - 6):
        cid = f"cell-{index:02d}-{digest[start:start + 6]}"
        if cid not in taken:
            return cid
    raise ValueError(f"no free id for cell {index}")


def with_ids(nb: dict) -> list[int]:
    """Give ``nb`` (in place) an id on every cell that lacks one or repeats one, and nbformat 4.5;
    returns the indexes of the cells it gave one.  The id comes first in the cell, after its type,
    as nbformat writes it."""
    bad = missing_ids(nb)
    taken = {c.get("id") for i, c in enumerate(nb["cells"]) if i not in bad}
    for i in bad:
        cell = nb["cells"][i]
        cid = new_id(i, cell_source(cell), taken)
        taken.add(cid)
        nb["cells"][i] = {"cell_type": cell["cell_type"], "id": cid,
                          **{k: v for k, v in cell.items() if k not in ("cell_type", "id")}}
    if nb.get("nbformat", 4) == 4:
        nb["nbformat_minor"] = max(5, nb.get("nbformat_minor", 0))
    return bad
