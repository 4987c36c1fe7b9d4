"""Softmax/LogSoftmax (stable: max-subtract), LayerNormalization,
InstanceNormalization, BatchNormalization (training-mode statistics in
batchnorm_training).

Row-wise ops run one parallel loop over rows; each row's statistics live
in a tiny scratch buffer allocated inside that loop (so iterations stay
independent); the backend should turn such small static allocs into stack
slots. Low-precision inputs compute in f32."""
from __future__ import annotations

from contextlib import contextmanager

import numpy as np

from ....ir.types import NONE, f32
from .batchnorm_training import batch_statistics
from ..common import LOW_FLOATS, is_float, load_as, store_as
from ..registry import lowering


def _ct(el):
    return f32 if el.name in LOW_FLOATS else el


@contextmanager
def _range(L, n, vectorize=False):
    """A loop over [0, n), or just index 0 when n == 1."""
    if n == 1:
        yield 0
    else:
        with L.loop(0, n, vectorize=vectorize) as i:
            yield i


@lowering("Softmax", "LogSoftmax")
def lower_softmax(cx, op):
    x, r = op.operands[0], op.results[0]
    L = cx.L
    shape = x.type.shape
    rank = len(shape)
    axis = cx.attr(op, "axis") % rank if rank else 0
    if cx.opset() < 13:
        O, A, I = int(np.prod(shape[:axis])), int(np.prod(shape[axis:])), 1
    else:
        O, A, I = int(np.prod(shape[:axis])), shape[axis], int(np.prod(shape[axis + 1:]))
    el = x.type.element
    t = _ct(el)
    xv, yv = L.view(cx.buf(x), (O, A, I)), L.view(cx.out(r), (O, A, I))
    log = op.name == "onnx.LogSoftmax"
    # f16/bf16 Softmax rounds where numpy's f16 ops do (onnx.reference):
    # x - max, each exp and the row sum to the element type, then one
    # division; rounding once at the end instead left Attention's f16
    # expanded cases 1 ulp off the suite's outputs in 2 of 192 elements
    low = el.name in LOW_FLOATS and not log

    def rnd(v):
        return L.op("arith.extf", [L.op("arith.truncf", [v], el)], t) if low else v
    with L.loop(0, O, parallel=True) as o:
        mx, sm = L.alloc((I,), t), L.alloc((I,), t)
        with _range(L, I, True) as i:
            L.store(L.c(float("-inf"), t), mx, [i])
            L.store(L.c(0.0, t), sm, [i])
        with L.loop(0, A) as a:
            with _range(L, I, True) as i:
                # maxnum, not maximum: a NaN still reaches every output through exp and the sum
                L.store(L.op("arith.maxnumf", [L.load(mx, [i]), load_as(L, xv, [o, a, i], t)], t), mx, [i])
        with L.loop(0, A) as a:
            with _range(L, I, True) as i:
                e = L.op("math.exp", [rnd(L.op("arith.subf", [load_as(L, xv, [o, a, i], t), L.load(mx, [i])], t))],
                         t)
                if not log:
                    store_as(L, e, yv, [o, a, i])
                L.store(L.op("arith.addf", [L.load(sm, [i]), rnd(e)], t), sm, [i])
        if not log and not low:  # one division per row, then products (within 1.5 ulp of dividing each)
            with _range(L, I, True) as i:
                L.store(L.op("arith.divf", [L.c(1.0, t), L.load(sm, [i])], t), sm, [i])
        with L.loop(0, A) as a:
            with _range(L, I, True) as i:
                if log:
                    sub = L.op("arith.addf", [L.load(mx, [i]), L.op("math.log", [L.load(sm, [i])], t)], t)
                    v = L.op("arith.subf", [load_as(L, xv, [o, a, i], t), sub], t)
                elif low:
                    v = L.op("arith.divf", [load_as(L, yv, [o, a, i], t), rnd(L.load(sm, [i]))], t)
                else:
                    v = L.op("arith.mulf", [load_as(L, yv, [o, a, i], t), L.load(sm, [i])], t)
                store_as(L, v, yv, [o, a, i])
        L.op("loop.dealloc", [mx])
        L.op("loop.dealloc", [sm])


def row_stats(L, xv, o, n, t, eps):
    """(mean, 1/sqrt(var + eps)) of row o of xv (two passes: stable)."""
    s = L.alloc((2,), t)
    L.store(L.c(0.0, t), s, [0])
    L.store(L.c(0.0, t), s, [1])
    with L.loop(0, n, vectorize=True) as j:
        L.store(L.op("arith.addf", [L.load(s, [0]), load_as(L, xv, [o, j], t)], t), s, [0])
    mean = L.op("arith.divf", [L.load(s, [0]), L.c(float(n), t)], t)
    with L.loop(0, n, vectorize=True) as j:
        d = L.op("arith.subf", [load_as(L, xv, [o, j], t), mean], t)
        L.store(L.op("arith.addf", [L.load(s, [1]), L.op("arith.mulf", [d, d], t)], t), s, [1])
    var = L.op("arith.divf", [L.load(s, [1]), L.c(float(n), t)], t)
    inv = L.op("arith.divf", [L.c(1.0, t), L.op("math.sqrt", [L.op("arith.addf", [var, L.c(eps, t)], t)], t)], t)
    L.op("loop.dealloc", [s])
    return mean, inv


