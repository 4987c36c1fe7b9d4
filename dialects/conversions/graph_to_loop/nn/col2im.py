"""Col2Im (opset 18): input [N, C*prod(block), prod(blocks)] scattered and
summed into [N, C, *image_shape] (pads, strides, dilations; any number of
spatial dims).

Loops run over (n, c, kernel offset, block): one kernel offset sends the
blocks to distinct pixels, so each (n, c) plane is race-free and every pixel
sums its contributions in kernel-offset order, as onnx.reference does (in
the element type: low floats round after each add). The blocks one offset
keeps inside the image are a range per dim, read from small tables."""
from __future__ import annotations

from contextlib import ExitStack

import numpy as np

from ....ir.types import INDEX, f32, i64
from ..common import LOW_FLOATS, is_float
from ..registry import lowering
from ..common import constant_table


def _ints(cx, op, i, what):
    v = cx.const(op.operands[i])
    if v is None:
        cx.fail(op, f"Col2Im's {what} must be a constant for the host lowering")
    return [int(a) for a in np.asarray(v).ravel()]


@lowering("Col2Im")
def lower_col2im(cx, op):
    L = cx.L
    x, r = op.operands[0], op.results[0]
    img, blk = _ints(cx, op, 1, "image_shape"), _ints(cx, op, 2, "block_shape")
    nd = len(img)
    if len(blk) != nd:
        cx.fail(op, f"Col2Im block_shape {blk} and image_shape {img} differ in rank")
    dil = cx.attr(op, "dilations") or [1] * nd
    strides = cx.attr(op, "strides") or [1] * nd
    pads = cx.attr(op, "pads") or [0] * (2 * nd)
    N, CK, Lx = x.type.shape
    K = int(np.prod(blk))
    nb = [(img[d] + pads[d] + pads[nd + d] - (dil[d] * (blk[d] - 1) + 1)) // strides[d] + 1 for d in range(nd)]
    if K == 0 or CK % K or int(np.prod(nb)) != Lx or min(nb) < 1:
        cx.fail(op, f"Col2Im input shape {list(x.type.shape)} does not fit image_shape {img}, "
                    f"block_shape {blk}, pads {pads}, strides {strides}, dilations {dil}")
    C = CK // K
    if list(r.type.shape) != [N, C] + img:
        cx.fail(op, f"Col2Im output shape {[N, C] + img} disagrees with the inferred {list(r.type.shape)}")
    el = r.type.element
    if not (is_float(el) and el.name in ("f16", "bf16", "f32", "f64")) and \
            not (hasattr(el, "width") and not is_float(el) and str(el) != "i1"):
        cx.fail(op, f"Col2Im does not support element type {el}")
    src, dst = cx.buf(x), cx.out(r)
    if r.type.num_elements == 0:
        return
    flt = is_float(el)
    with L.loops(r.type.shape) as ivs:
        L.store(L.c(0.0 if flt else 0, el), dst, ivs)
    # Per dim and kernel offset k: blocks b with 0 <= b*s - pad + k*dil < img.
    ranges = []
    for d in range(nd):
        lo, hi = [], []
        for k in range(blk[d]):
            pos = np.arange(nb[d]) * strides[d] - pads[d] + k * dil[d]
            ok = np.nonzero((pos >= 0) & (pos < img[d]))[0]
            lo.append(ok[0] if ok.size else 0)
            hi.append(ok[-1] + 1 if ok.size else 0)
        ranges.append(constant_table(L, np.array([lo, hi], np.int64).T, i64))
    low = flt and el.name in LOW_FLOATS
    xv = L.view(src, (N, C, K, Lx))
    with L.loop(0, N, parallel=N > 1) as n, L.loop(0, C, parallel=N == 1 and C > 1) as c:
        with ExitStack() as st:
            ks, bounds = [], []
            for d in range(nd):
                ks.append(st.enter_context(L.loop(0, blk[d])))
                t = ranges[d]
                bounds.append([L.op("arith.index_cast", [L.load(t, [ks[d], L.c(j)])], INDEX) for j in (0, 1)])
            kl = L.affine([(int(np.prod(blk[d + 1:])), ks[d]) for d in range(nd)])
            bs = []
            for d in range(nd):
                bs.append(st.enter_context(L.loop(bounds[d][0], bounds[d][1],
                                                  vectorize=d == nd - 1 and strides[d] == 1)))
            col = L.affine([(int(np.prod(nb[d + 1:])), bs[d]) for d in range(nd)])
            pos = [L.add(L.add(L.mul(bs[d], strides[d]), L.mul(ks[d], dil[d])), -pads[d]) for d in range(nd)]
            v = L.load(xv, [n, c, kl, col])
            o = L.load(dst, [n, c] + pos)
            if low:
                s = L.op("arith.truncf", [L.op("arith.addf", [L.op("arith.extf", [o], f32),
                                                              L.op("arith.extf", [v], f32)], f32)], el)
            else:
                s = L.op("arith.addf" if flt else "arith.addi", [o, v], el)
            L.store(s, dst, [n, c] + pos)
