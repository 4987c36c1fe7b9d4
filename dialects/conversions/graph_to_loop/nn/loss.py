"""NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss (as onnx.reference):
inputs (N, C, d1...) seen as (N, C, D), targets (N, D); per element
loss = -logp[n, t, d] * w[t] (w = weight or 1; 0 where t == ignore_index);
reduction none / sum / mean = sum(loss) / sum(w). SoftmaxCrossEntropyLoss
computes logp = log(softmax(x, axis=1)) first (optionally an output).
Arithmetic in f32 (f64 for f64)."""
from __future__ import annotations

import numpy as np

from ....ir.types import NONE, f32, f64, i1
from ..cast import emit_cast
from ..registry import lowering


@lowering("NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss")
def lower_loss(cx, op):
    L = cx.L
    x, tgt = op.operands[0], op.operands[1]
    wt = op.operands[2] if len(op.operands) > 2 and op.operands[2].type is not NONE else None
    xs = x.type.shape
    if len(xs) < 2:
        cx.fail(op, f"{op.name} needs an input of rank >= 2, got {xs}")
    N, C = xs[0], xs[1]
    D = int(np.prod(xs[2:]))
    T = x.type.element
    ct = f64 if T.name == "f64" else f32
    red = cx.attr(op, "reduction") or "mean"
    if red not in ("none", "sum", "mean"):
        cx.fail(op, f"{op.name} reduction '{red}' is not none, sum or mean")
    ignore = op.get_attr("ignore_index", None)
    xb = L.view(cx.buf(x), (N, C, D))
    tb = L.view(cx.buf(tgt), (N, D))
    te = tgt.type.element
    wb = cx.buf(wt) if wt is not None else None
    sce = op.name == "onnx.SoftmaxCrossEntropyLoss"
    res = op.results
    lp_out = res[1] if sce and len(res) > 1 and res[1].type is not NONE else None

    def ld(buf, idx, el):
        return emit_cast(L, L.load(buf, idx), el, ct)

    if sce:  # log_prob = log(exp(x - max) / sum(exp(x - max))) over C
        lp = L.alloc((N, C, D), ct)
        with L.loops((N, D), vectorize_inner=False) as (n, d):
            s = L.alloc((2,), ct)
            L.store(L.c(float("-inf"), ct), s, [0])
            L.store(L.c(0.0, ct), s, [1])
            with L.loop(0, C) as c:
                L.store(L.op("arith.maximumf", [L.load(s, [0]), ld(xb, [n, c, d], T)], ct), s, [0])
            m = L.load(s, [0])
            with L.loop(0, C) as c:
                e = L.op("math.exp", [L.op("arith.subf", [ld(xb, [n, c, d], T), m], ct)], ct)
                L.store(e, lp, [n, c, d])
                L.store(L.op("arith.addf", [L.load(s, [1]), e], ct), s, [1])
            tot = L.load(s, [1])
            with L.loop(0, C) as c:
                L.store(L.op("math.log", [L.op("arith.divf", [L.load(lp, [n, c, d]), tot], ct)], ct), lp, [n, c, d])
            L.op("loop.dealloc", [s])
        if lp_out is not None:
            ov = L.view(cx.out(lp_out), (N, C, D))
            with L.loops((N, C, D)) as ivs:
                L.store(emit_cast(L, L.load(lp, ivs), ct, T), ov, ivs)
        lpv, lp_t = lp, ct
    else:
        lpv, lp_t = xb, T

    out = res[0]
    ov = L.view(cx.out(out), (N, D)) if red == "none" else None
    acc = None
    if red != "none":
        acc = L.alloc((2,), ct)
        L.store(L.c(0.0, ct), acc, [0])
        L.store(L.c(0.0, ct), acc, [1])
    zero = L.c(0.0, ct)
    with L.loops((N, D), parallel_outer=red == "none", vectorize_inner=False) as (n, d):
        t = L.load(tb, [n, d])
        ti = L.cast_index(t, te)
        tc = L.minmax_idx("min", L.minmax_idx("max", ti, 0), C - 1)
        v = L.op("arith.negf", [emit_cast(L, L.load(lpv, [n, tc, d]), lp_t, ct)], ct)
        w = ld(wb, [tc], wt.type.element) if wb is not None else L.c(1.0, ct)
        if ignore is not None:
            ign = L.op("arith.cmpi", [t, L.c(int(ignore), te)], i1, predicate="eq")
            w = L.op("arith.select", [ign, zero, w], ct)
            lv = L.op("arith.select", [ign, zero, L.op("arith.mulf", [v, w], ct)], ct)
        else:
            lv = L.op("arith.mulf", [v, w], ct)
        if ov is not None:
            L.store(emit_cast(L, lv, ct, out.type.element), ov, [n, d])
        else:
            L.store(L.op("arith.addf", [L.load(acc, [0]), lv], ct), acc, [0])
            L.store(L.op("arith.addf", [L.load(acc, [1]), w], ct), acc, [1])
    if acc is not None:
        r = L.load(acc, [0])
        if red == "mean":
            r = L.op("arith.divf", [r, L.load(acc, [1])], ct)
        ob = cx.out(out)
        L.store(emit_cast(L, r, ct, out.type.element), ob, [0] * ob.type.rank)
        L.op("loop.dealloc", [acc])
    if sce:
        L.op("loop.dealloc", [lpv])

