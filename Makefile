PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export MLFLOW_DISABLE_TELEMETRY := true

.PHONY: demo ui test venv lint clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(BIN)/python examples/demo.py

# The MLflow UI on the demo's store: http://127.0.0.1:5000 (PORT=... to change it)
PORT ?= 5000
ui: $(STAMP)
	$(BIN)/mlflow ui --backend-store-uri sqlite:///mlflow.db --port $(PORT)

test: $(STAMP)
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check governance flavors cli examples tests

clean:
	rm -rf $(VENV) demo-output mlflow.db mlartifacts mlruns
