"""kvcache.blas: asking every BLAS library for fewer threads, in time or too late, and reading
back how many threads the loaded one uses."""
from __future__ import annotations

import os
import subprocess
import sys

from kvcache.blas import BLAS_THREAD_VARIABLES, blas_threads, limit_blas_threads


def test_limit_blas_threads_sets_every_library_variable_and_says_when_it_is_too_late():
    env = {}
    assert limit_blas_threads(1, environ=env, modules={}) is True
    assert env == {name: "1" for name in BLAS_THREAD_VARIABLES}
    assert {"OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OMP_NUM_THREADS"} <= set(env)
    assert limit_blas_threads(1, environ={}, modules={"numpy": object()}) is False


def test_the_limit_holds_in_a_fresh_interpreter():
    """numpy's BLAS, asked for one thread before numpy is imported, reports one thread (or, with
    a BLAS that cannot be asked, the variables are set)."""
    code = ("from kvcache.blas import limit_blas_threads, blas_threads\n"
            "ok = limit_blas_threads(1)\nimport numpy\nnumpy.ones((64, 64)) @ numpy.ones((64, 64))\n"
            "print(ok, blas_threads())\n")
    env = {k: v for k, v in os.environ.items() if k not in BLAS_THREAD_VARIABLES}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    in_time, threads = out.stdout.split()
    assert in_time == "True" and threads in ("1", "None")


def test_blas_threads_without_a_blas():
    assert blas_threads("") is None
    assert blas_threads("7f00-7f01 r-xp 0 0:0 0 /nonexistent/libopenblas.so\n") is None
