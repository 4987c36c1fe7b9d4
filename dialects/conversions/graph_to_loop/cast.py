"""Scalar conversion between any two element types (ONNX Cast semantics:
float->int truncates toward zero, anything->bool is `!= 0`)."""
from __future__ import annotations

from .builder import is_float, is_unsigned


def emit_cast(L, x, src, dst):
    if src == dst:
        return x
    if str(dst) == "i1":
        if is_float(src):
            return L.op("arith.cmpf", [x, L.c(0.0, src)], dst, predicate="une")
        return L.op("arith.cmpi", [x, L.c(0, src)], dst, predicate="ne")
    if is_float(src) and is_float(dst):
        if src.name in ("f16", "bf16") and dst.name in ("f16", "bf16"):
            x = L.op("arith.extf", [x], _f32())
            src = _f32()
        return L.op("arith.extf" if _fbits(src) < _fbits(dst) else "arith.truncf", [x], dst)
    if is_float(dst):
        return L.op("arith.uitofp" if is_unsigned(src) else "arith.sitofp", [x], dst)
    if is_float(src):
        return L.op("arith.fptoui" if is_unsigned(dst) else "arith.fptosi", [x], dst)
    if src.width == dst.width:
        return L.op("arith.bitcast", [x], dst)
    if src.width > dst.width:
        return L.op("arith.trunci", [x], dst)
    return L.op("arith.extui" if is_unsigned(src) else "arith.extsi", [x], dst)


def _fbits(t):
    return {"f16": 16, "bf16": 16, "f32": 32, "f64": 64}[t.name]


def _f32():
    from ...ir.types import f32
    return f32
