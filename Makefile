# tcc: build, install and test. No cmake: the native parts are plain C built
# here with the system compiler.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(VENV)/bin/pip
JOBS   ?= 2

.PHONY: install test test-fast test-ordered test-isas bench bench-ir bench-soak fuzz clean native

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

runtime/native/libtccrt.so: $(VENV)/.installed $(wildcard runtime/native/*.c runtime/native/*.h) accelerators/cpu/kernels/mathfun.h accelerators/cpu/kernels/tcc_cpu.h accelerators/cpu/kernels/pin.h
	$(PY) -m tcc.runtime.native $@

# The suite, in an order pytest-randomly shuffles with the printed seed (see
# test/conftest.py); -rs lists every skip with its reason.
test: install
	$(PY) -m pytest -n $(JOBS) -rs test

# The same suite in file order.
test-ordered: install
	$(PY) -m pytest -n $(JOBS) -rs -p no:randomly test

# The edit-run loop: the IR, the runtime, the elementwise and shape lowerings
# (interpreter and compiled), the cpu accelerator's models and the CLIs end to
# end; stops at the first failure.
FAST := test/ir test/runtime test/test_suite_rules.py test/lowering/test_elementwise.py \
	test/lowering/test_shape.py test/accelerators/cpu/test_models.py \
	test/accelerators/cpu/test_kernel_choice.py test/cli/test_end_to_end.py
test-fast: install
	$(PY) -m pytest -n $(JOBS) -rs -x $(FAST)

# The cpu accelerator's tests again on each other kernel build this CPU runs
# (TCC_CPU_ISA=avx2 and generic on an AVX-512 machine, generic on an AVX2 one).
test-isas: install
	@for isa in $$($(PY) -c "from tcc.accelerators.cpu import build as b; \
	    print(*[i for i in b.ISA_ORDER if b.ISA_NEEDS[i] <= b.cpu_flags() and i != b.best_isa()])"); do \
	  echo "== TCC_CPU_ISA=$$isa"; TCC_CPU_ISA=$$isa $(PY) -m pytest -n $(JOBS) -rs test/accelerators/cpu || exit 1; \
	done

# The long randomized fuzz run (10 minutes; `make test` runs a bounded,
# derandomized one and replays test/hostile/fuzz_corpus/). Crashing inputs are
# saved into that corpus: commit them with the fix.
FUZZ_SECONDS ?= 600
fuzz: install
	$(PY) test/hostile/run_fuzz.py $(FUZZ_SECONDS)

# The corpus of exporter-written models (test/models/corpus/) against
# onnxruntime: the tests, then the scoreboard (python -m tcc.model_report).
# Rebuilding the corpus needs torch: see test/models/build_corpus.py.
.PHONY: test-models
test-models: install
	$(PY) -m pytest -n $(JOBS) test/models
	$(PY) -m tcc.model_report

bench-ir: install
	$(PY) bench/bench_ir.py

# Load and soak: 10,000 runs with flat RSS, threads and sessions sharing an
# artifact, racing compiles to one path, artifacts deleted under a session.
bench-soak: install
	$(PY) bench/bench_soak.py

# bench_corpus: the exporter-written models of test/models/corpus (default
# compile and --maccel=host against onnxruntime). oneDNN's comparison
# (bench/bench_onednn.py) needs a wheel tcc does not depend on: run by hand.
# On an AVX-512 CPU that offers CPUID faulting, bench_cpu_accel.py runs a
# second time as on an AVX2-only machine (--hide-avx512: onnxruntime's AVX2
# kernels against tcc's avx2 library), and its int8 models as on an AVX2 CPU
# with AVX-VNNI (--keep-avx-vnni, where the CPU has AVX-VNNI) and as on an
# AVX-512 CPU without VNNI (--hide-vnni, where it has VNNI).
bench: install
	$(PY) bench/bench_ir.py
	$(PY) bench/bench_models.py
	$(PY) bench/bench_cpu_accel.py
	@if grep -qw avx512f /proc/cpuinfo && grep -qw cpuid_fault /proc/cpuinfo; then \
	  $(PY) bench/bench_cpu_accel.py --hide-avx512; fi
	@if grep -qw avx512f /proc/cpuinfo && grep -qw cpuid_fault /proc/cpuinfo && grep -qw avx_vnni /proc/cpuinfo; then \
	  $(PY) bench/bench_cpu_accel.py --hide-avx512 --keep-avx-vnni --models bert_int8 mlp_qdq resnet18_qdq --gemm; fi
	@if grep -qw avx512_vnni /proc/cpuinfo && grep -qw cpuid_fault /proc/cpuinfo; then \
	  $(PY) bench/bench_cpu_accel.py --hide-vnni --models bert_int8 mlp_qdq resnet18_qdq --gemm; fi
	$(PY) bench/bench_corpus.py

clean:
	rm -rf $(VENV) build *.egg-info

# GPU: scripts/gpu_device_run.sh runs everything GPU-side in one process tree of at
# most 9 minutes (probe, the gpu suite + the device conformance kit on gpu:0, the
# benchmarks vs torch eager / torch.compile / copy bandwidth, the node tests with
# forced placement), installing nothing; test-gpu runs it here, bench-gpu the
# benchmarks alone. gpu-wheels fetches the cp312 wheels it carries to a GPU machine
# that lacks these packages (the versions CI pins) into wheels/cp312 (~58 MiB).
.PHONY: test-gpu bench-gpu gpu-wheels
test-gpu: install
	PY=$(PY) bash scripts/gpu_device_run.sh

bench-gpu: install
	$(PY) bench/bench_gpu.py

GPU_WHEELS := llvmlite click pluggy ml_dtypes
gpu-wheels: $(VENV)/.installed
	$(PIP) download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
	  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
	  --platform manylinux2014_x86_64 -d wheels/cp312 \
	  $(foreach p,$(GPU_WHEELS),$(shell grep -i '^$(p)==' requirements-ci.txt))
