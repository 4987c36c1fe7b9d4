"""MaxUnpool: zeros, then X[e] stored at flat position I[e]. Indices are
flat over the shape MaxPool's attributes imply ((in - 1) * stride - pads +
kernel); a larger output_shape holds that block at its origin, the rest
zero, as onnx.reference and the backend node tests have it. The output's
static type already carries output_shape, so its value is not read."""
from __future__ import annotations

import numpy as np

from ....ir.types import INDEX
from ..registry import lowering
from ..common import fill


def _inferred(cx, op, xs):
    sp = xs[2:]
    n = len(sp)
    kernel = cx.attr(op, "kernel_shape")
    if kernel is None or len(kernel) != n:
        cx.fail(op, f"MaxUnpool kernel_shape {kernel} does not match {n} spatial dims")
    strides = cx.attr(op, "strides") or [1] * n
    pads = cx.attr(op, "pads") or [0] * (2 * n)
    return tuple(xs[:2]) + tuple((i - 1) * s - (pads[d] + pads[n + d]) + k
                                 for d, (i, s, k) in enumerate(zip(sp, strides, kernel)))


@lowering("MaxUnpool")
def lower_max_unpool(cx, op):
    x, ind = op.operands[:2]
    r = op.results[0]
    L = cx.L
    inf = _inferred(cx, op, x.type.shape)
    oshape = tuple(r.type.shape)
    if len(oshape) != len(inf) or any(o < i for o, i in zip(oshape, inf)):
        cx.fail(op, f"MaxUnpool output shape {oshape} is smaller than the unpooled shape {inf}")
    out = cx.out(r)
    fill(cx, out, 0)
    total = int(np.prod(inf))
    E = x.type.num_elements
    xv, iv = L.view(cx.buf(x), (E,)), L.view(cx.buf(ind), (E,))
    ov = L.view(out, (total,)) if oshape == inf else out
    with L.loop(0, E) as e:
        k = L.cast_index(L.load(iv, [e]), ind.type.element)
        # out-of-range indices are invalid models; clamp so the access stays in bounds
        k = L.minmax_idx("min", L.minmax_idx("max", k, 0), total - 1)
        if oshape == inf:
            idx = [k]
        else:
            idx = []
            for d in reversed(inf):
                idx.append(L.op("arith.remui", [k, L.c(d)], INDEX))
                k = L.op("arith.divui", [k, L.c(d)], INDEX)
            idx.reverse()
        L.store(L.load(xv, [e]), ov, idx)
