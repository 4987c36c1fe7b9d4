"""Reductions (ReduceSum/Mean/Max/Min/Prod/L1/L2/LogSum/LogSumExp/SumSquare,
the global pools) and ArgMax/ArgMin.

The input is walked in its own memory order (coalesced into alternating
kept/reduced dims), accumulating into the output element its kept indices
name; so whichever dims are reduced, the innermost loop reads unit-stride,
and when the innermost dim is kept it also writes unit-stride (vectorizable
row accumulation). The outermost loop is parallel only when it is a kept
dim (distinct outputs)."""
from __future__ import annotations

from contextlib import ExitStack

import numpy as np

from ....ir.types import f32, i1, i64
from ..common import LOW_FLOATS, is_float, is_unsigned
from .elementwise import elementwise_nest
from ..registry import lowering

_INIT = {"sum": 0, "mean": 0, "l1": 0, "l2": 0, "sumsquare": 0, "logsum": 0, "logsumexp": 0, "lp": 0,
         "prod": 1, "max": "lowest", "min": "highest"}


def _extreme(t, which):
    if is_float(t):
        return float("-inf") if which == "lowest" else float("inf")
    if is_unsigned(t):
        return 0 if which == "lowest" else (1 << t.width) - 1
    b = 1 << (t.width - 1)
    return -b if which == "lowest" else b - 1


def _groups(shape, axes):
    """[(size, reduced?)] after dropping unit dims and merging neighbours."""
    out = []
    for d, n in enumerate(shape):
        if n == 1:
            continue
        red = d in axes
        if out and out[-1][1] == red:
            out[-1][0] *= n
        else:
            out.append([n, red])
    return out


def _combine(L, kind, t, acc, v):
    if kind in ("max", "min"):
        name = f"arith.{kind}imumf" if is_float(t) else f"arith.{kind}{'ui' if is_unsigned(t) else 'si'}"
        return L.op(name, [acc, v], t)
    if kind == "prod":
        return L.op("arith.mulf" if is_float(t) else "arith.muli", [acc, v], t)
    return L.op("arith.addf" if is_float(t) else "arith.addi", [acc, v], t)


def _pre(L, kind, t, v, extra, p=None):
    if kind == "l1":
        return L.op("math.absf", [v], t) if is_float(t) else (v if is_unsigned(t) else L.op("math.absi", [v], t))
    if kind in ("l2", "sumsquare"):
        return L.op("arith.mulf" if is_float(t) else "arith.muli", [v, v], t)
    if kind == "logsumexp":
        return L.op("math.exp", [L.op("arith.subf", [v, extra], t)], t)
    if kind == "lp":
        return L.op("arith.powf", [L.op("math.absf", [v], t), L.c(float(p), t)], t)
    return v


def reduce_nest(cx, xbuf, shape, axes, acc, kind, t, pre_extra=None, p=None):
    """acc[kept] = combine over reduced dims of pre(x); acc pre-initialised."""
    L = cx.L
    groups = _groups(shape, axes)
    xv = L.view(xbuf, [n for n, _ in groups])
    kept = [n for n, red in groups if not red]
    av = L.view(acc, kept)
    ev = L.view(pre_extra, kept) if pre_extra is not None else None
    src_t = xbuf.type.element
    with ExitStack() as st:
        ivs = []
        for d, (n, red) in enumerate(groups):
            ivs.append(st.enter_context(L.loop(0, n, parallel=(d == 0 and not red),
                                               vectorize=d == len(groups) - 1)))
        kidx = [i for i, (n, red) in zip(ivs, groups) if not red]
        v = L.load(xv, ivs)
        if src_t != t:
            v = L.op("arith.extf", [v], t)
        extra = L.load(ev, kidx) if ev is not None else None
        v = _pre(L, kind, t, v, extra, p)
        L.store(_combine(L, kind, t, L.load(av, kidx), v), av, kidx)


def _fill(cx, buf, value):
    L, t = cx.L, buf.type.element
    elementwise_nest(cx, buf.type.shape, [], [buf],
                     lambda v: [L.c(float(value) if is_float(t) else int(value), t)])


