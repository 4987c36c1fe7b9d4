"""BatchNormalization's training mode (opset 14+): per channel, the batch
mean and biased variance over every axis but 1, which normalize Y; the
optional running_mean / running_var outputs are
input * momentum + batch statistic * (1 - momentum)."""
from __future__ import annotations

import numpy as np

from ....ir.types import NONE
from ..cast import emit_cast


def batch_statistics(cx, op, t):
    """(C,) buffers of the batch mean and variance in compute type t; also
    writes the running statistics outputs that are present."""
    if cx.opset() < 14:
        cx.fail(op, f"BatchNormalization training outputs at opset {cx.opset()} (before 14) have no host lowering")
    x = op.operands[0]
    L = cx.L
    shape = x.type.shape
    N, C = shape[0], shape[1] if len(shape) > 1 else 1
    P = int(np.prod(shape[2:]))
    T = x.type.element
    mom = cx.attr(op, "momentum")
    mom = 0.9 if mom is None else float(mom)
    xv = L.view(cx.buf(x), (N, C, P))
    mean, var = L.alloc((C,), t), L.alloc((C,), t)
    outs = list(op.results[1:3]) + [None, None]
    running = [(cx.buf(v), cx.out(r)) if r is not None and r.type is not NONE else None
               for v, r in zip(op.operands[3:5], outs)]
    with L.loop(0, C, parallel=True) as c:
        for k, stat in enumerate((mean, var)):
            L.store(L.c(0.0, t), stat, [c])
            with L.loop(0, N) as n:
                with L.loop(0, P, vectorize=True) as p:
                    v = emit_cast(L, L.load(xv, [n, c, p]), T, t)
                    if k:  # two passes: the variance sums squares about the mean, not x^2 - mean^2
                        v = L.op("arith.subf", [v, L.load(mean, [c])], t)
                        v = L.op("arith.mulf", [v, v], t)
                    L.store(L.op("arith.addf", [L.load(stat, [c]), v], t), stat, [c])
            L.store(L.op("arith.divf", [L.load(stat, [c]), L.c(float(N * P), t)], t), stat, [c])
        for pair, stat in zip(running, (mean, var)):
            if pair is None:
                continue
            src, dst = pair
            old = emit_cast(L, L.load(src, [c]), src.type.element, t)
            v = L.op("arith.addf", [L.op("arith.mulf", [old, L.c(mom, t)], t),
                                    L.op("arith.mulf", [L.load(stat, [c]), L.c(1.0 - mom, t)], t)], t)
            L.store(emit_cast(L, v, t, dst.type.element), dst, [c])
    return mean, var
