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

install: $(VENV)/.installed native cpu-kernels

# The host runtime library (thread pool) beside its source; tcc builds it into
# ~/.cache/tcc on first use when this was not run.
native: runtime/native/libtccrt.so

# The cpu accelerator's kernel library, one build per instruction set
# (avx512, avx2, generic; the best one the CPU runs is chosen at load time)
# into accelerators/cpu/build/. Built into ~/.cache/tcc on first use otherwise.
cpu-kernels: $(VENV)/.installed
	$(PY) -m tcc.accelerators.cpu.build

runtime/native/libtccrt.so: $(VENV)/.installed $(wildcard runtime/native/*.c runtime/native/*.h)
	$(PY) -m tcc.runtime.native $@

test: install
	$(PY) -m pytest -n $(JOBS) test

# The corpus of exporter-written models (test/models/corpus/) against
# onnxruntime: the tests, then the scoreboard (python -m tcc.model_report).
# Rebuilding the corpus needs torch: see test/models/build_corpus.py.
.PHONY: test-models
test-models: install
	$(PY) -m pytest -n $(JOBS) test/models
	$(PY) -m tcc.model_report

bench-ir: install
	$(PY) bench/bench_ir.py

bench: install
	$(PY) bench/bench_ir.py
	$(PY) bench/bench_models.py
	$(PY) bench/bench_cpu_accel.py

clean:
	rm -rf $(VENV) build *.egg-info

# GPU: the gpu suite, the conformance kit on gpu:0, node tests with --maccel=gpu
# (test-gpu), and the GPU benchmarks vs torch eager / copy bandwidth (bench-gpu).
.PHONY: test-gpu bench-gpu
test-gpu: install
	PY=$(PY) $(PY) -m pytest -q -rs test/accelerators/gpu
	PY=$(PY) bash scripts/gpu_check.sh

bench-gpu: install
	$(PY) bench/bench_gpu.py