def reduce_lowering(cx, op, kind, axes, keepdims, p=None):
    x, r = op.operands[0], op.results[0]
    L = cx.L
    shape = x.type.shape
    rank = len(shape)
    axes = sorted({a % rank for a in axes}) if rank else []
    el = r.type.element
    t = f32 if is_float(el) and el.name in LOW_FLOATS else el
    out = cx.out(r)
    kept_shape = [n for d, n in enumerate(shape) if d not in axes]
    acc = out if t == el else L.alloc(kept_shape or [1], t)
    acc = L.view(acc, kept_shape)
    xbuf = cx.buf(x)
    extra = None
    if kind == "logsumexp":
        extra = L.alloc(kept_shape, t)
        _fill(cx, extra, _extreme(t, "lowest"))
        reduce_nest(cx, xbuf, shape, axes, extra, "max", t)
    init = _INIT[kind]
    _fill(cx, acc, _extreme(t, init) if isinstance(init, str) else init)
    reduce_nest(cx, xbuf, shape, axes, acc, kind, t, extra, p)
    count = int(np.prod([shape[a] for a in axes])) if axes else 1

    def fin(v):
        a = v[0]
        if kind == "mean":
            a = L.op("arith.divf", [a, L.c(float(count), t)], t) if is_float(t) else \
                L.op("arith.divsi", [a, L.c(count, t)], t)
        elif kind == "l2":
            a = L.op("math.sqrt", [a], t) if is_float(t) else a
        elif kind == "logsum":
            a = L.op("math.log", [a], t)
        elif kind == "logsumexp":
            a = L.op("arith.addf", [L.op("math.log", [a], t), v[1]], t)
        elif kind == "lp":
            a = L.op("arith.powf", [a, L.c(1.0 / p, t)], t)
        return [a if t == el else L.op("arith.truncf", [a], el)]
    if kind in ("mean", "l2", "logsum", "logsumexp", "lp") or t != el:
        if kind == "l2" and not is_float(t):
            cx.fail(op, "integer ReduceL2 has no host lowering")
        ov = L.view(out, kept_shape)
        elementwise_nest(cx, kept_shape, [acc] + ([extra] if extra is not None else []), [ov], fin)
    if extra is not None:
        L.op("loop.dealloc", [extra])
    if t != el:
        L.op("loop.dealloc", [acc])


_KINDS = {"ReduceSum": "sum", "ReduceMean": "mean", "ReduceMax": "max", "ReduceMin": "min",
          "ReduceProd": "prod", "ReduceL1": "l1", "ReduceL2": "l2", "ReduceLogSum": "logsum",
          "ReduceLogSumExp": "logsumexp", "ReduceSumSquare": "sumsquare"}


@lowering(*_KINDS)
def lower_reduce(cx, op):
    from ..common import int_list
    kind = _KINDS[op.name.split(".")[1]]
    x = op.operands[0]
    since = 13 if kind == "sum" else 18
    if cx.opset() >= since:
        axes = int_list(cx, op, 1)
    else:
        axes = cx.attr(op, "axes")
    if not axes:
        if cx.attr(op, "noop_with_empty_axes"):
            from .elementwise import elementwise_nest as nest
            r = op.results[0]
            nest(cx, r.type.shape, [cx.buf(x)], [cx.out(r)], lambda v: [v[0]])
            return
        axes = list(range(x.type.rank))
    reduce_lowering(cx, op, kind, axes, cx.attr(op, "keepdims"))


@lowering("ArgMax", "ArgMin")
def lower_arg(cx, op):
    x, r = op.operands[0], op.results[0]
    L = cx.L
    shape = x.type.shape
    axis = cx.attr(op, "axis") % len(shape)
    O = int(np.prod(shape[:axis]))
    A = shape[axis]
    Inner = int(np.prod(shape[axis + 1:]))
    t = x.type.element
    xv = L.view(cx.buf(x), (O, A, Inner))
    out = L.view(cx.out(r), (O, Inner))
    best = L.alloc((O, Inner), t)
    last = cx.attr(op, "select_last_index")
    mx = op.name == "onnx.ArgMax"
    if is_float(t):
        pred = ("oge" if last else "ogt") if mx else ("ole" if last else "olt")
        cmp = "arith.cmpf"
    else:
        s = "u" if is_unsigned(t) else "s"
        pred = s + (("ge" if last else "gt") if mx else ("le" if last else "lt"))
        cmp = "arith.cmpi"
    with L.loop(0, O, parallel=True) as o:
        with L.loop(0, Inner, vectorize=True) as i:
            L.store(L.load(xv, [o, 0, i]), best, [o, i])
            L.store(L.c(0, i64), out, [o, i])
        with L.loop(1, A) as a:
            ai = L.op("arith.index_cast", [a], i64)
            with L.loop(0, Inner, vectorize=True) as i:
                v, b = L.load(xv, [o, a, i]), L.load(best, [o, i])
                better = L.op(cmp, [v, b], i1, predicate=pred)
                L.store(L.op("arith.select", [better, v, b], t), best, [o, i])
                L.store(L.op("arith.select", [better, ai, L.load(out, [o, i])], i64), out, [o, i])
    L.op("loop.dealloc", [best])

