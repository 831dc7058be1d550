PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# Every install takes the versions the suite passed with (constraints.txt, also for the build).
PIP_LOCKED := -m pip install --quiet --constraint constraints.txt --build-constraint constraints.txt
export MLFLOW_DISABLE_TELEMETRY := true

.PHONY: demo ui server services test test-fast venv lock lint clean

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --constraint constraints.txt pip
	$(BIN)/python $(PIP_LOCKED) -e ".[dev]"
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(BIN)/python examples/demo.py

# The MLflow UI on the demo's store: http://127.0.0.1:5000 (PORT=... to change it)
PORT ?= 5000
ui: $(STAMP)
	$(BIN)/mlflow ui --backend-store-uri sqlite:///mlflow.db --port $(PORT)

# The shared-server stack the tests use, in the foreground until Ctrl-C: PostgreSQL and an
# authenticated mlflow server in a temporary folder; it prints the URL, the admin's
# credentials and what to export (docs/deployment.md). SERVER_PORT=... fixes the port.
server: $(STAMP) services
	$(BIN)/python examples/server/stack.py $(if $(SERVER_PORT),--port $(SERVER_PORT))

# PostgreSQL's server binaries, SoftHSM2 (a PKCS#11 module) and Java 17 (for Spark's local
# mode), installed when missing (as root); the tests start the servers and make their tokens.
services:
	@sh examples/server/ensure_postgres.sh
	@sh examples/server/ensure_softhsm.sh
	@sh examples/server/ensure_java.sh

# The whole suite (what CI runs), on three workers (pytest-xdist; a file's tests stay on
# one worker, so module fixtures are built once). Many tests wait on a server, a child
# process or an environment build, so a third worker fills those waits (four were slower:
# 11:21). 10:01 for 1370 tests from a fresh clone on a quiet 2-core machine (the 10-minute
# bar missed by 2 s; the longest files first, tests/conftest.py): results_suite_cpu.md.
test: $(STAMP) services
	$(BIN)/python -m pytest -q -n 3 --dist loadfile

# The fast lane: unit tests of the domain library (no MLflow store, no subprocesses), on
# two workers (CPU-bound: 1:13 on the slower 2-core machine, 1:48 on one worker).
test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -n 2 tests/governance

# Refresh constraints.txt: resolve the newest versions pyproject.toml allows in a scratch
# environment, write them, reinstall .venv from them and run the whole suite. Commit the
# new constraints.txt only when the suite passes.
LOCK_VENV := .venv-lock
lock:
	rm -rf $(LOCK_VENV)
	$(PYTHON) -m venv $(LOCK_VENV)
	$(LOCK_VENV)/bin/python -m pip install --quiet --upgrade pip setuptools wheel
	$(LOCK_VENV)/bin/python -m pip install --quiet -e ".[dev]"
	{ sed -n '/^#/p' constraints.txt; \
	  $(LOCK_VENV)/bin/python -m pip freeze --all --exclude-editable | grep -v '^-e'; \
	} > constraints.txt.new
	mv constraints.txt.new constraints.txt
	rm -rf $(LOCK_VENV)
	$(MAKE) test

lint: $(STAMP)
	$(BIN)/ruff check governance flavors cli examples tests

clean:
	rm -rf $(VENV) $(LOCK_VENV) demo-output mlflow.db mlartifacts mlruns
