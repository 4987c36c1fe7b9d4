"""MaxPool (its Indices output in pool_indices), AveragePool
(count_include_pad, ceil_mode, dilations), LpPool and the global pools.
Same shape as Conv: per (n, c) plane, one branch-free window nest per
kernel offset; AveragePool's divisors depend only on the output position,
so they are a compile-time constant table."""
from __future__ import annotations

import itertools
import math

import numpy as np

from ....ir.attributes import DenseElementsAttr
from ....ir.types import NONE, MemRefType, TensorType, f32
from ..common import LOW_FLOATS, is_float, is_unsigned
from .pool_indices import lower_maxpool_indices
from ..math.reduce import reduce_lowering
from ..registry import lowering
from ..window import resolve_pads, window_nest


def _params(cx, op, x, r):
    in_sp, out_sp = x.type.shape[2:], r.type.shape[2:]
    n = len(in_sp)
    kernel = cx.attr(op, "kernel_shape")
    strides = cx.attr(op, "strides") or [1] * n
    dil = cx.attr(op, "dilations") or [1] * n
    begin, end = resolve_pads(cx.attr(op, "auto_pad"), cx.attr(op, "pads"), in_sp, out_sp, kernel, strides, dil)
    end = [e if e is not None else max(0, (o - 1) * s + (k - 1) * d + 1 - i - b)
           for e, o, s, k, d, i, b in zip(end, out_sp, strides, kernel, dil, in_sp, begin)]
    return in_sp, out_sp, kernel, strides, dil, begin, end


def _minval(t):
    if is_float(t):
        return float("-inf")
    if is_unsigned(t):
        return 0
    return -(1 << (t.width - 1))


@lowering("MaxPool", "AveragePool", "LpPool")
def lower_pool(cx, op):
    x, r = op.operands[0], op.results[0]
    params = _params(cx, op, x, r)
    if len(op.results) > 1 and op.results[1].type is not NONE:
        lower_maxpool_indices(cx, op, params, _minval)
        return
    L = cx.L
    in_sp, out_sp, kernel, strides, dil, begin, end = params
    N, C = x.type.shape[:2]
    el = r.type.element
    low = is_float(el) and el.name in LOW_FLOATS
    t = f32 if low else el
    kind = op.name.split(".")[1]
    out = cx.out(r)
    acc = L.alloc(r.type.shape, f32) if low else out
    xv = L.view(cx.buf(x), (N * C,) + tuple(in_sp))
    av = L.view(acc, (N * C,) + tuple(out_sp))
    P = int(np.prod(out_sp))
    flat = L.view(acc, (N * C, P))
    p_norm = cx.attr(op, "p") if kind == "LpPool" else None
    if kind == "MaxPool":
        init = L.c(_minval(t), t)
        comb = ("arith.maximumf" if is_float(t) else ("arith.maxui" if is_unsigned(t) else "arith.maxsi"))
    else:
        init, comb = L.c(0.0, t), "arith.addf"
    with L.loop(0, N * C, parallel=True) as nc:
        with L.loop(0, P, vectorize=True) as p:
            L.store(init, flat, [nc, p])
        for kp in itertools.product(*[range(k) for k in kernel]):
            offs = [k * d - b for k, d, b in zip(kp, dil, begin)]

            def body(oi, ii):
                v = L.load(xv, [nc] + ii)
                if low:
                    v = L.op("arith.extf", [v], f32)
                if p_norm is not None:
                    v = L.op("math.absf", [v], t)
                    v = L.op("arith.mulf", [v, v], t) if p_norm == 2 else \
                        L.op("arith.powf", [v, L.c(float(p_norm), t)], t)
                idx = [nc] + oi
                L.store(L.op(comb, [L.load(av, idx), v], t), av, idx)
            window_nest(L, out_sp, in_sp, strides, offs, body, taps=math.prod(kernel))
        if kind != "MaxPool":
            with L.loop(0, P, vectorize=True) as p:
                v = L.load(flat, [nc, p])
                if kind == "AveragePool":
                    cnt = _counts(cx, op, in_sp, out_sp, kernel, strides, dil, begin, end)
                    v = L.op("arith.divf", [v, L.load(cnt, [p])], t)
                elif p_norm == 2:
                    v = L.op("math.sqrt", [v], t)
                else:
                    v = L.op("arith.powf", [v, L.c(1.0 / p_norm, t)], t)
                L.store(v, flat, [nc, p])
    if low:
        from ..math.matmul import truncate_into
        truncate_into(cx, acc, out)


def _counts(cx, op, in_sp, out_sp, kernel, strides, dil, begin, end):
    """Divisor per output position: kernel taps inside the image, or inside
    the padded image with count_include_pad."""
    include = cx.attr(op, "count_include_pad")
    per_dim = []
    for o, i, k, s, d, b, e in zip(out_sp, in_sp, kernel, strides, dil, begin, end):
        lo, hi = (-b, i + e) if include else (0, i)
        starts = np.arange(o) * s - b
        taps = starts[:, None] + np.arange(k)[None, :] * d
        per_dim.append(((taps >= lo) & (taps < hi)).sum(axis=1))
    cnt = per_dim[0]
    for c in per_dim[1:]:
        cnt = np.multiply.outer(cnt, c)
    cnt = np.asarray(cnt, dtype=np.float32).reshape(-1)
    return cx.L.at_top("loop.global", MemRefType(cnt.shape, f32),
                       value=DenseElementsAttr(cnt, TensorType(cnt.shape, f32)))


@lowering("GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool")
def lower_global_pool(cx, op):
    x = op.operands[0]
    kind = {"onnx.GlobalAveragePool": "mean", "onnx.GlobalMaxPool": "max",
            "onnx.GlobalLpPool": "lp"}[op.name]
    axes = list(range(2, x.type.rank))
    if kind == "lp":
        p = cx.attr(op, "p")
        reduce_lowering(cx, op, "l2" if p == 2 else ("l1" if p == 1 else "lp"), axes, True, p=p)
    else:
        reduce_lowering(cx, op, kind, axes, True)
