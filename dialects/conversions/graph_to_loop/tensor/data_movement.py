"""Data movement: constants, views (Reshape & co. cost nothing), Transpose,
Concat, Slice, Split, Gather(Elements), Tile, Pad, Shape/Size, fills and
index-generated tensors. Loops run over the destination so the innermost
loop writes contiguously."""
from __future__ import annotations

import numpy as np

from ....ir.attributes import DenseElementsAttr, DenseResourceAttr, elements_value
from ....ir.types import INDEX, NONE, TensorType, from_numpy_dtype, i1
from ..common import data_index, fill, int_list, is_float
from ..registry import lowering


def constant_value(cx, v):
    op = getattr(v, "op", None)
    if op is None or op.name != "onnx.Constant":
        return None
    a = op.attributes.get("value")
    if a is not None:
        return elements_value(a)
    for name, dt in (("value_float", np.float32), ("value_floats", np.float32), ("value_int", np.int64),
                     ("value_ints", np.int64)):
        if name in op.attributes:
            return np.array(op.get_attr(name), dtype=dt)
    return None


def _global(cx, arr, t):
    arr = np.asarray(arr).reshape(t.shape)
    return cx.L.at_top("loop.global", _mem(t), value=DenseElementsAttr(arr, TensorType(t.shape, t.element)))


def _mem(t):
    from ....ir.types import MemRefType
    return MemRefType(t.shape, t.element)


@lowering("Constant")
def lower_constant(cx, op):
    r = op.results[0]
    a = op.attributes.get("value")
    if not (isinstance(a, (DenseElementsAttr, DenseResourceAttr)) and a.type.shape == r.type.shape):
        v = constant_value(cx, r)
        if v is None:
            cx.fail(op, "onnx.Constant without a dense value")
        a = DenseElementsAttr(np.asarray(v).reshape(r.type.shape), TensorType(r.type.shape, r.type.element))
    # Made on first use, at the function's top: constants only read as
    # attributes (Reshape's shape...) never become buffers.
    cx.alias(r, lambda: cx.L.at_top("loop.global", _mem(r.type), value=a))


@lowering("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity")
def lower_view(cx, op):
    r, x = op.results[0], op.operands[0]
    if x.type.has_static_shape and r.type.has_static_shape and \
            int(np.prod(x.type.shape)) != int(np.prod(r.type.shape)):
        # onnx's Reshape inference takes a constant shape as it is: 12
        # elements "reshaped" to [5, 5] would read past the buffer. At run-time
        # specialization this is an input the model cannot take.
        from ....transforms.shape_inference import ShapeMismatch
        raise ShapeMismatch(op, f"{int(np.prod(x.type.shape))} elements cannot be viewed as "
                                f"{list(r.type.shape)} ({int(np.prod(r.type.shape))} elements)")
    cx.alias(r, cx.L.view(cx.buf(op.operands[0]), r.type.shape))


def copy_nest(cx, shape, dst, dst_idx, src, src_idx):
    """for every index i of shape: dst[dst_idx(i)] = src[src_idx(i)]."""
    L = cx.L
    with L.loops(shape) as ivs:
        L.store(L.load(src, src_idx(ivs)), dst, dst_idx(ivs))


@lowering("Transpose")
def lower_transpose(cx, op):
    x, r = op.operands[0], op.results[0]
    rank = x.type.rank
    perm = cx.attr(op, "perm") or list(reversed(range(rank)))

    def src(ivs):
        idx = [None] * rank
        for k, p in enumerate(perm):
            idx[p] = ivs[k]
        return idx
    copy_nest(cx, r.type.shape, cx.out(r), lambda ivs: ivs, cx.buf(x), src)


