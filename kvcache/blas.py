"""The BLAS numpy calls for its matrix products: which library it is, how many threads it uses,
and asking it for fewer.

Each BLAS library reads its thread count from its own environment variable, once, when numpy
loads it: ``limit_blas_threads`` sets every such variable and says whether it came in time
(numpy not imported yet).  ``blas_threads`` asks the library already loaded in this process,
through ``ctypes``, since no variable says what a library actually chose; the grouped decode
attention (``kvcache.gqa``) splits its work across that many threads.

This module does not import numpy at import time: ``limit_blas_threads`` must run before numpy
is imported.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

__all__ = ["BLAS_THREAD_VARIABLES", "limit_blas_threads", "blas_library", "blas_threads"]

# Each BLAS library numpy may be built with reads its own variable, once, when it is loaded.
BLAS_THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
                         "BLIS_NUM_THREADS", "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS")


def limit_blas_threads(n: int = 1, environ=None, modules=None) -> bool:
    """Ask every BLAS library numpy may use for ``n`` threads.  True when it can take effect:
    numpy was not imported yet (the libraries read the variables when numpy loads them)."""
    environ = os.environ if environ is None else environ
    modules = sys.modules if modules is None else modules
    for name in BLAS_THREAD_VARIABLES:
        environ[name] = str(n)
    return "numpy" not in modules


def blas_library() -> str:
    """The BLAS numpy calls for ``@`` ("scipy-openblas 0.3.27", "mkl 2024.1"...), or "unknown"."""
    import numpy as np
    try:
        config = np.show_config(mode="dicts")
        blas = config["Build Dependencies"]["blas"]
    except Exception:  # noqa: BLE001 - older numpy has no mode="dicts": say we do not know
        return "unknown"
    name, version = blas.get("name"), blas.get("version")
    if not name:
        return "unknown"
    return f"{name} {version}" if version and version != "unknown" else str(name)


# Functions that report the thread count of each BLAS numpy may load (numpy's own wheels ship
# OpenBLAS with the "scipy_" prefix and a "64_" suffix).
_THREAD_QUERIES = {
    "openblas": ("scipy_openblas_get_num_threads64_", "scipy_openblas_get_num_threads",
                 "openblas_get_num_threads64_", "openblas_get_num_threads"),
    "mkl": ("MKL_Get_Max_Threads", "mkl_get_max_threads"),
    "blis": ("bli_thread_get_num_threads",),
}


# The thread-count function found in this process's own libraries (they stay loaded): asking it
# again costs a call, where finding it reads /proc/self/maps and opens libraries.
_own_thread_query = None


def blas_threads(maps: str | None = None) -> int | None:
    """How many threads the BLAS loaded in this process says it uses, or None when no loaded
    library answers (asked through ``ctypes``; ``maps`` is the text of /proc/self/maps)."""
    import ctypes

    global _own_thread_query
    own = maps is None
    if own and _own_thread_query is not None:
        count = int(_own_thread_query())
        return count if count > 0 else None
    if own:
        try:
            maps = Path("/proc/self/maps").read_text()
        except OSError:
            return None
    paths = sorted({line.split()[-1] for line in maps.splitlines()
                    if line.split() and line.split()[-1].startswith("/") and ".so" in line.split()[-1]})
    for kind, names in _THREAD_QUERIES.items():
        for path in (p for p in paths if kind in Path(p).name.lower()):
            try:
                lib = ctypes.CDLL(path)
            except OSError:
                continue
            for name in names:
                fn = getattr(lib, name, None)
                if fn is not None:
                    fn.restype = ctypes.c_int
                    if own:
                        _own_thread_query = fn
                    count = int(fn())
                    return count if count > 0 else None
    return None
