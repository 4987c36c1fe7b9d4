"""MatMul and Gemm (float32 products with a 2-D right operand through
tcc_cpu_gemm, see _gemm_f32; batched ones through numpy's matmul),
Softmax, LayerNormalization, Conv and pooling: the cpu accelerator's C
kernels for float32 where the library is built (they take their sizes at run
time), numpy otherwise; Conv with no C library falls back to the reference."""
from __future__ import annotations

import ctypes
import math
import threading

import numpy as np

from .fusion import apply_activation
from .toolkit import ConvParams, Epilogue, PoolParams, axis_of, c_kernels, f32, kernel, ptr


# M*N*K up to which numpy's OpenBLAS computes a product on one thread (its
# SMP threshold): there numpy's matmul is faster (2 x 64 x 64: 2.7 us against
# 12.0 through ctypes; 21 x 64 x 256: 13.1 against 22.8) and cannot stall.
BLAS_ONE_THREAD = 262144


def _as_matrix(x):
    """(array, transposed?, leading dim) of a 2-D float32 operand for
    tcc_cpu_gemm: C-contiguous as it is, or the transpose of one (a
    Transpose's view), else a contiguous copy."""
    if x.flags.c_contiguous:
        return x, 0, x.shape[1]
    if x.T.flags.c_contiguous:
        return x.T, 1, x.shape[0]
    x = np.ascontiguousarray(x)
    return x, 0, x.shape[1]


def _gemm_f32(lib, a, b, alpha=1.0, c=None, beta=0.0):
    """alpha * a @ b (+ beta * c, c broadcast to the result) for 2-D float32
    a [M, K], b [K, N] through tcc_cpu_gemm: one thread below 2 MFLOP, the
    library's pool above; used past BLAS_ONE_THREAD. numpy's matmul
    (OpenBLAS) splits a product over its own threads from M*N*K > 262144
    (the MLP and LM-head products of the small corpus models): on this
    loaded 2-core machine 2 % of those calls stalled ~20 ms waiting for the
    second thread (llama's MatMul steps averaged 433 us, median 12 us; with
    one BLAS thread 20 us)."""
    (M, K), N = a.shape, b.shape[1]
    A, ta, lda = _as_matrix(a)
    B, tb, ldb = _as_matrix(b)
    y = np.empty((M, N), np.float32)
    ep = None
    if c is not None and beta != 0.0:
        c = f32(c)
        cs = c.shape if c.ndim == 2 else (1,) + c.shape if c.ndim == 1 else (1, 1)
        mode = 4 if c.size == 1 else 3 if cs == (M, N) else 1 if cs == (1, N) else 2 if cs == (M, 1) else None
        if mode is None:
            np.matmul(a, b, out=y)
            y *= np.float32(alpha)
            return y + c * np.float32(beta)
        ep = ctypes.byref(Epilogue(ptr(c), mode, float(beta), None, 0, 0.0, 0.0))
    if M and N:
        lib.tcc_cpu_gemm(ta, tb, M, N, K, float(alpha), ptr(A), lda, ptr(B), ldb, ptr(y), N, ep)
    return y


def _with_epilogue(fn, bias, act):
    """fn followed by + bias and act in place (fn returns a fresh array)."""
    def fused(*xs):
        y = fn(*xs)
        if bias is not None:
            np.add(y, bias, out=y)
        return apply_activation(y, act) if act is not None else y
    fused.tape_epilogue = (bias, act)  # what tape.py's product record applies
    return fused


def _product_epilogue(node, fn, takes_bias):
    """fn.epilogue for fusion.py: a constant bias (MatMul only: a scalar or
    one float32 value per column of its constant 2-D right operand) and an
    activation, applied in place to the product's fresh float32 result."""
    w = node.consts[1] if len(node.consts) > 1 else None

    def epilogue(bias, act):
        if w is None or w.dtype != np.float32 or w.ndim != 2:
            return None
        if bias is not None:
            n = w.shape[0] if node.get("transB", 0) else w.shape[1]
            if not takes_bias or bias.dtype != np.float32 or bias.ndim > 1 or bias.size not in (1, n):
                return None
        return _with_epilogue(fn, bias, act)
    fn.epilogue = epilogue
    return fn


@kernel("MatMul")
def _matmul(node):
    return _product_epilogue(node, _matmul_fn(node), True)


