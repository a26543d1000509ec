# cemlab — `make help` lists the targets.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
CEMLAB := $(VENV)/bin/cemlab
SWEEP ?= recursion_ablation
SCALE ?= tiny
CONFIG ?= configs/default.yaml
# The scales, as sweeps/scales.yaml names them (its top-level keys).
SCALES := $(shell sed -nE 's/^([a-z][a-z0-9_-]*):.*/\1/p' sweeps/scales.yaml | paste -sd'|')
PYTEST_ARGS ?=
# pytest processes for make test (pytest-xdist; 0: one process). Alone the suite kept 1.2 of the
# 2-core machine's cores busy (servers booting, one-thread trials); two processes keep it at 1.9.
TEST_WORKERS ?= 2
PYTEST := $(PY) -m pytest -n $(TEST_WORKERS) --dist worksteal
# torch: see scripts/install-torch.sh (empty TORCH_INDEX_URL: the PyTorch CPU wheel index)
TORCH_VERSION ?= 2.13.0
TORCH_INDEX_URL ?=
# The install is redone when pyproject.toml changes.
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml requirements/constraints.txt 2>/dev/null | sha1sum | cut -c1-10)

.DEFAULT_GOAL := help
.PHONY: help install test test-all sweep plan report ui train bench clean constraints cluster-up cluster-down lint-docker image

help: ## List the targets
	@grep -hE '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  \033[36m%-14s\033[0m %s\n", $$1, $$2}'
	@echo ""
	@echo "  Variables: SWEEP=$(SWEEP) SCALE=$(SCALE) ($(SCALES)), MLFLOW_TRACKING_URI, RAY_ADDRESS"

$(STAMP):
	@test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --timeout 15 --retries 1 --upgrade pip || echo "warning: pip not upgraded; going on with $$($(PY) -m pip --version)"
	@# torch first, the build this machine needs: an installed one is kept (a CUDA build without a GPU
	@# with a warning); a GPU gets the CUDA build, macOS its own, a CPU-only Linux machine the CPU build
	@# (from pip's configured sources when they offer it, else TORCH_INDEX_URL), never CUDA wheels.
	PY=$(PY) TORCH_VERSION=$(TORCH_VERSION) TORCH_INDEX_URL=$(TORCH_INDEX_URL) bash scripts/install-torch.sh
	$(PY) -m pip install -q -e ".[dev]" -c requirements/constraints.txt
	@rm -f $(VENV)/.installed-*; touch $(STAMP)

install: $(STAMP) ## Create .venv and install cemlab with its test tools (CPU torch on CPU machines; TORCH_INDEX_URL=...)

test: $(STAMP) ## Run the test suite (installs what it needs first; the few checks marked beyond_budget: make test-all)
	@bash scripts/test-prereqs.sh
	$(PYTEST) -m "not beyond_budget" $(PYTEST_ARGS)

test-all: $(STAMP) ## Run every test, also any long end-to-end check marked beyond_budget
	@bash scripts/test-prereqs.sh
	$(PYTEST) $(PYTEST_ARGS)

sweep: $(STAMP) ## Run a sweep: make sweep SWEEP=recursion_ablation [SCALE=tiny]
	$(CEMLAB) sweep $(SWEEP) --scale $(SCALE)

plan: $(STAMP) ## Show a sweep's trials, what is done, tokens, FLOPs and GPU-hours (trains nothing)
	$(CEMLAB) plan $(SWEEP) --scale $(SCALE)

report: $(STAMP) ## Regenerate the report of a sweep from MLflow: make report SWEEP=... [SCALE=tiny]
	$(CEMLAB) report $(SWEEP) --scale $(SCALE)

ui: $(STAMP) ## Open the MLflow dashboard on the project's store and print its address
	$(CEMLAB) ui

train: $(STAMP) ## Train one model: make train CONFIG=configs/x.yaml (default: tiny model on the embedded corpus)
	$(CEMLAB) train $(CONFIG)

bench: $(STAMP) ## Print layer/model throughput and memory benchmarks
	$(CEMLAB) bench

constraints: $(STAMP) ## Re-freeze requirements/constraints.txt from the current .venv (after a tested upgrade)
	@{ sed -n '1,3p' requirements/constraints.txt; $(PY) -m pip freeze --exclude-editable | grep -v -iE "^(torch|cemlab)=="; } > requirements/constraints.new
	@mv requirements/constraints.new requirements/constraints.txt; echo "requirements/constraints.txt updated"

COMPOSE ?= docker compose
# Docker when its engine answers, else Podman; BASE_IMAGE overrides the Dockerfile's base.
CONTAINER ?= $(shell docker info >/dev/null 2>&1 && echo docker || echo podman)
IMAGE ?= cemlab:latest
BASE_IMAGE ?=
image: ## Build cemlab's image with Docker or Podman (IMAGE=cemlab:latest, BASE_IMAGE=... to change the base)
	$(CONTAINER) build -f docker/Dockerfile $(if $(BASE_IMAGE),--build-arg BASE_IMAGE=$(BASE_IMAGE)) -t $(IMAGE) .

cluster-up: ## Build the image and start PostgreSQL, MLflow, a Ray head and a GPU worker (docker/compose.yaml)
	$(COMPOSE) -f docker/compose.yaml up -d --build --wait

cluster-down: ## Stop the cluster stack (keeps its volumes; add -v by hand to delete them)
	$(COMPOSE) -f docker/compose.yaml down

lint-docker: $(STAMP) ## Lint the Dockerfile and validate the compose file
	$(VENV)/bin/hadolint docker/Dockerfile
	$(PY) -m pytest -q tests/test_docker_files.py

clean: ## Remove the virtual environment and caches (keeps runs/ and reports/)
	rm -rf $(VENV) .pytest_cache *.egg-info
