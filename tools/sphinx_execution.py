"""A small Sphinx extension for the course site (loaded from ``_config.yml``: ``local_extensions``):
every output of a chapter reaches the page, or the build stops and says so.

The kernel sends a cell's outputs (its figures, and every number ``glue`` records for the text) on
one channel and the end of the cell on another.  nbclient, which executes the notebooks, waits
only ``iopub_timeout`` seconds (4 by default) for the outputs after the end of the cell, and when
they come later it drops them with a log line and goes on.  On a busy machine a cell that glues
several numbers then loses some of them, and the page is missing figures for no reason in the
chapter.  This extension gives the outputs a minute, and makes a wait longer than that an error
that names the cell.
"""
from __future__ import annotations

from typing import Any

#: Seconds nbclient waits for a cell's outputs once the kernel has said the cell is done.
OUTPUT_WAIT = 60


def patient_output_wait(executor_module=None) -> None:
    """Make the executor myst-nb calls (jupyter-cache's ``executenb``, which is nbclient's
    ``execute``) wait ``OUTPUT_WAIT`` seconds for outputs and fail rather than drop them, unless a
    caller asks otherwise; myst-nb passes no such option of its own."""
    if executor_module is None:
        from jupyter_cache.executors import utils as executor_module
    execute = executor_module.executenb
    if getattr(execute, "waits_for_outputs", False):
        return

    def execute_waiting_for_outputs(nb, *args, **kwargs):
        kwargs.setdefault("iopub_timeout", OUTPUT_WAIT)
        kwargs.setdefault("raise_on_iopub_timeout", True)
        return execute(nb, *args, **kwargs)

    execute_waiting_for_outputs.waits_for_outputs = True
    executor_module.executenb = execute_waiting_for_outputs


def setup(app: Any) -> dict:
    patient_output_wait()
    return {"parallel_read_safe": True, "parallel_write_safe": True}
