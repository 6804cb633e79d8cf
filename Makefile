# Two set-up commands on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
export FLWR_TELEMETRY_ENABLED := 0
export NUMBA_CACHE_DIR ?= $(CURDIR)/.venv/numba_cache
export MPLBACKEND := Agg

.PHONY: demo test bench clean

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

test: $(VENV)/.installed-test
	$(PY) -m pytest -q tests

bench: $(VENV)/.installed-test
	$(PY) benchmarks/bench_gmm.py

clean:
	rm -rf $(VENV) demo_output .pytest_cache
