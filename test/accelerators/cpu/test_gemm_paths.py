"""The packed-weights GEMM (kernels/gemm_packed.c), called directly in every
ISA build at 1 and 2 threads against numpy on fresh random data: every tile
height (M = 1..30: exact-row tiles, several row blocks), column tails (N
below, at and past 16 and 32), K from 1, an A past 1 MB (panels taken in
groups), every epilogue (bias modes, residual, each activation), alpha !=
1, strided and transposed A, ldc > N
(columns past N untouched); and its tiles on a row-major B (tcc_cpu_gemm
with a small B), and on a runtime B packed per call beside OpenBLAS. The narrow-B GEMM (kernels/gemm_narrow.c) the same way:
N = 1..40 (column groups of every width), M = 1..70 (row-block tails), K
below, at and past a vector, odd; and the compiler choosing it for a
classifier's last layer (MatMul and Gemm with transB)."""
import zipfile
import ctypes

import numpy as np
import pytest

from tcc.accelerators.cpu.codegen import narrow_ldb, pack_b, pack_bt

from .helpers import check, model, rand
from .test_pool_paths import _lib

L, F, P = ctypes.c_long, ctypes.c_float, ctypes.c_void_p
RELU, CLIP, SIGMOID, TANH, LEAKY = 1, 2, 3, 4, 5
rng = np.random.default_rng()


class Ep(ctypes.Structure):
    _fields_ = [("bias", P), ("bias_mode", ctypes.c_int), ("bias_scale", F), ("residual", P), ("act", ctypes.c_int),
                ("a0", F), ("a1", F)]


def lib_at(isa, threads):
    """The `isa` build of the kernel library, its pool limited to `threads`
    (test/conftest.py lifts the limit after each test)."""
    lib = _lib(isa)
    lib.tcc_cpu_set_num_threads(threads)
    return lib


# (bias mode, residual, act): every mode and activation, alone and combined
EPILOGUES = [None, (1, False, 0), (0, True, 0), (1, True, RELU), (2, False, CLIP), (3, True, LEAKY), (4, False, RELU),
             (1, False, SIGMOID), (3, True, TANH), (0, False, CLIP), (2, True, 0)]


def _epilogue(mode, res, act, ref, m, n, ldc, keep):
    """The tcc_epilogue for (mode, res, act) and ref with it applied."""
    ep = Ep(None, 0, 0.75, None, act, -0.5, 0.8 if act == CLIP else 0.0)
    if act == LEAKY:
        ep.a0 = 0.1
    if mode:
        bias = rng.standard_normal({1: (n,), 2: (m,), 3: (m, n), 4: (1,)}[mode]).astype(np.float32)
        keep.append(bias)
        ep.bias, ep.bias_mode = bias.ctypes.data, mode
        ref = ref + 0.75 * (bias[:, None] if mode == 2 else bias)
    if res:
        r = rng.standard_normal((m, ldc)).astype(np.float32)
        keep.append(r)
        ep.residual = r.ctypes.data
        ref = ref + r[:, :n]
    if act == RELU:
        ref = np.maximum(ref, 0)
    elif act == CLIP:
        ref = np.clip(ref, -0.5, 0.8)
    elif act == LEAKY:
        ref = np.where(ref >= 0, ref, 0.1 * ref)
    elif act == SIGMOID:
        ref = 1 / (1 + np.exp(-ref))
    elif act == TANH:
        ref = np.tanh(ref)
    return ep, ref


