# Tornado Concurrency Lab: one command each (see README.md).
PYTHON ?= python3
# Another Python gets a venv of its own beside the default one:
# make install PYTHON=python3.13 (or a path) makes .venv-3.13.
ifeq ($(origin PYTHON),command line)
VENV   ?= .venv-$(shell $(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null || echo missing)
else
VENV   ?= .venv
endif
BIN    := $(VENV)/bin
ARGS   ?=

.PHONY: install peers run test test-python locust lint format docs pictures bench compare system-deps clean \
        python-ft install-ft run-ft test-ft

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

$(VENV)/.dev: $(VENV)/.peers requirements-dev.txt requirements-test.txt requirements-load.txt
	$(BIN)/python -m pip install --quiet -r requirements-dev.txt
	@touch $@

## locust: Locust's web UI on http://127.0.0.1:8089 against a lab server of its own (LAB=http://127.0.0.1:8000: a running one)
LAB ?=
locust: $(VENV)/.load
	$(BIN)/python -m bench.load --ui $(if $(LAB),--url $(LAB)) $(ARGS)

$(VENV)/.load: $(VENV)/.runtime requirements-load.txt
	$(BIN)/python -m pip install --quiet -r requirements-load.txt
	@touch $@

## run: serve http://127.0.0.1:8000 with the embedded upstream (ARGS="--processes 0" etc.)
run: install
	$(BIN)/python server.py $(ARGS)

## test: dev deps, system tools the tests need (siege, chromium, valgrind...), lint, the whole suite
## (two pytest workers, each handed whole files, the longest first (tests/conftest.py): most tests wait on
## servers, not on a core)
TEST_WORKERS ?= 2
test: $(VENV)/.dev system-deps lint
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder $(ARGS)

## test-python: on another Python (PYTHON=python3.13): its venv, then the mode, workload and interpreters tests
PYTHON_TESTS := tests/test_interpreters.py tests/test_modes.py tests/test_workloads.py tests/test_catalog.py \
                tests/test_mix.py tests/test_page_workload.py
test-python: $(VENV)/.test
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder $(PYTHON_TESTS) $(ARGS)

$(VENV)/.test: $(VENV)/.runtime requirements-test.txt
	$(BIN)/python -m pip install --quiet -r requirements-test.txt
	@touch $@

## python-ft: free-threaded CPython 3.13 (--disable-gil) built from Debian's python3.13 source into .python-ft/
FT_PYTHON := .python-ft/bin/python3.13t
FT_VENV   := .venv-ft
python-ft: $(FT_PYTHON)

$(FT_PYTHON):
	scripts/python-ft.sh .python-ft

## install-ft: .venv-ft on it, with the runtime deps that exist for it (requirements-ft.txt) and the test ones
install-ft: $(FT_VENV)/.runtime

$(FT_VENV)/.runtime: $(FT_PYTHON) requirements-ft.txt requirements-test-ft.txt
	$(FT_PYTHON) -m venv $(FT_VENV)
	$(FT_VENV)/bin/python -m pip install --quiet --only-binary numpy,scipy,scikit-learn \
		-r requirements-ft.txt -r requirements-test-ft.txt
	@touch $@

## run-ft: the lab on the free-threaded build (ARGS as for run)
run-ft: install-ft
	$(FT_VENV)/bin/python server.py $(ARGS)

## test-ft: the mode, workload, stats and race tests, and the free-threaded ones, on .venv-ft
FT_TESTS := $(PYTHON_TESTS) tests/test_free_threaded.py tests/test_gil.py tests/test_stats.py \
            tests/test_stats_board.py tests/test_bench_race.py tests/test_threading_mode.py
test-ft: install-ft
	$(FT_VENV)/bin/python -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder $(FT_TESTS) $(ARGS)

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

## pictures: retake the page's pictures in docs/img from the page (scripts/screenshot.py; ARGS="--series DIR")
pictures: $(VENV)/.dev system-deps
	$(BIN)/python -m scripts.screenshot $(ARGS)

## system-deps: siege, chromium, postgresql, ab (apache2-utils), iproute2 and valgrind from apt, when missing
system-deps:
	@scripts/system-deps.sh siege chromium postgresql ab ip valgrind

clean:
	rm -rf $(VENV) $(FT_VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis
