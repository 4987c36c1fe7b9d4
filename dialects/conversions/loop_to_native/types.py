"""IR types to LLVM types, in registers and in memory.

bf16 has no llvmlite type, and LLVM's x86 support for bfloat arithmetic is
partial, so a bf16 value is held in registers as an f32 that is always
exactly representable in bf16 (every bf16 result is rounded, to nearest even,
right where it is produced) and stored in memory as its 16 high bits. That is
bit-for-bit what computing in f32 and rounding each op's result gives, which is
what ml_dtypes (and the interpreter) do. i1 is one byte in memory, like numpy's
bool.

The 8- and 4-bit floats (f8E4M3FN, f8E4M3FNUZ, f8E5M2, f8E5M2FNUZ, f8E8M0FNU,
f4E2M1FN) work the same way: in registers an f32 holding a value exactly
representable in the type (`round_small` rounds to it, to nearest even, with
ml_dtypes' overflow/NaN rules), in memory one byte per element as ml_dtypes
lays them out (`encode_small` writes the bits, a 256-entry table decodes
them). Sub-byte integers (i4, ui4, i2, ui2) are iN in registers and one byte
per element in memory (the value's low bits, high bits zero, as ml_dtypes)."""
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


# name -> (exponent bits, mantissa bits, bias, special-value convention, ml_dtypes name)
SMALL_FLOATS = {
    "f8E4M3FN": (4, 3, 7, "fn", "float8_e4m3fn"),
    "f8E4M3FNUZ": (4, 3, 8, "fnuz", "float8_e4m3fnuz"),
    "f8E5M2": (5, 2, 15, "ieee", "float8_e5m2"),
    "f8E5M2FNUZ": (5, 2, 16, "fnuz", "float8_e5m2fnuz"),
    "f8E8M0FNU": (8, 0, 127, "e8m0", "float8_e8m0fnu"),
    "f4E2M1FN": (2, 1, 1, "sat", "float4_e2m1fn"),
}


def is_small_float(t) -> bool:
    return isinstance(t, FloatType) and t.name in SMALL_FLOATS


def small_float_max(t) -> float:
    import ml_dtypes
    return float(ml_dtypes.finfo(getattr(ml_dtypes, SMALL_FLOATS[t.name][4])).max)


def _np_small(t):
    import ml_dtypes
    return np.dtype(getattr(ml_dtypes, SMALL_FLOATS[t.name][4]))


def small_const(t, v: float) -> float:
    """The f32 register value of the constant v in small float type t."""
    return float(np.float32(np.array([v], np.float32).astype(_np_small(t))[0]))


def _decode_table(b, t):
    mod = b.function.module
    name = f"tcc_decode_{t.name}"
    g = mod.globals.get(name)
    if g is None:
        codes = np.arange(256, dtype=np.uint8)
        vals = codes.view(_np_small(t)).astype(np.float32)
        ty = ir.ArrayType(F32, 256)
        g = ir.GlobalVariable(mod, ty, name)
        g.initializer = ir.Constant(ty, [ir.Constant(F32, float(v)) for v in vals])
        g.global_constant, g.linkage = True, "private"
    return g


def decode_small(b, byte, t):
    """One stored byte (i8) of small float type t -> its f32 value."""
    g = _decode_table(b, t)
    return b.load(b.gep(g, [ir.Constant(I32, 0), b.zext(byte, I32)], inbounds=True), typ=F32)


