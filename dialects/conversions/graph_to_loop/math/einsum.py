"""Einsum (any equation: repeated letters, `...` with broadcasting, implicit
output) as one nest over every letter, output letters outermost:
out[o] += prod(inputs[...]), accumulated in f32 for f16/bf16; and Hardmax."""
from __future__ import annotations

import string
from contextlib import ExitStack

import numpy as np

from ....ir.types import f32, i1, i64
from ..common import LOW_FLOATS, is_float
from ..cast import emit_cast
from ..registry import lowering


def parse_einsum(eq, shapes):
    """-> (input letter lists, output letter list, {letter: size}); `...`
    becomes fresh upper-case letters (right-aligned across inputs)."""
    eq = eq.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(shapes):
        raise ValueError(f"equation has {len(terms)} operands, the node {len(shapes)}")
    ell_rank = 0
    for t, s in zip(terms, shapes):
        if "..." in t:
            ell_rank = max(ell_rank, len(s) - (len(t) - 3))
    ell = list(string.ascii_uppercase[:ell_rank])
    ins, sizes = [], {}
    for t, s in zip(terms, shapes):
        if "..." in t:
            a, _, b = t.partition("...")
            n = len(s) - len(a) - len(b)
            letters = list(a) + ell[ell_rank - n:] + list(b)
        else:
            letters = list(t)
        if len(letters) != len(s):
            raise ValueError(f"term '{t}' does not match an operand of rank {len(s)}")
        for c, d in zip(letters, s):
            if c in sizes and sizes[c] != d and d != 1 and sizes[c] != 1:
                raise ValueError(f"letter '{c}' has sizes {sizes[c]} and {d}")
            sizes[c] = d if sizes.get(c, 1) == 1 else sizes[c]
        ins.append(letters)
    if arrow:
        if "..." in rhs:
            a, _, b = rhs.partition("...")
            out = list(a) + ell + list(b)
        else:
            out = list(rhs)
    else:
        flat = [c for t in ins for c in t if c not in ell]
        out = ell + sorted(c for c in set(flat) if flat.count(c) == 1)
    return ins, out, sizes


@lowering("Einsum")
def lower_einsum(cx, op):
    L = cx.L
    r = op.results[0]
    try:
        ins, out, sizes = parse_einsum(cx.attr(op, "equation"), [v.type.shape for v in op.operands])
    except ValueError as e:
        cx.fail(op, f"Einsum: {e}")
    el = r.type.element
    ct = f32 if is_float(el) and el.name in LOW_FLOATS else el
    red = [c for c in sizes if c not in out]
    bufs = [cx.buf(v) for v in op.operands]
    ob = cx.out(r)
    acc = ob if ct == el else L.alloc(r.type.shape, ct)
    zero = L.c(0.0 if is_float(ct) else 0, ct)
    with L.loops([sizes[c] for c in out]) as ovs:
        L.store(zero, acc, ovs)
    with ExitStack() as st:
        env = {}
        for k, c in enumerate(out):
            env[c] = st.enter_context(L.loop(0, sizes[c], parallel=k == 0))
        for c in red:
            env[c] = st.enter_context(L.loop(0, sizes[c]))
        prod = None
        for b, letters, v in zip(bufs, ins, op.operands):
            idx = [0 if d == 1 and sizes[c] != 1 else env[c] for c, d in zip(letters, v.type.shape)]
            x = emit_cast(L, L.load(b, idx), v.type.element, ct)
            prod = x if prod is None else L.op("arith.mulf" if is_float(ct) else "arith.muli", [prod, x], ct)
        oidx = [env[c] for c in out]
        L.store(L.op("arith.addf" if is_float(ct) else "arith.addi", [L.load(acc, oidx), prod], ct), acc, oidx)
    if acc is not ob:
        with L.loops(r.type.shape) as ivs:
            L.store(emit_cast(L, L.load(acc, ivs), ct, el), ob, ivs)
        L.op("loop.dealloc", [acc])


@lowering("Hardmax")
def lower_hardmax(cx, op):
    x, r = op.operands[0], op.results[0]
    L = cx.L
    shape = x.type.shape
    rank = len(shape)
    axis = cx.attr(op, "axis")
    axis = (-1 if axis is None else axis) % rank
    if cx.opset() < 13:
        O, A, I = int(np.prod(shape[:axis])), int(np.prod(shape[axis:])), 1
    else:
        O, A, I = int(np.prod(shape[:axis])), shape[axis], int(np.prod(shape[axis + 1:]))
    t = x.type.element
    xv, yv = L.view(cx.buf(x), (O, A, I)), L.view(cx.out(r), (O, A, I))
    one, zero = L.c(1.0 if is_float(t) else 1, t), L.c(0.0 if is_float(t) else 0, t)
    with L.loop(0, O, parallel=True) as o:
        with L.loop(0, I) as i:
            best = L.alloc((1,), t)
            arg = L.alloc((1,), i64)
            L.store(L.load(xv, [o, 0, i]), best, [0])
            L.store(L.c(0, i64), arg, [0])
            with L.loop(1, A) as a:
                v = L.load(xv, [o, a, i])
                pred = "ogt" if is_float(t) else "sgt"
                gt = L.op("arith.cmpf" if is_float(t) else "arith.cmpi", [v, L.load(best, [0])], i1, predicate=pred)
                L.store(L.op("arith.select", [gt, v, L.load(best, [0])], t), best, [0])
                ai = L.op("arith.index_cast", [a], i64)
                L.store(L.op("arith.select", [gt, ai, L.load(arg, [0])], i64), arg, [0])
            k = L.op("arith.index_cast", [L.load(arg, [0])], _index())
            with L.loop(0, A) as a:
                hit = L.op("arith.cmpi", [a, k], i1, predicate="eq")
                L.store(L.op("arith.select", [hit, one, zero], t), yv, [o, a, i])
            L.op("loop.dealloc", [best])
            L.op("loop.dealloc", [arg])


def _index():
    from ....ir.types import INDEX
    return INDEX
