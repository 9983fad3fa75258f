# The one entry point for people and CI: make install | test | lint | typecheck | demo | bench | clean
# | test-newest
SHELL := /bin/bash
.DEFAULT_GOAL := help

VENV  := .venv
BIN   := $(VENV)/bin
STAMP := $(VENV)/.beatflow-installed
# make demo installs only what `beatflow dev` runs (the embedded extra); its own stamp, so the
# lighter install never passes for the dev one (and a dev install, a superset, serves the demo).
DEMO_STAMP := $(VENV)/.beatflow-demo-installed
# make test-newest: its own venv, with the newest versions pyproject's bounds allow.
NEWEST_VENV := .venv-newest
# A subset of the integration tests that lean on Celery's, kombu's and RedBeat's internals (the
# Redis channel, Producer batching, the tracer, the scheduler), for test-newest.
NEWEST_TESTS ?= tests/unit tests/integration/test_app.py tests/integration/celery/test_broker_clients.py \
	tests/integration/runs/test_fire.py tests/integration/scheduler/test_fire_batches.py \
	tests/integration/dag/test_chain_step.py
# The first python on PATH that is 3.11 or newer.
PYTHON ?= $(shell for p in python3.13 python3.12 python3.11 python3; do \
	command -v $$p >/dev/null 2>&1 && $$p -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
	2>/dev/null && { command -v $$p; break; }; done)
PYTEST_ARGS ?=
# pytest-xdist processes for make test (0: one process). Most tests wait on real processes (workers,
# beats, failovers), so two halve the suite's time on 2 cores. Each test file runs whole in one
# process (--dist loadfile: a module's stack is built once, and its tests may read what the file's
# earlier tests left), the files in the order tests/conftest.py gives them (--no-loadscope-reorder:
# the longest files first, so no process runs one alone at the end). Redis databases 1..15 are
# shared out between the processes (tests/services), so more than 7 cannot run against one Redis.
PYTEST_WORKERS ?= 2
SRC := platform tests dags bench deploy

.PHONY: help install deps-system test test-newest lint typecheck demo bench sync-rules image clean

help:
	@echo "make install      create $(VENV) (Python >= 3.11) and install beatflow with its dev extras"
	@echo "make demo         install what the demo runs (beatflow[embedded]), then run the embedded stack with the example_etl DAG to completion"
	@echo "make test         install, then run the whole test suite in 2 processes (starts throwaway Redis/PostgreSQL if none runs)"
	@echo "make test-newest  in $(NEWEST_VENV): the newest Celery/kombu/... that pyproject's bounds allow, then the unit tests and an integration subset (the CI job for new releases)"
	@echo "make lint         ruff check, ruff format --check, mypy"
	@echo "make bench        run every bench/bench_*.py"
	@echo "make docs         build the docs site into build/site (mkdocs build --strict)"
	@echo "make image       build the container image with Podman (localhost/beatflow:local; no registry needed)"
	@echo "make screenshot   retake docs/web-ui.png (the README's picture) from the browser tests, in headless Chromium"
	@echo "make sync-rules   regenerate the alert-rule copies (k8s, Helm) from the rule files"
	@echo "make clean        remove caches and the embedded stack's state (.beatflow/); keeps $(VENV)"

install: $(STAMP)

# The venv (Python >= 3.11); both installs below start from it.
$(BIN)/python:
	@test -n "$(PYTHON)" || { echo "error: no Python 3.11+ on PATH; install python3 (>= 3.11) and retry" >&2; exit 1; }
	@$(PYTHON) -m venv $(VENV) 2>/dev/null || { \
		rm -rf $(VENV); \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
			echo "installing python3-venv (Debian splits venv out of python3)"; \
			DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends python3-venv >/dev/null 2>&1 \
			|| { apt-get update -q >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends python3-venv >/dev/null 2>&1; }; \
		fi; \
		$(PYTHON) -m venv $(VENV); \
	} || { echo "error: '$(PYTHON) -m venv' failed; on Debian: apt-get install python3-venv" >&2; exit 1; }

# The dev install brings pip up to date first. The demo's install goes through uv (fetched into
# the venv by its own pip: 2 s) with bytecode compiled in parallel: 7 s where pip takes 22 s on
# these 2-core machines; where uv cannot be had (no PyPI, only a pip mirror uv is not told of),
# the venv's own pip does it.
$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $@

$(DEMO_STAMP): pyproject.toml | $(BIN)/python
	@if [ -f $(STAMP) ] && [ $(STAMP) -nt pyproject.toml ]; then \
		echo "beatflow[dev] is installed: it holds what the demo runs"; \
	else \
		echo "installing beatflow[embedded] into $(VENV)"; \
		{ $(BIN)/python -m pip install --quiet uv 2>/dev/null \
		  && $(BIN)/uv pip install --quiet --python $(BIN)/python --compile-bytecode -e '.[embedded]'; } \
		|| $(BIN)/python -m pip install --quiet -e '.[embedded]'; \
	fi
	@touch $@

