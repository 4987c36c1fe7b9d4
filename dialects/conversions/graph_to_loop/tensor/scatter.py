"""Scatter, ScatterElements, ScatterND (reduction none/add/mul/max/min):
the output starts as a copy of `data`, then the updates are applied one
after another in index order (sequential loops, so duplicate indices
combine as the reference's loop does; with reduction none the last wins)."""
from __future__ import annotations

from ..common import data_index, is_float, is_unsigned
from ..registry import lowering
from .data_movement import copy_nest


def _combine(cx, op, red, old, new):
    L, t = cx.L, new.type
    if red in (None, "none"):
        return new
    if red == "add":
        return L.op("arith.addf" if is_float(t) else "arith.addi", [old, new], t)
    if red == "mul":
        return L.op("arith.mulf" if is_float(t) else "arith.muli", [old, new], t)
    if red in ("max", "min"):
        if is_float(t):
            return L.op(f"arith.{red}imumf", [old, new], t)
        return L.op(f"arith.{red}{'ui' if is_unsigned(t) else 'si'}", [old, new], t)
    cx.fail(op, f"{op.name} reduction '{red}' is not none, add, mul, max or min")


def _reduction(cx, op):
    red = op.get_attr("reduction", None)
    if red not in (None, "none", "add", "mul", "max", "min"):
        cx.fail(op, f"{op.name} reduction '{red}' is not none, add, mul, max or min")
    return red


def _copy_data(cx, op):
    data, r = op.operands[0], op.results[0]
    out = cx.out(r)
    copy_nest(cx, r.type.shape, out, lambda ivs: ivs, cx.buf(data), lambda ivs: ivs)
    return out


@lowering("ScatterElements", "Scatter")
def lower_scatter_elements(cx, op):
    data, ind, upd = op.operands[:3]
    red = _reduction(cx, op)
    L = cx.L
    rank = data.type.rank
    axis = (cx.attr(op, "axis") or 0) % rank
    out = _copy_data(cx, op)
    ib, ub = cx.buf(ind), cx.buf(upd)
    with L.loops(ind.type.shape, parallel_outer=False, vectorize_inner=False) as ivs:
        k = data_index(L, L.load(ib, ivs), ind.type.element, data.type.shape[axis])
        idx = [k if d == axis else iv for d, iv in enumerate(ivs)]
        new = L.load(ub, ivs)
        v = new if red in (None, "none") else _combine(cx, op, red, L.load(out, idx), new)
        L.store(v, out, idx)


@lowering("ScatterND")
def lower_scatter_nd(cx, op):
    data, ind, upd = op.operands[:3]
    red = _reduction(cx, op)
    L = cx.L
    ds = data.type.shape
    ish = ind.type.shape
    k = ish[-1]
    if k > len(ds):
        cx.fail(op, f"ScatterND index depth {k} exceeds the data rank {len(ds)}")
    out = _copy_data(cx, op)
    ib, ub = cx.buf(ind), cx.buf(upd)
    outer, inner = list(ish[:-1]), list(ds[k:])
    with L.loops(outer, parallel_outer=False, vectorize_inner=False) as ovs:
        pre = [data_index(L, L.load(ib, list(ovs) + [j]), ind.type.element, ds[j]) for j in range(k)]
        with L.loops(inner, parallel_outer=False) as ivs:
            idx = pre + list(ivs)
            new = L.load(ub, list(ovs) + list(ivs))
            v = new if red in (None, "none") else _combine(cx, op, red, L.load(out, idx), new)
            L.store(v, out, idx)
