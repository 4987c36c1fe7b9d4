"""arith.* and math.* to LLVM instructions, with MLIR's semantics (the loop
interpreter is the spec).

Where MLIR leaves a result undefined but x86 would trap or the interpreter
picks a value, we pick the interpreter's value, so native and interpreted
runs agree and nothing kills the process:
- integer division by zero divides by 1 instead (x86 would raise SIGFPE), and
  INT_MIN / -1 wraps to INT_MIN (remainder 0);
- shifts by >= the width give 0 (shli, shrui) or the sign fill (shrsi);
- fptosi/fptoui of NaN or ±Inf give 0; in-range values truncate, larger ones
  wrap modulo 2^width (they go through a saturating i64 conversion).

Fast-math: only `contract` (lets LLVM fuse a*b+c into an FMA, one rounding
instead of two) on f32/f64 add/sub/mul; never nnan/ninf (ONNX tests feed
NaN and Inf) nor reassoc (reductions must keep their order's rounding)."""
from __future__ import annotations

import math

import llvmlite.ir as ir
import numpy as np

from tcc.dialects.ir.types import FloatType, IndexType, IntegerType

from . import mathlib
from .target import NativeCodegenError
from .types import F16, F32, F64, I1, I8, I64, bf16_const, decode_small, encode_small, is_bf16, is_small_float, \
    reg_type, round_bf16, round_small, small_const

_CMPI = {"eq": ("==", False), "ne": ("!=", False), "slt": ("<", True), "sle": ("<=", True),
         "sgt": (">", True), "sge": (">=", True), "ult": ("<", False), "ule": ("<=", False),
         "ugt": (">", False), "uge": (">=", False)}
_CMPF_O = {"oeq": "==", "ogt": ">", "oge": ">=", "olt": "<", "ole": "<=", "one": "!=", "ord": "ord"}
_CMPF_U = {"ueq": "==", "ugt": ">", "uge": ">=", "ult": "<", "ule": "<=", "une": "!=", "uno": "uno"}
_FAST = ["contract"]


def _width(t):
    return 64 if isinstance(t, IndexType) else t.width


def constant(t, value):
    lt = reg_type(t)
    if isinstance(t, FloatType):
        v = float(value)
        if is_bf16(t):
            v = bf16_const(v)
        elif is_small_float(t):
            v = small_const(t, v)
        elif t.name == "f16":
            v = float(np.float16(v))
        elif t.name == "f32":
            v = float(np.float32(v))
        return ir.Constant(lt, v)
    w = _width(t)
    v = int(value) & ((1 << w) - 1)
    if w > 1 and v >> (w - 1):
        v -= 1 << w
    return ir.Constant(lt, v)


