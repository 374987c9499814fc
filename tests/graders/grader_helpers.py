"""Shared helpers of the grader's tests (imported by name: tests/ has no packages).

Submissions are written as text by the tests (or read from ``hostile/``) and graded with tight
limits so that the hostile ones that hang cost a few seconds, not minutes.  Tests that need
bubblewrap are skipped, with the reason, only where it cannot run (``make test`` installs it).
"""
from __future__ import annotations

import os
import sys
import textwrap
from pathlib import Path

import pytest

from graders import Limits, grade_bytes
from graders.sandbox import bwrap_status

HERE = Path(__file__).resolve().parent
HOSTILE = HERE / "hostile"
ROOT = HERE.parent.parent
PYTHON = sys.executable

FAST = Limits(test_seconds=0.5, submission_seconds=4.0, import_seconds=3.0)

BWRAP, BWRAP_WHY = bwrap_status()
needs_bwrap = pytest.mark.skipif(not BWRAP, reason=f"bubblewrap cannot run here: {BWRAP_WHY}")


def grade_text(source: str, exercise: str, filename: str = "submission.py", limits: Limits = FAST,
               isolation: str = "auto") -> dict:
    """Grade Python source text (dedented) as a .py submission."""
    return grade_bytes(textwrap.dedent(source).encode(), filename, exercise, limits=limits,
                       isolation=isolation)


def processes_matching(*needles: str) -> list[str]:
    """Live processes whose name or command line contains one of ``needles`` (killed ones waiting
    to be reaped by init are gone)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0] in "ZX":
                continue
            comm = Path(f"/proc/{entry}/comm").read_text().strip()
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if any(n in comm or n in cmdline for n in needles):
            found.append(f"{entry} {comm} {cmdline}")
    return found


def by_name(result: dict) -> dict[str, dict]:
    return {t["name"]: t for t in result["tests"]}


def failed_outputs(result: dict) -> list[str]:
    return [t["output"] for t in result["tests"] if t["status"] != "passed"]


GOOD = {
    "softmax": """
        import numpy as np
        def softmax(scores):
            s = np.asarray(scores, dtype=float)
            e = np.exp(s - s.max(axis=-1, keepdims=True))
            return e / e.sum(axis=-1, keepdims=True)
        """,
    "causal_attention": """
        import numpy as np
        def causal_attention(Q, K, V):
            T, d = Q.shape
            S = Q @ K.T / np.sqrt(d)
            S = np.where(np.tril(np.ones((T, T), dtype=bool)), S, -np.inf)
            e = np.exp(S - S.max(axis=-1, keepdims=True))
            return (e / e.sum(axis=-1, keepdims=True)) @ V
        """,
    "attend_step": """
        import numpy as np
        def attend_step(x_t, cache, p):
            q, k, v = x_t @ p["Wq"], x_t @ p["Wk"], x_t @ p["Wv"]
            K = np.vstack([cache["k"], k[None]])
            V = np.vstack([cache["v"], v[None]])
            s = K @ q / np.sqrt(q.shape[0])
            w = np.exp(s - s.max())
            return (w / w.sum()) @ V, {"k": K, "v": V}
        """,
    "kv_cache_bytes": """
        def kv_cache_bytes(n_layers, n_kv_heads, head_dim, n_tokens, bytes_per_value):
            return 2 * n_layers * n_kv_heads * head_dim * n_tokens * bytes_per_value
        """,
    "max_batch": """
        def max_batch(gpu_bytes, weight_bytes, n_layers, n_kv_heads, head_dim, seq_len, bytes_per_value):
            if weight_bytes >= gpu_bytes:
                return 0
            return (gpu_bytes - weight_bytes) // (2 * n_layers * n_kv_heads * head_dim * seq_len * bytes_per_value)
        """,
    "arithmetic_intensity": """
        def arithmetic_intensity(n, d, bytes_per_value):
            return (4 * d + 3) * n / (4 * bytes_per_value * (n + d))
        """,
    "time_per_token": """
        def time_per_token(n_params, bytes_per_param, bandwidth):
            return n_params * bytes_per_param / bandwidth
        """,
    "prefill_time": """
        def prefill_time(n_tokens, n_params, flops):
            return n_tokens * 2 * n_params / flops
        """,
}


GOOD = {name: textwrap.dedent(src).lstrip("\n") for name, src in GOOD.items()}

