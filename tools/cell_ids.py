"""Give every cell of the course's notebooks a stable, unique id (nbformat 4.5).

JupyterLab marks a notebook without cell ids as changed the moment it opens it, and nbformat warns
(MissingIDFieldWarning).  A cell that already has an id keeps it; a new cell gets ``cell-NN-xxxxxx``
from its position and its source, so two runs give the same ids (``course.cell_ids``, which the
learner's copy uses for the cells it adds).

    python tools/cell_ids.py            # write the missing ids
    python tools/cell_ids.py --check    # exit 1, naming the notebooks, when one is missing
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from course.cell_ids import missing_ids, new_id, with_ids

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = ("book/chapters", "exercises", "solutions")

__all__ = ["notebooks", "missing_ids", "new_id", "add_ids"]


def notebooks(root: Path = ROOT) -> list[Path]:
    """Every notebook the course ships, chapters, exercises and solutions."""
    return sorted(p for folder in FOLDERS for p in (root / folder).glob("*.ipynb"))


def add_ids(path: Path) -> bool:
    """Write the missing ids into ``path`` (its indentation kept); True when it changed."""
    text = path.read_text()
    nb = json.loads(text)
    bad = missing_ids(nb)
    if not bad and nb.get("nbformat_minor", 0) >= 5:
        return False
    with_ids(nb)
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