@lowering("Concat")
def lower_concat(cx, op):
    r = op.results[0]
    rank = r.type.rank
    axis = cx.attr(op, "axis") % rank
    dst, off = cx.out(r), 0
    for v in op.operands:
        n = v.type.shape[axis]
        if n:
            copy_nest(cx, v.type.shape, dst,
                      lambda ivs, o=off: [cx.L.add(i, o) if d == axis else i for d, i in enumerate(ivs)],
                      cx.buf(v), lambda ivs: ivs)
        off += n


def _slice_params(cx, op):
    shape = op.operands[0].type.shape
    rank = len(shape)
    if cx.opset() < 10:
        starts, ends, axes, steps = cx.attr(op, "starts"), cx.attr(op, "ends"), cx.attr(op, "axes"), None
    else:
        starts, ends, axes, steps = int_list(cx, op, 1), int_list(cx, op, 2), int_list(cx, op, 3), int_list(cx, op, 4)
    axes = list(range(len(starts))) if axes is None else [a % rank for a in axes]
    steps = [1] * len(starts) if steps is None else steps
    begin, step = [0] * rank, [1] * rank
    for a, s, st in zip(axes, starts, steps):
        dim = shape[a]
        s = s + dim if s < 0 else s
        s = min(max(s, 0), dim) if st > 0 else min(max(s, 0), dim - 1)
        begin[a], step[a] = s, st
    return begin, step


@lowering("Slice")
def lower_slice(cx, op):
    r = op.results[0]
    begin, step = _slice_params(cx, op)
    copy_nest(cx, r.type.shape, cx.out(r), lambda ivs: ivs, cx.buf(op.operands[0]),
              lambda ivs: [cx.L.add(cx.L.mul(i, s), b) for i, s, b in zip(ivs, step, begin)])


@lowering("Split")
def lower_split(cx, op):
    x = op.operands[0]
    rank = x.type.rank
    axis = cx.attr(op, "axis") % rank
    off = 0
    for r in op.results:
        if r.type is NONE:
            continue
        copy_nest(cx, r.type.shape, cx.out(r), lambda ivs: ivs, cx.buf(x),
                  lambda ivs, o=off: [cx.L.add(i, o) if d == axis else i for d, i in enumerate(ivs)])
        off += r.type.shape[axis]


@lowering("Gather")
def lower_gather(cx, op):
    data, ind = op.operands
    r = op.results[0]
    rank = data.type.rank
    axis = cx.attr(op, "axis") % rank
    L, dst, src, ib = cx.L, cx.out(r), cx.buf(data), cx.buf(ind)
    q = ind.type.rank
    outer = r.type.shape[:axis + q]
    inner = r.type.shape[axis + q:]
    with L.loops(outer, vectorize_inner=not inner) as ovs:
        k = data_index(L, L.load(ib, ovs[axis:]), ind.type.element, data.type.shape[axis])
        with L.loops(inner, parallel_outer=not outer) as ivs:
            L.store(L.load(src, ovs[:axis] + [k] + ivs), dst, ovs + ivs)


@lowering("GatherElements")
def lower_gather_elements(cx, op):
    data, ind = op.operands
    r = op.results[0]
    axis = cx.attr(op, "axis") % data.type.rank
    L, dst, src, ib = cx.L, cx.out(r), cx.buf(data), cx.buf(ind)
    with L.loops(r.type.shape) as ivs:
        k = data_index(L, L.load(ib, ivs), ind.type.element, data.type.shape[axis])
        L.store(L.load(src, [k if d == axis else i for d, i in enumerate(ivs)]), dst, ivs)


@lowering("Tile")
def lower_tile(cx, op):
    x, r = op.operands[0], op.results[0]
    L = cx.L

    def src(ivs):
        return [i if n == o else L.op("arith.remui", [i, L.c(n)], INDEX)
                for i, n, o in zip(ivs, x.type.shape, r.type.shape)]
    copy_nest(cx, r.type.shape, cx.out(r), lambda ivs: ivs, cx.buf(x), src)


