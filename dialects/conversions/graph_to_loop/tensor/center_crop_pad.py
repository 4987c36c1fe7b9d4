"""CenterCropPad (opset 18): per listed axis, crop or zero-pad symmetrically
to the target length; an odd difference puts the extra element at the end
(onnx.reference's slices start at difference // 2)."""
from __future__ import annotations

import numpy as np

from ....ir.types import INDEX, i1
from ..common import is_float
from ..registry import lowering


@lowering("CenterCropPad")
def lower_center_crop_pad(cx, op):
    L = cx.L
    x, r = op.operands[0], op.results[0]
    shape, out = list(x.type.shape), list(r.type.shape)
    rank = len(shape)
    target = cx.const(op.operands[1])
    if target is None:
        cx.fail(op, "CenterCropPad's shape must be a constant for the host lowering")
    target = [int(v) for v in np.asarray(target).ravel()]
    axes = cx.attr(op, "axes")
    axes = list(range(rank)) if axes is None else [a % rank for a in axes]
    if len(axes) != len(target):
        cx.fail(op, f"CenterCropPad shape has {len(target)} values for {len(axes)} axes")
    want = list(shape)
    for a, t in zip(axes, target):
        want[a] = t
    if want != out:
        cx.fail(op, f"CenterCropPad output shape {want} disagrees with the inferred {out}")
    el = r.type.element
    if not (is_float(el) or hasattr(el, "width")):
        cx.fail(op, f"CenterCropPad does not support element type {el}")
    src, dst = cx.buf(x), cx.out(r)
    if r.type.num_elements == 0:
        return
    zero = L.c(0.0 if is_float(el) else 0, el)
    with L.loops(out) as ivs:
        idx, valid = [], None
        for d, i in enumerate(ivs):
            if out[d] == shape[d]:
                idx.append(i)
            elif out[d] < shape[d]:
                idx.append(L.add(i, (shape[d] - out[d]) // 2))
            else:
                s = L.op("arith.subi", [i, L.c((out[d] - shape[d]) // 2)], INDEX)
                ok = L.op("arith.andi", [L.op("arith.cmpi", [s, L.c(0)], i1, predicate="sge"),
                                         L.op("arith.cmpi", [s, L.c(shape[d])], i1, predicate="slt")], i1)
                valid = ok if valid is None else L.op("arith.andi", [valid, ok], i1)
                idx.append(L.minmax_idx("min", L.minmax_idx("max", s, 0), shape[d] - 1))
        if valid is not None and 0 in shape:
            L.store(zero, dst, ivs)
            return
        v = L.load(src, idx)
        if valid is not None:
            v = L.op("arith.select", [valid, v, zero], el)
        L.store(v, dst, ivs)
