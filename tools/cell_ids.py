"""Give every cell of the course's notebooks a stable, unique id (nbformat 4.5).

JupyterLab marks a notebook without cell ids as changed the moment it opens it, and nbformat warns
(MissingIDFieldWarning).  A cell that already has an id keeps it; a new cell gets ``cell-NN-xxxxxx``
from its position and its source, so two runs give the same ids.

    python tools/cell_ids.py            # write the missing ids
    python tools/cell_ids.py --check    # exit 1, naming the notebooks, when one is missing
"""
from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = ("book/chapters", "exercises", "solutions")


def notebooks(root: Path = ROOT) -> list[Path]:
    """Every notebook the course ships, chapters, exercises and solutions."""
    return sorted(p for folder in FOLDERS for p in (root / folder).glob("*.ipynb"))


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


def add_ids(path: Path) -> bool:
    """Write the missing ids into ``path`` (its indentation kept); True when it changed."""
    text = path.read_text()
    nb = json.loads(text)
    bad = missing_ids(nb)
    if not bad and nb.get("nbformat_minor", 0) >= 5:
        return False
    taken = {c.get("id") for i, c in enumerate(nb["cells"]) if i not in bad}
    for i in bad:
        cell = nb["cells"][i]
        source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        cid = new_id(i, source, taken)
        taken.add(cid)
        cell.pop("id", None)
        nb["cells"][i] = {"cell_type": cell["cell_type"], "id": cid, **{k: v for k, v in cell.items() if k != "cell_type"}}
    nb["nbformat_minor"] = max(5, nb.get("nbformat_minor", 0))
    path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
    return True


def main(argv: list[str]) -> int:
    check = "--check" in argv
    lacking = [p for p in notebooks() if missing_ids(json.loads(p.read_text()))]
    if check:
        for p in lacking:
            print(f"{p.relative_to(ROOT)}: a cell has no id or a repeated one (python tools/cell_ids.py)")
        return 1 if lacking else 0
    for p in lacking:
        add_ids(p)
        print(f"ids written: {p.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
