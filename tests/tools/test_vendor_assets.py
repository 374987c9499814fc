"""tools/vendor_assets.py: the course's own files are vendored beside the npm packages, and a
changed file is copied again (the stamp records what was copied)."""
from __future__ import annotations

import hashlib
import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def vendor(tmp_path, monkeypatch):
    spec = importlib.util.spec_from_file_location("vendor_assets", ROOT / "tools" / "vendor_assets.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    source = tmp_path / "repo" / "coursebook" / "widgets" / "host.js"
    source.parent.mkdir(parents=True)
    source.write_text("/* host, first version */\n")
    monkeypatch.setattr(module, "ROOT", tmp_path / "repo")
    monkeypatch.setattr(module, "DEST", tmp_path / "repo" / "book" / "_static" / "vendor")
    monkeypatch.setattr(module, "STAMP", tmp_path / "repo" / "book" / "_static" / "vendor" / ".vendored.json")
    monkeypatch.setattr(module, "PACKAGES", {})       # no npm here: the course's files alone
    monkeypatch.setattr(module, "COPIES", [])
    monkeypatch.setattr(module, "ES_MODULES", {})     # nor the exercise pages' libraries
    monkeypatch.setattr(module, "RUNTIME", False)     # nor their Python
    return module, source


def test_the_widget_host_is_vendored_and_recopied_when_it_changes(vendor):
    module, source = vendor
    assert module.COURSE_FILES == [("coursebook/widgets/host.js", "widgets/host.js")]
    assert not module._complete()
    module.vendor()
    copied = module.DEST / "widgets" / "host.js"
    assert copied.read_text() == "/* host, first version */\n" and module._complete()
    assert module.main(["--check"]) == 0
    source.write_text("/* host, second version */\n")
    assert not module._complete() and module.main(["--check"]) == 1
    module.vendor()
    assert copied.read_text() == "/* host, second version */\n" and module._complete()
    stamp = module._wanted_stamp()["course_files"]["coursebook/widgets/host.js"]
    assert stamp == hashlib.sha256(b"/* host, second version */\n").hexdigest()


def test_the_site_config_loads_the_host_and_nothing_else_for_widgets():
    import yaml

    config = yaml.safe_load((ROOT / "_config.yml").read_text())["sphinx"]["config"]
    assert config["nb_ipywidgets_js"] == {"vendor/widgets/host.js": {}}