class ScalarEmitter:
    def __init__(self, module: ir.Module):
        self.module = module

    # -- helpers ---------------------------------------------------------------
    def _fin(self, b, v, t):
        """Rounds a bf16 (or 8/4-bit float) result computed in f32."""
        if is_small_float(t):
            return round_small(b, v, t)
        return round_bf16(b, v) if is_bf16(t) else v

    def _wide(self, b, v, t):
        """f16 to f32 for math functions (which have no half versions)."""
        return b.fpext(v, F32) if reg_type(t) == F16 else v

    def _narrow(self, b, v, t):
        if reg_type(t) == F16:
            return b.fptrunc(v, F16)
        return self._fin(b, v, t)

    def _math_type(self, t):
        return F64 if reg_type(t) == F64 else F32

    def intrinsic(self, base, t, nargs=1):
        return mathlib.intrinsic(self.module, base, t, nargs)

    # -- dispatch ---------------------------------------------------------------
    def emit(self, op, b: ir.IRBuilder, args):
        dialect, _, kind = op.name.partition(".")
        fn = getattr(self, f"_{dialect}_{kind}", None)
        if fn is not None:
            return fn(op, b, args)
        if dialect == "arith" and kind in _INT_BIN:
            return _INT_BIN[kind](self, b, args[0], args[1], op.results[0].type)
        if dialect == "arith" and kind in _FLT_BIN:
            t = op.results[0].type
            return self._fin(b, _FLT_BIN[kind](self, b, args[0], args[1], t), t)
        if dialect == "math" and (kind in mathlib.INTRINSICS or kind in mathlib.LIBM):
            return self._math_unary(op, b, args, kind)
        raise NativeCodegenError(f"'{op.name}' ({op.loc.describe()}) is not supported by the native backend")

    # -- arith -------------------------------------------------------------------
    def _arith_constant(self, op, b, args):
        return constant(op.results[0].type, op.get_attr("value"))

    def _arith_negf(self, op, b, args):
        return b.fneg(args[0])

    def _arith_select(self, op, b, args):
        return b.select(args[0], args[1], args[2])

    def _arith_cmpi(self, op, b, args):
        pred = op.get_attr("predicate")
        cmp, signed = _CMPI[pred]
        return (b.icmp_signed if signed else b.icmp_unsigned)(cmp, args[0], args[1])

    def _arith_cmpf(self, op, b, args):
        pred = op.get_attr("predicate")
        if pred == "false":
            return ir.Constant(I1, 0)
        if pred == "true":
            return ir.Constant(I1, 1)
        if pred in _CMPF_O:
            return b.fcmp_ordered(_CMPF_O[pred], args[0], args[1])
        if pred in _CMPF_U:
            return b.fcmp_unordered(_CMPF_U[pred], args[0], args[1])
        raise NativeCodegenError(f"arith.cmpf: unknown predicate '{pred}' ({op.loc.describe()})")

    # casts
    def _arith_sitofp(self, op, b, args):
        return self._int_to_float(b, args[0], op.results[0].type, signed=True)

    def _arith_uitofp(self, op, b, args):
        return self._int_to_float(b, args[0], op.results[0].type, signed=False)

    def _int_to_float(self, b, v, ot, signed):
        lt = reg_type(ot)
        conv = b.sitofp if signed else b.uitofp
        if lt == F16 or is_bf16(ot) or is_small_float(ot):
            # Through f64 (exact for up to 53-bit ints), as numpy does, then one rounding.
            d = conv(v, F64)
            return b.fptrunc(d, F16) if lt == F16 else self._fin(b, b.fptrunc(d, F32), ot)
        return conv(v, lt)

    def _arith_fptosi(self, op, b, args):
        return self._float_to_int(b, args[0], op.operands[0].type, op.results[0].type, signed=True)

    def _arith_fptoui(self, op, b, args):
        return self._float_to_int(b, args[0], op.operands[0].type, op.results[0].type, signed=False)

    def _float_to_int(self, b, v, it, ot, signed):
        """Truncates toward zero then wraps modulo 2^width, like the
        interpreter; NaN and ±Inf give 0. Below 2^63 in magnitude a
        saturating conversion to i64 is exact; above it the value is an
        integer m * 2^k, whose low 64 bits are computed from its bits."""
        if v.type != F64:
            v = b.fpext(v, F64)  # exact
        w = _width(ot)
        name = "llvm.fptosi.sat.i64.f64"
        sat = self.module.globals.get(name) or ir.Function(self.module, ir.FunctionType(I64, [F64]), name)
        small = b.call(sat, [v])
        bits = b.bitcast(v, I64)
        exp = b.and_(b.lshr(bits, ir.Constant(I64, 52)), ir.Constant(I64, 0x7FF))
        mant = b.or_(b.and_(bits, ir.Constant(I64, (1 << 52) - 1)), ir.Constant(I64, 1 << 52))
        shift = b.sub(exp, ir.Constant(I64, 1075))
        in_range = b.icmp_signed("<", shift, ir.Constant(I64, 64))
        safe = b.select(in_range, shift, ir.Constant(I64, 0))
        big = b.select(in_range, b.shl(mant, safe), ir.Constant(I64, 0))
        big = b.select(b.icmp_signed("<", bits, ir.Constant(I64, 0)), b.sub(ir.Constant(I64, 0), big), big)
        absv = b.call(self.intrinsic("llvm.fabs", F64), [v])
        r = b.select(b.fcmp_ordered(">=", absv, ir.Constant(F64, 2.0 ** 63)), big, small)
        r = b.select(b.fcmp_ordered("<", absv, ir.Constant(F64, math.inf)), r, ir.Constant(I64, 0))
        return b.trunc(r, reg_type(ot)) if w < 64 else r

    def _arith_extf(self, op, b, args):
        return self._float_to_float(b, args[0], op.operands[0].type, op.results[0].type)

    _arith_truncf = _arith_extf

    def _float_to_float(self, b, v, it, ot):
        src, dst = reg_type(it), reg_type(ot)
        if is_small_float(ot):
            # f64 goes through f32 first (a second rounding only for f64 values
            # within 2^-24 relative of a tie of the target type).
            if src == F64:
                v = b.fptrunc(v, F32)
            elif src == F16:
                v = b.fpext(v, F32)
            return v if it == ot else round_small(b, v, ot)
        if is_bf16(ot):
            if src == F64:
                v = b.fptrunc(v, F32)
            elif src == F16:
                v = b.fpext(v, F32)
            return v if is_bf16(it) or is_small_float(it) else round_bf16(b, v)
        if src == dst:
            return v
        order = {"half": 0, "float": 1, "double": 2}
        return b.fpext(v, dst) if order[str(src)] < order[str(dst)] else b.fptrunc(v, dst)

    def _arith_extsi(self, op, b, args):
        return b.sext(args[0], reg_type(op.results[0].type))

    def _arith_extui(self, op, b, args):
        return b.zext(args[0], reg_type(op.results[0].type))

    def _arith_trunci(self, op, b, args):
        return b.trunc(args[0], reg_type(op.results[0].type))

    def _index_cast(self, b, v, ot, signed):
        dst = reg_type(ot)
        if v.type.width == dst.width:
            return v
        if v.type.width > dst.width:
            return b.trunc(v, dst)
        return (b.sext if signed else b.zext)(v, dst)

    def _arith_index_cast(self, op, b, args):
        return self._index_cast(b, args[0], op.results[0].type, True)

    def _arith_index_castui(self, op, b, args):
        return self._index_cast(b, args[0], op.results[0].type, False)

    def _arith_bitcast(self, op, b, args):
        it, ot = op.operands[0].type, op.results[0].type
        v = args[0]
        if is_small_float(it) or is_small_float(ot):
            if it == ot:
                return v
            if is_small_float(it) and reg_type(ot) == I8:
                return encode_small(b, v, it)
            if is_small_float(ot) and reg_type(it) == I8:
                return decode_small(b, v, ot)
            raise NativeCodegenError(f"arith.bitcast {it} -> {ot} ({op.loc.describe()}) is not supported")
        if is_bf16(it):
            v = b.trunc(b.lshr(b.bitcast(v, ir.IntType(32)), ir.Constant(ir.IntType(32), 16)), ir.IntType(16))
            if is_bf16(ot):
                return args[0]
            return v if reg_type(ot) == v.type else b.bitcast(v, reg_type(ot))
        if is_bf16(ot):
            if v.type != ir.IntType(16):
                v = b.bitcast(v, ir.IntType(16))
            return b.bitcast(b.shl(b.zext(v, ir.IntType(32)), ir.Constant(ir.IntType(32), 16)), F32)
        dst = reg_type(ot)
        return v if v.type == dst else b.bitcast(v, dst)

    # -- math --------------------------------------------------------------------
    def _math_unary(self, op, b, args, kind):
        t = op.results[0].type
        x = self._wide(b, args[0], t)
        mt = x.type
        if mt == F32 and kind in mathlib.INLINE_F32:
            r = mathlib.INLINE_F32[kind](b, self.module, x)
        elif kind in mathlib.INTRINSICS:
            r = b.call(self.intrinsic(mathlib.INTRINSICS[kind], mt), [x])
        else:
            r = b.call(mathlib.libm(self.module, mathlib.LIBM[kind], mt), [x])
        return self._narrow(b, r, t)

    def _math_rsqrt(self, op, b, args):
        t = op.results[0].type
        x = self._wide(b, args[0], t)
        r = b.fdiv(ir.Constant(x.type, 1.0), b.call(self.intrinsic("llvm.sqrt", x.type), [x]))
        return self._narrow(b, r, t)

    def _math_absi(self, op, b, args):
        x = args[0]
        neg = b.icmp_signed("<", x, ir.Constant(x.type, 0))
        return b.select(neg, b.sub(ir.Constant(x.type, 0), x), x)

    def _math_isnan(self, op, b, args):
        return b.fcmp_unordered("uno", args[0], args[0])

    def _math_isinf(self, op, b, args):
        x = args[0]
        a = b.call(self.intrinsic("llvm.fabs", x.type), [x])
        return b.fcmp_ordered("==", a, ir.Constant(x.type, math.inf))

    def _math_fma(self, op, b, args):
        t = op.results[0].type
        if reg_type(t) == F64:
            return b.call(self.intrinsic("llvm.fma", F64, 3), args)
        # As the interpreter: the product is exact in f64, the sum rounds in f64, then to t.
        xs = [b.fpext(a, F64) for a in args]
        r = b.fadd(b.fmul(xs[0], xs[1]), xs[2])
        if reg_type(t) == F16:
            return b.fptrunc(r, F16)
        return self._fin(b, b.fptrunc(r, F32), t)

    def _math_atan2(self, op, b, args):
        t = op.results[0].type
        xs = [self._wide(b, a, t) for a in args]
        r = b.call(mathlib.libm(self.module, "atan2", xs[0].type, 2), xs)
        return self._narrow(b, r, t)


