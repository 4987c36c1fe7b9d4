"""Scalar conversion between any two element types (ONNX Cast semantics:
float->int truncates toward zero, anything->bool is `!= 0`; to a float8 type
`saturate` clamps to its finite range first; to f8E8M0FNU `round_mode`
picks the exponent as onnx.numpy_helper.to_float8e8m0 does)."""
from __future__ import annotations

from .common import is_float, is_unsigned

SMALL = {"f8E4M3FN": 8, "f8E4M3FNUZ": 8, "f8E5M2": 8, "f8E5M2FNUZ": 8, "f8E8M0FNU": 8, "f4E2M1FN": 4}
FLOAT_BITS = {"f16": 16, "bf16": 16, "f32": 32, "f64": 64, **SMALL}


def emit_cast(L, x, src, dst, saturate=True, round_mode="up"):
    if src == dst:
        return x
    if str(dst) == "i1":
        if is_float(src):
            return L.op("arith.cmpf", [x, L.c(0.0, src)], dst, predicate="une")
        return L.op("arith.cmpi", [x, L.c(0, src)], dst, predicate="ne")
    if str(dst) == "f8E8M0FNU":
        return _to_e8m0(L, x, src, saturate, round_mode)
    if is_float(dst) and dst.name in SMALL and saturate and dst.name != "f4E2M1FN":
        # clip to the finite range (NaN stays NaN), as onnx.numpy_helper.saturate_cast
        from ..loop_to_native.types import small_float_max
        if not is_float(src) or src.name in SMALL:
            x, src = emit_cast(L, x, src, _f32()), _f32()
        m = small_float_max(dst)
        x = L.op("arith.minimumf", [L.op("arith.maximumf", [x, L.c(-m, src)], src), L.c(m, src)], src)
        return _ff(L, x, src, dst)
    if is_float(src) and is_float(dst):
        return _ff(L, x, src, dst)
    if is_float(dst):
        return L.op("arith.uitofp" if is_unsigned(src) else "arith.sitofp", [x], dst)
    if is_float(src):
        return L.op("arith.fptoui" if is_unsigned(dst) else "arith.fptosi", [x], dst)
    if src.width == dst.width:
        return L.op("arith.bitcast", [x], dst)
    if src.width > dst.width:
        return L.op("arith.trunci", [x], dst)
    return L.op("arith.extui" if is_unsigned(src) else "arith.extsi", [x], dst)


def _ff(L, x, src, dst):
    if FLOAT_BITS[src.name] == FLOAT_BITS[dst.name] and src != dst and src.name not in SMALL and dst.name not in SMALL:
        x = L.op("arith.extf", [x], _f32())  # f16 <-> bf16 through f32
        src = _f32()
    return L.op("arith.extf" if FLOAT_BITS[src.name] < FLOAT_BITS[dst.name] else "arith.truncf", [x], dst)


def _to_e8m0(L, x, src, saturate, round_mode):
    """The f32 exponent field, rounded by `round_mode` on the mantissa bits
    (sign ignored; NaN/Inf -> 0xFF), as onnx.numpy_helper.to_float8e8m0."""
    from ...ir.types import i1, i32, i8, SCALARS
    if round_mode not in ("up", "down", "nearest"):
        raise ValueError(f"Cast round_mode '{round_mode}' is not one of up, down, nearest")
    f = emit_cast(L, x, src, _f32()) if src != _f32() else x
    bits = L.op("arith.bitcast", [f], i32)
    c = lambda v: L.c(v, i32)  # noqa: E731
    exp = L.op("arith.andi", [L.op("arith.shrui", [bits, c(23)], i32), c(0xFF)], i32)
    special = L.op("arith.cmpi", [exp, c(0xFF)], i1, predicate="eq")
    nz = lambda m: L.op("arith.cmpi", [L.op("arith.andi", [bits, c(m)], i32), c(0)], i1, predicate="ne")  # noqa
    up = None
    if round_mode == "up":
        up = nz(0x7FFFFF)
    elif round_mode == "nearest":
        lsb = L.op("arith.cmpi", [exp, c(0)], i1, predicate="ugt")
        rs = L.op("arith.ori", [L.op("arith.ori", [nz(0x200000), nz(0x1FFFFF)], i1), lsb], i1)
        up = L.op("arith.andi", [nz(0x400000), rs], i1)
    if up is not None:
        up = L.op("arith.andi", [up, L.op("arith.xori", [special, L.c(1, i1)], i1)], i1)
        if saturate:
            at_max = L.op("arith.cmpi", [exp, c(0xFE)], i1, predicate="eq")
            up = L.op("arith.andi", [up, L.op("arith.xori", [at_max, L.c(1, i1)], i1)], i1)
        exp = L.op("arith.addi", [exp, L.op("arith.extui", [up], i32)], i32)
    exp = L.op("arith.select", [special, c(0xFF), exp], i32)
    return L.op("arith.bitcast", [L.op("arith.trunci", [exp], i8)], SCALARS["f8E8M0FNU"])


def _f32():
    from ...ir.types import f32
    return f32
