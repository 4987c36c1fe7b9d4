"""TensorScatter (opset 24): a KV-cache update. The output is a copy of
past_cache in which, for batch b, the update's rows along `axis` land at
sequence positions write_indices[b] + s (mod the cache length with
mode=circular)."""
from __future__ import annotations

import numpy as np

from ....ir.types import INDEX, NONE, i1
from ..common import is_unsigned
from ..registry import lowering
from .data_movement import copy_nest


@lowering("TensorScatter")
def lower_tensor_scatter(cx, op):
    past, upd = op.operands[:2]
    wi = op.operands[2] if len(op.operands) > 2 and op.operands[2].type is not NONE else None
    r = op.results[0]
    L = cx.L
    shape, ushape = past.type.shape, upd.type.shape
    rank = len(shape)
    axis = cx.attr(op, "axis")
    axis = -2 if axis is None else axis
    if not -rank <= axis < rank or axis % rank == 0:
        cx.fail(op, f"TensorScatter axis {axis} is not a non-batch axis of a rank-{rank} cache")
    axis %= rank
    mode = cx.attr(op, "mode") or "linear"
    if mode not in ("linear", "circular"):
        cx.fail(op, f"TensorScatter mode '{mode}' is not linear or circular")
    if len(ushape) != rank or any(a != b for d, (a, b) in enumerate(zip(shape, ushape)) if d != axis) \
            or ushape[axis] > shape[axis]:
        cx.fail(op, f"TensorScatter update of shape {ushape} does not fit cache of shape {shape} on axis {axis}")
    out = cx.out(r)
    copy_nest(cx, shape, out, lambda ivs: ivs, cx.buf(past), lambda ivs: ivs)
    M = shape[axis]
    pre, post = shape[:axis], (int(np.prod(shape[axis + 1:])),)
    ov = L.view(out, tuple(pre) + (M,) + post)
    uv = L.view(cx.buf(upd), tuple(pre) + (ushape[axis],) + post)
    wb = cx.buf(wi) if wi is not None else None
    el = wi.type.element if wi is not None else None
    with L.loops(tuple(pre) + (ushape[axis],), vectorize_inner=False) as ivs:
        s = ivs[-1]
        if wb is None:
            pos = s
        else:
            w = L.load(wb, [ivs[0]])
            start = L.op("arith.index_castui", [w], INDEX) if is_unsigned(el) else L.cast_index(w, el)
            pos = L.add(start, s)
        if mode == "circular":
            # a remainder that is never negative, as numpy's %
            m = L.op("arith.remsi", [pos, L.c(M)], INDEX)
            neg = L.op("arith.cmpi", [m, L.c(0)], i1, predicate="slt")
            pos = L.op("arith.select", [neg, L.add(m, M), m], INDEX)
        else:
            # out-of-range positions are invalid models; clamp so the access stays in bounds
            pos = L.minmax_idx("min", L.minmax_idx("max", pos, 0), M - 1)
        with L.loop(0, post[0], vectorize=True) as j:
            L.store(L.load(uv, list(ivs) + [j]), ov, list(ivs[:-1]) + [pos, j])
