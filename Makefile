# The two set-up commands of the README: `make demo` and `make test`.
# Each creates .venv when missing and installs what it needs.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
# torch: the CPU wheel only (2.13.0 lies on disk on the project machines);
# never let pip resolve a CUDA build.
TORCH_SPEC ?= torch==2.13.0

.PHONY: demo test lint venv clean

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip

$(VENV)/.installed-core: pyproject.toml | $(VENV)/bin/python
	$(PIP) install -q -e ".[cli]"
	touch $@

$(VENV)/.installed-dev: pyproject.toml | $(VENV)/bin/python
	$(PIP) install -q "$(TORCH_SPEC)" || echo "warning: $(TORCH_SPEC) not available; torch tests will be skipped"
	$(PIP) install -q -e ".[cli,dev,dask]"
	touch $@

venv: $(VENV)/.installed-dev

demo: $(VENV)/.installed-core
	$(PY) -m mbkkm.demo --out demo_output

test: $(VENV)/.installed-dev
	$(PY) -m ruff check src tests benchmarks
	$(PY) -m pytest -q

lint: $(VENV)/.installed-dev
	$(PY) -m ruff check src tests benchmarks
	$(PY) -m ruff format --check src tests benchmarks || true

clean:
	rm -rf $(VENV) demo_output .pytest_cache .ruff_cache
