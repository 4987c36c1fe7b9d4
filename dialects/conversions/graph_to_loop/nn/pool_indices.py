"""MaxPool with its second output, Indices: the flat position in X of each
window's maximum, (n*C + c) * prod(spatial) + the spatial offset, row-major
(storage_order 0) or column-major (1) over the spatial dims.

Kernel offsets are visited in row-major order and a tap replaces the
running maximum only when strictly greater (or when it is the first non-NaN
tap), so ties keep the first tap and NaNs never win, as onnxruntime's and
onnx.reference's scans do."""
from __future__ import annotations

import itertools
import math

import numpy as np

from ....ir.types import i1
from ..common import compute_type, is_float, is_unsigned, load_as
from ..window import window_nest


def spatial_strides(in_sp, storage_order):
    n = len(in_sp)
    order = range(n - 1, -1, -1) if storage_order == 0 else range(n)
    strides, acc = [0] * n, 1
    for d in order:
        strides[d] = acc
        acc *= in_sp[d]
    return strides


def lower_maxpool_indices(cx, op, params, minval):
    x, r, ri = op.operands[0], op.results[0], op.results[1]
    in_sp, out_sp, kernel, strides, dil, begin, _ = params
    storage_order = cx.attr(op, "storage_order") or 0
    if storage_order not in (0, 1):
        cx.fail(op, f"MaxPool storage_order {storage_order} is not 0 or 1")
    L = cx.L
    N, C = x.type.shape[:2]
    el = r.type.element
    t = compute_type(el)
    low = t != el
    out = cx.out(r)
    acc = L.alloc(r.type.shape, t) if low else out
    xv = L.view(cx.buf(x), (N * C,) + tuple(in_sp))
    av = L.view(acc, (N * C,) + tuple(out_sp))
    iv = L.view(cx.out(ri), (N * C,) + tuple(out_sp))
    P, S = int(np.prod(out_sp)), int(np.prod(in_sp))
    flat, iflat = L.view(acc, (N * C, P)), L.view(iv, (N * C, P))
    sp_strides = spatial_strides(in_sp, storage_order)
    ie = ri.type.element
    if is_float(t):
        gt, pred = "arith.cmpf", "ogt"
    else:
        gt, pred = "arith.cmpi", "ugt" if is_unsigned(t) else "sgt"
    with L.loop(0, N * C, parallel=True) as nc:
        base = L.mul(nc, S)
        with L.loop(0, P, vectorize=True) as p:
            L.store(L.c(minval(t), t), flat, [nc, p])
            L.store(L.c(-1, ie), iflat, [nc, p])  # no tap taken yet
        for kp in itertools.product(*[range(k) for k in kernel]):
            offs = [k * d - b for k, d, b in zip(kp, dil, begin)]

            def body(oi, ii):
                v = load_as(L, xv, [nc] + ii, t)
                idx = [nc] + oi
                cur, cur_i = L.load(av, idx), L.load(iv, idx)
                # the first tap wins even when it only equals the initial value (the
                # type's lowest: an all-zero uint8 window); a NaN still does not
                first = L.op("arith.cmpi", [cur_i, L.c(-1, ie)], i1, predicate="eq")
                if is_float(t):
                    first = L.op("arith.andi", [first, L.op("arith.cmpf", [v, v], i1, predicate="ord")], i1)
                win = L.op("arith.ori", [L.op(gt, [v, cur], i1, predicate=pred), first], i1)
                L.store(L.op("arith.select", [win, v, cur], t), av, idx)
                pos = L.affine([(s, i) for i, s in zip(ii, sp_strides)], 0)
                pos = L.op("arith.index_cast", [L.add(base, pos)], ie)
                L.store(L.op("arith.select", [win, pos, cur_i], ie), iv, idx)
            window_nest(L, out_sp, in_sp, strides, offs, body, taps=math.prod(kernel))
    if low:
        from ..math.matmul import truncate_into
        truncate_into(cx, acc, out)