def _assert_gemm_close(c, ref, a, b, alpha, msg):
    """c within f32 rounding of the float64 reference: 1e-4 relative, plus
    2^-16 of the sum of the products' magnitudes (a fixed atol failed K =
    1024 where an output's products cancel: 1.3e-4 off on 0.124; a product
    left out or counted twice is off by ~|a||b|, far past it)."""
    bound = 1e-5 + 1e-4 * np.abs(ref) + 2.0 ** -16 * abs(alpha) * (np.abs(a.astype(np.float64)) @ np.abs(b))
    bad = np.abs(c - ref) > bound
    assert not bad.any(), (msg, np.argwhere(bad)[:3], c[bad][:3], ref[bad][:3])


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("isa", ["avx512", "avx2", "generic"])
def test_gemm_packed(isa, threads):
    lib = lib_at(isa, threads)
    lib.tcc_cpu_gemm_packed.argtypes = [L, L, L, F, P, L, L, P, P, L, P]
    lib.tcc_cpu_gemm_packed.restype = None
    ns, ks = [1, 10, 16, 17, 31, 32, 33, 70], [1, 7, 64, 300]
    cases = [(m, ns[m % len(ns)], ks[m % len(ks)], EPILOGUES[m % len(EPILOGUES)], m % 3) for m in range(1, 31)]
    cases += [(13, 45, 37, ep, a) for ep in EPILOGUES for a in range(3)] + [(64, 1024, 200, (1, True, RELU), 0)]
    # rows a multiple of 4 KB apart, which gemm_panels copies further apart first
    cases += [(30, 70, 1024, (1, True, RELU), 0), (17, 45, 1000, (2, False, CLIP), 3), (29, 33, 300, None, 3)]
    # A past 1 MB, which gemm_panels walks in groups of panels: 14 panels in
    # groups of 11 (27 AVX2 half panels: 23), one group of all, transposed A
    cases += [(600, 421, 700, (1, True, RELU), 0), (4000, 70, 90, (2, False, CLIP), 0), (520, 95, 600, None, 1)]
    for m, n, k, epi, layout in cases:
        b = rng.standard_normal((k, n)).astype(np.float32)
        bp = np.ascontiguousarray(pack_b(b))
        # A as it is, transposed (K x M), every 2nd row and 3rd column of a larger matrix, or
        # the first columns of one
        if layout == 0:
            a = rng.standard_normal((m, k)).astype(np.float32)
            buf, rsa, csa = a, k, 1
        elif layout == 1:
            buf = rng.standard_normal((k, m)).astype(np.float32)
            a, rsa, csa = buf.T, 1, m
        elif layout == 2:
            buf = rng.standard_normal((2 * m, 3 * k)).astype(np.float32)
            a, rsa, csa = buf[::2, ::3], 6 * k, 3
        else:  # the first k columns of rows 2048 floats (8 KB) long
            buf = rng.standard_normal((m, 2048)).astype(np.float32)
            a, rsa, csa = buf[:, :k], 2048, 1
        alpha = 1.0 if m % 2 else -1.5
        ldc = n + 3
        c = np.full((m, ldc), 7, np.float32)
        ref = alpha * (a.astype(np.float64) @ b)
        keep = []
        ep, ref = _epilogue(*epi, ref, m, n, ldc, keep) if epi else (None, ref)
        lib.tcc_cpu_gemm_packed(m, n, k, alpha, buf.ctypes.data, rsa, csa, bp.ctypes.data, c.ctypes.data, ldc,
                                ctypes.byref(ep) if ep else None)
        _assert_gemm_close(c[:, :n], ref, a, b, alpha, (m, n, k, epi, layout))
        assert (c[:, n:] == 7).all(), (m, n, k, epi, layout)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("isa", ["avx512", "avx2", "generic"])
def test_gemm_small_b_in_place(isa, threads):
    """tcc_cpu_gemm with a B small enough for the packed tiles to read in place
    (AVX-512; OpenBLAS elsewhere), and one just past that size: padded lda,
    ldb, ldc, every transpose."""
    f = lib_at(isa, threads).tcc_cpu_gemm
    f.argtypes = [ctypes.c_int, ctypes.c_int, L, L, L, F, P, L, P, L, P, L, P]
    f.restype = None
    for m, n, k in ((5, 16, 64), (13, 33, 17), (128, 128, 64), (128, 64, 128), (30, 70, 9), (29, 257, 256)):
        _check_gemm_transposes(f, m, n, k, 0.5, None)


