"""Resize (opset 10-19: nearest, linear, cubic; every coordinate
transformation (opset 11's tf_half_pixel_for_nn too), nearest_mode, exclude_outside, extrapolation_value,
cubic_coeff_a, antialias, axes, keep_aspect_ratio_policy; scales or sizes).

Scales, sizes and roi are constants here, so each resized axis's sampling
(source indices, weights, extrapolated positions) depends only on the output
index along it: it is worked out at compile time, in float64 the way
onnx.reference does, into small tables. Nearest then is one gather nest.
Linear and cubic run as onnx.reference does, one pass per resized axis
(separable), each pass a weighted sum of that axis's taps; intermediates
stay in the compute type (f64 for f64 and integers, else f32)."""
from __future__ import annotations

import math
from contextlib import ExitStack

import numpy as np

from ....ir.attributes import DenseElementsAttr
from ....ir.types import INDEX, NONE, IntegerType, MemRefType, TensorType, f32, f64, i1, i8, i64
from ..common import LOW_FLOATS, constant_table, is_float, is_unsigned
from ..cast import emit_cast
from ..registry import lowering

_MODES = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric",
          "tf_crop_and_resize", "tf_half_pixel_for_nn")
# Beyond this many taps per output position (antialiased strong downscaling)
# a pass loops over taps instead of unrolling them.
_UNROLL = 16


def _const_input(cx, op, i, what):
    if len(op.operands) <= i or op.operands[i].type is NONE:
        return None
    v = cx.const(op.operands[i])
    if v is None:
        cx.fail(op, f"Resize's {what} must be a constant for the host lowering")
    v = np.asarray(v).ravel()
    return v if v.size else None


def _plan(cx, op, shape, scales=None):
    """Per-axis (scale, out size) and per-axis roi as onnx.reference resolves them."""
    r = len(shape)
    if cx.opset() < 11:
        roi, sizes = None, None
        scales = _const_input(cx, op, 1, "scales") if scales is None else np.asarray(scales, np.float64)
        axes, policy = None, "stretch"
    else:
        roi = _const_input(cx, op, 1, "roi")
        scales = _const_input(cx, op, 2, "scales")
        sizes = _const_input(cx, op, 3, "sizes")
        axes = cx.attr(op, "axes") if cx.opset() >= 18 else None
        policy = (cx.attr(op, "keep_aspect_ratio_policy") or "stretch") if cx.opset() >= 18 else "stretch"
    if scales is None and sizes is None:
        cx.fail(op, "Resize needs scales or sizes")
    if axes is None:
        axes = list(range(r))
    else:
        axes = [a % r for a in axes]
        if len(set(axes)) != len(axes):
            cx.fail(op, f"Resize axes {axes} repeat an axis")
    n = len(axes)
    given = sizes if sizes is not None else scales
    if len(given) != n:
        cx.fail(op, f"Resize's {'sizes' if sizes is not None else 'scales'} has {len(given)} values for {n} axes")
    rois = [None] * r
    if roi is not None:
        if len(roi) != 2 * n:
            cx.fail(op, f"Resize's roi has {len(roi)} values, expected {2 * n}")
        for k, a in enumerate(axes):
            rois[a] = (roi[k], roi[n + k])
    if sizes is not None:
        out = list(shape)
        for k, a in enumerate(axes):
            out[a] = int(sizes[k])
        scale = [out[i] / shape[i] if shape[i] else 1.0 for i in range(r)]
        if policy != "stretch":
            if policy not in ("not_larger", "not_smaller"):
                cx.fail(op, f"Resize keep_aspect_ratio_policy '{policy}' is not supported")
            pick = min if policy == "not_larger" else max
            s = pick(scale[a] for a in axes)
            scale = [s if i in axes else 1.0 for i in range(r)]
            out = [int(s * shape[i] + 0.5) if i in axes else shape[i] for i in range(r)]
    else:
        scale = [1.0] * r
        for k, a in enumerate(axes):
            scale[a] = float(scales[k])
        if any(s <= 0 for s in scale):
            cx.fail(op, f"Resize scales {list(scales)} must be positive")
        out = [int(np.float64(s) * d) for s, d in zip(scale, shape)]
    return axes, scale, out, rois


