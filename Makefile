# Tornado Concurrency Lab: one command each (see README.md).
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
ARGS   ?=

.PHONY: install peers run test lint format docs bench compare system-deps clean

## install: create .venv with the pinned runtime dependencies
install: $(VENV)/.runtime

$(VENV)/.runtime: requirements.txt
	@scripts/system-deps.sh venv $(PYTHON)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -r requirements.txt
	@touch $@

## peers: uWSGI (built from its source), gunicorn and gevent in .venv, for bench/compare.py
peers: $(VENV)/.peers

$(VENV)/.peers: $(VENV)/.runtime requirements-peers.txt
	@scripts/system-deps.sh build $(BIN)/python
	$(BIN)/python -m pip install --quiet -r requirements-peers.txt
	@touch $@

$(VENV)/.dev: $(VENV)/.peers requirements-dev.txt
	$(BIN)/python -m pip install --quiet -r requirements-dev.txt
	@touch $@

## run: serve http://127.0.0.1:8000 with the embedded upstream (ARGS="--processes 0" etc.)
run: install
	$(BIN)/python server.py $(ARGS)

## test: dev deps, system tools the tests need (siege, chromium), lint, the whole suite
## (two pytest workers, a file each at a time: most tests wait on servers, not on a core)
TEST_WORKERS ?= 2
test: $(VENV)/.dev system-deps lint
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile $(ARGS)

## lint: ruff (lint + format check) and mypy
lint: $(VENV)/.dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

## format: apply ruff's formatting and safe fixes
format: $(VENV)/.dev
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

## docs: regenerate the routes, workloads and flags tables of docs/api.md from the code
docs: install
	$(BIN)/python -m scripts.reference

## bench: the 10-concurrent-requests experiment with siege (ARGS are passed on)
bench: install
	@scripts/system-deps.sh siege
	bench/siege.sh $(ARGS)

## compare: the lab, uWSGI and gunicorn side by side (bench/compare.py; ARGS="--preset grid", "--quick"...)
compare: peers
	@scripts/system-deps.sh siege
	$(BIN)/python -m bench.compare $(ARGS)

## system-deps: siege and chromium from apt, when missing
system-deps:
	@scripts/system-deps.sh siege chromium

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis
