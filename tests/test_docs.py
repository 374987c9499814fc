"""The project's documents: what they name exists, the book's helpers are documented, and the
code speaks of the project alone (no issue numbers)."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

import coursebook

ROOT = Path(__file__).resolve().parents[1]
DOCS = ["README.md", "CONTRIBUTING.md", "graders/README.md"]
ISSUE = re.compile(r"\bissues?\s*#?\s*\d+|(?<![\w&#/])#\d{1,4}(?!\w)", re.IGNORECASE)


@pytest.mark.parametrize("doc", DOCS)
def test_the_files_a_document_names_exist(doc):
    text = (ROOT / doc).read_text(encoding="utf-8")
    named = set(re.findall(r"`((?:tests|tools|bench|kvcache|lessons|coursebook|graders|coursetools|course|answers|public_checks|ga2)/[\w/.-]+\.(?:py|json|md|ipynb))`",
                           text))
    named = {n for n in named if "NAME" not in n and "_N_" not in n and "5_6" not in n}
    missing = sorted(n for n in named if not (ROOT / n).exists())
    assert not missing, f"{doc} names files that do not exist: {missing}"


def test_every_coursebook_helper_is_documented():
    text = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
    def documented(name):
        """A function or class is documented with its call, "`name(", a constant by its name."""
        return (f"`{name}(" if callable(getattr(coursebook, name)) else f"`{name}`") in text

    undocumented = [name for name in coursebook.__all__ if name != "Table" and not documented(name)]
    assert not undocumented, f"CONTRIBUTING.md does not document: {undocumented}"


def test_no_issue_numbers_in_code_comments_or_documents():
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    hits = []
    for name in files:
        path = ROOT / name
        if path.suffix not in (".py", ".md", ".ipynb", ".yml", ".yaml", ".toml", ".txt", ".css", ".js", ".sh") \
                and path.name != "Makefile":
            continue
        if not path.is_file():
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if ISSUE.search(line):
                hits.append(f"{name}:{number}: {line.strip()[:80]}")
    assert not hits, "issue numbers in the project's files:\n" + "\n".join(hits[:20])


def test_the_issue_pattern():
    hash_ = "#"      # written apart, so that this file does not match its own pattern
    assert ISSUE.search("see issue " + hash_ + "4") and ISSUE.search("fixed in issue" + " 8")
    assert ISSUE.search("(" + hash_ + "12)")
    assert not ISSUE.search('color="#777777"') and not ISSUE.search("# A heading") and not ISSUE.search("&#39;")


def test_every_test_the_threat_model_names_exists():
    """Each row of the grader's threat model names the test that proves its defence
    (``path::function``): the file defines that function."""
    text = (ROOT / "graders" / "README.md").read_text(encoding="utf-8")
    section = text.split("## Threat model", 1)[1].split("\n## ", 1)[0]
    named = re.findall(r"`(tests/[\w/]+\.py)::(\w+)`", section)
    assert len(named) >= 10
    missing = [f"{path}::{name}" for path, name in named
               if not re.search(rf"^def {name}\(", (ROOT / path).read_text(encoding="utf-8"), flags=re.M)]
    assert not missing, missing
