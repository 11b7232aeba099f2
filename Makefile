# labnn: `make site` and `make test` set everything up themselves (a .venv made with pip).
#
#   make venv       .venv with torch==2.13.0 (installed first, pinned: a CPU wheel where one is found) and
#                   labnn[test,docs] in editable mode; a stamp skips the work while pyproject.toml is unchanged
#   make site       the site in site/: the notebooks executed at full size side by side (one thread
#                   each, JOBS at once, a line as each starts and ends; a notebook whose code, labnn/
#                   and flags are unchanged is not run again: .ci/execute_notebooks.py), then
#                   mkdocs build --strict rendering them
#   make test       pytest tests/ + nbval on every notebook (LABNN_FAST=1), the strict site build rendering
#                   the notebooks as nbval executed them into .cache/site-fast/ (never site/), then the
#                   browser test of every page; first of all
#                   it checks for Chromium, installing Debian's `chromium` when root (else stops at once)
#   make test-torch TORCH=torch==2.9.1   unit tests and notebooks against that torch, in .venv-torch-2.9.1
#   make chromium   Chromium for the browser test (make test's first step): Debian's, and a CJK font, when root
#   make lab        JupyterLab on notebooks/ (installs the `lab` extra)
#   make test-gpu   pytest, every notebook (fast and full size), then the GPU benchmarks, on a CUDA device
#                   within GPU_BUDGET seconds (570); results into docs/gpu.md; offline: WHEELS=dir
#   make wheelhouse WHEELS=dir  download every wheel make test-gpu needs, to carry to an offline machine
#   make translations   what the Chinese (中文) pages need translated, per page (docs/locale/zh/*.po);
#                   UPDATE=1 also writes the new and changed entries into the catalogs to translate
#   make clean      remove site/, caches and executed notebooks (keeps .venv)
#
# Variables: PYTHON (interpreter that creates the venv), WHEELS (install offline from that folder),
# TORCH (the torch requirement), JOBS (pytest-xdist workers), LABNN_DATA_DIR (Tiny Shakespeare folder),
# LABNN_CHROMIUM (the browser for make test, default /usr/bin/chromium).

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV ?= .venv
TORCH ?= torch==2.13.0
JOBS ?= 2
WHEELS ?=
BIN := $(VENV)/bin
PY := $(BIN)/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.labnn-stamp
NOTEBOOKS := $(sort $(wildcard notebooks/*.ipynb))
# mkdocs is pinned below 2 (pyproject.toml): mkdocs-material's notice about MkDocs 2.0 does
# not apply to this build, and this is its documented switch
export NO_MKDOCS_2_WARNING := 1
EXECUTED := .cache/executed/notebooks
# The folder docs/hooks/notebooks.py itself executes into for a full build (mkdocs serve reuses it)
SITE_EXECUTED := .cache/site-executed/full/notebooks
TEST_SITE := .cache/site-fast
# The browser tests: they need the built site (LABNN_SITE_DIR), so the unit-test steps leave them out.
BROWSER_TESTS := tests/test_site.py tests/test_site_zh.py tests/test_site_interactive.py \
  tests/test_site_crossref.py tests/test_site_search_sections.py tests/test_site_reader.py \
  tests/test_site_phone.py
NOT_BROWSER := $(addprefix --ignore=,$(BROWSER_TESTS))
PIP_OFFLINE := $(if $(WHEELS),--no-index --find-links $(abspath $(WHEELS)),)
# The corpus: CI and this workspace keep it in ../shared/data (else labnn downloads it to ~/.cache/labnn).
ifeq ($(origin LABNN_DATA_DIR),undefined)
  ifneq ($(wildcard ../shared/data/tiny_shakespeare.txt),)
    export LABNN_DATA_DIR := $(abspath ../shared/data)
  endif
endif
# pytest exits 5 when it collected nothing (no tests yet): that is not a failure here.
ALLOW_EMPTY := || { rc=$$?; [ $$rc -eq 5 ] || exit $$rc; }

.PHONY: help venv site test test-torch chromium test-gpu lab wheelhouse translations clean

help:
	@sed -n 's/^#   //p' Makefile

venv: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q $(PIP_OFFLINE) "$(TORCH)"
	$(PIP) install -q $(PIP_OFFLINE) -e ".[test,docs]"
	@touch $@

site: venv
	OMP_NUM_THREADS=1 $(PY) .ci/execute_notebooks.py --jobs $(JOBS) --out $(SITE_EXECUTED) $(NOTEBOOKS)
	OMP_NUM_THREADS=1 LABNN_EXECUTED_NOTEBOOKS=$(SITE_EXECUTED) $(BIN)/mkdocs build --strict

# Chromium first: a missing browser stops `make test` before the venv, the notebooks and the site build.
chromium:
	@$(SHELL) .ci/ensure-chromium

test: chromium venv
	@rm -rf $(EXECUTED)
	@# 1. unit tests and every notebook (nbval: runs without error; exercise stubs are tagged
	@#    raises-exception), one notebook per worker; each passing notebook is kept with its outputs.
	@#    LABNN_DEVICE=audit: the notebooks run on a stand-in accelerator (labnn.training.device_audit), so a
	@#    model or tensor left off `device` fails here as it would on a GPU.
	LABNN_DEVICE=audit LABNN_FAST=1 OMP_NUM_THREADS=1 PYTHONPATH=tests $(BIN)/pytest -n $(JOBS) --dist loadscope -p nbval_capture \
	  --nbval-lax --nbval-current-env --nbval-capture=$(EXECUTED) \
	  tests $(NOTEBOOKS) $(NOT_BROWSER) $(ALLOW_EMPTY)
	@# 2. the strict site build, rendering the notebooks as step 1 executed them (no second run), into
	@#    $(TEST_SITE): site/ stays the reader's full-size site (make site)
	LABNN_FAST=1 OMP_NUM_THREADS=1 LABNN_EXECUTED_NOTEBOOKS=$(EXECUTED) $(BIN)/mkdocs build --strict -d $(TEST_SITE)
	@# 3. every page of the built site in headless Chromium (the Chinese pages, every interactive
	@#    figure moved too)
	LABNN_SITE_DIR=$(TEST_SITE) $(BIN)/pytest $(BROWSER_TESTS) -q

# The unit tests and the notebooks (as step 1 of `make test` runs them; not the site) against another
# torch, in a venv of its own: `make test-torch TORCH=torch==2.9.1` -> .venv-torch-2.9.1; .venv is left
# as it is.
TORCH_VENV = .venv-$(shell printf '%s' '$(TORCH)' | sed 's/==/-/; s/[^A-Za-z0-9.+_-]/_/g')

test-torch:
	@test -x $(TORCH_VENV)/bin/python || $(PYTHON) -m venv $(TORCH_VENV)
	$(TORCH_VENV)/bin/python -m pip install -q $(PIP_OFFLINE) "$(TORCH)"
	$(TORCH_VENV)/bin/python -m pip install -q $(PIP_OFFLINE) -e ".[test]" "$(TORCH)"
	@# pip must not have swapped the torch asked for (as a floor on Triton once made it do)
	@$(TORCH_VENV)/bin/python -c 'import sys, numpy, torch; \
	  print("torch", torch.__version__, "| numpy", numpy.__version__, "| Python", sys.version.split()[0]); \
	  want = sys.argv[1].partition("==")[2]; \
	  ok = not want or torch.__version__.split("+")[0] == want; \
	  sys.exit(None if ok else f"asked for torch {want}, the venv holds {torch.__version__}")' "$(TORCH)"
	LABNN_DEVICE=audit LABNN_FAST=1 OMP_NUM_THREADS=1 PYTHONPATH=tests $(TORCH_VENV)/bin/pytest \
	  -n $(JOBS) --dist loadscope --nbval-lax --nbval-current-env \
	  tests $(NOTEBOOKS) $(NOT_BROWSER) -q $(ALLOW_EMPTY)

lab: venv
	$(PIP) install -q $(PIP_OFFLINE) -e ".[lab]"
	$(BIN)/jupyter lab --notebook-dir=notebooks

# The interpreter with a CUDA build of torch: the venv's when there is one, else python3 (a GPU
# machine's own torch). Missing test extras come from WHEELS; labnn runs from this checkout.
GPU_PY ?= $(if $(wildcard $(PY)),$(PY),$(PYTHON))
GPU_BUDGET ?= 570

test-gpu:
	$(GPU_PY) .ci/test-gpu --budget $(GPU_BUDGET) $(if $(WHEELS),--wheels $(abspath $(WHEELS)),)

wheelhouse:
	@test -n "$(WHEELS)" || { echo "usage: make wheelhouse WHEELS=dir [TORCH_INDEX=https://download.pytorch.org/whl/cu128]"; exit 2; }
	$(PYTHON) .ci/wheelhouse "$(WHEELS)" "$(TORCH)" $(if $(TORCH_INDEX),--torch-index $(TORCH_INDEX),)

# Exits 1 while anything is missing or stale (tests/test_i18n.py fails then too).
translations: venv
	$(PY) docs/hooks/i18n.py $(if $(UPDATE),update,status)

clean:
	rm -rf site .cache build
	find . -name __pycache__ -type d -not -path "./$(VENV)/*" -prune -exec rm -rf {} +
