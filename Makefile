# tcc: build, install and test. No cmake: the native parts are plain C built
# here with the system compiler.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(VENV)/bin/pip
JOBS   ?= 2

.PHONY: install test test-fast bench bench-ir clean native

$(VENV)/.installed: pyproject.toml setup.py requirements-ci.txt
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -c requirements-ci.txt -e '.[test]'
	touch $@

install: $(VENV)/.installed native

# The host runtime library (thread pool) beside its source; tcc builds it into
# ~/.cache/tcc on first use when this was not run.
native: runtime/native/libtccrt.so

runtime/native/libtccrt.so: runtime/native/threadpool.c
	$${CC:-cc} -O2 -fPIC -shared -pthread -o $@ $^

test: install
	$(PY) -m pytest -n $(JOBS) test

bench-ir: install
	$(PY) bench/bench_ir.py

bench: install
	$(PY) bench/bench_ir.py

clean:
	rm -rf $(VENV) build *.egg-info