def _bin_libm(name):
    def f(self, b, x, y, t):
        if reg_type(t) == F16:
            r = b.call(mathlib.libm(self.module, name, F32, 2), [b.fpext(x, F32), b.fpext(y, F32)])
            return b.fptrunc(r, F16)
        return b.call(mathlib.libm(self.module, name, x.type, 2), [x, y])
    return f


def _fast(t):
    return _FAST if reg_type(t) in (F32, F64) and not is_bf16(t) and not is_small_float(t) else []


def _minmax(base):
    def f(self, b, x, y, t):
        return b.call(self.intrinsic(base, x.type, 2), [x, y])
    return f


def _float_constant(v):
    return v.constant if isinstance(v, ir.Constant) and isinstance(v.type, (ir.FloatType, ir.DoubleType)) and \
        isinstance(v.constant, float) and not math.isnan(v.constant) else None


def _bound(base, is_max):
    """IEEE maximum/minimum against a constant c that is no NaN (a Clip's or
    Relu's bound, a quantization's range): c if c wins or ties, else v, by
    one compare and select, exact. A NaN v fails the ordered compare and is
    returned; at c = -0 (maximum) or +0 (minimum) the compare is strict, so
    that max(+0, -0) is +0 and min(-0, +0) is -0. LLVM's expansion of
    llvm.maximum, which knows nothing of the constant, took 6 instructions
    where this takes 1-2 (with the bound a constant, codegen.py's
    _scalar_global): mlp_qdq, whose requantizing loops clip twice, went from
    0.310 to 0.285 ms with AVX-512 and from 1.47 to 1.44 with AVX2 (1
    thread, Intel Xeon family 6 model 167, in one process)."""
    general = _minmax(base)

    def f(self, b, x, y, t):
        c, v = (y, x) if _float_constant(y) is not None else (x, y)
        cv = _float_constant(c)
        if cv is None:
            return general(self, b, x, y, t)
        negative = math.copysign(1.0, cv) < 0
        strict = cv == 0 and negative == is_max
        op = (">" if strict else ">=") if is_max else ("<" if strict else "<=")
        return b.select(b.fcmp_ordered(op, c, v), c, v)
    return f


