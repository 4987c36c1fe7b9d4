"""Every path of the cpu kernel library's pooling (kernels/pool.c) against
onnxruntime on fresh random data: the separable row-buffer kernel for
MaxPool and AveragePool (stride 1 in place, stride 2 deinterleaved, strides
>= 3 split into phase rows; 3-tap and any-tap sweeps; widths under one
vector and masked tails; dilations; asymmetric pads; ceil_mode windows
running past the padded input; count_include_pad; windows entirely in the
padding; planes split into row blocks when there are few of them) and
GlobalAveragePool (plane sizes below, at and above the vector unrolls). The
last tests call the avx2 and generic builds of the library directly."""
import ctypes

import numpy as np
import onnxruntime as ort
import pytest
from onnx import helper

from .helpers import check, model, rand, skip_unless_runs

H = helper.make_node


def out_size(n, k, s, d, pb, pe, ceil):
    span = n + pb + pe - ((k - 1) * d + 1)
    o = (-(-span // s) if ceil else span // s) + 1
    if ceil and (o - 1) * s >= n + pb:
        o -= 1
    return o


def pool_node(op, k, s, d, pads, ceil, cip):
    kw = dict(kernel_shape=list(k), strides=list(s), pads=list(pads), ceil_mode=ceil)
    if d != (1, 1):
        kw["dilations"] = list(d)
    if op == "AveragePool":
        kw["count_include_pad"] = cip
    return H(op, ["x"], ["y"], **kw)


def pool_case(op, n, c, h, w, k, s=(1, 1), d=(1, 1), pads=(0, 0, 0, 0), ceil=0, cip=0, opset=19):
    oh = out_size(h, k[0], s[0], d[0], pads[0], pads[2], ceil)
    ow = out_size(w, k[1], s[1], d[1], pads[1], pads[3], ceil)
    x = rand(n, c, h, w)
    m = model([pool_node(op, k, s, d, pads, ceil, cip)], [("x", x.shape)], [("y", (n, c, oh, ow))], opset=opset)
    return m, x


CASES = [
    # (n, c, h, w, k, s, d, pads, ceil)
    (1, 64, 112, 112, (3, 3), (2, 2), (1, 1), (1, 1, 1, 1), 0),    # ResNet stem
    (2, 5, 13, 11, (3, 3), (2, 2), (1, 1), (1, 1, 1, 1), 0),
    (2, 3, 9, 7, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 0),           # stride 1, width < 8
    (1, 3, 5, 3, (2, 2), (1, 1), (1, 1), (0, 0, 0, 0), 0),           # tiny planes
    (2, 7, 17, 37, (3, 3), (3, 3), (1, 1), (1, 1, 1, 1), 0),        # stride 3, masked tail
    (1, 6, 23, 41, (5, 4), (2, 3), (1, 1), (2, 1, 0, 3), 1),        # mixed strides, asymmetric, ceil
    (2, 3, 19, 21, (3, 3), (2, 2), (2, 2), (2, 2, 2, 2), 0),        # dilation, stride 2
    (1, 4, 15, 33, (2, 3), (1, 1), (3, 2), (0, 2, 1, 0), 0),        # dilation, stride 1
    (1, 3, 16, 16, (2, 2), (2, 2), (1, 1), (0, 0, 0, 0), 0),         # exact 2x2
    (2, 3, 14, 14, (3, 3), (2, 2), (1, 1), (0, 0, 0, 0), 1),         # ceil past the input
    (1, 2, 10, 66, (1, 7), (1, 4), (1, 1), (0, 3, 0, 3), 1),         # 1-row kernel, 7 taps, stride 4
    (1, 2, 33, 5, (7, 1), (3, 1), (1, 1), (3, 0, 3, 0), 0),          # column kernel
    (1, 3, 8, 8, (8, 8), (1, 1), (1, 1), (0, 0, 0, 0), 0),           # global-sized window
    (3, 1, 6, 40, (3, 2), (5, 5), (1, 3), (2, 1, 2, 1), 1),          # stride 5, dilation 3
    (1, 2, 7, 9, (3, 3), (2, 2), (1, 1), (2, 2, 2, 2), 1),           # windows mostly padding
]


def _ids(c):
    n, ch, h, w, k, s, d, pads, ceil = c
    return f"{n}x{ch}x{h}x{w}-k{k[0]}{k[1]}-s{s[0]}{s[1]}-d{d[0]}{d[1]}-p{''.join(map(str, pads))}-c{ceil}"


@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_maxpool(case):
    n, c, h, w, k, s, d, pads, ceil = case
    m, x = pool_case("MaxPool", n, c, h, w, k, s, d, pads, ceil)
    check(m, {"x": x}, rtol=0, atol=0)


@pytest.mark.parametrize("cip", [0, 1])
@pytest.mark.parametrize("case", [c for c in CASES if c[6] == (1, 1)], ids=_ids)
def test_avgpool(case, cip):
    n, c, h, w, k, s, d, pads, ceil = case
    m, x = pool_case("AveragePool", n, c, h, w, k, s, d, pads, ceil, cip)
    check(m, {"x": x})


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
def test_ceil_mode_output_undeclared(op):
    """ceil_mode with the output's dims left to inference: onnx's (1.23) keeps
    a last window that starts in the end padding (23 x 41, kernel 5 x 4,
    strides 2 x 3, pads 2 1 0 3: 11 x 15), onnxruntime drops it (11 x 14);
    tcc computes the dims itself, by onnxruntime's rule."""
    m, x = pool_case(op, 1, 6, 23, 41, (5, 4), (2, 3), (1, 1), (2, 1, 0, 3), 1)
    m.graph.output[0].type.tensor_type.shape.dim[2].dim_param = "oh"
    m.graph.output[0].type.tensor_type.shape.dim[3].dim_param = "ow"
    check(m, {"x": x}, rtol=0 if op == "MaxPool" else 1e-4, atol=0 if op == "MaxPool" else 1e-5)


@pytest.mark.parametrize("cip", [0, 1])
def test_avgpool_dilated(cip):
    # AveragePool dilations need opset 19
    m, x = pool_case("AveragePool", 2, 3, 19, 21, (3, 3), (2, 2), (2, 2), (2, 1, 1, 2), 1, cip)
    check(m, {"x": x})


def test_maxpool_extremes():
    # -inf inputs and windows of only padding give -FLT_MAX, as onnxruntime does
    m, x = pool_case("MaxPool", 1, 2, 9, 19, (3, 3), (2, 2), (1, 1), (1, 1, 1, 1), 0)
    x[0, 0, :3] = -np.inf
    x[0, 1] = -np.inf
    x[0, 0, 5, 7] = np.inf
    check(m, {"x": x}, rtol=0, atol=0)


@pytest.mark.parametrize("shape", [(1, 512, 7, 7), (2, 5, 1, 3), (1, 3, 16, 16), (1, 7, 11, 13), (2, 33, 64, 1)])
def test_global_avgpool(shape):
    x = rand(*shape) + 3.0  # a mean far from zero: summation error shows
    check(model([H("GlobalAveragePool", ["x"], ["y"])], [("x", x.shape)], [("y", shape[:2] + (1, 1))]), {"x": x})


# ReduceMean over trailing axes (a squeeze-excite's mean over H, W) runs as the global average of
# the leading dims' rows: axes as an input (opset 18) or an attribute (13), negative, keepdims 0/1,
# every axis (no axes given); other axes stay on the host.
@pytest.mark.parametrize("shape,axes,keepdims,opset", [
    ((2, 24, 8, 8), [2, 3], 1, 18),
    ((2, 24, 8, 8), [-1, -2], 0, 18),
    ((3, 5, 7), [-1], 1, 13),
    ((2, 6, 5, 3), [1, 2, 3], 0, 13),
    ((4, 9), None, 1, 18),
])
def test_reduce_mean_trailing_axes(shape, axes, keepdims, opset):
    x = rand(*shape) + 3.0
    rank = len(shape)
    red = set(range(rank)) if axes is None else {a % rank for a in axes}
    out = tuple(1 if i in red else d for i, d in enumerate(shape) if keepdims or i not in red)
    inputs, inits, attrs = ["x"], [], {"keepdims": keepdims}
    if axes is not None and opset >= 18:
        inputs.append("axes")
        inits.append(("axes", np.array(axes, np.int64)))
    elif axes is not None:
        attrs["axes"] = axes
    m = model([H("ReduceMean", inputs, ["y"], **attrs)], [("x", shape)], [("y", out)], inits, opset=opset)
    check(m, {"x": x}, kernel="tcc_cpu_global_avgpool")


def test_reduce_mean_other_axes_stay_on_the_host():
    import tcc
    m = model([H("ReduceMean", ["x", "axes"], ["y"], keepdims=1)], [("x", (2, 3, 4))], [("y", (2, 1, 4))],
              [("axes", np.array([1], np.int64))])
    sess = tcc.load(tcc.compile(m, maccel=["cpu"]))
    assert not [s for s in sess.manifest["plan"] if s.get("accelerator") == "cpu"], sess.manifest["plan"]
    x = rand(2, 3, 4)
    np.testing.assert_allclose(sess.run({"x": x})[0], x.mean(axis=1, keepdims=True), rtol=1e-5, atol=1e-6)


# ---- the other ISA builds, called directly -----------------------------------------------------
class PoolParams(ctypes.Structure):
    _fields_ = [(f, ctypes.c_long) for f in ("n", "c", "h", "w", "oh", "ow", "kh", "kw", "sh", "sw", "dh", "dw",
                                             "pt", "pl", "pb", "pr")] + [("count_include_pad", ctypes.c_int)]


def _lib(isa):
    from tcc.accelerators.cpu import build
    skip_unless_runs(isa)
    lib = ctypes.CDLL(build.library_path(isa), mode=ctypes.RTLD_LOCAL)
    for f in ("tcc_cpu_maxpool2d", "tcc_cpu_avgpool2d"):
        getattr(lib, f).argtypes = [ctypes.POINTER(PoolParams), ctypes.c_void_p, ctypes.c_void_p]
        getattr(lib, f).restype = None
    lib.tcc_cpu_global_avgpool.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
    lib.tcc_cpu_global_avgpool.restype = None
    return lib


@pytest.mark.parametrize("isa", ["avx2", "generic"])
def test_other_isa_builds(isa):
    lib = _lib(isa)
    for op in ("MaxPool", "AveragePool"):
        for n, c, h, w, k, s, d, pads, ceil in CASES[1:]:
            if op == "AveragePool" and d != (1, 1):
                continue
            for cip in ((0, 1) if op == "AveragePool" else (0,)):
                m, x = pool_case(op, n, c, h, w, k, s, d, pads, ceil, cip)
                ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(
                    None, {"x": x})[0]
                y = np.full_like(ref, np.nan)
                p = PoolParams(n, c, h, w, ref.shape[2], ref.shape[3], *k, *s, *d, *pads, cip)
                fn = lib.tcc_cpu_maxpool2d if op == "MaxPool" else lib.tcc_cpu_avgpool2d
                fn(ctypes.byref(p), x.ctypes.data, y.ctypes.data)
                np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-6, err_msg=f"{op} {(n, c, h, w, k, s, d, pads)}")
    x = rand(3, 5, 7, 9)
    y = np.empty(15, np.float32)
    lib.tcc_cpu_global_avgpool(15, 63, x.ctypes.data, y.ctypes.data)
    np.testing.assert_allclose(y, x.reshape(15, 63).mean(1), rtol=1e-5, atol=1e-6)


# ---- small-M GEMM (kernels/gemm.c, not pooling: a classifier's batch-1 Gemm) ---------------------
@pytest.mark.parametrize("isa", ["avx512", "avx2", "generic"])
def test_small_m_gemm(isa, rng):
    lib = _lib(isa)
    f = lib.tcc_cpu_gemm
    L, F, P = ctypes.c_long, ctypes.c_float, ctypes.c_void_p
    f.argtypes = [ctypes.c_int, ctypes.c_int, L, L, L, F, P, L, P, L, P, L, P]
    f.restype = None
    for m, n, k in ((1, 1000, 512), (2, 67, 129), (3, 5, 1100), (4, 300, 33), (1, 9, 700)):
        for ta in (0, 1):
            for tb in (0, 1):
                a = rng.standard_normal((k, m) if ta else (m, k)).astype(np.float32)
                b = rng.standard_normal((n, k) if tb else (k, n)).astype(np.float32)
                c = np.full((m, n + 3), 7, np.float32)
                f(ta, tb, m, n, k, 0.5, a.ctypes.data, a.shape[1], b.ctypes.data, b.shape[1], c.ctypes.data, n + 3, None)
                ref = 0.5 * (a.T if ta else a) @ (b.T if tb else b)
                np.testing.assert_allclose(c[:, :n], ref, rtol=1e-4, atol=1e-3, err_msg=f"{m, n, k, ta, tb}")
                assert (c[:, n:] == 7).all()
