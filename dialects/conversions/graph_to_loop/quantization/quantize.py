"""QuantizeLinear / DequantizeLinear (opset 10-25): per-tensor, per-axis and
blocked scales and zero points, every quantized type (8/16-bit integers,
int4/uint4/int2/uint2, the float8 kinds, float4e2m1), as onnx.reference
computes them: quantize divides in the input's type (or `precision`),
rounds half to even and saturates to the integer range after adding the zero
point (float8: Cast with `saturate`; float4: + zero point, then Cast);
dequantize subtracts the zero point in f32 (float8/float4: no zero point)
and multiplies by the scale."""
from __future__ import annotations

import numpy as np

from ....ir.types import NONE, f32, f64, i1, i32, i64, to_numpy_dtype
from ..common import LOW_FLOATS, is_float, is_unsigned
from ..cast import SMALL, emit_cast
from ..registry import lowering


def _param_index(cx, op, v, x_shape, axis, block, ivs):
    """Index into scale / zero point `v` for the element of x at ivs."""
    s = v.type.shape
    if len(s) == 0:
        return []
    if int(np.prod(s)) == 1:
        return [0] * len(s)
    if not block:
        if len(s) != 1 or s[0] != x_shape[axis]:
            cx.fail(op, f"{op.name}: scale/zero point of shape {s} does not match axis {axis} of {x_shape}")
        return [ivs[axis]]
    if len(s) != len(x_shape) or any(a != b for d, (a, b) in enumerate(zip(s, x_shape)) if d != axis) \
            or s[axis] != -(-x_shape[axis] // block):
        cx.fail(op, f"{op.name}: blocked scale of shape {s} does not match {x_shape} with block_size {block}")
    return [cx.L.op("arith.divui", [iv, cx.L.c(block)], iv.type) if d == axis else iv for d, iv in enumerate(ivs)]


def _axis_block(cx, op, rank):
    axis = cx.attr(op, "axis")
    axis = 1 if axis is None else axis
    if rank:
        axis %= rank
    block = cx.attr(op, "block_size") or 0
    if block < 0:
        cx.fail(op, f"{op.name}: block_size must be positive")
    return axis, block


def _given(op, i):
    return len(op.operands) > i and op.operands[i].type is not NONE


@lowering("QuantizeLinear")
def lower_quantize(cx, op):
    L = cx.L
    x, sc = op.operands[0], op.operands[1]
    zp = op.operands[2] if _given(op, 2) else None
    r = op.results[0]
    xs = x.type.shape
    axis, block = _axis_block(cx, op, len(xs))
    T, S, Q = x.type.element, sc.type.element, r.type.element
    prec = cx.attr(op, "precision") if "precision" in op.attributes else None
    if prec:
        import onnx.helper
        from ....ir.types import from_numpy_dtype
        pt = from_numpy_dtype(np.dtype(onnx.helper.tensor_dtype_to_np_dtype(prec)))
    elif not is_float(T) or not is_float(S):
        pt = f64  # numpy: int32 / f32 -> f64
    else:
        pt = T if np.dtype(to_numpy_dtype(T)).itemsize >= np.dtype(to_numpy_dtype(S)).itemsize else S
    ct = f64 if pt.name == "f64" else f32
    low = pt.name in LOW_FLOATS

    def rnd(v):
        return L.op("arith.extf", [L.op("arith.truncf", [v], pt)], ct) if low else v

    sat = cx.attr(op, "saturate")
    sat = True if sat is None else bool(sat)
    xb, sb = cx.buf(x), cx.buf(sc)
    zb = cx.buf(zp) if zp is not None else None
    out = cx.out(r)
    integer = not is_float(Q)
    if integer:
        lo, hi = (0, (1 << Q.width) - 1) if is_unsigned(Q) else (-(1 << (Q.width - 1)), (1 << (Q.width - 1)) - 1)
    with L.loops(xs) as ivs:
        xv = rnd(emit_cast(L, L.load(xb, ivs), T, ct))
        sv = rnd(emit_cast(L, L.load(sb, _param_index(cx, op, sc, xs, axis, block, ivs)), S, ct))
        v = rnd(L.op("arith.divf", [xv, sv], ct))
        zv = L.load(zb, _param_index(cx, op, zp, xs, axis, block, ivs)) if zb is not None else None
        if integer and ct.name == "f32" and Q.width <= 16:
            # in f32, M = 1.5 * 2^23 (even): v + M rounds v to an integer
            # half to even, M + rint(v), for |v| < 2^22; adding the zero
            # point is then exact, and the clamp to [M + lo, M + hi] leaves
            # q in the low mantissa bits (see DynamicQuantizeLinear). Past
            # 2^22 the sum is inexact but beyond the clamp, which saturates
            # as rint would; NaN becomes lo (maxnum drops a NaN operand), as
            # the i64 path gives it on x86. The i64 path ran scalar: 128x1024
            # to uint8 took 0.24 ms at 1 thread, this one 0.033 (onnxruntime
            # 0.019; Intel Xeon). The add of M stands for a round and an add
            # after the clamp (vrndscaleps on AVX-512): with maxnum/minnum
            # instead of a NaN test, 7 -> 4 instructions a vector.
            q = L.op("arith.addf", [v, L.c(12582912.0, ct)], ct)
            if zv is not None:
                q = L.op("arith.addf", [q, emit_cast(L, zv, Q, ct)], ct)
            q = L.op("arith.minnumf", [L.op("arith.maxnumf", [q, L.c(12582912.0 + lo, ct)], ct),
                                      L.c(12582912.0 + hi, ct)], ct)
            bits = L.op("arith.bitcast", [q], i32)
            res = emit_cast(L, bits, i32, Q)
        elif integer:
            q = L.op("arith.fptosi", [L.op("math.roundeven", [v], ct)], i64)
            # the int32 of numpy's rint(x).astype(int32), saturated instead of wrapped
            q = L.op("arith.minsi", [L.op("arith.maxsi", [q, L.c(-(1 << 31), i64)], i64), L.c((1 << 31) - 1, i64)], i64)
            if zv is not None:
                q = L.op("arith.addi", [q, emit_cast(L, zv, Q, i64)], i64)
            q = L.op("arith.minsi", [L.op("arith.maxsi", [q, L.c(lo, i64)], i64), L.c(hi, i64)], i64)
            res = emit_cast(L, q, i64, Q)
        elif Q.name == "f4E2M1FN":
            if zv is not None:
                v = L.op("arith.addf", [v, emit_cast(L, zv, Q, ct)], ct)
            res = emit_cast(L, v, ct, Q)
        elif Q.name in SMALL and Q.name != "f8E8M0FNU":
            res = emit_cast(L, v, ct, Q, saturate=sat)
        else:
            cx.fail(op, f"QuantizeLinear to {Q} has no host lowering")
        L.store(res, out, ivs)


@lowering("DequantizeLinear")
def lower_dequantize(cx, op):
    L = cx.L
    x, sc = op.operands[0], op.operands[1]
    zp = op.operands[2] if _given(op, 2) else None
    r = op.results[0]
    xs = x.type.shape
    axis, block = _axis_block(cx, op, len(xs))
    X, S, Y = x.type.element, sc.type.element, r.type.element
    ct = f64 if S.name == "f64" else f32
    xb, sb = cx.buf(x), cx.buf(sc)
    small = is_float(X)
    zb = cx.buf(zp) if zp is not None and not small else None
    out = cx.out(r)
    with L.loops(xs) as ivs:
        dx = emit_cast(L, L.load(xb, ivs), X, f32)
        if zb is not None:
            z = emit_cast(L, L.load(zb, _param_index(cx, op, zp, xs, axis, block, ivs)), zp.type.element, f32)
            dx = L.op("arith.subf", [dx, z], f32)
        dx = emit_cast(L, dx, f32, ct)
        s = emit_cast(L, L.load(sb, _param_index(cx, op, sc, xs, axis, block, ivs)), S, ct)
        L.store(emit_cast(L, L.op("arith.mulf", [dx, s], ct), ct, Y), out, ivs)


@lowering("DynamicQuantizeLinear")
def lower_dynamic_quantize(cx, op):
    """uint8 quantization with scale (max(0, max x) - min(0, min x)) / 255 (1/255
    when they are equal) and zero point rint(clip(-min / scale, 0, 255)), as
    onnx.reference (NaN inputs propagate through max/min as in numpy)."""
    L = cx.L
    x = op.operands[0]
    y, ys, yz = op.results[:3]
    n = x.type.num_elements
    T = x.type.element
    if T.name != "f32":
        cx.fail(op, f"DynamicQuantizeLinear on {T} (only float32 is allowed)")
    xv = L.view(cx.buf(x), (n,))
    st = L.alloc((2,), f32)
    L.store(L.c(0.0, f32), st, [0])
    L.store(L.c(0.0, f32), st, [1])
    with L.loop(0, n) as i:
        v = L.load(xv, [i])
        L.store(L.op("arith.maximumf", [L.load(st, [0]), v], f32), st, [0])
        L.store(L.op("arith.minimumf", [L.load(st, [1]), v], f32), st, [1])
    mx, mn = L.load(st, [0]), L.load(st, [1])
    same = L.op("arith.cmpf", [mx, mn], i1, predicate="oeq")
    rng = L.op("arith.select", [same, L.c(1.0, f32), L.op("arith.subf", [mx, mn], f32)], f32)
    scale = L.op("arith.divf", [rng, L.c(255.0, f32)], f32)
    zp = L.op("arith.subf", [L.c(0.0, f32), L.op("arith.divf", [mn, scale], f32)], f32)
    zp = L.op("arith.minimumf", [L.op("arith.maximumf", [zp, L.c(0.0, f32)], f32), L.c(255.0, f32)], f32)
    zpi = L.op("math.roundeven", [zp], f32)
    U = y.type.element
    sb, zb = cx.out(ys), cx.out(yz)
    L.store(scale, sb, [0] * sb.type.rank)
    L.store(emit_cast(L, zpi, f32, U), zb, [0] * zb.type.rank)
    yv = L.view(cx.out(y), (n,))
    with L.loop(0, n, parallel=True) as i:
        q = L.op("arith.addf", [L.op("math.roundeven", [L.op("arith.divf", [L.load(xv, [i]), scale], f32)], f32),
                                zpi], f32)
        q = L.op("arith.minimumf", [L.op("arith.maximumf", [q, L.c(0.0, f32)], f32), L.c(255.0, f32)], f32)
        # q is a whole number in [0, 255] or NaN (0, as the cast gives it):
        # 1.5 * 2^23 + q holds q in its low mantissa bits, so an add and a
        # bitcast convert it. The general cast (wrapping modulo 2^8 through a
        # saturating i64 conversion) ran scalar: 128x1024 took 0.34 ms at 1
        # thread, now 0.06 (onnxruntime: 0.03).
        q = L.op("arith.select", [L.op("arith.cmpf", [q, q], i1, predicate="uno"), L.c(0.0, f32), q], f32)
        bits = L.op("arith.bitcast", [L.op("arith.addf", [q, L.c(12582912.0, f32)], f32)], i32)
        L.store(emit_cast(L, bits, i32, U), yv, [i])
    L.op("loop.dealloc", [st])
