# The two set-up commands of the README: `make demo` and `make test`.
# Each creates .venv when missing and installs what it needs.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
# torch: the CPU wheel only (2.13.0 lies on disk on the project machines);
# never let pip resolve a CUDA build.
TORCH_SPEC ?= torch==2.13.0

# Sphinx: warnings are errors; the gallery runs the plot_* examples only unless
# MBKKM_GALLERY=all (see examples/README.rst).
SPHINXOPTS ?= -W --keep-going -j 1
DOCS_OUT := docs/_build/html

.PHONY: demo test test-cpu-targets lint venv clean docs docs-full dist

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip

$(VENV)/.installed-core: pyproject.toml | $(VENV)/bin/python
	$(PIP) install -q -e ".[cli]"
	touch $@

$(VENV)/.installed-dev: pyproject.toml | $(VENV)/bin/python
	$(PIP) install -q "$(TORCH_SPEC)" || echo "warning: $(TORCH_SPEC) not available; torch tests will be skipped"
	$(PIP) install -q -e ".[cli,dev,dask,docs]"
	touch $@

$(VENV)/.installed-docs: pyproject.toml | $(VENV)/bin/python
	$(PIP) install -q -e ".[docs]"
	touch $@

venv: $(VENV)/.installed-dev

demo: $(VENV)/.installed-core
	$(PY) -m mbkkm.demo --out demo_output

test: $(VENV)/.installed-dev
	$(PY) -m ruff check src tests benchmarks examples docs conftest.py
	$(PY) -m ruff format --check src tests benchmarks examples docs conftest.py
	$(PY) -m pytest -q
	$(MAKE) test-cpu-targets
	$(MAKE) docs

# The numerical tests once more under a second CPU target, as on a CPU with AVX2 but
# no AVX-512 (a common laptop or cloud CPU): OpenBLAS's Haswell kernels, NumPy's
# AVX-512 dispatch targets switched off (the names this NumPy dispatches on, read
# from it: X86_V4 AVX512_ICL AVX512_SPR on NumPy 2.4, AVX512F ... on 1.x), torch's
# AVX2 kernels and MKL's AVX2 code path. Their rounding differs from AVX-512's, so a
# test that holds only under one CPU's rounding fails here (docs/reliability.md,
# Determinism). The first line printed shows the targets in force. Cost: 1,506 tests,
# 4 min of CPU time (26 min of wall time on a 2-core machine under a load average of 8).
NUMERIC_TESTS := tests/backends tests/kernels tests/core tests/cluster
NPY_AVX512 = $(shell $(PY) -c "import numpy as np; m = getattr(np, '_core', None) or np.core; \
	print(','.join(f for f in m._multiarray_umath.__cpu_dispatch__ if f.startswith('AVX512') or f == 'X86_V4'))")
CPU_TARGET_ENV = OPENBLAS_CORETYPE=Haswell NPY_DISABLE_CPU_FEATURES="$(NPY_AVX512)" \
	ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2

test-cpu-targets: $(VENV)/.installed-dev
	$(CPU_TARGET_ENV) $(PY) -c "import numpy as np, threadpoolctl; \
	u = (getattr(np, '_core', None) or np.core)._multiarray_umath; \
	print('second CPU target: numpy SIMD', [f for f in u.__cpu_dispatch__ if u.__cpu_features__[f]], \
	'BLAS', [(i['internal_api'], i.get('architecture')) for i in threadpoolctl.threadpool_info()])"
	$(CPU_TARGET_ENV) $(PY) -m pytest -q -x -p no:cacheprovider $(NUMERIC_TESTS)

# The documentation site, HTML into docs/_build/html.
docs: $(VENV)/.installed-docs
	$(PY) -m sphinx -b html $(SPHINXOPTS) docs $(DOCS_OUT)

# The same with every gallery example executed (MNIST at scale needs
# ../shared/datasets/mnist.npz; the GPU example runs only where CUDA is seen).
docs-full: $(VENV)/.installed-docs
	MBKKM_GALLERY=all $(PY) -m sphinx -b html $(SPHINXOPTS) docs $(DOCS_OUT)

# An sdist and a wheel into dist/, checked by twine. `build` makes them in an
# isolated environment of its own with the build backend only (hatchling), so this
# needs neither the project's dependencies nor the development set.
dist: $(VENV)/bin/python
	rm -rf dist
	$(PIP) install -q "build>=1.2" "twine>=5.1"
	$(PY) -m build --outdir dist
	$(PY) -m twine check --strict dist/*

lint: $(VENV)/.installed-dev
	$(PY) -m ruff check src tests benchmarks
	$(PY) -m ruff format --check src tests benchmarks examples docs conftest.py

clean:
	rm -rf $(VENV) demo_output .pytest_cache .ruff_cache dist docs/_build docs/api/generated docs/auto_examples
