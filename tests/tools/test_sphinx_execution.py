"""The site build waits for a cell's outputs and never drops them (tools/sphinx_execution.py)."""
from __future__ import annotations

import importlib.util
import types
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def _extension():
    spec = importlib.util.spec_from_file_location("sphinx_execution", ROOT / "tools" / "sphinx_execution.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _executor():
    calls = []
    return types.SimpleNamespace(executenb=lambda nb, **kw: calls.append((nb, kw))), calls


def test_the_executor_waits_a_minute_for_outputs_and_fails_rather_than_drop_them():
    extension = _extension()
    module, calls = _executor()
    extension.patient_output_wait(module)
    module.executenb("nb", cwd="/x", timeout=300, allow_errors=False)
    assert calls == [("nb", {"cwd": "/x", "timeout": 300, "allow_errors": False,
                             "iopub_timeout": 60, "raise_on_iopub_timeout": True})]
    module.executenb("nb", iopub_timeout=5)                       # a caller's own choice stands
    assert calls[-1][1] == {"iopub_timeout": 5, "raise_on_iopub_timeout": True}


def test_setting_it_up_twice_wraps_the_executor_once():
    extension = _extension()
    module, calls = _executor()
    extension.patient_output_wait(module)
    wrapped = module.executenb
    extension.patient_output_wait(module)
    assert module.executenb is wrapped
    module.executenb("nb")
    assert len(calls) == 1


def test_myst_nb_executes_through_the_wrapped_executor():
    """myst-nb's direct and cached executors call jupyter-cache's ``single_nb_execution``, which
    looks ``executenb`` up in its module at call time: wrapping the module's name reaches them."""
    from jupyter_cache.executors import utils
    source = Path(utils.__file__).read_text()
    assert "executenb(" in source and "from nbclient import execute as executenb" in source
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    assert config["sphinx"]["local_extensions"]["sphinx_execution"] == "tools"
