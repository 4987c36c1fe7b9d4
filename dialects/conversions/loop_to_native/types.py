"""IR types to LLVM types, in registers and in memory.

bf16 has no llvmlite type, and LLVM's x86 support for bfloat arithmetic is
partial, so a bf16 value is held in registers as an f32 that is always
exactly representable in bf16 (every bf16 result is rounded, to nearest even,
right where it is produced) and stored in memory as its 16 high bits. That is
bit-for-bit what computing in f32 and rounding each op's result gives, which is
what ml_dtypes (and the interpreter) do. i1 is one byte in memory, like numpy's
bool."""
from __future__ import annotations

import llvmlite.ir as ir
import numpy as np

from tcc.dialects.ir.types import FloatType, IndexType, IntegerType, MemRefType

from .target import NativeCodegenError

I1, I8, I16, I32, I64 = ir.IntType(1), ir.IntType(8), ir.IntType(16), ir.IntType(32), ir.IntType(64)
F16, F32, F64 = ir.HalfType(), ir.FloatType(), ir.DoubleType()
PTR = ir.PointerType()
VOID = ir.VoidType()

_FLOATS = {"f16": F16, "bf16": F32, "f32": F32, "f64": F64}


def is_bf16(t) -> bool:
    return isinstance(t, FloatType) and t.name == "bf16"


def reg_type(t):
    """The LLVM type a scalar of IR type `t` lives in."""
    if isinstance(t, IndexType):
        return I64
    if isinstance(t, IntegerType):
        return ir.IntType(t.width)
    if isinstance(t, FloatType):
        if t.name not in _FLOATS:
            raise NativeCodegenError(f"element type {t} is not supported by the native backend")
        return _FLOATS[t.name]
    if isinstance(t, MemRefType):
        return PTR
    raise NativeCodegenError(f"type {t} has no native representation")


def mem_type(t):
    """The LLVM type an element of IR type `t` is stored as."""
    if is_bf16(t):
        return I16
    if isinstance(t, IntegerType) and t.width == 1:
        return I8
    return reg_type(t)


def elem_bytes(t) -> int:
    if isinstance(t, IndexType):
        return 8
    if isinstance(t, IntegerType):
        return 1 if t.width == 1 else t.width // 8
    return {"f16": 2, "bf16": 2, "f32": 4, "f64": 8}[t.name] if isinstance(t, FloatType) and t.name in _FLOATS \
        else _unsupported(t)


def _unsupported(t):
    raise NativeCodegenError(f"element type {t} is not supported by the native backend")


def static_shape(t: MemRefType, what="buffer"):
    if t.shape is None or any(d is None for d in t.shape):
        raise NativeCodegenError(f"{what} of type {t}: dynamic shapes are not supported by the native backend")
    return tuple(t.shape)


def byte_size(t: MemRefType) -> int:
    n = 1
    for d in static_shape(t):
        n *= d
    return n * elem_bytes(t.element)


def round_bf16(b: ir.IRBuilder, x):
    """Rounds an f32 register to the nearest-even bf16 value (still an f32);
    NaNs stay NaN (quieted), as in ml_dtypes."""
    bits = b.bitcast(x, I32)
    lsb = b.and_(b.lshr(bits, ir.Constant(I32, 16)), ir.Constant(I32, 1))
    rounded = b.add(b.add(bits, ir.Constant(I32, 0x7FFF)), lsb)
    isnan = b.fcmp_unordered("uno", x, x)
    quiet = b.or_(bits, ir.Constant(I32, 0x400000))
    out = b.and_(b.select(isnan, quiet, rounded), ir.Constant(I32, 0xFFFF0000 - (1 << 32)))
    return b.bitcast(out, F32)


def bf16_const(v: float) -> float:
    import ml_dtypes
    return float(np.float32(ml_dtypes.bfloat16(v)))


def load_convert(b, raw, t):
    if is_bf16(t):
        return b.bitcast(b.shl(b.zext(raw, I32), ir.Constant(I32, 16)), F32)
    if isinstance(t, IntegerType) and t.width == 1:
        return b.trunc(raw, I1)
    return raw


def store_convert(b, v, t):
    if is_bf16(t):
        return b.trunc(b.lshr(b.bitcast(v, I32), ir.Constant(I32, 16)), I16)
    if isinstance(t, IntegerType) and t.width == 1:
        return b.zext(v, I8)
    return v