def _source_coords(ctm, scale, w_in, w_out, roi):
    """Source coordinate of every output index (float64), and which are
    extrapolated (tf_crop_and_resize only)."""
    y = np.arange(w_out, dtype=np.float64)
    out_w = scale * w_in
    ext = None
    if ctm == "align_corners":
        x = np.zeros(w_out) if out_w == 1 else y * (w_in - 1) / (out_w - 1)
    elif ctm == "asymmetric":
        x = y / scale
    elif ctm == "tf_crop_and_resize":
        r0, r1 = roi if roi is not None else (np.float32(0), np.float32(1))
        x = np.full(w_out, (r1 - r0) * (w_in - 1) / 2, np.float64) if out_w == 1 else \
            y * (r1 - r0) * (w_in - 1) / (out_w - 1)
        x = x + r0 * (w_in - 1)
        ext = (x < 0) | (x > w_in - 1)
    elif ctm == "pytorch_half_pixel":
        x = np.full(w_out, -0.5) if out_w == 1 else (y + 0.5) / scale - 0.5
    elif ctm == "half_pixel":
        x = (y + 0.5) / scale - 0.5
    elif ctm == "tf_half_pixel_for_nn":  # opset 11 only
        x = (y + 0.5) / scale
    else:  # half_pixel_symmetric: the roi's center maps to the output's center
        offset = w_in / 2 * (1 - w_out / out_w)
        x = offset + (y + 0.5) / scale - 0.5
    return x, ext


def _cubic(t, a):
    return [((a * (t + 1) - 5 * a) * (t + 1) + 8 * a) * (t + 1) - 4 * a,
            ((a + 2) * t - (a + 3)) * t * t + 1,
            ((a + 2) * (1 - t) - (a + 3)) * (1 - t) * (1 - t) + 1,
            ((a * ((1 - t) + 1) - 5 * a) * ((1 - t) + 1) + 8 * a) * ((1 - t) + 1) - 4 * a]


def _antialias_linear(t, scale):
    s = min(scale, 1.0)
    start = int(np.floor(-1 / s) + 1)
    c = np.clip(1 - np.abs((np.arange(start, 2 - start) - t) * s), 0, 1)
    return c / c.sum()


def _antialias_cubic(t, scale, a):
    s = min(scale, 1.0)
    start = int(np.floor(-2 / s) + 1)
    x = np.abs(s * (np.arange(start, 2 - start) - t))
    c = np.where(x <= 1, (a + 2) * x ** 3 - (a + 3) * x ** 2 + 1,
                 np.where(x < 2, a * x ** 3 - 5 * a * x ** 2 + 8 * a * x - 4 * a, 0.0))
    return c / c.sum()