def _matmul_fn(node):
    lib = c_kernels()

    def matmul(a, b):
        if b.ndim == 2 and a.ndim >= 2 and a.dtype == np.float32 and b.dtype == np.float32 and a.shape[-1] == b.shape[0]:
            if lib is not None and a.size * b.shape[1] > BLAS_ONE_THREAD:  # one GEMM over every row of a
                m = math.prod(a.shape[:-1])  # (not -1: with K = 0 numpy cannot infer it)
                rows = a.reshape(m, a.shape[-1]) if a.flags.c_contiguous or a.ndim == 2 else \
                    np.ascontiguousarray(a).reshape(m, a.shape[-1])
                return _gemm_f32(lib, rows, b).reshape(a.shape[:-1] + b.shape[1:])
            if a.flags.c_contiguous:  # one GEMM, not one per batch: 8.1 -> 5.9 us
                return np.matmul(a.reshape(math.prod(a.shape[:-1]), a.shape[-1]), b).reshape(a.shape[:-1] + b.shape[1:])
        return np.matmul(a, b)  # batched products: small per batch, one BLAS thread each
    return matmul


@kernel("Gemm")
def _gemm(node):
    return _product_epilogue(node, _gemm_fn(node), False)


def _gemm_fn(node):
    alpha, beta = node.get("alpha", 1.0), node.get("beta", 1.0)
    ta, tb = node.get("transA", 0), node.get("transB", 0)
    lib = c_kernels()

    def gemm(a, b, c=None):
        a, b = (a.T if ta else a), (b.T if tb else b)
        if lib is not None and a.dtype == np.float32 and b.dtype == np.float32 and a.shape[1] == b.shape[0] and \
                a.size * b.shape[1] > BLAS_ONE_THREAD and (c is None or c.dtype == np.float32):
            return _gemm_f32(lib, a, b, alpha, c, beta)
        out = a @ b
        if alpha != 1.0:
            out *= out.dtype.type(alpha)
        if c is not None and beta != 0.0:
            out += c * c.dtype.type(beta) if beta != 1.0 else c
        return out
    return gemm


def _softmax(log):
    def make(node):
        legacy = node.opset < 13  # softmax over the flattened [axis:] dims
        axis = node.get("axis", 1 if legacy else -1)
        lib = c_kernels()

        def softmax(x):
            a = axis_of(axis, x.ndim)
            if legacy:
                outer, n, inner = math.prod(x.shape[:a]), math.prod(x.shape[a:]), 1
            else:
                outer, n, inner = math.prod(x.shape[:a]), x.shape[a], math.prod(x.shape[a + 1:])
            if lib is not None and x.dtype == np.float32 and x.size:
                x = f32(x)
                y = np.empty(x.shape, np.float32)
                lib.tcc_cpu_softmax(outer, n, inner, ptr(x), ptr(y), int(log))
                return y
            v = x.reshape(outer, n, inner)
            m = np.max(v, axis=1, keepdims=True) if v.size else v
            e = v - m
            if log:
                return (e - np.log(np.sum(np.exp(e), axis=1, keepdims=True))).reshape(x.shape)
            e = np.exp(e)
            return (e / np.sum(e, axis=1, keepdims=True)).reshape(x.shape)
        return softmax
    return make


kernel("Softmax")(_softmax(False))
kernel("LogSoftmax")(_softmax(True))


@kernel("LayerNormalization")
def _layernorm(node):
    axis, eps = node.get("axis", -1), float(node.get("epsilon", 1e-5))
    lib = c_kernels()
    stats = any(node.used[1:])
    # constant scale and bias (what exporters write): their addresses once
    # (a.ctypes.data on a read-only array is 2 us a call here)
    fixed = {id(c): (c, ptr(f32(c))) for c in node.consts[1:3] if c is not None and c.dtype == np.float32 and
             c.flags.c_contiguous}

    def address(v):
        got = fixed.get(id(v))
        return got[1] if got is not None and got[0] is v else ptr(f32(v))

    def layernorm(x, scale, bias=None):
        a = axis_of(axis, x.ndim)
        rows, cols = math.prod(x.shape[:a]), math.prod(x.shape[a:])
        if lib is not None and not stats and x.dtype == np.float32 and scale.size == cols and \
                (bias is None or bias.size == cols) and rows and cols:
            x = f32(x)
            y = np.empty(x.shape, np.float32)
            lib.tcc_cpu_layernorm(rows, cols, ptr(x), address(scale), None if bias is None else address(bias), eps,
                                  ptr(y))
            return (y, None, None)[:node.n_results] if node.n_results > 1 else y
        v = x.reshape(rows, cols).astype(np.float32 if x.dtype != np.float64 else x.dtype)
        mean = np.add.reduce(v, axis=1, keepdims=True) / v.dtype.type(cols)
        d = v - mean
        inv = 1 / np.sqrt(np.add.reduce(d * d, axis=1, keepdims=True) / v.dtype.type(cols) + v.dtype.type(eps))
        y = (d * inv).reshape(x.shape) * scale
        if bias is not None:
            y = y + bias
        y = y.astype(x.dtype, copy=False)
        if not stats:
            return (y, None, None)[:node.n_results] if node.n_results > 1 else y
        keep = x.shape[:a] + (1,) * (x.ndim - a)
        return (y, mean.reshape(keep), inv.reshape(keep))[:node.n_results]
    return layernorm


