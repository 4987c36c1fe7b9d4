"""CumSum / CumProd along a constant axis (exclusive, reverse), accumulating
in the element type (f16/bf16: in f32, rounded to the type after each step,
as numpy's cumsum in that type)."""
from __future__ import annotations

import numpy as np

from ....ir.types import INDEX, f32
from ..common import LOW_FLOATS, is_float
from ..registry import lowering


@lowering("CumSum", "CumProd")
def lower_cumulative(cx, op):
    L = cx.L
    x, ax = op.operands[:2]
    r = op.results[0]
    a = cx.const(ax)
    if a is None:
        cx.fail(op, f"input #1 (axis) of {op.name} must be a constant for the host lowering")
    shape = x.type.shape
    rank = len(shape)
    axis = int(np.asarray(a).ravel()[0])
    if not -rank <= axis < rank:
        cx.fail(op, f"{op.name} axis {axis} out of range for rank {rank}")
    axis %= rank
    O, A, I = int(np.prod(shape[:axis])), shape[axis], int(np.prod(shape[axis + 1:]))
    T = x.type.element
    low = is_float(T) and T.name in LOW_FLOATS
    ct = f32 if low else T
    prod = op.name == "onnx.CumProd"
    excl, rev = bool(cx.attr(op, "exclusive")), bool(cx.attr(op, "reverse"))
    xv, yv = L.view(cx.buf(x), (O, A, I)), L.view(cx.out(r), (O, A, I))
    init = L.c((1.0 if prod else 0.0) if is_float(ct) else (1 if prod else 0), ct)
    opname = ("arith.mulf" if prod else "arith.addf") if is_float(ct) else ("arith.muli" if prod else "arith.addi")

    def ld(idx):
        v = L.load(xv, idx)
        return L.op("arith.extf", [v], ct) if low else v

    def st(v, idx):
        L.store(L.op("arith.truncf", [v], T) if low else v, yv, idx)

    with L.loop(0, O, parallel=O > 1) as o:
        with L.loop(0, I) as i:
            acc = L.alloc((1,), ct)
            L.store(init, acc, [0])
            with L.loop(0, A) as k:
                kk = L.op("arith.subi", [L.c(A - 1), k], INDEX) if rev else k
                cur = L.load(acc, [0])
                nxt = L.op(opname, [cur, ld([o, kk, i])], ct)
                if low:
                    nxt = L.op("arith.extf", [L.op("arith.truncf", [nxt], T)], ct)
                st(cur if excl else nxt, [o, kk, i])
                L.store(nxt, acc, [0])
            L.op("loop.dealloc", [acc])


@lowering("TopK")
def lower_topk(cx, op):
    """k rounds of selection per row: the largest (smallest) value not yet
    taken, the lowest index among equals; outputs sorted."""
    from ....ir.types import i1, i8, i64
    L = cx.L
    x, kv = op.operands[:2]
    vals, inds = op.results[:2]
    kc = cx.const(kv) if cx.opset() >= 10 else None
    k = int(np.asarray(kc).ravel()[0]) if kc is not None else cx.attr(op, "k")
    if k is None:
        cx.fail(op, "input #1 (k) of TopK must be a constant for the host lowering")
    shape = x.type.shape
    rank = len(shape)
    axis = cx.attr(op, "axis")
    axis = (-1 if axis is None else axis) % rank
    O, A, I = int(np.prod(shape[:axis])), shape[axis], int(np.prod(shape[axis + 1:]))
    if not 0 <= k <= A:
        cx.fail(op, f"TopK k={k} out of range for an axis of {A}")
    largest = cx.attr(op, "largest")
    largest = True if largest is None else bool(largest)
    T = x.type.element
    xv = L.view(cx.buf(x), (O, A, I))
    vv = L.view(cx.out(vals), (O, k, I))
    iv = L.view(cx.out(inds), (O, k, I))
    if is_float(T):
        cmp, pred = "arith.cmpf", "ogt" if largest else "olt"
    else:
        from ..common import is_unsigned
        cmp, pred = "arith.cmpi", ("u" if is_unsigned(T) else "s") + ("gt" if largest else "lt")
    with L.loop(0, O, parallel=O > 1) as o:
        with L.loop(0, I) as i:
            taken = L.alloc((A,), i8)
            best = L.alloc((1,), i64)
            with L.loop(0, A) as a:
                L.store(L.c(0, i8), taken, [a])
            with L.loop(0, k) as j:
                L.store(L.c(-1, i64), best, [0])
                with L.loop(0, A) as a:
                    b = L.load(best, [0])
                    free = L.op("arith.cmpi", [L.load(taken, [a]), L.c(0, i8)], i1, predicate="eq")
                    none = L.op("arith.cmpi", [b, L.c(0, i64)], i1, predicate="slt")
                    bi = L.op("arith.index_cast", [L.op("arith.maxsi", [b, L.c(0, i64)], i64)], INDEX)
                    better = L.op(cmp, [L.load(xv, [o, a, i]), L.load(xv, [o, bi, i])], i1, predicate=pred)
                    take = L.op("arith.andi", [free, L.op("arith.ori", [none, better], i1)], i1)
                    L.store(L.op("arith.select", [take, L.op("arith.index_cast", [a], i64), b], i64), best, [0])
                b = L.load(best, [0])
                bi = L.op("arith.index_cast", [b], INDEX)
                L.store(L.c(1, i8), taken, [bi])
                L.store(L.load(xv, [o, bi, i]), vv, [o, j, i])
                L.store(emit_i64(L, b, inds.type.element), iv, [o, j, i])
            L.op("loop.dealloc", [taken])
            L.op("loop.dealloc", [best])


def emit_i64(L, v, el):
    from ..cast import emit_cast
    from ....ir.types import i64
    return emit_cast(L, v, i64, el)
