"""runtime/native/gemm.c picks its micro-kernel from CPUID (AVX-512, AVX2 +
FMA, or portable C); TCC_CPU_ISA picks a lesser one. The GEMM and
convolution tests of test_gemm_conv_kernels.py again, in a fresh process per
lesser kernel this CPU runs (the choice is made once per process), so the
AVX2 kernel an AVX2-only machine runs is tested on an AVX-512 one too."""
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
FLAGS = open("/proc/cpuinfo").read().split() if os.path.exists("/proc/cpuinfo") else []


@pytest.mark.parametrize("isa", ["avx2", "generic"])
def test_gemm_conv_kernels_on_each_lesser_kernel(isa, _tcc_test_seed):
    if isa == "avx2" and not {"avx2", "fma"} <= set(FLAGS):
        pytest.skip("the CPU has no AVX2 + FMA")
    if isa == "avx2" and "avx512f" not in FLAGS:
        pytest.skip("AVX2 is this CPU's own kernel: test_gemm_conv_kernels.py runs it")
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
                        f"--seed={_tcc_test_seed}", os.path.join(HERE, "test_gemm_conv_kernels.py")],
                       env=dict(os.environ, TCC_CPU_ISA=isa), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