# System tools some tests use (promtool for the alert-rule tests; podman, runc and mmdebstrap for
# the container tests; chromium for the web UI's browser tests; rabbitmq-server for the tests on
# RabbitMQ). Best effort: installs only what is missing, only as root, only with apt-get; never
# fails the build by itself.
SYSTEM_TOOLS := promtool:prometheus podman:podman runc:runc mmdebstrap:mmdebstrap \
	/usr/lib/cni/dnsname:golang-github-containernetworking-plugin-dnsname chromium:chromium \
	rabbitmq-server:rabbitmq-server
deps-system:
	@missing=""; for pair in $(SYSTEM_TOOLS); do \
		cmd=$${pair%%:*}; pkg=$${pair##*:}; \
		command -v $$cmd >/dev/null 2>&1 || missing="$$missing $$pkg"; \
	done; \
	if [ -z "$$missing" ]; then exit 0; fi; \
	if [ "$$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then \
		echo "note: missing system packages:$$missing (apt-get install$$missing as root); tests that need them will say so"; \
		exit 0; \
	fi; \
	echo "installing system packages:$$missing"; \
	export DEBIAN_FRONTEND=noninteractive; \
	apt-get install -y -q --no-install-recommends $$missing >/dev/null 2>&1 \
		|| { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q --no-install-recommends $$missing >/dev/null 2>&1; } \
		|| echo "warning: could not apt-get install$$missing; tests that need them will say so"
	@# kubectl and helm into .tools/bin (and docker-compose as root): the deploy tests use them.
	@if [ -f deploy/tools.sh ]; then PYTHON=$(BIN)/python bash deploy/tools.sh >/dev/null \
		|| echo "warning: deploy/tools.sh failed; the deploy tests will say why"; fi

test: install deps-system
	$(BIN)/pytest -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder $(PYTEST_ARGS)

# The newest releases pyproject.toml allows (celery, kombu and celery-redbeat are capped at the
# minor version beatflow's use of their internals was tested with): upgraded eagerly in their own
# venv each time, so a new patch release that breaks us shows here before it reaches a user.
test-newest:
	@test -n "$(PYTHON)" || { echo "error: no Python 3.11+ on PATH; install python3 (>= 3.11) and retry" >&2; exit 1; }
	@test -x $(NEWEST_VENV)/bin/python || $(PYTHON) -m venv $(NEWEST_VENV)
	$(NEWEST_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(NEWEST_VENV)/bin/python -m pip install --quiet --upgrade --upgrade-strategy eager -e '.[test]'
	@$(NEWEST_VENV)/bin/python -m pip list --disable-pip-version-check 2>/dev/null \
		| grep -i -E '^(celery|kombu|celery-redbeat|redis|sqlalchemy|flower|fastapi) ' || true
	$(NEWEST_VENV)/bin/pytest -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder $(PYTEST_ARGS) $(NEWEST_TESTS)

lint: install
	$(BIN)/ruff check $(SRC)
	$(BIN)/ruff format --check $(SRC)
	$(BIN)/mypy

typecheck: install
	$(BIN)/mypy

demo: $(DEMO_STAMP)
	$(BIN)/beatflow dev --run example_etl

# The docs site: reference pages are generated from the code (docs/gen), warnings are errors.
.PHONY: docs
docs: install
	@$(BIN)/python -c 'import material, mkdocs' 2>/dev/null || $(BIN)/python -m pip install --quiet -e '.[docs]'
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

bench: install
	@set -e; shopt -s nullglob; files=(bench/bench_*.py); \
	if [ $${#files[@]} -eq 0 ]; then echo "no bench/bench_*.py yet"; exit 0; fi; \
	for f in "$${files[@]}"; do echo "== $$f"; $(BIN)/python "$$f"; done

# The README's picture is a screenshot the browser tests take (tests/web/test_browser.py,
# "web-ui"), never one from a development machine: no path of this checkout is on it.
.PHONY: screenshot
screenshot: install deps-system
	rm -rf build/screenshots
	BEATFLOW_SCREENSHOTS_DIR=build/screenshots $(BIN)/pytest -n 0 -q tests/web/test_browser.py
	cp build/screenshots/web-ui.png docs/web-ui.png

sync-rules: install
	$(BIN)/python -m deploy.rules

# The image, with Podman: base from Debian packages (mmdebstrap) unless BEATFLOW_BASE_IMAGE names
# one (python:3.11-slim with a registry); wheels built on the host; base and wheels cached in
# ~/.cache/beatflow-image. See deploy/image.sh.
image: install
	PYTHON=$(BIN)/python deploy/image.sh

clean:
	rm -rf .beatflow .pytest_cache .mypy_cache .ruff_cache build dist .wheelhouse $(NEWEST_VENV)
	find . -path ./$(VENV) -prune -o -name __pycache__ -type d -exec rm -rf {} +
