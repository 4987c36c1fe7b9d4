"""Softmax/layernorm rows (kernels/norm.c, and the two fused) and transposes (kernels/copy.c),
called directly in every ISA build against numpy on fresh random data: row
lengths below, at and past the vector width, in-place softmax, streamed
stores from an unaligned output; transposes
of rank 1-5 with strided and contiguous last dimensions, partial 16 x 16
blocks, rows split across 2 threads."""
import ctypes

import numpy as np
import pytest

from .test_gemm_paths import L, F, P, lib_at

rng = np.random.default_rng()


@pytest.mark.parametrize("isa", ["avx512", "avx2", "generic"])
def test_norm_rows(isa):
    lib = lib_at(isa, 2)
    lib.tcc_cpu_softmax.argtypes = [L, L, L, P, P, ctypes.c_int]
    lib.tcc_cpu_layernorm.argtypes = [L, L, P, P, P, F, P]
    for cols in list(range(1, 41)) + [128, 255]:
        x = (rng.standard_normal((5, cols)) * 4 + 1).astype(np.float32)
        x64 = x.astype(np.float64)
        e = np.exp(x64 - x64.max(1, keepdims=True))
        sm = e / e.sum(1, keepdims=True)
        for log in (0, 1):
            want = np.log(sm) if log else sm
            y = np.empty_like(x)
            lib.tcc_cpu_softmax(5, cols, 1, x.ctypes.data, y.ctypes.data, log)
            np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6, err_msg=f"{cols} log={log}")
            inplace = x.copy()  # y may be x
            lib.tcc_cpu_softmax(5, cols, 1, inplace.ctypes.data, inplace.ctypes.data, log)
            np.testing.assert_allclose(inplace, want, rtol=1e-5, atol=1e-6, err_msg=f"{cols} log={log} in place")
        s, bias = rng.standard_normal(cols).astype(np.float32), rng.standard_normal(cols).astype(np.float32)
        mean, var = x64.mean(1, keepdims=True), x64.var(1, keepdims=True)
        z = (x64 - mean) / np.sqrt(var + 1e-5)
        norm = z * s
        # float32's rounding of x and its mean (a few ulps of the row's largest |x|) moves x - mean,
        # and with it z and the row's variance, by that over sqrt(var + eps): a row of nearly equal
        # values (two columns close together) amplifies it past any fixed tolerance
        cond = 8 * 2.0 ** -24 * np.abs(x64).max(1, keepdims=True) / np.sqrt(var + 1e-5)
        tol = 1e-5 + cond * np.abs(s) * (1 + np.abs(z))
        for bp, want in ((None, norm), (bias.ctypes.data, norm + bias)):
            y = np.empty_like(x)
            lib.tcc_cpu_layernorm(5, cols, x.ctypes.data, s.ctypes.data, bp, 1e-5, y.ctypes.data)
            bad = np.abs(y - want) > tol + 1e-4 * np.abs(want)
            assert not bad.any(), (f"layernorm {cols}: at {np.argwhere(bad)[:3].tolist()} got {y[bad][:3]}, "
                                   f"want {want[bad][:3]}, within {(tol + 1e-4 * np.abs(want))[bad][:3]}")
        # layernorm(softmax(x)) in one pass; the probabilities' spread is ~1/cols, so the
        # normalization scales their rounding error by up to cols
        lib.tcc_cpu_softmax_layernorm.argtypes = [L, L, P, P, P, F, P]
        pm, pv = sm.mean(1, keepdims=True), sm.var(1, keepdims=True)
        snorm = (sm - pm) / np.sqrt(pv + 1e-5) * s
        for bp, want in ((None, snorm), (bias.ctypes.data, snorm + bias)):
            y = np.empty_like(x)
            lib.tcc_cpu_softmax_layernorm(5, cols, x.ctypes.data, s.ctypes.data, bp, 1e-5, y.ctypes.data)
            np.testing.assert_allclose(y, want, rtol=1e-4, atol=2e-6 * cols, err_msg=f"softmax_layernorm {cols}")


@pytest.mark.parametrize("isa", ["avx512", "avx2", "generic"])
@pytest.mark.parametrize("offset", [0, 1, 3])
def test_softmax_layernorm_streamed(isa, offset):
    """Past 8 MB the fused rows are written with non-temporal stores from y's
    first vector-aligned element: y at an offset of 0, 1 and 3 floats from an
    aligned buffer, rows (1001) no vector width divides."""
    lib = lib_at(isa, 2)
    lib.tcc_cpu_softmax_layernorm.argtypes = [L, L, P, P, P, F, P]
    rows, cols = 2100, 1001
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    s, bias = rng.standard_normal(cols).astype(np.float32), rng.standard_normal(cols).astype(np.float32)
    buf = np.empty(rows * cols + 16 + offset, np.float32)
    start = (-buf.ctypes.data // 4) % 16 + offset  # 64-byte aligned, then `offset` floats on
    y = buf[start:start + rows * cols].reshape(rows, cols)
    lib.tcc_cpu_softmax_layernorm(rows, cols, x.ctypes.data, s.ctypes.data, bias.ctypes.data, 1e-5, y.ctypes.data)
    x64 = x.astype(np.float64)
    e = np.exp(x64 - x64.max(1, keepdims=True))
    sm = e / e.sum(1, keepdims=True)
    want = (sm - sm.mean(1, keepdims=True)) / np.sqrt(sm.var(1, keepdims=True) + 1e-5) * s + bias
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=2e-6 * cols)


