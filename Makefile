# Two set-up commands on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
export FLWR_TELEMETRY_ENABLED := 0
# one numba cache per state of the compiled sources: numba does not see edits of the helper
# modules a cached kernel calls (tests/_numba_cache_key.py)
export NUMBA_CACHE_DIR ?= $(shell $(PYTHON) tests/_numba_cache_key.py)
export MPLBACKEND := Agg

.PHONY: demo test bench bench-pfl-venv clean

$(VENV)/bin/activate:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip

$(VENV)/.installed-demo: $(VENV)/bin/activate setup.py
	$(PIP) install --quiet -e ".[plot]"
	touch $@

$(VENV)/.installed-test: $(VENV)/bin/activate setup.py
	$(PIP) install --quiet -e ".[test,plot,notebooks,flower]"
	touch $@

demo: $(VENV)/.installed-demo
	$(VENV)/bin/fedemstats demo --out demo_output

# One BLAS thread: numba's pool already uses both cores, and oversubscribed OpenBLAS
# threads made small factorisations 100x slower on a 2-core machine.
test: $(VENV)/.installed-test
	OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 $(PY) -m pytest -q --durations=20 tests

bench: $(VENV)/.installed-test
	$(PY) benchmarks/bench_gmm.py

# pfl (the privacy benchmark's peer) pins dp-accounting<0.6: its own venv, never a package dependency
bench-pfl-venv:
	$(PYTHON) -m venv .venv-pfl
	.venv-pfl/bin/python -m pip install --quiet pfl==0.6.0

clean:
	rm -rf $(VENV) .venv-pfl demo_output .pytest_cache .numba_cache