def _check_gemm_transposes(f, m, n, k, alpha, epi):
    """tcc_cpu_gemm `f` for (m, n, k) with every transpose of A and B, both
    with padded rows, ldc = n + 3 (the columns past n must stay 7), the
    epilogue `epi` (or None), against float64."""
    for ta in (0, 1):
        for tb in (0, 1):
            ash, bsh = ((k, m) if ta else (m, k)), ((n, k) if tb else (k, n))
            a = rng.standard_normal((ash[0], ash[1] + 2)).astype(np.float32)
            b = rng.standard_normal((bsh[0], bsh[1] + 5)).astype(np.float32)
            c = np.full((m, n + 3), 7, np.float32)
            av, bv = a[:, :ash[1]], b[:, :bsh[1]]
            ref = alpha * ((av.T if ta else av).astype(np.float64) @ (bv.T if tb else bv))
            keep = []
            ep, ref = _epilogue(*epi, ref, m, n, n + 3, keep) if epi else (None, ref)
            f(ta, tb, m, n, k, alpha, a.ctypes.data, a.shape[1], b.ctypes.data, b.shape[1], c.ctypes.data, n + 3,
              ctypes.byref(ep) if ep else None)
            _assert_gemm_close(c[:, :n], ref, av.T if ta else av, bv.T if tb else bv, alpha, (m, n, k, ta, tb))
            assert (c[:, n:] == 7).all()


@pytest.mark.parametrize("route", [1, 0])
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("isa", ["avx512", "avx2", "generic"])
def test_gemm_runtime_b_routes(isa, threads, route):
    """tcc_cpu_gemm and tcc_cpu_gemm_batch with B packed per call for the
    AVX-512 tiles (route 1, the default where OpenBLAS has no AVX-512
    kernels for this CPU) and through OpenBLAS (0); other builds take
    OpenBLAS either way. B large enough to be packed once for all threads,
    and small ones packed in a thread's buffer: every transpose, column
    tails, padded strides, an epilogue, ldc > N."""
    lib = lib_at(isa, threads)
    f, fb = lib.tcc_cpu_gemm, lib.tcc_cpu_gemm_batch
    f.argtypes = [ctypes.c_int, ctypes.c_int, L, L, L, F, P, L, P, L, P, L, P]
    fb.argtypes = [L, P, P, P, ctypes.c_int, ctypes.c_int, L, L, L, F, P, L, P, L, P, L, P]
    f.restype = fb.restype = None
    was = lib.tcc_cpu_gemm_pack_b(route)
    try:
        for m, n, k in ((70, 300, 260), (100, 33, 2100), (9, 257, 31), (128, 128, 64), (33, 1000, 100)):
            _check_gemm_transposes(f, m, n, k, -1.5, (1, True, RELU))
        # attention's per-head products: Q K^T (B transposed) and P V, 3 heads
        for (m, n, k), tb in (((50, 50, 64), 1), ((50, 64, 50), 0), ((128, 128, 64), 1)):
            h = 3
            a = rng.standard_normal((h, m, k)).astype(np.float32)
            b = rng.standard_normal((h, n, k) if tb else (h, k, n)).astype(np.float32)
            c = np.empty((h, m, n), np.float32)
            offs = [np.arange(h, dtype=np.int64) * x.shape[1] * x.shape[2] for x in (a, b, c)]
            fb(h, *(o.ctypes.data for o in offs), 0, tb, m, n, k, 0.5, a.ctypes.data, k, b.ctypes.data,
               k if tb else n, c.ctypes.data, n, None)
            ref = 0.5 * (a.astype(np.float64) @ (b.transpose(0, 2, 1) if tb else b))
            _assert_gemm_close(c, ref, a, b.transpose(0, 2, 1) if tb else b, 0.5, ("batch", m, n, k, tb))
    finally:
        lib.tcc_cpu_gemm_pack_b(was)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("isa", ["avx512", "avx2", "generic"])
