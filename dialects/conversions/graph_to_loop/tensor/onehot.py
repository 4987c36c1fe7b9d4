"""OneHot (opset 9/11): out[.., j, ..] = on if index == j else off, the
depth axis inserted at `axis`. As onnx.reference: a negative index counts
from the end of depth, an index out of [-depth, depth) matches nothing (all
off), and float indices match only when they equal j exactly."""
from __future__ import annotations

import numpy as np

from ....ir.types import f32, i1, i64
from ..common import LOW_FLOATS, is_float, is_unsigned
from ..cast import emit_cast
from ..registry import lowering


@lowering("OneHot")
def lower_onehot(cx, op):
    L = cx.L
    ind, depth_v, vals = op.operands[:3]
    r = op.results[0]
    rank = ind.type.rank
    axis = cx.attr(op, "axis")
    axis = -1 if axis is None else axis
    axis = axis + rank + 1 if axis < 0 else axis
    if not 0 <= axis <= rank:
        cx.fail(op, f"OneHot axis {cx.attr(op, 'axis')} is out of range for rank {rank}")
    depth = cx.const(depth_v)
    if depth is None:
        cx.fail(op, "OneHot's depth must be a constant for the host lowering")
    depth = np.asarray(depth).ravel()[0]
    n = r.type.shape[axis]
    if n != len(np.arange(depth)):
        cx.fail(op, f"OneHot depth {depth} disagrees with the inferred output shape {list(r.type.shape)}")
    el, iel, vel = r.type.element, ind.type.element, vals.type.element
    ib, vb, dst = cx.buf(ind), cx.buf(vals), cx.out(r)
    off, on = L.load(vb, [L.c(0)]), L.load(vb, [L.c(1)])
    if vel != el:
        off, on = emit_cast(L, off, vel, el), emit_cast(L, on, vel, el)
    if r.type.num_elements == 0:
        return
    fidx = is_float(iel)
    ct = f32 if fidx and iel.name in LOW_FLOATS else iel
    with L.loops(r.type.shape, vectorize_inner=False) as ivs:
        j = ivs[axis]
        v = L.load(ib, ivs[:axis] + ivs[axis + 1:])
        if fidx:
            v = emit_cast(L, v, iel, ct)
            neg = L.op("arith.cmpf", [v, L.c(0.0, ct)], i1, predicate="olt")
            v = L.op("arith.select", [neg, L.op("arith.addf", [v, L.c(float(depth), ct)], ct), v], ct)
            fj = L.op("arith.sitofp", [L.op("arith.index_cast", [j], i64)], ct)
            hit = L.op("arith.cmpf", [v, fj], i1, predicate="oeq")
        else:
            # Widened to i64 (unsigned zero-extended) so no index wraps into range.
            w = v if iel == i64 else emit_cast(L, v, iel, i64) if not is_unsigned(iel) else \
                L.op("arith.extui", [v], i64) if iel.width < 64 else v
            if is_unsigned(iel):
                hit = L.op("arith.cmpi", [w, L.op("arith.index_cast", [j], i64)], i1, predicate="eq")
            else:
                neg = L.op("arith.cmpi", [w, L.c(0, i64)], i1, predicate="slt")
                w = L.op("arith.select", [neg, L.op("arith.addi", [w, L.c(int(depth), i64)], i64), w], i64)
                hit = L.op("arith.cmpi", [w, L.op("arith.index_cast", [j], i64)], i1, predicate="eq")
        L.store(L.op("arith.select", [hit, on, off], el), dst, ivs)
