"""The argument mapping the GPU runtime hands cuBLAS, checked without a GPU:
the emulated launch plan runs its GEMM steps through a column-major sgemm
written from the BLAS definition, fed exactly the arguments
`plan.row_major_gemm_as_column_major` gives `cublas.sgemm` /
`sgemmStridedBatched` (swapped operands, transposes, leading dimensions,
offsets, batch strides), and every MatMul/Gemm family case must still match
onnxruntime. (The emulation's own GEMM is row-major numpy, which never
exercises that mapping.)"""
import numpy as np
import pytest

from tcc.accelerators.gpu import emulate, plan
from tcc.accelerators.gpu.emulate import EmulatedModule, compiler

from . import models
from .fake_cupy import sgemm as cublas_sgemm
from .helpers import compile_partition, onnxruntime_outputs, random_inputs

needs_cxx = pytest.mark.skipif(compiler() is None, reason="no host C++ compiler for the CUDA emulation")


def gemm_with_cublas_arguments(self, s, a, b, c):
    g = plan.row_major_gemm_as_column_major(s)
    bufs = {"a": a.view(np.float32), "b": b.view(np.float32), "c": c.view(np.float32)}
    for i in range(g["batch"]):
        (an, ao, lda, sa), (bn, bo, ldb, sb), (cn, co, ldc, sc) = g["A"], g["B"], g["C"]
        cublas_sgemm(g["transa"], g["transb"], g["m"], g["n"], g["k"], g["alpha"],
                     bufs[an][ao + i * sa:], lda, bufs[bn][bo + i * sb:], ldb, g["beta"], bufs[cn][co + i * sc:], ldc)


GEMM_CASES = [k for k in models.family_cases() if k.startswith(("matmul", "gemm"))]


@needs_cxx
@pytest.mark.parametrize("name", GEMM_CASES)
def test_gemm_steps_through_the_cublas_argument_mapping(name, monkeypatch):
    monkeypatch.setattr(emulate._Backend, "gemm", gemm_with_cublas_arguments)
    model = models.family_cases()[name]
    rm, ins, outs = compile_partition(model)
    assert rm.metadata["gemms"] >= 1, rm.metadata
    feeds = random_inputs(model)
    got = EmulatedModule(rm.payload).run("gpu_0", [feeds[k] for k in ins], outs)
    ref = onnxruntime_outputs(model, feeds)
    assert len(got) == len(ref)
    for g, r in zip(got, ref):
        np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-5)


def test_the_reference_sees_a_wrong_mapping(rng):
    # row-major C (3x5) = A (3x4) B (4x5): the right mapping agrees with numpy, unswapped operands do not fit
    a, b = rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal((4, 5)).astype(np.float32)
    s = dict(ta=0, tb=0, m=3, n=5, k=4, a_off=0, b_off=0, c_off=0, lda=4, ldb=5, ldc=5, sa=0, sb=0, sc=0,
             batch=1, alpha=1.0, beta=0.0)
    # exact product in float64; float32 sums in another order differ by a few ulps of the largest
    # term (seed 3921249680: 1.3e-8 on an entry of 7e-3, over rtol 1e-6), a wrong mapping by O(1)
    want = a.astype(np.float64) @ b.astype(np.float64)
    c = np.zeros(15, np.float32)
    gemm_with_cublas_arguments(None, s, a.reshape(-1), b.reshape(-1), c)
    np.testing.assert_allclose(c.reshape(3, 5), want, rtol=1e-5, atol=1e-5)
    with pytest.raises(AssertionError):  # row-major A and B handed over as they are: other values
        c2 = np.zeros(15, np.float32)
        cublas_sgemm(0, 0, 3, 5, 4, 1.0, a.reshape(-1), 4, b.reshape(-1), 5, 0.0, c2, 5)
        np.testing.assert_allclose(c2.reshape(3, 5), want, rtol=1e-5, atol=1e-5)
