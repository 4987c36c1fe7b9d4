"""DeformConv (opset 19/22), 2-D, as onnx.reference: each kernel tap of
each output position samples its input channel at the tap's position plus
a learned offset (offset input: per offset group, tap and output position,
(dy, dx)), bilinearly with zeros outside the image (GridSample linear,
align_corners), times the optional mask, times the weight; groups and
offset groups split the input channels; plus the optional bias. In f64."""
from __future__ import annotations

from ....ir.types import INDEX, NONE, f64, i1, i64
from ..cast import emit_cast
from ..registry import lowering


@lowering("DeformConv")
def lower_deform_conv(cx, op):
    L = cx.L
    ops = op.operands
    x, w, off = ops[:3]
    bias = ops[3] if len(ops) > 3 and ops[3].type is not NONE else None
    mask = ops[4] if len(ops) > 4 and ops[4].type is not NONE else None
    r = op.results[0]
    if x.type.rank != 4:
        cx.fail(op, f"DeformConv is lowered for 2-D images (X of rank 4), got X of shape {x.type.shape}")
    N, C, IH, IW = x.type.shape
    M, CG, KH, KW = w.type.shape
    OH, OW = r.type.shape[2:]
    G = int(cx.attr(op, "group") or 1)
    OG = int(cx.attr(op, "offset_group") or 1)
    if C != CG * G or M % G or C % OG:
        cx.fail(op, f"DeformConv channels do not fit: X has {C}, W {w.type.shape}, group {G}, offset_group {OG}")
    if off.type.shape != (N, OG * KH * KW * 2, OH, OW):
        cx.fail(op, f"DeformConv offset has shape {off.type.shape}, expected {(N, OG * KH * KW * 2, OH, OW)}")
    sh, sw = cx.attr(op, "strides") or (1, 1)
    dh, dw = cx.attr(op, "dilations") or (1, 1)
    pads = cx.attr(op, "pads") or (0, 0, 0, 0)
    MG, CPO = M // G, C // OG
    xb, wb, ob, rb = cx.buf(x), cx.buf(w), cx.buf(off), cx.out(r)
    bb = cx.buf(bias) if bias is not None else None
    mb = cx.buf(mask) if mask is not None else None
    F = lambda v: L.c(float(v), f64)  # noqa: E731

    def f(name, *a):
        return L.op("arith." + name, list(a), f64)

    def ld(buf, idx, v):
        return emit_cast(L, L.load(buf, idx), v.type.element, f64)

    def to_f(i):
        return L.op("arith.sitofp", [L.op("arith.index_cast", [i], i64)], f64)

    def taps(pos, size):
        """[(index, weight)] of the two linear taps at pos, weight 0 outside."""
        lo = L.op("math.floor", [pos], f64)
        t = f("subf", pos, lo)
        out = []
        for k, wt in ((0, f("subf", F(1), t)), (1, t)):
            fi = f("addf", lo, F(k))
            ok = L.op("arith.andi", [L.op("arith.cmpf", [fi, F(0)], i1, predicate="oge"),
                                     L.op("arith.cmpf", [fi, F(size - 1)], i1, predicate="ole")], i1)
            i = L.op("arith.index_cast", [L.op("arith.fptosi", [L.op("arith.select", [ok, fi, F(0)], f64)], i64)],
                     INDEX)
            out.append((i, L.op("arith.select", [ok, wt, F(0)], f64)))
        return out

    acc = L.alloc((1,), f64)
    with L.loops((N, M, OH, OW), vectorize_inner=False) as (n, m, i, j):
        L.store(ld(bb, [m], bias) if bb is not None else F(0), acc, [0])
        g = L.op("arith.divui", [m, L.c(MG)], INDEX)
        with L.loop(0, CG) as cg:
            c = L.add(L.mul(g, CG), cg)
            og = L.op("arith.divui", [c, L.c(CPO)], INDEX)
            for kh in range(KH):
                for kw in range(KW):
                    k = kh * KW + kw
                    base = L.mul(og, KH * KW)
                    ch = L.add(base, k)
                    dy = ld(ob, [n, L.add(L.mul(ch, 2), 0), i, j], off)
                    dx = ld(ob, [n, L.add(L.mul(ch, 2), 1), i, j], off)
                    y = f("addf", f("addf", F(kh * dh - pads[0]), f("mulf", to_f(i), F(sh))), dy)
                    xx = f("addf", f("addf", F(kw * dw - pads[1]), f("mulf", to_f(j), F(sw))), dx)
                    s = None
                    for yi, wy in taps(y, IH):
                        for xi, wx in taps(xx, IW):
                            t = f("mulf", f("mulf", wy, wx), ld(xb, [n, c, yi, xi], x))
                            s = t if s is None else f("addf", s, t)
                    s = f("mulf", s, ld(wb, [m, cg, kh, kw], w))
                    if mb is not None:
                        s = f("mulf", s, ld(mb, [n, ch, i, j], mask))
                    L.store(f("addf", L.load(acc, [0]), s), acc, [0])
        L.store(emit_cast(L, L.load(acc, [0]), f64, r.type.element), rb, [n, m, i, j])
    L.op("loop.dealloc", [acc])