def _pads(node, spatial, in_sizes, kernel_sizes, strides, dilations):
    auto = node.get("auto_pad", "NOTSET")
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        out = []
        for i in range(spatial):
            total = max((-(-in_sizes[i] // strides[i]) - 1) * strides[i] + (kernel_sizes[i] - 1) * dilations[i] + 1
                        - in_sizes[i], 0)
            small, big = total // 2, total - total // 2
            out.append((big, small) if auto == "SAME_LOWER" else (small, big))
        return [p[0] for p in out] + [p[1] for p in out]
    if auto == "VALID":
        return [0] * (2 * spatial)
    return list(node.get("pads", [0] * (2 * spatial)))


@kernel("Conv")
def _conv(node):
    lib = c_kernels()
    if lib is None:
        return None
    conv = _conv_fn(node, lib, None)
    # fusion.py: an activation after the convolution, in the C kernel's epilogue
    conv.epilogue = lambda bias, act: _conv_fn(node, lib, act) if bias is None and act is not None else None
    return conv


CONV_SHAPES = 16  # input shapes a Conv step keeps its resolved call for (as executor.KEYS)


def _conv_fn(node, lib, act):
    group = node.get("group", 1)
    code, a0, a1 = act or (0, 0.0, 0.0)
    # Per input shape, with the constant weights and bias (what exporters
    # write), everything but x's and y's addresses resolved once: the
    # parameter and epilogue structs, the scratch size, the weights'
    # addresses. efficientnet's 16 Conv steps: 33 -> ~20 us each.
    const_w, const_b = (node.consts + [None] * 3)[1:3]
    resolved, lock = {}, threading.Lock()

    def setup(xs, ws):
        """The parameter struct for input shape xs and weights ws (a 1-D
        convolution as a 2-D one of height 1); GenericShapeError where they
        do not fit the node."""
        spatial = len(xs) - 2
        ks = list(node.get("kernel_shape", ws[2:]))
        st = list(node.get("strides", [1] * spatial))
        dl = list(node.get("dilations", [1] * spatial))
        if xs[1] != ws[1] * group or ws[0] % group:
            raise node.error(f"cannot convolve {list(xs)} with weights {list(ws)} in {group} groups")
        pads = _pads(node, spatial, xs[2:], ks, st, dl)
        if spatial == 1:
            xs = (xs[0], xs[1], 1, xs[2])
            ks, st, dl, pads = [1] + ks, [1] + st, [1] + dl, [0, pads[0], 0, pads[1]]
        n, c, h, wd = xs
        oh = (h + pads[0] + pads[2] - ((ks[0] - 1) * dl[0] + 1)) // st[0] + 1
        ow = (wd + pads[1] + pads[3] - ((ks[1] - 1) * dl[1] + 1)) // st[1] + 1
        if oh <= 0 or ow <= 0:
            raise node.error(f"cannot convolve {list(xs)} with a {ks} kernel (pads {pads})")
        return ConvParams(n, c, h, wd, ws[0], ks[0], ks[1], oh, ow, st[0], st[1], dl[0], dl[1],
                          pads[0], pads[1], pads[2], pads[3], group)

    def tape_setup(xs, ws):  # tape.py: (parameters, scratch floats, activation) or None
        if len(xs) - 2 not in (1, 2) or len(ws) != len(xs):
            return None
        p = setup(xs, ws)
        return p, max(int(lib.tcc_cpu_conv2d_scratch(ctypes.byref(p))), 1), (code, a0, a1)

    def conv(x, w, b=None):
        got = resolved.get(x.shape)
        if got is not None and w is const_w and b is const_b and x.dtype == np.float32:
            p, ep, n_scratch, y_shape, w_ptr, spatial, _ = got
            x = f32(x)
            y = np.empty(y_shape, np.float32)
            scratch = np.empty(n_scratch, np.float32)
            lib.tcc_cpu_conv2d(p, ptr(x), w_ptr, ptr(y), ptr(scratch), ep)
            return y[:, :, 0, :] if spatial == 1 else y
        shape = x.shape
        spatial = x.ndim - 2
        if x.dtype != np.float32 or spatial not in (1, 2) or w.ndim != x.ndim:
            raise NotImplementedError("Conv beyond 1-D/2-D float32")
        p = setup(x.shape, w.shape)
        if spatial == 1:  # a 1-D convolution is a 2-D one of height 1
            x, w = x[:, :, None, :], w[:, :, None, :]
        x, w = f32(x), f32(w)
        n, oh, ow = p.n, p.oh, p.ow
        y = np.empty((n, w.shape[0], oh, ow), np.float32)
        bias = None if b is None else f32(b)
        ep = Epilogue(None if bias is None else ptr(bias), 0 if bias is None else 2, 1.0, None, code, a0, a1)
        n_scratch = max(int(lib.tcc_cpu_conv2d_scratch(ctypes.byref(p))), 1)
        scratch = np.empty(n_scratch, np.float32)
        lib.tcc_cpu_conv2d(ctypes.byref(p), ptr(x), ptr(w), ptr(y), ptr(scratch), ctypes.byref(ep))
        if w is const_w and b is const_b and w.base is None and (bias is None or bias is b):
            # (w and bias are the constants themselves, not copies: their addresses stay valid)
            with lock:  # the plan may run on several threads
                if len(resolved) >= CONV_SHAPES:
                    resolved.pop(next(iter(resolved)))
                resolved[shape] = (ctypes.byref(p), ctypes.byref(ep), n_scratch, y.shape, ptr(w), spatial,
                                   (p, ep, bias))
        return y[:, :, 0, :] if spatial == 1 else y
    conv.tape_setup = tape_setup
    return conv


def _pool(name):
    def make(node):
        lib = c_kernels()
        if lib is None or node.get("ceil_mode", 0) or node.n_results > 1 or \
                len(node.get("kernel_shape", [])) != 2:
            return None
        ks = list(node.get("kernel_shape"))
        st = list(node.get("strides", [1, 1]))
        dl = list(node.get("dilations", [1, 1]))
        include = int(node.get("count_include_pad", 0))
        fn = getattr(lib, f"tcc_cpu_{name}2d")

        def pool(x):
            if x.dtype != np.float32 or x.ndim != 4:
                raise NotImplementedError("pooling beyond 2-D float32")
            x = f32(x)
            n, c, h, w = x.shape
            pads = _pads(node, 2, x.shape[2:], ks, st, dl)
            oh = (h + pads[0] + pads[2] - ((ks[0] - 1) * dl[0] + 1)) // st[0] + 1
            ow = (w + pads[1] + pads[3] - ((ks[1] - 1) * dl[1] + 1)) // st[1] + 1
            if oh <= 0 or ow <= 0:
                raise node.error(f"cannot pool {list(x.shape)} with a {ks} window")
            p = PoolParams(n, c, h, w, oh, ow, ks[0], ks[1], st[0], st[1], dl[0], dl[1], *pads, include)
            y = np.empty((n, c, oh, ow), np.float32)
            fn(ctypes.byref(p), ptr(x), ptr(y))
            return y
        return pool
    return make


kernel("MaxPool")(_pool("maxpool"))
kernel("AveragePool")(_pool("avgpool"))


@kernel("GlobalAveragePool")
def _gap(node):
    return lambda x: np.mean(x, axis=tuple(range(2, x.ndim)), keepdims=True, dtype=x.dtype)


@kernel("GlobalMaxPool")
def _gmp(node):
    return lambda x: np.max(x, axis=tuple(range(2, x.ndim)), keepdims=True)


@kernel("BatchNormalization")
def _batchnorm(node):
    if node.get("training_mode", 0) or node.n_results > 1:
        return None
    eps = float(node.get("epsilon", 1e-5))

    def batchnorm(x, scale, bias, mean, var):
        shape = (1, -1) + (1,) * (x.ndim - 2)
        k = (scale / np.sqrt(var + x.dtype.type(eps))).astype(x.dtype, copy=False)
        return (x * k.reshape(shape) + (bias - mean * k).reshape(shape)).astype(x.dtype, copy=False)
    return batchnorm
