"""Run every benchmark: ``python -m bench`` (``make bench``).

Calls ``main()`` of each ``bench/bench_*.py`` module in name order, with a header before each.
A benchmark that raises (or has no ``main``) is reported and the next one still runs; the exit
status is non-zero when any failed.  ``python -m bench NAME ...`` runs only the named ones
(``ga2`` or ``bench_ga2``).
"""
from __future__ import annotations

import importlib
import sys
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent


def discover() -> list[str]:
    """Module names of the benchmarks, in name order."""
    return sorted(p.stem for p in HERE.glob("bench_*.py"))


def run_one(name: str) -> bool:
    """Run ``bench.<name>.main()``; True when it finished without raising."""
    print(f"=== {name} " + "=" * max(3, 66 - len(name)), flush=True)
    start = time.perf_counter()
    try:
        module = importlib.import_module(f"{__package__ or 'bench'}.{name}")
        main = getattr(module, "main", None)
        if not callable(main):
            raise AttributeError(f"bench/{name}.py has no main() function")
        result = main()
        if isinstance(result, int) and not isinstance(result, bool) and result != 0:
            raise RuntimeError(f"main() returned exit status {result}")
    except BaseException as err:  # noqa: BLE001 - a failing benchmark must not stop the others
        if isinstance(err, KeyboardInterrupt):
            raise
        traceback.print_exc(file=sys.stdout)
        print(f"--- {name}: FAILED after {time.perf_counter() - start:.1f} s ({type(err).__name__}: {err})",
              flush=True)
        return False
    print(f"--- {name}: done in {time.perf_counter() - start:.1f} s", flush=True)
    return True


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    names = discover()
    if argv:
        wanted = [a if a.startswith("bench_") else f"bench_{a}" for a in argv]
        unknown = [w for w in wanted if w not in names]
        if unknown:
            print(f"no such benchmark: {', '.join(unknown)} (have: {', '.join(names) or 'none'})",
                  file=sys.stderr)
            return 2
        names = wanted
    if not names:
        print("no benchmarks found (bench/bench_*.py)")
        return 0
    failed = [name for name in names if not run_one(name)]
    print()
    print(f"{len(names) - len(failed)} of {len(names)} benchmarks finished"
          + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