def test_gemm_narrow(isa, threads):
    lib = lib_at(isa, threads)
    f = lib.tcc_cpu_gemm_narrow
    f.argtypes = [L, L, L, F, P, L, P, L, P, L, P]
    f.restype = None
    ks = [1, 5, 15, 16, 17, 33, 127, 301, 1024]
    cases = [(m, 1 + (m * 7) % 40, ks[m % len(ks)], EPILOGUES[m % len(EPILOGUES)]) for m in range(1, 71)]
    cases += [(9, n, 77, EPILOGUES[n % len(EPILOGUES)]) for n in range(1, 41)]
    cases += [(64, 10, 1024, (1, False, 0)), (5, 3, 0, (1, False, RELU))]
    for i, (m, n, k, epi) in enumerate(cases):
        b = rng.standard_normal((k, n)).astype(np.float32)
        # the compiler's padded B^T, or one with rows exactly K long (the last ends the buffer)
        bt = np.ascontiguousarray(pack_bt(b)) if i % 2 else np.ascontiguousarray(b.T)
        ldbt = narrow_ldb(k) if i % 2 else k
        lda = k + (i % 3) * 5  # A's rows padded
        buf = rng.standard_normal((m, lda)).astype(np.float32)
        a = buf[:, :k]
        alpha = 1.0 if m % 2 else -1.5
        ldc = n + 3
        c = np.full((m, ldc), 7, np.float32)
        ref = alpha * (a.astype(np.float64) @ b)
        keep = []
        ep, ref = _epilogue(*epi, ref, m, n, ldc, keep) if epi else (None, ref)
        f(m, n, k, alpha, buf.ctypes.data, lda, bt.ctypes.data, ldbt, c.ctypes.data, ldc,
          ctypes.byref(ep) if ep else None)
        _assert_gemm_close(c[:, :n], ref, a, b, alpha, (m, n, k, epi))
        assert (c[:, n:] == 7).all(), (m, n, k, epi)


def _c_source(sess, tmp_path):
    from tcc.accelerators.cpu.runtime import c_source
    with zipfile.ZipFile(tmp_path / "m.tcc") as z:
        return c_source(z.read(sess.manifest["accelerators"]["cpu"]["member"]))


def test_narrow_chosen_for_classifier_layers(tmp_path):
    """MatMul+Add (a batch of 3 x 7 rows folded into one GEMM) and Gemm with
    transB, alpha and beta, 10 columns of depth 300: the narrow kernel; 40
    columns: the packed panels. Tolerance: a depth-300 sum of unit normals is
    ~17 in size, and two float32 summation orders differ there by up to
    ~eps * 17 * sqrt(300) (4e-5; a 1.7e-5 difference failed atol 1e-5)."""
    from onnx import helper as H
    tol = {"rtol": 1e-4, "atol": 1e-4}
    a, w, bias = rand(3, 7, 300), rand(300, 10), rand(10)
    mdl = model([H.make_node("MatMul", ["a", "w"], ["m"]), H.make_node("Add", ["m", "b"], ["y"])],
                [("a", a.shape)], [("y", (3, 7, 10))], [("w", w), ("b", bias)])
    sess = check(mdl, {"a": a}, tmp_path=tmp_path, **tol)
    assert "tcc_cpu_gemm_narrow(21, 10, 300," in _c_source(sess, tmp_path)
    x, wt, c = rand(13, 300), rand(10, 300), rand(10)
    mdl = model([H.make_node("Gemm", ["x", "w", "c"], ["y"], transB=1, alpha=0.5, beta=2.0)],
                [("x", x.shape)], [("y", (13, 10))], [("w", wt), ("c", c)])
    sess = check(mdl, {"x": x}, tmp_path=tmp_path, **tol)
    assert "tcc_cpu_gemm_narrow(13, 10, 300, 0.5f," in _c_source(sess, tmp_path)
    w40 = rand(300, 40)
    mdl = model([H.make_node("MatMul", ["x", "w"], ["y"])], [("x", x.shape)], [("y", (13, 40))], [("w", w40)])
    sess = check(mdl, {"x": x}, tmp_path=tmp_path, **tol)
    assert "tcc_cpu_gemm_narrow" not in _c_source(sess, tmp_path)
