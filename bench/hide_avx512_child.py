"""Imported first by the bench scripts: in a `--hide-avx512` child
(TCC_BENCH_HIDE_AVX512 names the shim bench_models.hide_avx512_env built),
loads bench/hide_avx512.c's shim before numpy, onnxruntime or OpenBLAS read
CPUID. Elsewhere it does nothing."""
import ctypes
import os

if os.environ.get("TCC_BENCH_HIDE_AVX512"):
    ctypes.CDLL(os.environ["TCC_BENCH_HIDE_AVX512"])
