"""GridSample (opset 16/20/22: any number of spatial dims; nearest, linear,
cubic; zeros, border, reflection padding; align_corners), as
onnx.reference: grid coords (last axis, reversed) denormalized in f32,
out-of-range coords clamped or reflected, then a tensor product of per-dim
taps (1, 2 or 4) whose out-of-range pixels are 0, clamped or reflected."""
from __future__ import annotations

import itertools

from ....ir.types import INDEX, f32, f64, i1, i64
from ..cast import emit_cast
from ..registry import lowering


@lowering("GridSample")
def lower_gridsample(cx, op):
    L = cx.L
    x, grid = op.operands[:2]
    r = op.results[0]
    xs, gs = x.type.shape, grid.type.shape
    N, C, dims = xs[0], xs[1], list(xs[2:])
    nd = len(dims)
    if gs[-1] != nd:
        cx.fail(op, f"GridSample grid's last dim {gs[-1]} != {nd} spatial dims")
    mode = cx.attr(op, "mode") or "linear"
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(mode, mode)
    pad = cx.attr(op, "padding_mode") or "zeros"
    if mode not in ("nearest", "linear", "cubic") or pad not in ("zeros", "border", "reflection"):
        cx.fail(op, f"GridSample mode '{mode}' / padding_mode '{pad}' is not supported")
    ac = bool(cx.attr(op, "align_corners"))
    T = x.type.element
    ct = f64 if T.name == "f64" else f32
    xb, gb, ob = cx.buf(x), cx.buf(grid), cx.out(r)
    F = lambda v: L.c(float(v), f32)  # noqa: E731

    def fop(name, *a):
        return L.op("arith." + name, list(a), f32)

    def cmp(a, b, p):
        return L.op("arith.cmpf", [a, b], i1, predicate=p)

    def sel(c, a, b, t=f32):
        return L.op("arith.select", [c, a, b], t)

    def bounds(d):
        return (0.0, d - 1.0) if ac else (-0.5, d - 0.5)

    def reflect(v, lo, hi):
        rng = hi - lo
        if rng <= 0:
            return F(lo)
        below = fop("subf", F(lo), v)
        above = fop("subf", v, F(hi))

        def fold(dx):
            n = L.op("math.trunc", [fop("divf", dx, F(rng))], f32)
            rem = fop("subf", dx, fop("mulf", n, F(rng)))
            half = fop("mulf", n, F(0.5))
            even = cmp(L.op("math.floor", [half], f32), half, "oeq")
            return rem, even
        rb, eb = fold(below)
        ra, ea = fold(above)
        lo_v = sel(eb, fop("addf", F(lo), rb), fop("subf", F(hi), rb))
        hi_v = sel(ea, fop("subf", F(hi), ra), fop("addf", F(lo), ra))
        return sel(cmp(v, F(lo), "olt"), lo_v, sel(cmp(v, F(hi), "ogt"), hi_v, v))

    def to_idx(v):
        return L.op("arith.index_cast", [L.op("arith.fptosi", [v], i64)], INDEX)

    def pixel_index(fi, d):
        """(index, valid) for float integer-valued index fi along a dim of size d."""
        lo, hi = bounds(d)
        if pad == "border":
            fi = fop("minimumf", fop("maximumf", fi, F(0)), F(d - 1))
        elif pad == "reflection":
            fi = reflect(fi, lo, hi)
        i = to_idx(fi)
        valid = None
        if pad == "zeros":
            valid = L.op("arith.andi", [L.op("arith.cmpi", [i, L.c(0)], i1, predicate="sge"),
                                        L.op("arith.cmpi", [i, L.c(d)], i1, predicate="slt")], i1)
        return L.minmax_idx("min", L.minmax_idx("max", i, 0), d - 1), valid

    def cubic(t):
        a = -0.75
        t = L.op("math.absf", [t], f32)
        t1, o1, o2 = fop("addf", t, F(1)), fop("subf", F(1), t), fop("subf", F(2), t)
        c0 = fop("subf", fop("mulf", fop("addf", fop("mulf", fop("subf", fop("mulf", F(a), t1), F(5 * a)), t1),
                                         F(8 * a)), t1), F(4 * a))
        c1 = fop("addf", fop("mulf", fop("mulf", fop("subf", fop("mulf", F(a + 2), t), F(a + 3)), t), t), F(1))
        c2 = fop("addf", fop("mulf", fop("mulf", fop("subf", fop("mulf", F(a + 2), o1), F(a + 3)), o1), o1), F(1))
        c3 = fop("subf", fop("mulf", fop("addf", fop("mulf", fop("subf", fop("mulf", F(a), o2), F(5 * a)), o2),
                                         F(8 * a)), o2), F(4 * a))
        return [c0, c1, c2, c3]

    zero = L.c(0.0, ct)
    with L.loops([N] + list(gs[1:-1]), vectorize_inner=False) as ivs:
        n, o = ivs[0], ivs[1:]
        taps = []  # per spatial dim: [(index, valid, weight)]
        for i, d in enumerate(dims):
            g = emit_cast(L, L.load(gb, [n] + list(o) + [nd - 1 - i]), grid.type.element, f32)
            if ac:
                v = fop("mulf", fop("divf", fop("addf", g, F(1)), F(2)), F(d - 1))
            else:
                v = fop("divf", fop("subf", fop("mulf", fop("addf", g, F(1)), F(d)), F(1)), F(2))
            if mode == "nearest":
                v = L.op("math.roundeven", [v], f32)
            lo, hi = bounds(d)
            if pad == "border":
                out_rng = L.op("arith.ori", [cmp(v, F(lo), "olt"), cmp(v, F(hi), "ogt")], i1)
                v = sel(out_rng, fop("minimumf", fop("maximumf", v, F(0)), F(d - 1)), v)
            elif pad == "reflection":
                v = reflect(v, lo, hi)
            if mode == "nearest":
                idx, valid = pixel_index(L.op("math.trunc", [v], f32), d)
                taps.append([(idx, valid, None)])
                continue
            x0 = L.op("math.floor", [v], f32)
            t = fop("subf", v, x0)
            if mode == "linear":
                ws, offs = [fop("subf", F(1), t), t], [0, 1]
            else:
                ws, offs = cubic(t), [-1, 0, 1, 2]
            taps.append([pixel_index(fop("addf", x0, F(k)), d) + (w,) for k, w in zip(offs, ws)])
        with L.loop(0, C) as c:
            acc = None
            for combo in itertools.product(*taps):
                idx = [n, c] + [t[0] for t in combo]
                p = emit_cast(L, L.load(xb, idx), T, ct)
                valid = None
                for t in combo:
                    if t[1] is not None:
                        valid = t[1] if valid is None else L.op("arith.andi", [valid, t[1]], i1)
                if valid is not None:
                    p = L.op("arith.select", [valid, p, zero], ct)
                w = None
                for t in combo:
                    if t[2] is not None:
                        w = t[2] if w is None else fop("mulf", w, t[2])
                if w is not None:
                    p = L.op("arith.mulf", [p, emit_cast(L, w, f32, ct)], ct)
                acc = p if acc is None else L.op("arith.addf", [acc, p], ct)
            L.store(emit_cast(L, acc, ct, r.type.element), ob, [n, c] + list(o))