@lowering("Pad")
def lower_pad(cx, op):
    x, r = op.operands[0], op.results[0]
    L, shape, rank = cx.L, x.type.shape, x.type.rank
    mode = cx.attr(op, "mode")
    el = x.type.element
    if cx.opset() < 11:
        pads, cval = cx.attr(op, "pads"), cx.attr(op, "value") or 0.0
        cval = L.c(float(cval) if is_float(el) else int(cval), el)
        axes = list(range(rank))
    else:
        pads = int_list(cx, op, 1)
        cval = None
        if len(op.operands) > 2 and op.operands[2].type is not NONE:
            cb = cx.buf(op.operands[2])
            cval = L.load(cb, [0] * cb.type.rank)
        if cval is None:
            cval = L.c(0.0 if is_float(el) else 0, el)
        axes = int_list(cx, op, 3)
        axes = list(range(rank)) if axes is None else [a % rank for a in axes]
    n = len(axes)
    before = {a: pads[k] for k, a in enumerate(axes)}
    src, dst = cx.buf(x), cx.out(r)
    with L.loops(r.type.shape) as ivs:
        idx, valid = [], None
        for d, i in enumerate(ivs):
            pb, dim = before.get(d, 0), shape[d]
            if pb == 0 and r.type.shape[d] == dim:
                idx.append(i)
                continue
            s = L.op("arith.subi", [i, L.c(pb)], INDEX) if pb > 0 else L.add(i, -pb)
            lo = L.op("arith.cmpi", [s, L.c(0)], i1, predicate="slt")
            hi = L.op("arith.cmpi", [s, L.c(dim)], i1, predicate="sge")
            clamped = L.minmax_idx("min", L.minmax_idx("max", s, 0), dim - 1)
            if mode == "constant":
                ok = L.op("arith.xori", [L.op("arith.ori", [lo, hi], i1), L.c(1, i1)], i1)
                valid = ok if valid is None else L.op("arith.andi", [valid, ok], i1)
                idx.append(clamped)
            elif mode == "edge":
                idx.append(clamped)
            elif mode == "reflect":
                neg = L.op("arith.subi", [L.c(0), s], INDEX)
                over = L.op("arith.subi", [L.c(2 * (dim - 1)), s], INDEX)
                idx.append(L.op("arith.select", [lo, neg, L.op("arith.select", [hi, over, s], INDEX)], INDEX))
            elif mode == "wrap":
                m = L.op("arith.remsi", [L.add(L.op("arith.remsi", [s, L.c(dim)], INDEX), dim), L.c(dim)], INDEX)
                idx.append(m)
            else:
                cx.fail(op, f"Pad mode '{mode}' has no host lowering")
        v = L.load(src, idx)
        if valid is not None:
            v = L.op("arith.select", [valid, v, cval], el)
        L.store(v, dst, ivs)
    del n


@lowering("Shape", "Size")
def lower_shape(cx, op):
    x, r = op.operands[0], op.results[0]
    shape = list(x.type.shape)
    if op.name == "onnx.Size":
        val = np.array(int(np.prod(shape, dtype=np.int64)), dtype=np.int64)
    else:
        start, end = cx.attr(op, "start") or 0, cx.attr(op, "end")
        val = np.array(shape[start:end] if end is not None else shape[start:], dtype=np.int64)
    cx.alias(r, _global(cx, val, r.type))


@lowering("ConstantOfShape")
def lower_constant_of_shape(cx, op):
    r = op.results[0]
    a = op.attributes.get("value")
    v = 0 if a is None else np.asarray(elements_value(a)).ravel()[0]
    el = r.type.element
    if r.type.num_elements:
        fill(cx, cx.out(r), float(v) if is_float(el) else int(v))
    else:
        cx.out(r)


