"""RMSNormalization, LpNormalization, LRN.

Rows are the dims before `axis` flattened, the normalized dims after; each
row's 1/sqrt(mean(x^2) + eps) is computed in f32 (f64 for f64 inputs), then
y = x * inv * scale with `scale` numpy-broadcast against X."""
from __future__ import annotations

import numpy as np

from ....ir.types import f32, f64
from ..cast import emit_cast
from ..math.elementwise import elementwise_nest
from ..registry import lowering


def _ct(el):
    return f64 if el.name == "f64" else f32


def broadcast_to(cx, buf, shape):
    """`buf` numpy-broadcast to `shape` (a fresh buffer unless already that shape)."""
    if tuple(buf.type.shape) == tuple(shape):
        return buf, False
    out = cx.L.alloc(shape, buf.type.element)
    elementwise_nest(cx, shape, [buf], [out], lambda v: [v[0]])
    return out, True


@lowering("RMSNormalization")
def lower_rmsnorm(cx, op):
    x, w = op.operands[0], op.operands[1]
    y = op.results[0]
    L = cx.L
    shape = x.type.shape
    rank = len(shape)
    axis = cx.attr(op, "axis")
    axis = -1 if axis is None else axis
    if not -rank <= axis < rank:
        cx.fail(op, f"RMSNormalization axis {axis} out of range for rank {rank}")
    axis %= rank
    O, N = int(np.prod(shape[:axis])), int(np.prod(shape[axis:]))
    T = x.type.element
    ct = _ct(T)
    eps = float(cx.attr(op, "epsilon"))
    wshape = w.type.shape
    if len(wshape) > rank or any(a not in (1, b) for a, b in zip(reversed(wshape), reversed(shape))):
        cx.fail(op, f"RMSNormalization scale of shape {wshape} does not broadcast to {shape}")
    # scale over the normalized dims only, or over all of X
    inner = len(wshape) <= rank - axis or all(d == 1 for d in wshape[:len(wshape) - (rank - axis)])
    if inner:
        wb, tmp = broadcast_to(cx, L.view(cx.buf(w), wshape[max(0, len(wshape) - (rank - axis)):]) if wshape else
                               cx.buf(w), shape[axis:])
        wv = L.view(wb, (N,))
    else:
        wb, tmp = broadcast_to(cx, cx.buf(w), shape)
        wv = L.view(wb, (O, N))
    xv = L.view(cx.buf(x), (O, N))
    yv = L.view(cx.out(y), (O, N))
    with L.loop(0, O, parallel=True) as o:
        s = L.alloc((1,), ct)
        L.store(L.c(0.0, ct), s, [0])
        with L.loop(0, N, vectorize=True) as j:
            v = emit_cast(L, L.load(xv, [o, j]), T, ct)
            L.store(L.op("arith.addf", [L.load(s, [0]), L.op("arith.mulf", [v, v], ct)], ct), s, [0])
        ms = L.op("arith.divf", [L.load(s, [0]), L.c(float(N), ct)], ct)
        rms = L.op("math.sqrt", [L.op("arith.addf", [ms, L.c(eps, ct)], ct)], ct)
        inv = L.op("arith.divf", [L.c(1.0, ct), rms], ct)
        with L.loop(0, N, vectorize=True) as j:
            v = L.op("arith.mulf", [emit_cast(L, L.load(xv, [o, j]), T, ct), inv], ct)
            wl = L.load(wv, [j] if inner else [o, j])
            v = L.op("arith.mulf", [v, emit_cast(L, wl, w.type.element, ct)], ct)
            L.store(emit_cast(L, v, ct, y.type.element), yv, [o, j])
        L.op("loop.dealloc", [s])
    if tmp:
        L.op("loop.dealloc", [wb])


@lowering("LpNormalization")
def lower_lpnorm(cx, op):
    """y = x / (sum over axis of |x|^p)^(1/p), 0 where the norm is 0 (p = 1, 2)."""
    x, y = op.operands[0], op.results[0]
    L = cx.L
    shape = x.type.shape
    axis = cx.attr(op, "axis")
    axis = (-1 if axis is None else axis) % len(shape)
    p = cx.attr(op, "p")
    p = 2 if p is None else p
    if p not in (1, 2):
        cx.fail(op, f"LpNormalization p={p} is not 1 or 2")
    O, A, I = int(np.prod(shape[:axis])), shape[axis], int(np.prod(shape[axis + 1:]))
    T = x.type.element
    ct = _ct(T)
    xv, yv = L.view(cx.buf(x), (O, A, I)), L.view(cx.out(y), (O, A, I))
    with L.loop(0, O, parallel=True) as o:
        with L.loop(0, I) as i:
            s = L.alloc((1,), ct)
            L.store(L.c(0.0, ct), s, [0])
            with L.loop(0, A) as a:
                v = emit_cast(L, L.load(xv, [o, a, i]), T, ct)
                v = L.op("math.absf", [v], ct) if p == 1 else L.op("arith.mulf", [v, v], ct)
                L.store(L.op("arith.addf", [L.load(s, [0]), v], ct), s, [0])
            n = L.load(s, [0])
            if p == 2:
                n = L.op("math.sqrt", [n], ct)
            zero = L.op("arith.cmpf", [n, L.c(0.0, ct)], _i1(), predicate="oeq")
            with L.loop(0, A) as a:
                q = L.op("arith.divf", [emit_cast(L, L.load(xv, [o, a, i]), T, ct), n], ct)
                q = L.op("arith.select", [zero, L.c(0.0, ct), q], ct)
                L.store(emit_cast(L, q, ct, T), yv, [o, a, i])
            L.op("loop.dealloc", [s])


