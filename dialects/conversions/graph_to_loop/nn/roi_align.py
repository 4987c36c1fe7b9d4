"""RoiAlign (opset 10/16/22), as onnx.reference (which follows
onnxruntime's kernel): per ROI, a grid of sampling points per output bin
(sampling_ratio, or ceil(roi size / output size) decided at run time from
the ROI's values), each bilinearly interpolated from X; a bin is the mean
(mode avg) or the max (mode max, of the four weighted taps) of its points.
Coordinates, weights and sums are in f64, as the reference's Python floats."""
from __future__ import annotations

from ....ir.types import INDEX, f64, i1, i64
from ..cast import emit_cast
from ..registry import lowering


@lowering("RoiAlign")
def lower_roi_align(cx, op):
    L = cx.L
    x, rois, bidx = op.operands[:3]
    r = op.results[0]
    if x.type.rank != 4 or rois.type.rank != 2 or rois.type.shape[1] != 4 or bidx.type.rank != 1:
        cx.fail(op, f"RoiAlign needs X (N, C, H, W), rois (R, 4) and batch_indices (R), got {x.type.shape}, "
                    f"{rois.type.shape}, {bidx.type.shape}")
    N, C, H, W = x.type.shape
    R = rois.type.shape[0]
    PH, PW = r.type.shape[2], r.type.shape[3]
    mode = (cx.attr(op, "mode") or "avg").lower()
    if mode not in ("avg", "max"):
        cx.fail(op, f"RoiAlign mode '{mode}' is not avg or max")
    ctm = op.get_attr("coordinate_transformation_mode", None)
    if ctm is None:  # before opset 16 the behaviour was output_half_pixel
        ctm = "output_half_pixel" if cx.opset() < 16 else (cx.attr(op, "coordinate_transformation_mode")
                                                            or "half_pixel")
    if ctm not in ("half_pixel", "output_half_pixel"):
        cx.fail(op, f"RoiAlign coordinate_transformation_mode '{ctm}' is not half_pixel or output_half_pixel")
    half = ctm == "half_pixel"
    sr = int(cx.attr(op, "sampling_ratio") or 0)
    scale = cx.attr(op, "spatial_scale")
    scale = 1.0 if scale is None else float(scale)
    xb, rb, bb, ob = cx.buf(x), cx.buf(rois), cx.buf(bidx), cx.out(r)
    F = lambda v: L.c(float(v), f64)  # noqa: E731

    def f(name, *a):
        return L.op("arith." + name, list(a), f64)

    def lt(a, b):
        return L.op("arith.cmpf", [a, b], i1, predicate="olt")

    def sel(c, a, b, t=f64):
        return L.op("arith.select", [c, a, b], t)

    def to_index(v):
        return L.op("arith.index_cast", [L.op("arith.fptosi", [v], i64)], INDEX)

    def to_f(i):
        return L.op("arith.sitofp", [L.op("arith.index_cast", [i], i64)], f64)

    acc = L.alloc((1,), f64)
    with L.loop(0, R) as n:
        b = L.cast_index(L.load(bb, [n]), bidx.type.element)
        c4 = [f(("subf"), f("mulf", emit_cast(L, L.load(rb, [n, k]), rois.type.element, f64), F(scale)),
                F(0.5 if half else 0.0)) for k in range(4)]
        sw, sh, ew, eh = c4
        rw, rh = f("subf", ew, sw), f("subf", eh, sh)
        if not half:  # malformed ROIs are forced to 1x1
            rw, rh = f("maximumf", rw, F(1)), f("maximumf", rh, F(1))
        bh, bw = f("divf", rh, F(PH)), f("divf", rw, F(PW))
        if sr > 0:
            gh = gw = sr
            ghf = gwf = F(sr)
            count = F(sr * sr)
        else:
            gh, gw = to_index(L.op("math.ceil", [bh], f64)), to_index(L.op("math.ceil", [bw], f64))
            ghf, gwf = to_f(gh), to_f(gw)
            count = f("maximumf", f("mulf", ghf, gwf), F(1))
        with L.loops((C, PH, PW), vectorize_inner=False) as (c, ph, pw):
            L.store(F(0), acc, [0])
            with L.loop(0, gh) as iy:
                yy = f("addf", f("addf", sh, f("mulf", to_f(ph), bh)),
                       f("divf", f("mulf", f("addf", to_f(iy), F(0.5)), bh), ghf))
                with L.loop(0, gw) as ix:
                    xx = f("addf", f("addf", sw, f("mulf", to_f(pw), bw)),
                           f("divf", f("mulf", f("addf", to_f(ix), F(0.5)), bw), gwf))
                    out = L.op("arith.ori", [L.op("arith.ori", [lt(yy, F(-1)), lt(F(H), yy)], i1),
                                             L.op("arith.ori", [lt(xx, F(-1)), lt(F(W), xx)], i1)], i1)
                    taps = []
                    for v, D in ((yy, H), (xx, W)):
                        v = f("maximumf", v, F(0))
                        lo = to_index(v)
                        edge = L.op("arith.cmpi", [lo, L.c(D - 1)], i1, predicate="sge")
                        lo = L.op("arith.select", [edge, L.c(D - 1), lo], INDEX)
                        hi = L.op("arith.select", [edge, L.c(D - 1), L.op("arith.addi", [lo, L.c(1)], INDEX)], INDEX)
                        v = sel(edge, to_f(lo), v)
                        lw = sel(out, F(0), f("subf", v, to_f(lo)))
                        hw = sel(out, F(0), f("subf", F(1), f("subf", v, to_f(lo))))
                        taps.append(((lo, hw), (hi, lw)))
                    terms = []
                    for (yi, wy) in taps[0]:
                        for (xi, wx) in taps[1]:
                            v = emit_cast(L, L.load(xb, [b, c, yi, xi]), x.type.element, f64)
                            terms.append(f("mulf", f("mulf", wy, wx), v))
                    prev = L.load(acc, [0])
                    if mode == "avg":
                        s = terms[0]
                        for t in terms[1:]:
                            s = f("addf", s, t)
                        L.store(f("addf", prev, s), acc, [0])
                    else:  # Python's max: the later value only when strictly greater
                        m = terms[0]
                        for t in terms[1:]:
                            m = sel(lt(m, t), t, m)
                        first = L.op("arith.andi", [L.op("arith.cmpi", [iy, L.c(0)], i1, predicate="eq"),
                                                    L.op("arith.cmpi", [ix, L.c(0)], i1, predicate="eq")], i1)
                        L.store(sel(first, m, sel(lt(prev, m), m, prev)), acc, [0])
            v = L.load(acc, [0])
            if mode == "avg":
                v = f("divf", v, count)
            L.store(emit_cast(L, v, f64, r.type.element), ob, [n, c, ph, pw])
    L.op("loop.dealloc", [acc])
