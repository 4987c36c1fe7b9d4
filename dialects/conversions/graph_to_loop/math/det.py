"""Det: the determinant of each [M, M] matrix of a [..., M, M] tensor, by
LU decomposition with partial pivoting (as LAPACK's getrf, which numpy and
onnx.reference use): the product of the pivots, negated once per row swap.
Each matrix is factored in a scratch copy in f64, so f16/f32 results are
rounded once at the end."""
from __future__ import annotations

import numpy as np

from ....ir.types import INDEX, f64, i1, i64
from ..cast import emit_cast
from ..registry import lowering


def _abs_at(L, a, i, k):
    return L.op("math.absf", [L.load(a, [i, k])], f64)


@lowering("Det")
def lower_det(cx, op):
    x, r = op.operands[0], op.results[0]
    L = cx.L
    shape = x.type.shape
    T = x.type.element
    if len(shape) < 2 or shape[-1] != shape[-2]:
        cx.fail(op, f"Det needs [..., M, M] matrices, got shape {shape}")
    M = shape[-1]
    B = int(np.prod(shape[:-2]))
    xv = L.view(cx.buf(x), (B, M, M))
    yv = L.view(cx.out(r), (B,))
    zero, one = L.c(0.0, f64), L.c(1.0, f64)
    with L.loop(0, B, parallel=True) as b:
        a = L.alloc((M, M), f64)
        det, best = L.alloc((1,), f64), L.alloc((1,), f64)
        piv = L.alloc((1,), i64)
        with L.loop(0, M) as i:
            with L.loop(0, M, vectorize=True) as j:
                L.store(emit_cast(L, L.load(xv, [b, i, j]), T, f64), a, [i, j])
        L.store(one, det, [0])
        with L.loop(0, M) as k:
            # the pivot: the first row at or below k with the largest |a[row, k]|
            L.store(_abs_at(L, a, k, k), best, [0])
            L.store(L.op("arith.index_cast", [k], i64), piv, [0])
            with L.loop(L.add(k, 1), M) as i:
                v = _abs_at(L, a, i, k)
                gt = L.op("arith.cmpf", [v, L.load(best, [0])], i1, predicate="ogt")
                L.store(L.op("arith.select", [gt, v, L.load(best, [0])], f64), best, [0])
                L.store(L.op("arith.select", [gt, L.op("arith.index_cast", [i], i64), L.load(piv, [0])], i64),
                        piv, [0])
            p = L.op("arith.index_cast", [L.load(piv, [0])], INDEX)
            with L.loop(0, M) as j:  # swapping row k with itself is harmless
                t = L.load(a, [k, j])
                L.store(L.load(a, [p, j]), a, [k, j])
                L.store(t, a, [p, j])
            d = L.load(a, [k, k])
            swapped = L.op("arith.cmpi", [p, k], i1, predicate="ne")
            dv = L.op("arith.mulf", [L.load(det, [0]), d], f64)
            L.store(L.op("arith.select", [swapped, L.op("arith.negf", [dv], f64), dv], f64), det, [0])
            # a zero pivot means a zero column below it: det is 0, and skipping the
            # elimination keeps 0/0 NaNs out of it
            singular = L.op("arith.cmpf", [d, zero], i1, predicate="oeq")
            with L.loop(L.add(k, 1), M) as i:
                q = L.op("arith.divf", [L.load(a, [i, k]), d], f64)
                q = L.op("arith.select", [singular, zero, q], f64)
                with L.loop(L.add(k, 1), M, vectorize=True) as j:
                    v = L.op("arith.subf", [L.load(a, [i, j]), L.op("arith.mulf", [q, L.load(a, [k, j])], f64)], f64)
                    L.store(v, a, [i, j])
        L.store(emit_cast(L, L.load(det, [0]), f64, T), yv, [b])
        for buf in (a, det, best, piv):
            L.op("loop.dealloc", [buf])