_FLT_BIN = {
    "addf": lambda s, b, x, y, t: b.fadd(x, y, flags=_fast(t)),
    "subf": lambda s, b, x, y, t: b.fsub(x, y, flags=_fast(t)),
    "mulf": lambda s, b, x, y, t: b.fmul(x, y, flags=_fast(t)),
    "divf": lambda s, b, x, y, t: b.fdiv(x, y),
    "remf": lambda s, b, x, y, t: b.frem(x, y),
    "maximumf": _bound("llvm.maximum", True),
    "minimumf": _bound("llvm.minimum", False),
    # IEEE maxNum/minNum (a NaN operand loses): fewer instructions than
    # maximum on x86, for reductions whose NaNs propagate another way.
    "maxnumf": _minmax("llvm.maxnum"),
    "minnumf": _minmax("llvm.minnum"),
    "powf": _bin_libm("pow"),
    "copysign": _minmax("llvm.copysign"),
}


def _safe_divisor(b, x, y, signed):
    zero, one = ir.Constant(y.type, 0), ir.Constant(y.type, 1)
    bad = b.icmp_unsigned("==", y, zero)
    if signed and y.type.width > 1:
        w = y.type.width
        int_min = ir.Constant(y.type, -(1 << (w - 1)))
        overflow = b.and_(b.icmp_unsigned("==", x, int_min), b.icmp_signed("==", y, ir.Constant(y.type, -1)))
        bad = b.or_(bad, overflow)
    return b.select(bad, one, y)