def _taps(x, w_in, mode, scale, nearest, a, antialias, exclude):
    """(indices [w_out, n] clamped into the input, weights [w_out, n]).

    The taps of x are the n input positions nearest to it, ties going to
    the lower one; a fractional position of exactly 0 counts as 1 (so the
    left neighbour is the reference pixel)."""
    w_out = len(x)
    fl = np.floor(x)
    ratio = np.where(x == fl, 1.0, x - fl)
    if mode == "nearest":
        up = {"round_prefer_floor": ratio > 0.5, "round_prefer_ceil": ratio >= 0.5,
              "floor": np.zeros(w_out, bool), "ceil": np.ones(w_out, bool)}[nearest]
        up = np.where(ratio == 1.0, True, up)
        coeffs = np.stack([~up, up], axis=1).astype(np.float64)
    elif mode == "linear":
        coeffs = np.stack([_antialias_linear(t, scale) if antialias else np.array([1 - t, t]) for t in ratio])
    else:
        coeffs = np.stack([_antialias_cubic(t, scale, a) if antialias else np.array(_cubic(t, a)) for t in ratio])
    coeffs = coeffs.reshape(w_out, -1)
    n = coeffs.shape[1]
    pad = (n + 1) // 2
    xp = x + pad
    p = np.floor(xp)
    frac = xp - p
    if n % 2 == 0:
        off = np.where(frac == 0, -(n // 2), -(n // 2) + 1)
    else:
        off = np.where(frac <= 0.5, -((n - 1) // 2), -((n - 1) // 2) + 1)
    idx = (p.astype(np.int64) + off)[:, None] + np.arange(n)[None, :] - pad
    if exclude:
        coeffs = np.where((idx < 0) | (idx >= w_in), 0.0, coeffs)
        s = coeffs.sum(axis=1, keepdims=True)
        coeffs = coeffs / np.where(s == 0, 1.0, s)
    return np.clip(idx, 0, w_in - 1), coeffs


def _simple_nearest(x, scale, w_in):
    """Resize-10's nearest (as onnxruntime): ceil when downsampling, else floor."""
    i = np.ceil(x) if scale < 1 else np.floor(x)
    return np.clip(i.astype(np.int64), 0, w_in - 1)


def _store_value(L, v, ct, el):
    """The compute-type result to the output type as onnx.reference's
    saturate_cast: integers round half to even and clamp; low floats clamp."""
    if is_float(el):
        if el.name in LOW_FLOATS and el != ct:
            m = 65504.0 if el.name == "f16" else 3.3895313892515355e38
            v = L.op("arith.minimumf", [L.op("arith.maximumf", [v, L.c(-m, ct)], ct), L.c(m, ct)], ct)
        return emit_cast(L, v, ct, el)
    lo, hi = (0, (1 << el.width) - 1) if is_unsigned(el) else (-(1 << (el.width - 1)), (1 << (el.width - 1)) - 1)
    hi = float(np.nextafter(np.float64(hi), 0)) if el.width == 64 else float(hi)
    v = L.op("math.roundeven", [v], ct)
    v = L.op("arith.minimumf", [L.op("arith.maximumf", [v, L.c(float(lo), ct)], ct), L.c(hi, ct)], ct)
    return L.op("arith.fptoui" if is_unsigned(el) else "arith.fptosi", [v], el)


def _scalar_of(el, value):
    """extrapolation_value in the element type, as saturate_cast makes it."""
    if str(el) == "i1":
        return bool(value)
    if is_float(el):
        return float(value)
    info = np.iinfo(np.dtype(f"{'u' if is_unsigned(el) else ''}int{el.width}"))
    return int(np.clip(np.round(value), info.min, info.max))


class _Nest:
    """Loops over `shape`, the first with more than one iteration parallel;
    `at(d)` hooks emit code right inside loop d (hoisted per-axis work)."""

    def __init__(self, L, shape, at=None, vectorize=False):
        self.L, self.shape, self.at, self.vec = L, shape, at or {}, vectorize

    def __enter__(self):
        L, self.st, ivs = self.L, ExitStack(), []
        par = next((d for d, s in enumerate(self.shape) if s > 1), -1)
        self.hooked = {}
        for d, size in enumerate(self.shape):
            ivs.append(self.st.enter_context(
                L.loop(0, size, parallel=d == par, vectorize=self.vec and d == len(self.shape) - 1)))
            if d in self.at:
                self.hooked[d] = self.at[d](ivs[d])
        return ivs

    def __exit__(self, *exc):
        return self.st.__exit__(*exc)


@lowering("Resize")
def lower_resize(cx, op, scales=None):
    """`scales`: given by Upsample-7's attribute instead of an operand."""
    L = cx.L
    x, r = op.operands[0], op.results[0]
    shape, el = list(x.type.shape), x.type.element
    rank = len(shape)
    old = cx.opset() < 11
    mode = cx.attr(op, "mode") or "nearest"
    ctm = "asymmetric" if old else (cx.attr(op, "coordinate_transformation_mode") or "half_pixel")
    nearest = None if old else (cx.attr(op, "nearest_mode") or "round_prefer_floor")
    a = -0.75 if old else cx.attr(op, "cubic_coeff_a")
    a = -0.75 if a is None else float(a)
    exclude = False if old else bool(cx.attr(op, "exclude_outside"))
    extrap = 0.0 if old else float(cx.attr(op, "extrapolation_value") or 0.0)
    antialias = cx.opset() >= 18 and bool(cx.attr(op, "antialias"))
    if mode not in ("nearest", "linear", "cubic"):
        cx.fail(op, f"Resize mode '{mode}' is not supported")
    if ctm not in _MODES:
        cx.fail(op, f"Resize coordinate_transformation_mode '{ctm}' is not supported")
    if nearest is not None and nearest not in ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil"):
        cx.fail(op, f"Resize nearest_mode '{nearest}' is not supported")
    if mode == "nearest" and antialias:
        cx.fail(op, "Resize antialias applies to linear and cubic modes only")
    plain_float = is_float(el) and el.name in ("f16", "bf16", "f32", "f64")
    integer = isinstance(el, IntegerType)
    if not (plain_float or integer) or (mode != "nearest" and str(el) == "i1"):
        cx.fail(op, f"Resize {mode} does not support element type {el}")
    axes, scale, out, rois = _plan(cx, op, shape, scales)
    if tuple(out) != tuple(r.type.shape):
        cx.fail(op, f"Resize output shape {out} disagrees with the inferred {list(r.type.shape)}")
    dst = cx.out(r)
    if 0 in out or 0 in shape:
        if 0 in shape and 0 not in out:
            cx.fail(op, "Resize of an empty tensor to a non-empty one")
        return
    # Axes left as they are: onnx.reference skips them, so do we.
    moved = []
    for d in axes:
        roi = rois[d] if ctm == "tf_crop_and_resize" else None
        if (math.isclose(scale[d], 1.0) and out[d] == shape[d]
                and (roi is None or (math.isclose(float(roi[0]), 0.0) and math.isclose(float(roi[1]), 1.0)))):
            continue
        moved.append(d)
    coords = {d: _source_coords(ctm, scale[d], shape[d], out[d],
                                rois[d] if ctm == "tf_crop_and_resize" else None) for d in moved}

    if mode == "nearest":
        tabs = {}
        for d in moved:
            xs, ext = coords[d]
            if old:
                idx = _simple_nearest(xs, scale[d], shape[d])
            else:
                i2, c2 = _taps(xs, shape[d], "nearest", scale[d], nearest, a, False, False)
                idx = np.where(c2[:, 1] > 0, i2[:, 1], i2[:, 0])
            tabs[d] = (constant_table(L, idx.astype(np.int64), i64),
                       constant_table(L, ext.astype(np.int8), i8) if ext is not None and ext.any() else None)
        src = cx.buf(x)
        fill = L.c(_scalar_of(el, extrap), el) if str(el) != "i1" else L.c(int(bool(extrap)), i1)

        def hook(d):
            def h(o):
                it, et = tabs[d]
                i = L.op("arith.index_cast", [L.load(it, [o])], INDEX)
                f = None if et is None else L.op("arith.cmpi", [L.load(et, [o]), L.c(0, i8)], i1, predicate="ne")
                return i, f
            return h
        nest = _Nest(L, out, {d: hook(d) for d in moved}, vectorize=rank - 1 not in moved)
        with nest as ivs:
            idx = [nest.hooked[d][0] if d in nest.hooked else iv for d, iv in enumerate(ivs)]
            v = L.load(src, idx)
            flag = None
            for d in moved:
                f = nest.hooked[d][1]
                if f is not None:
                    flag = f if flag is None else L.op("arith.ori", [flag, f], i1)
            if flag is not None:
                v = L.op("arith.select", [flag, fill, v], el)
            L.store(v, dst, ivs)
        return

    ct = f32 if is_float(el) and el.name in ("f16", "bf16", "f32") else f64
    cur, cur_shape, cur_el = cx.buf(x), list(shape), el
    if not moved:
        L.op("loop.copy", [cur, dst])
        return
    for j, d in enumerate(moved):
        xs, ext = coords[d]
        idx, w = _taps(xs, shape[d], mode, scale[d], nearest, a, antialias, exclude)
        if ext is not None and not ext.any():
            ext = None
        nshape = list(cur_shape)
        nshape[d] = out[d]
        last = j == len(moved) - 1
        nxt = dst if last else L.alloc(nshape, ct)
        _axis_pass(L, cur, cur_el, nxt, ct, d, nshape, idx, w, ext, extrap, r.type.element if last else ct)
        cur, cur_shape, cur_el = nxt, nshape, ct


def _axis_pass(L, src, src_el, dst, ct, d, shape, idx, w, ext, extrap, out_el):
    """dst[.., o, ..] = sum_k w[o, k] * src[.., idx[o, k], ..] along axis d
    (extrapolation_value where ext[o])."""
    n = idx.shape[1]
    it, wt = constant_table(L, idx.astype(np.int64), i64), constant_table(L, w, ct)
    et = None if ext is None else constant_table(L, ext.astype(np.int8), i8)
    rank = len(shape)

    def taps(o):
        flag = None if et is None else L.op("arith.cmpi", [L.load(et, [o]), L.c(0, i8)], i1, predicate="ne")
        if n > _UNROLL:
            return None, flag
        return [(L.op("arith.index_cast", [L.load(it, [o, L.c(k)])], INDEX), L.load(wt, [o, L.c(k)]))
                for k in range(n)], flag

    def finish(acc, flag, ivs):
        if flag is not None:
            acc = L.op("arith.select", [flag, L.c(float(extrap), ct), acc], ct)
        L.store(_store_value(L, acc, ct, out_el) if out_el != ct else acc, dst, ivs)

    def term(i, wk, ivs):
        v = emit_cast(L, L.load(src, ivs[:d] + [i] + ivs[d + 1:]), src_el, ct)
        return L.op("arith.mulf", [wk, v], ct)

    nest = _Nest(L, shape, {d: taps}, vectorize=d != rank - 1)
    with nest as ivs:
        ts, flag = nest.hooked[d]
        if ts is not None:
            acc = None
            for i, wk in ts:
                t = term(i, wk, ivs)
                acc = t if acc is None else L.op("arith.addf", [acc, t], ct)
            finish(acc, flag, ivs)
            return
        # Many taps: accumulate in a one-element scratch, looping over them.
        s = L.alloc((1,), ct)
        L.store(L.c(0.0, ct), s, [L.c(0)])
        with L.loop(0, n) as k:
            i = L.op("arith.index_cast", [L.load(it, [ivs[d], k])], INDEX)
            L.store(L.op("arith.addf", [L.load(s, [L.c(0)]), term(i, L.load(wt, [ivs[d], k]), ivs)], ct),
                    s, [L.c(0)])
        finish(L.load(s, [L.c(0)]), flag, ivs)