def encode_small(b, x, t):
    """f32 -> the byte of small float type t nearest to it (ties to even),
    with ml_dtypes' rules for overflow, NaN, Inf and -0 (non-saturating)."""
    E, M, bias, kind, _ = SMALL_FLOATS[t.name]
    C = lambda v: ir.Constant(I32, v)  # noqa: E731
    bits = b.bitcast(x, I32)
    sign = b.lshr(bits, C(31))
    absb = b.and_(bits, C(0x7FFFFFFF))
    a = b.bitcast(absb, F32)
    isnan = b.fcmp_unordered("uno", x, x)
    shift = 23 - M
    # normal: round the f32 mantissa to M bits (ties to even), rebias the exponent
    rounded = b.add(b.add(absb, C((1 << (shift - 1)) - 1)), b.and_(b.lshr(absb, C(shift)), C(1)))
    normal = b.sub(b.lshr(rounded, C(shift)), C((127 - bias) << M))
    # subnormal: count units of the smallest subnormal, ties to even
    unit_inv = float(2.0 ** (M - 1 + bias))
    rint = ir.Function(b.function.module, ir.FunctionType(F32, [F32]), "llvm.roundeven.f32") \
        if "llvm.roundeven.f32" not in b.function.module.globals else b.function.module.globals["llvm.roundeven.f32"]
    if kind == "e8m0":  # no subnormals: f32 subnormals round on their bits like normals (ml_dtypes)
        sub = normal
    else:
        sub = b.fptosi(b.call(rint, [b.fmul(a, ir.Constant(F32, unit_inv))]), I32)
    min_normal = float(2.0 ** (1 - bias))
    small = b.fcmp_ordered("<", a, ir.Constant(F32, min_normal))
    mag = b.select(small, sub, normal)
    isinf = b.fcmp_ordered("==", a, ir.Constant(F32, float("inf")))
    top = (1 << (E + M)) - 1  # all magnitude bits set
    if kind == "fn":      # no inf; S.1111.111 is NaN
        over = b.or_(b.icmp_signed(">", mag, C(top - 1)), b.or_(isinf, isnan))
        mag = b.select(over, C(top), mag)
        out = b.or_(b.shl(sign, C(7)), mag)
    elif kind == "fnuz":  # no inf, no -0; 0x80 is NaN
        over = b.or_(b.icmp_signed(">", mag, C(top)), b.or_(isinf, isnan))
        out = b.or_(b.shl(sign, C(7)), mag)
        out = b.select(b.icmp_signed("==", mag, C(0)), C(0), out)
        out = b.select(over, C(0x80), out)
    elif kind == "ieee":  # e5m2: inf 0x7C, NaN 0x7E
        inf_bits = ((1 << E) - 1) << M
        over = b.or_(b.icmp_signed(">=", mag, C(inf_bits)), isinf)
        mag = b.select(over, C(inf_bits), mag)
        mag = b.select(isnan, C(inf_bits | (1 << (M - 1))), mag)
        out = b.or_(b.shl(sign, C(7)), mag)
    elif kind == "sat":   # f4E2M1FN: no inf/NaN, overflow saturates, NaN -> zero of the other sign
        over = b.or_(b.icmp_signed(">", mag, C(top)), isinf)
        mag = b.select(over, C(top), mag)
        out = b.or_(b.shl(sign, C(E + M)), mag)
        out = b.select(isnan, b.shl(b.xor(sign, C(1)), C(E + M)), out)
    else:                 # e8m0: unsigned powers of two, 0xFF is NaN
        zero_or_neg = b.or_(b.icmp_signed("!=", sign, C(0)), b.fcmp_ordered("==", a, ir.Constant(F32, 0.0)))
        over = b.or_(b.icmp_signed(">", mag, C(254)), b.or_(isinf, isnan))
        mag = b.select(b.icmp_signed("<", mag, C(0)), C(0), mag)
        out = b.select(b.or_(over, zero_or_neg), C(0xFF), mag)
    return b.trunc(out, I8)


def round_small(b, x, t):
    """Rounds an f32 register to small float type t (still an f32)."""
    return decode_small(b, encode_small(b, x, t), t)


def reg_type(t):
    """The LLVM type a scalar of IR type `t` lives in."""
    if isinstance(t, IndexType):
        return I64
    if isinstance(t, IntegerType):
        return ir.IntType(t.width)
    if isinstance(t, FloatType):
        if t.name in SMALL_FLOATS:
            return F32
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
    if is_small_float(t):
        return I8
    if isinstance(t, IntegerType) and t.width < 8:
        return I8
    return reg_type(t)


def elem_bytes(t) -> int:
    if isinstance(t, IndexType):
        return 8
    if isinstance(t, IntegerType):
        return 1 if t.width < 8 else t.width // 8
    if is_small_float(t):
        return 1
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
    if is_small_float(t):
        return decode_small(b, raw, t)
    if isinstance(t, IntegerType) and t.width < 8:
        return b.trunc(raw, ir.IntType(t.width))
    return raw


def store_convert(b, v, t):
    if is_bf16(t):
        return b.trunc(b.lshr(b.bitcast(v, I32), ir.Constant(I32, 16)), I16)
    if is_small_float(t):
        return encode_small(b, v, t)
    if isinstance(t, IntegerType) and t.width < 8:
        return b.zext(v, I8)
    return v