@pytest.mark.parametrize("isa", ["avx512", "avx2", "generic"])
def test_softmax_layernorm_spread(isa):
    """The fused rows take the probabilities' variance from the exponentials'
    sum and sum of squares (no pass around the mean): rows from nearly
    uniform (variance far below epsilon) to one-hot-like (variance ~1/cols),
    one row and many, row lengths with a tail past the vectors, epsilon from
    1e-3 down to 1e-8."""
    lib = lib_at(isa, 2)
    lib.tcc_cpu_softmax_layernorm.argtypes = [L, L, P, P, P, F, P]
    for rows, cols in ((1, 1023), (1, 17), (7, 1024), (3, 333)):
        for spread in (1e-3, 0.3, 3.0, 12.0):
            for eps in (1e-3, 1e-5, 1e-8):
                x = (rng.standard_normal((rows, cols)) * spread + rng.standard_normal()).astype(np.float32)
                s, bias = rng.standard_normal(cols).astype(np.float32), rng.standard_normal(cols).astype(np.float32)
                y = np.empty_like(x)
                lib.tcc_cpu_softmax_layernorm(rows, cols, x.ctypes.data, s.ctypes.data, bias.ctypes.data, eps,
                                              y.ctypes.data)
                x64 = x.astype(np.float64)
                e = np.exp(x64 - x64.max(1, keepdims=True))
                sm = e / e.sum(1, keepdims=True)
                sd = np.sqrt(sm.var(1, keepdims=True) + eps)
                want = (sm - sm.mean(1, keepdims=True)) / sd * s + bias
                # float32 probabilities carry ~1e-7 of their own size; normalized by sd
                tol = 4e-7 * sm.max(1, keepdims=True) / sd * np.abs(s) + 1e-5
                assert (np.abs(y - want) <= tol).all(), (rows, cols, spread, eps, float(np.max(np.abs(y - want) / tol)))


@pytest.mark.parametrize("isa", ["avx512", "avx2", "generic"])
def test_softmax_layernorm_underflow(isa):
    """Rows whose exponentials underflow (x - max below -87, where the
    vector exp gives e^-87 ~ 1.6e-38 instead of 0) and masked entries
    (-inf, an attention's mask), against float64 numpy: the outputs of the
    underflowing entries equal the zero probabilities' to float precision."""
    lib = lib_at(isa, 2)
    lib.tcc_cpu_softmax_layernorm.argtypes = [L, L, P, P, P, F, P]
    rows, cols = 6, 1000
    x = rng.uniform(-400.0, 5.0, (rows, cols)).astype(np.float32)
    x[rng.random((rows, cols)) < 0.2] = -np.inf
    x[:, 0] = 5.0  # no row all -inf
    s, bias = rng.standard_normal(cols).astype(np.float32), rng.standard_normal(cols).astype(np.float32)
    y = np.empty_like(x)
    lib.tcc_cpu_softmax_layernorm(rows, cols, x.ctypes.data, s.ctypes.data, bias.ctypes.data, 1e-5, y.ctypes.data)
    x64 = x.astype(np.float64)
    e = np.exp(x64 - x64.max(1, keepdims=True))
    sm = e / e.sum(1, keepdims=True)
    want = (sm - sm.mean(1, keepdims=True)) / np.sqrt(sm.var(1, keepdims=True) + 1e-5) * s + bias
    assert np.isfinite(y).all()
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=2e-6 * cols)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("isa", ["avx512", "avx2", "generic"])
def test_transpose(isa, threads):
    lib = lib_at(isa, threads)
    f = lib.tcc_cpu_transpose
    f.argtypes = [ctypes.c_int, P, P, P, P]
    f.restype = None
    cases = [((1, 128, 4, 64), (0, 2, 3, 1)), ((1, 128, 4, 64), (0, 2, 1, 3)), ((37, 53), (1, 0)), ((16, 16), (1, 0)),
             ((33, 70), (1, 0)), ((3, 5, 17, 19), (3, 0, 2, 1)), ((2, 40, 33), (0, 2, 1)), ((7,), (0,)),
             ((2, 3, 4, 5, 6), (4, 2, 0, 3, 1)), ((130, 2, 18), (2, 0, 1)), ((100, 3, 40), (1, 2, 0)), ((5, 64, 3), (1, 0, 2))]
    for shape, perm in cases:
        x = rng.standard_normal(shape).astype(np.float32)
        y = np.empty(x.size, np.float32)
        sh, pm = (ctypes.c_long * len(shape))(*shape), (ctypes.c_long * len(perm))(*perm)
        f(len(shape), sh, pm, x.ctypes.data, y.ctypes.data)
        np.testing.assert_array_equal(y, x.transpose(perm).ravel(), err_msg=f"{shape} {perm}")