@lowering("Range")
def lower_range(cx, op):
    r = op.results[0]
    L, el = cx.L, r.type.element
    start = L.load(cx.buf(op.operands[0]), [0] * op.operands[0].type.rank)
    delta = L.load(cx.buf(op.operands[2]), [0] * op.operands[2].type.rank)
    dst = cx.out(r)
    with L.loop(0, r.type.shape[0], parallel=True, vectorize=True) as i:
        if is_float(el):
            fi = L.op("arith.sitofp", [L.op("arith.index_cast", [i], _i64())], el)
            v = L.op("arith.addf", [start, L.op("arith.mulf", [fi, delta], el)], el)
        else:
            ii = L.op("arith.index_cast", [i], el)
            v = L.op("arith.addi", [start, L.op("arith.muli", [ii, delta], el)], el)
        L.store(v, dst, [i])


def _i64():
    from ....ir.types import i64
    return i64


@lowering("EyeLike")
def lower_eyelike(cx, op):
    r = op.results[0]
    L, el = cx.L, r.type.element
    k = cx.attr(op, "k") or 0
    dst = cx.out(r)
    one, zero = L.c(1.0 if is_float(el) else 1, el), L.c(0.0 if is_float(el) else 0, el)
    with L.loops(r.type.shape) as (i, j):
        diag = L.op("arith.cmpi", [j, L.add(i, k)], i1, predicate="eq")
        L.store(L.op("arith.select", [diag, one, zero], el), dst, [i, j])


@lowering("Trilu")
def lower_trilu(cx, op):
    x, r = op.operands[0], op.results[0]
    L, el = cx.L, r.type.element
    k = (int_list(cx, op, 1) or [0])[0]
    upper = cx.attr(op, "upper")
    src, dst = cx.buf(x), cx.out(r)
    zero = L.c(0.0 if is_float(el) else 0, el)
    with L.loops(r.type.shape) as ivs:
        i, j = ivs[-2], ivs[-1]
        # upper keeps j - i >= k, i.e. j >= i + k; lower keeps j <= i + k.
        keep = L.op("arith.cmpi", [j, L.ix(L.add(i, k)) if k >= 0 else L.op("arith.subi", [i, L.c(-k)], INDEX)],
                    i1, predicate="sge" if upper else "sle")
        L.store(L.op("arith.select", [keep, L.load(src, ivs), zero], el), dst, ivs)


@lowering("DepthToSpace", "SpaceToDepth")
def lower_depth_space(cx, op):
    x, r = op.operands[0], op.results[0]
    b = cx.attr(op, "blocksize")
    N, C, H, W = x.type.shape
    L = cx.L
    if op.name == "onnx.SpaceToDepth":
        v = L.view(cx.buf(x), (N, C, H // b, b, W // b, b))  # x[n, c, h, bh, w, bw]
        if cx.attr(op, "mode") == "CRD":  # out channel c*b*b + bh*b + bw
            o = L.view(cx.out(r), (N, C, b, b, H // b, W // b))
            src = lambda s: [s[0], s[1], s[4], s[2], s[5], s[3]]  # noqa: E731
        else:  # DCR: out channel (bh*b + bw)*C + c
            o = L.view(cx.out(r), (N, b, b, C, H // b, W // b))
            src = lambda s: [s[0], s[3], s[4], s[1], s[5], s[2]]  # noqa: E731
        copy_nest(cx, o.type.shape, o, lambda s: s, v, src)
        return
    Co = C // (b * b)
    if cx.attr(op, "mode") == "CRD":
        v = L.view(cx.buf(x), (N, Co, b, b, H, W))   # x[n, c, bh, bw, h, w]
        src = lambda s: [s[0], s[1], s[3], s[5], s[2], s[4]]  # noqa: E731
    else:
        v = L.view(cx.buf(x), (N, b, b, Co, H, W))   # x[n, bh, bw, c, h, w]
        src = lambda s: [s[0], s[3], s[5], s[1], s[2], s[4]]  # noqa: E731
    o = L.view(cx.out(r), (N, Co, H, b, W, b))
    copy_nest(cx, (N, Co, H, b, W, b), o, lambda s: s, v, src)