def _vec(cx, op, v, n):
    """An optional per-feature operand as a flat (n,) buffer (or (1,) to broadcast)."""
    if v is None or v.type is NONE:
        return None
    k = v.type.num_elements
    if k not in (n, 1):
        cx.fail(op, f"{op.name} with scale/bias of shape {v.type.shape} has no host lowering")
    return cx.L.view(cx.buf(v), (k,))


@lowering("LayerNormalization")
def lower_layernorm(cx, op):
    x = op.operands[0]
    L = cx.L
    shape = x.type.shape
    axis = cx.attr(op, "axis") % len(shape)
    O, N = int(np.prod(shape[:axis])), int(np.prod(shape[axis:]))
    el = x.type.element
    t = f32 if el.name in LOW_FLOATS or cx.attr(op, "stash_type") == 1 and el.name != "f64" else el
    eps = float(cx.attr(op, "epsilon"))
    xv = L.view(cx.buf(x), (O, N))
    y = op.results[0]
    yv = L.view(cx.out(y), (O, N))
    sc = _vec(cx, op, op.operands[1], N)
    bi = _vec(cx, op, op.operands[2] if len(op.operands) > 2 else None, N)
    extra = [L.view(cx.out(r), (O,)) if r.type is not NONE else None for r in op.results[1:3]]
    with L.loop(0, O, parallel=True) as o:
        mean, inv = row_stats(L, xv, o, N, t, eps)
        for buf, val in zip(extra, (mean, inv)):
            if buf is not None:
                store_as(L, val, buf, [o])
        with L.loop(0, N, vectorize=True) as j:
            v = L.op("arith.mulf", [L.op("arith.subf", [load_as(L, xv, [o, j], t), mean], t), inv], t)
            if sc is not None:
                v = L.op("arith.mulf", [v, load_as(L, sc, [j if sc.type.shape[0] > 1 else 0], t)], t)
            if bi is not None:
                v = L.op("arith.addf", [v, load_as(L, bi, [j if bi.type.shape[0] > 1 else 0], t)], t)
            store_as(L, v, yv, [o, j])


@lowering("InstanceNormalization")
def lower_instancenorm(cx, op):
    x, sc, bi = op.operands
    L = cx.L
    shape = x.type.shape
    N, C, P = shape[0], shape[1], int(np.prod(shape[2:]))
    t = _ct(x.type.element)
    eps = float(cx.attr(op, "epsilon"))
    xv = L.view(cx.buf(x), (N * C, P))
    yv = L.view(cx.out(op.results[0]), (N * C, P))
    scb, bib = cx.buf(sc), cx.buf(bi)
    with L.loop(0, N * C, parallel=True) as o:
        c = L.op("arith.remui", [o, L.c(C)], o.type)
        mean, inv = row_stats(L, xv, o, P, t, eps)
        a = L.op("arith.mulf", [inv, load_as(L, scb, [c], t)], t)
        b = load_as(L, bib, [c], t)
        with L.loop(0, P, vectorize=True) as j:
            v = L.op("arith.subf", [load_as(L, xv, [o, j], t), mean], t)
            store_as(L, L.op("arith.addf", [L.op("arith.mulf", [v, a], t), b], t), yv, [o, j])


@lowering("BatchNormalization")
def lower_batchnorm(cx, op):
    x, sc, bi, mean, var = op.operands
    L = cx.L
    shape = x.type.shape
    N, C = shape[0], shape[1] if len(shape) > 1 else 1
    P = int(np.prod(shape[2:]))
    t = _ct(x.type.element)
    eps = float(cx.attr(op, "epsilon"))
    training = cx.attr(op, "training_mode") or any(r.type is not NONE for r in op.results[1:])
    stats = batch_statistics(cx, op, t) if training else (cx.buf(mean), cx.buf(var))
    a, b = L.alloc((C,), t), L.alloc((C,), t)
    bufs = [cx.buf(sc), cx.buf(bi), *stats]
    # y = x * a[c] + b[c] with a = scale / sqrt(var + eps), b = bias - mean * a
    with L.loop(0, C, vectorize=True) as c:
        s, bb, m, v = (load_as(L, q, [c], t) for q in bufs)
        av = L.op("arith.divf", [s, L.op("math.sqrt", [L.op("arith.addf", [v, L.c(eps, t)], t)], t)], t)
        L.store(av, a, [c])
        L.store(L.op("arith.subf", [bb, L.op("arith.mulf", [m, av], t)], t), b, [c])
    xv = L.view(cx.buf(x), (N, C, P))
    yv = L.view(cx.out(op.results[0]), (N, C, P))
    with L.loop(0, N, parallel=N > 1) as n:
        with L.loop(0, C, parallel=N == 1) as c:
            av, bv = L.load(a, [c]), L.load(b, [c])
            with L.loop(0, P, vectorize=True) as p:
                v = L.op("arith.addf", [L.op("arith.mulf", [load_as(L, xv, [n, c, p], t), av], t), bv], t)
                store_as(L, v, yv, [n, c, p])
    for buf in (a, b) + (stats if training else ()):
        L.op("loop.dealloc", [buf])