def _shift(kind):
    def f(self, b, x, y, t):
        w = ir.Constant(x.type, _width(t))
        big = b.icmp_unsigned(">=", y, w)
        if kind == "shrsi":
            return b.ashr(x, b.select(big, ir.Constant(x.type, _width(t) - 1), y))
        safe = b.select(big, ir.Constant(x.type, 0), y)
        r = b.shl(x, safe) if kind == "shli" else b.lshr(x, safe)
        return b.select(big, ir.Constant(x.type, 0), r)
    return f


def _minmaxi(cmp, signed):
    def f(self, b, x, y, t):
        c = (b.icmp_signed if signed else b.icmp_unsigned)(cmp, x, y)
        return b.select(c, x, y)
    return f


_INT_BIN = {
    "addi": lambda s, b, x, y, t: b.add(x, y),
    "subi": lambda s, b, x, y, t: b.sub(x, y),
    "muli": lambda s, b, x, y, t: b.mul(x, y),
    "divsi": lambda s, b, x, y, t: b.sdiv(x, _safe_divisor(b, x, y, True)),
    "divui": lambda s, b, x, y, t: b.udiv(x, _safe_divisor(b, x, y, False)),
    "remsi": lambda s, b, x, y, t: b.srem(x, _safe_divisor(b, x, y, True)),
    "remui": lambda s, b, x, y, t: b.urem(x, _safe_divisor(b, x, y, False)),
    "maxsi": _minmaxi(">", True), "minsi": _minmaxi("<", True),
    "maxui": _minmaxi(">", False), "minui": _minmaxi("<", False),
    "andi": lambda s, b, x, y, t: b.and_(x, y),
    "ori": lambda s, b, x, y, t: b.or_(x, y),
    "xori": lambda s, b, x, y, t: b.xor(x, y),
    "shli": _shift("shli"), "shrsi": _shift("shrsi"), "shrui": _shift("shrui"),
}