@lowering("LRN")
def lower_lrn(cx, op):
    """y = x / (bias + alpha / size * sum of x^2 over channels
    [c - floor((size-1)/2), c + ceil((size-1)/2)])^beta."""
    x, y = op.operands[0], op.results[0]
    L = cx.L
    shape = x.type.shape
    if len(shape) < 3:
        cx.fail(op, f"LRN needs an input of rank >= 3, got {shape}")
    N, C, P = shape[0], shape[1], int(np.prod(shape[2:]))
    size = int(cx.attr(op, "size"))
    alpha, beta = float(cx.attr(op, "alpha")), float(cx.attr(op, "beta"))
    bias = float(cx.attr(op, "bias"))
    lo, hi = (size - 1) // 2, -(-(size - 1) // 2)
    T = x.type.element
    ct = _ct(T)
    xv, yv = L.view(cx.buf(x), (N, C, P)), L.view(cx.out(y), (N, C, P))
    with L.loops((N, C, P), vectorize_inner=False) as (n, c, p):
        s = L.alloc((1,), ct)
        L.store(L.c(0.0, ct), s, [0])
        b = L.op("arith.maxsi", [L.op("arith.subi", [c, L.c(lo)], c.type), L.c(0)], c.type)
        e = L.minmax_idx("min", L.add(c, hi + 1), C)
        with L.loop(b, e) as k:
            v = emit_cast(L, L.load(xv, [n, k, p]), T, ct)
            L.store(L.op("arith.addf", [L.load(s, [0]), L.op("arith.mulf", [v, v], ct)], ct), s, [0])
        d = L.op("arith.addf", [L.c(bias, ct), L.op("arith.mulf", [L.c(alpha / size, ct), L.load(s, [0])], ct)], ct)
        d = L.op("arith.powf", [d, L.c(beta, ct)], ct)
        q = L.op("arith.divf", [emit_cast(L, L.load(xv, [n, c, p]), T, ct), d], ct)
        L.store(emit_cast(L, q, ct, T), yv, [n, c, p])
        L.op("loop.dealloc", [s])


def _i1():
    from ....ir.types import i1
    return i1


@lowering("GroupNormalization")
def lower_groupnorm(cx, op):
    """Statistics per (n, group) over its channels and spatial dims; scale and
    bias per channel (opset 21) or per group (opset 18)."""
    from .softmax_normalization import row_stats
    x, sc, bi = op.operands[:3]
    y = op.results[0]
    L = cx.L
    shape = x.type.shape
    N, C, P = shape[0], shape[1], int(np.prod(shape[2:]))
    G = int(cx.attr(op, "num_groups"))
    if G <= 0 or C % G:
        cx.fail(op, f"GroupNormalization: {C} channels do not split into {G} groups")
    per_group = sc.type.num_elements == G and G != C
    if not per_group and sc.type.num_elements != C:
        cx.fail(op, f"GroupNormalization scale of shape {sc.type.shape} fits neither {C} channels nor {G} groups")
    T = x.type.element
    ct = _ct(T)
    eps = float(cx.attr(op, "epsilon"))
    Cg = C // G
    xv = L.view(cx.buf(x), (N * G, Cg * P))
    yv = L.view(cx.out(y), (N * G, Cg * P))
    sb, bb = L.view(cx.buf(sc), (sc.type.num_elements,)), L.view(cx.buf(bi), (bi.type.num_elements,))
    with L.loop(0, N * G, parallel=True) as o:
        mean, inv = row_stats(L, xv, o, Cg * P, ct, eps)
        g = L.op("arith.remui", [o, L.c(G)], o.type)
        with L.loop(0, Cg) as k:
            c = g if per_group else L.add(L.mul(g, Cg), k)
            a = L.op("arith.mulf", [inv, emit_cast(L, L.load(sb, [c]), sc.type.element, ct)], ct)
            b = emit_cast(L, L.load(bb, [c]), bi.type.element, ct)
            with L.loop(0, P, vectorize=True) as j:
                col = L.add(L.mul(k, P), j)
                v = L.op("arith.subf", [emit_cast(L, L.load(xv, [o, col]), T, ct), mean], ct)
                L.store(emit_cast(L, L.op("arith.addf", [L.op("arith.mulf", [v, a], ct), b], ct), ct, T), yv,
                        [o, col])
