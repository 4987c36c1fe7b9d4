"""Elementwise ops: scalar emitters (shared by unfused ops and graph.fused
groups) and the broadcasting loop nest they run in.

An emitter is `fn(cx, op, args, ins, out) -> scalar Value`: `args` are the
operands' scalars (None for an absent optional input), `ins`/`out` their
element types. f16/bf16 emitters see f32 (promoted around them)."""
from __future__ import annotations

import math
from contextlib import ExitStack

from ....ir.types import NONE, f32
from ....onnx.dialect import NAN_TO_MIN
from ..common import LOW_FLOATS, is_float, is_unsigned
from ..cast import emit_cast
from ..registry import lowering

EMITTERS = {}
# Ops that move values without computing: no f32 round trip for them.
NO_PROMOTE = {"onnx.Cast", "onnx.CastLike", "onnx.BitCast", "onnx.Identity", "onnx.Expand", "onnx.Where", "onnx.Not",
              "onnx.IsNaN", "onnx.IsInf"}
# Ops whose trailing operands are shapes, not data.
DATA_OPERANDS = {"onnx.Expand": 1, "onnx.CastLike": 1}


def emitter(*names):
    def deco(fn):
        for n in names:
            EMITTERS["onnx." + n] = fn
        return fn
    return deco


def _el(v):
    return None if v.type is NONE else v.type.element


def emit(cx, op, args):
    """The scalar result of elementwise `op` on `args`."""
    L = cx.L
    n = DATA_OPERANDS.get(op.name, len(op.operands))
    ins = [_el(v) for v in op.operands[:n]]
    out = op.results[0].type.element
    fn = EMITTERS[op.name]
    low = [t for t in ins + [out] if t is not None and is_float(t) and t.name in LOW_FLOATS]
    if not low or op.name in NO_PROMOTE:
        return fn(cx, op, args, ins, out)
    pargs = [L.op("arith.extf", [a], f32) if a is not None and t is not None and is_float(t)
             and t.name in LOW_FLOATS else a for a, t in zip(args, ins)]
    pins = [f32 if t is not None and is_float(t) and t.name in LOW_FLOATS else t for t in ins]
    pout = f32 if is_float(out) and out.name in LOW_FLOATS else out
    r = fn(cx, op, pargs, pins, pout)
    return L.op("arith.truncf", [r], out) if pout is not out else r


# -- the loop nest -------------------------------------------------------------------

def coalesce(out_shape, in_shapes):
    """Drops unit dims and merges neighbours that every input either spans or
    broadcasts alike, so nests are as shallow (and inner loops as long) as
    the broadcasting allows. Returns (dims, per-input spans-dim flags)."""
    R = len(out_shape)
    shapes = [(1,) * (R - len(s)) + tuple(s) for s in in_shapes]
    groups = []
    for d in range(R):
        if out_shape[d] == 1:
            continue
        pat = tuple(s[d] == out_shape[d] for s in shapes)
        if groups and groups[-1][1] == pat:
            groups[-1][0] *= out_shape[d]
        else:
            groups.append([out_shape[d], pat])
    return [g[0] for g in groups], [[g[1][i] for g in groups] for i in range(len(shapes))]


def elementwise_nest(cx, out_shape, ins, outs, body):
    """for every index of out_shape: outs[...] = body(loaded ins); ins are
    numpy-broadcast into out_shape. Each distinct input is loaded once, at
    the outermost loop level its index depends on."""
    L = cx.L
    present = [(k, b) for k, b in enumerate(ins) if b is not None]
    dims, spans = coalesce(out_shape, [b.type.shape for _, b in present])
    views = [L.view(b, [d if s else 1 for d, s in zip(dims, sp)]) for (_, b), sp in zip(present, spans)]
    oviews = [L.view(o, dims) for o in outs]
    last_dep = [max([d for d, s in enumerate(sp) if s], default=-1) for sp in spans]
    vals = [None] * len(ins)
    seen = {}

    def load_level(level, ivs):
        for j, (k, b) in enumerate(present):
            if last_dep[j] != level:
                continue
            key = b
            if key not in seen:
                seen[key] = L.load(views[j], [ivs[d] if s else 0 for d, s in enumerate(spans[j])])
            vals[k] = seen[key]

    with ExitStack() as stack:
        ivs = []
        load_level(-1, ivs)
        for d, size in enumerate(dims):
            ivs.append(stack.enter_context(L.loop(0, size, parallel=d == 0, vectorize=d == len(dims) - 1)))
            load_level(d, ivs)
        results = body(vals)
        for r, o in zip(results, oviews):
            L.store(r, o, ivs)


@lowering(*[n for n in (
    "Add Sub Mul Div Mod Pow Relu Sigmoid Tanh Exp Log Sqrt Neg Abs Erf Reciprocal Floor Ceil Round Sign "
    "Sin Cos Tan Asin Acos Atan Sinh Cosh Asinh Acosh Atanh Softplus Softsign Elu Selu Celu LeakyRelu "
    "ThresholdedRelu HardSigmoid HardSwish Gelu Mish Shrink PRelu Clip Where Cast CastLike Expand "
    "Min Max Sum Mean Equal Less Greater LessOrEqual GreaterOrEqual And Or Xor Not IsNaN IsInf "
    "BitwiseAnd BitwiseOr BitwiseXor BitwiseNot BitShift BitCast Swish").split()])
def lower_elementwise(cx, op):
    r = op.results[0]
    n = DATA_OPERANDS.get(op.name, len(op.operands))
    ins = [None if v.type is NONE else cx.buf(v) for v in op.operands[:n]]
    elementwise_nest(cx, r.type.shape, ins, [cx.out(r)], lambda vals: [emit(cx, op, vals)])


# -- emitters ---------------------------------------------------------------------------

def _c(L, v, t):
    return L.c(float(v) if is_float(t) else int(v), t)


def _bin(fop, iop, uop=None):
    def fn(cx, op, a, ins, out):
        t = ins[0]
        name = fop if is_float(t) else (uop if uop and is_unsigned(t) else iop)
        return cx.L.op("arith." + name, [a[0], a[1]], t)
    return fn


for _n, _ops in {"Add": ("addf", "addi"), "Sub": ("subf", "subi"), "Mul": ("mulf", "muli"),
                 "Div": ("divf", "divsi", "divui"), "And": (None, "andi"), "Or": (None, "ori"),
                 "Xor": (None, "xori"), "BitwiseAnd": (None, "andi"), "BitwiseOr": (None, "ori"),
                 "BitwiseXor": (None, "xori")}.items():
    EMITTERS["onnx." + _n] = _bin(*_ops)


def _cmp(fp, ip, up=None):
    def fn(cx, op, a, ins, out):
        t = ins[0]
        if is_float(t):
            return cx.L.op("arith.cmpf", [a[0], a[1]], out, predicate=fp)
        return cx.L.op("arith.cmpi", [a[0], a[1]], out, predicate=up if is_unsigned(t) and up else ip)
    return fn


for _n, _p in {"Equal": ("oeq", "eq"), "Less": ("olt", "slt", "ult"), "Greater": ("ogt", "sgt", "ugt"),
               "LessOrEqual": ("ole", "sle", "ule"), "GreaterOrEqual": ("oge", "sge", "uge")}.items():
    EMITTERS["onnx." + _n] = _cmp(*_p)


def _math(name):
    def fn(cx, op, a, ins, out):
        return cx.L.op("math." + name, [a[0]], out)
    return fn


for _n, _m in {"Tanh": "tanh", "Exp": "exp", "Log": "log", "Sqrt": "sqrt", "Erf": "erf", "Floor": "floor",
               "Ceil": "ceil", "Round": "roundeven", "Sin": "sin", "Cos": "cos", "Tan": "tan", "Asin": "asin",
               "Acos": "acos", "Atan": "atan", "Sinh": "sinh", "Cosh": "cosh", "Asinh": "asinh",
               "Acosh": "acosh", "Atanh": "atanh", "IsNaN": "isnan"}.items():
    EMITTERS["onnx." + _n] = _math(_m)


def _minmax(kind):
    def fn(cx, op, a, ins, out):
        t = ins[0]
        name = (kind + "imumf") if is_float(t) else (kind + ("ui" if is_unsigned(t) else "si"))
        acc = a[0]
        for x in a[1:]:
            acc = cx.L.op("arith." + name, [acc, x], t)
        return acc
    return fn


EMITTERS["onnx.Min"], EMITTERS["onnx.Max"] = _minmax("min"), _minmax("max")


@emitter("Sum", "Mean")
def _sum(cx, op, a, ins, out):
    add = "arith.addf" if is_float(out) else "arith.addi"
    acc = a[0]
    for x in a[1:]:
        acc = cx.L.op(add, [acc, x], out)
    if op.name == "onnx.Mean":
        acc = cx.L.op("arith.divf", [acc, cx.L.c(float(len(a)), out)], out)
    return acc


@emitter("Relu")
def _relu(cx, op, a, ins, out):
    if is_float(out):
        return cx.L.op("arith.maximumf", [a[0], cx.L.c(0.0, out)], out)
    return cx.L.op("arith.maxsi", [a[0], cx.L.c(0, out)], out)


@emitter("Neg")
def _neg(cx, op, a, ins, out):
    if is_float(out):
        return cx.L.op("arith.negf", [a[0]], out)
    return cx.L.op("arith.subi", [cx.L.c(0, out), a[0]], out)


@emitter("Abs")
def _abs(cx, op, a, ins, out):
    if is_float(out):
        return cx.L.op("math.absf", [a[0]], out)
    return a[0] if is_unsigned(out) else cx.L.op("math.absi", [a[0]], out)


@emitter("Reciprocal")
def _recip(cx, op, a, ins, out):
    return cx.L.op("arith.divf", [cx.L.c(1.0, out), a[0]], out)


@emitter("Sigmoid")
def _sigmoid(cx, op, a, ins, out):
    L = cx.L
    e = L.op("math.exp", [L.op("arith.negf", [a[0]], out)], out)
    return L.op("arith.divf", [L.c(1.0, out), L.op("arith.addf", [L.c(1.0, out), e], out)], out)


@emitter("Swish")
def _swish(cx, op, a, ins, out):
    """x * sigmoid(alpha * x)."""
    L = cx.L
    al = cx.attr(op, "alpha")
    ax = L.op("arith.mulf", [a[0], L.c(1.0 if al is None else float(al), out)], out)
    e = L.op("math.exp", [L.op("arith.negf", [ax], out)], out)
    sig = L.op("arith.divf", [L.c(1.0, out), L.op("arith.addf", [L.c(1.0, out), e], out)], out)
    return L.op("arith.mulf", [a[0], sig], out)


@emitter("Sign")
def _sign(cx, op, a, ins, out):
    L, x = cx.L, a[0]
    if is_float(out):
        pos = L.op("arith.cmpf", [x, L.c(0.0, out)], _i1(), predicate="ogt")
        neg = L.op("arith.cmpf", [x, L.c(0.0, out)], _i1(), predicate="olt")
        return L.op("arith.select", [pos, L.c(1.0, out), L.op("arith.select", [neg, L.c(-1.0, out), x], out)], out)
    zero = L.c(0, out)
    pos = L.op("arith.cmpi", [x, zero], _i1(), predicate="ugt" if is_unsigned(out) else "sgt")
    r = L.op("arith.select", [pos, L.c(1, out), zero], out)
    if is_unsigned(out):
        return r
    neg = L.op("arith.cmpi", [x, zero], _i1(), predicate="slt")
    return L.op("arith.select", [neg, L.c(-1, out), r], out)


def _i1():
    from ....ir.types import i1
    return i1


def _f(cx, op, name):
    return float(cx.attr(op, name))


def _lt0(L, x, t, pred="olt"):
    return L.op("arith.cmpf", [x, L.c(0.0, t)], _i1(), predicate=pred)


@emitter("LeakyRelu", "PRelu")
def _leaky(cx, op, a, ins, out):
    L, x = cx.L, a[0]
    if op.name == "onnx.LeakyRelu":
        slope = L.c(_f(cx, op, "alpha"), out)
    else:
        slope = a[1]
    if not is_float(out):
        neg = L.op("arith.cmpi", [x, L.c(0, out)], _i1(), predicate="slt")
        return L.op("arith.select", [neg, L.op("arith.muli", [x, slope], out), x], out)
    return L.op("arith.select", [_lt0(L, x, out), L.op("arith.mulf", [x, slope], out), x], out)


@emitter("Elu")
def _elu(cx, op, a, ins, out):
    L, x = cx.L, a[0]
    em1 = L.op("arith.subf", [L.op("math.exp", [x], out), L.c(1.0, out)], out)
    return L.op("arith.select", [_lt0(L, x, out), L.op("arith.mulf", [L.c(_f(cx, op, "alpha"), out), em1], out),
                                 x], out)


@emitter("Selu")
def _selu(cx, op, a, ins, out):
    L, x = cx.L, a[0]
    al, g = L.c(_f(cx, op, "alpha"), out), L.c(_f(cx, op, "gamma"), out)
    neg = L.op("arith.subf", [L.op("arith.mulf", [al, L.op("math.exp", [x], out)], out), al], out)
    v = L.op("arith.select", [_lt0(L, x, out, "ole"), neg, x], out)
    return L.op("arith.mulf", [g, v], out)


@emitter("Celu")
def _celu(cx, op, a, ins, out):
    L, x = cx.L, a[0]
    al = _f(cx, op, "alpha")
    e = L.op("math.exp", [L.op("arith.divf", [x, L.c(al, out)], out)], out)
    neg = L.op("arith.mulf", [L.c(al, out), L.op("arith.subf", [e, L.c(1.0, out)], out)], out)
    return L.op("arith.addf", [L.op("arith.maximumf", [x, L.c(0.0, out)], out),
                               L.op("arith.minimumf", [neg, L.c(0.0, out)], out)], out)


@emitter("ThresholdedRelu")
def _trelu(cx, op, a, ins, out):
    L, x = cx.L, a[0]
    gt = L.op("arith.cmpf", [x, L.c(_f(cx, op, "alpha"), out)], _i1(), predicate="ogt")
    return L.op("arith.select", [gt, x, L.c(0.0, out)], out)


def _clamp01(L, v, t):
    return L.op("arith.minimumf", [L.op("arith.maximumf", [v, L.c(0.0, t)], t), L.c(1.0, t)], t)


@emitter("HardSigmoid")
def _hsig(cx, op, a, ins, out):
    L = cx.L
    v = L.op("arith.addf", [L.op("arith.mulf", [a[0], L.c(_f(cx, op, "alpha"), out)], out),
                            L.c(_f(cx, op, "beta"), out)], out)
    return _clamp01(L, v, out)


@emitter("HardSwish")
def _hswish(cx, op, a, ins, out):
    L = cx.L
    v = L.op("arith.addf", [L.op("arith.mulf", [a[0], L.c(1.0 / 6.0, out)], out), L.c(0.5, out)], out)
    return L.op("arith.mulf", [a[0], _clamp01(L, v, out)], out)


def _softplus_v(L, x, t):
    return L.op("math.log", [L.op("arith.addf", [L.op("math.exp", [x], t), L.c(1.0, t)], t)], t)


@emitter("Softplus")
def _softplus(cx, op, a, ins, out):
    return _softplus_v(cx.L, a[0], out)


@emitter("Softsign")
def _softsign(cx, op, a, ins, out):
    L = cx.L
    return L.op("arith.divf", [a[0], L.op("arith.addf", [L.c(1.0, out), L.op("math.absf", [a[0]], out)], out)], out)


@emitter("Mish")
def _mish(cx, op, a, ins, out):
    L = cx.L
    return L.op("arith.mulf", [a[0], L.op("math.tanh", [_softplus_v(L, a[0], out)], out)], out)


@emitter("Gelu")
def _gelu(cx, op, a, ins, out):
    L, x = cx.L, a[0]
    if cx.attr(op, "approximate") == "tanh":
        x3 = L.op("arith.mulf", [L.op("arith.mulf", [x, x], out), x], out)
        inner = L.op("arith.addf", [x, L.op("arith.mulf", [L.c(0.044715, out), x3], out)], out)
        t = L.op("math.tanh", [L.op("arith.mulf", [L.c(math.sqrt(2 / math.pi), out), inner], out)], out)
    else:
        t = L.op("math.erf", [L.op("arith.mulf", [x, L.c(1 / math.sqrt(2), out)], out)], out)
    half_x = L.op("arith.mulf", [L.c(0.5, out), x], out)
    return L.op("arith.mulf", [half_x, L.op("arith.addf", [L.c(1.0, out), t], out)], out)


@emitter("Shrink")
def _shrink(cx, op, a, ins, out):
    L, x = cx.L, a[0]
    lam, bias = _f(cx, op, "lambd"), _f(cx, op, "bias")
    if not is_float(out):
        xf = emit_cast(L, x, out, f32)
        r = _shrink_f(L, xf, lam, bias, f32)
        return emit_cast(L, r, f32, out)
    return _shrink_f(L, x, lam, bias, out)


def _shrink_f(L, x, lam, bias, t):
    lo = L.op("arith.cmpf", [x, L.c(-lam, t)], _i1(), predicate="olt")
    hi = L.op("arith.cmpf", [x, L.c(lam, t)], _i1(), predicate="ogt")
    v = L.op("arith.select", [hi, L.op("arith.subf", [x, L.c(bias, t)], t), L.c(0.0, t)], t)
    return L.op("arith.select", [lo, L.op("arith.addf", [x, L.c(bias, t)], t), v], t)


@emitter("Clip")
def _clip(cx, op, a, ins, out):
    L, x = cx.L, a[0]
    lo, hi = (a[1] if len(a) > 1 else None), (a[2] if len(a) > 2 else None)
    if cx.opset() < 11:
        lo, hi = L.c(_f(cx, op, "min"), out), L.c(_f(cx, op, "max"), out)
    if is_float(out):
        # qdq's NAN_TO_MIN: NaN gives the lower bound (maxnum drops a NaN operand)
        nan_to_min = op.get_attr(NAN_TO_MIN) and lo is not None
        mx, mn = ("arith.maxnumf", "arith.minnumf") if nan_to_min else ("arith.maximumf", "arith.minimumf")
    else:
        mx, mn = ("arith.maxui", "arith.minui") if is_unsigned(out) else ("arith.maxsi", "arith.minsi")
    if lo is not None:
        x = L.op(mx, [x, lo], out)
    if hi is not None:
        x = L.op(mn, [x, hi], out)
    return x


@emitter("Where")
def _where(cx, op, a, ins, out):
    return cx.L.op("arith.select", [a[0], a[1], a[2]], out)


@emitter("Cast", "CastLike")
def _castop(cx, op, a, ins, out):
    sat = op.get_attr("saturate", None)
    mode = op.get_attr("round_mode", None)
    return emit_cast(cx.L, a[0], ins[0], out, saturate=True if sat is None else bool(sat),
                     round_mode="up" if mode is None else mode)


def _bits(t):
    from ..cast import FLOAT_BITS
    return FLOAT_BITS[t.name] if is_float(t) else t.width


@emitter("BitCast")
def _bitcast(cx, op, a, ins, out):
    """The same bytes read as another type (numpy's view)."""
    src, L = ins[0], cx.L
    if src == out:
        return a[0]
    if str(src) == "i1" and _bits(out) == 8:  # a bool's byte is 0 or 1
        from ....ir.types import i8
        if not is_float(out):
            return L.op("arith.extui", [a[0]], out)
        return L.op("arith.bitcast", [L.op("arith.extui", [a[0]], i8)], out)
    if str(out) == "i1" and _bits(src) == 8:
        from ....ir.types import i8
        v = a[0] if not is_float(src) else L.op("arith.bitcast", [a[0]], i8)
        return L.op("arith.cmpi", [v, L.c(0, v.type)], out, predicate="ne")
    if _bits(src) != _bits(out):
        cx.fail(op, f"BitCast from {src} to {out}: the bit widths differ")
    return L.op("arith.bitcast", [a[0]], out)


@emitter("Identity", "Expand")
def _ident(cx, op, a, ins, out):
    return a[0]


@emitter("Not")
def _not(cx, op, a, ins, out):
    return cx.L.op("arith.xori", [a[0], cx.L.c(1, out)], out)


@emitter("BitwiseNot")
def _bnot(cx, op, a, ins, out):
    return cx.L.op("arith.xori", [a[0], cx.L.c(-1, out)], out)


@emitter("BitShift")
def _shift(cx, op, a, ins, out):
    # Shifting by >= the width is poison in LLVM: spell out ONNX's answer
    # (0, or the sign fill for an arithmetic right shift).
    L, x, n = cx.L, a[0], a[1]
    w = out.width
    if cx.attr(op, "direction") == "RIGHT" and not is_unsigned(out):
        return L.op("arith.shrsi", [x, L.op("arith.minui", [n, L.c(w - 1, out)], out)], out)
    big = L.op("arith.cmpi", [n, L.c(w, out)], _i1(), predicate="uge")
    name = "arith.shli" if cx.attr(op, "direction") == "LEFT" else "arith.shrui"
    return L.op("arith.select", [big, L.c(0, out), L.op(name, [x, n], out)], out)


@emitter("IsInf")
def _isinf(cx, op, a, ins, out):
    L, x, t = cx.L, a[0], ins[0]
    pos, neg = cx.attr(op, "detect_positive"), cx.attr(op, "detect_negative")
    if pos and neg:
        return L.op("math.isinf", [x], out)
    if not pos and not neg:
        return L.c(0, out)
    inf = L.c(float("inf") if pos else float("-inf"), t)
    return L.op("arith.cmpf", [x, inf], out, predicate="oeq")


@emitter("Mod")
def _mod(cx, op, a, ins, out):
    L, x, y = cx.L, a[0], a[1]
    if is_float(out):
        r = L.op("arith.remf", [x, y], out)
        if cx.attr(op, "fmod"):
            return r
        # Python-style: the result takes the divisor's sign.
        fix = L.op("arith.andi", [L.op("arith.cmpf", [r, L.c(0.0, out)], _i1(), predicate="une"),
                                  L.op("arith.xori", [_lt0(L, r, out), _lt0(L, y, out)], _i1())], _i1())
        return L.op("arith.select", [fix, L.op("arith.addf", [r, y], out), r], out)
    if is_unsigned(out):
        return L.op("arith.remui", [x, y], out)
    r = L.op("arith.remsi", [x, y], out)
    if cx.attr(op, "fmod"):
        return r
    zero = L.c(0, out)
    rneg = L.op("arith.cmpi", [r, zero], _i1(), predicate="slt")
    yneg = L.op("arith.cmpi", [y, zero], _i1(), predicate="slt")
    nz = L.op("arith.cmpi", [r, zero], _i1(), predicate="ne")
    fix = L.op("arith.andi", [nz, L.op("arith.xori", [rneg, yneg], _i1())], _i1())
    return L.op("arith.select", [fix, L.op("arith.addi", [r, y], out), r], out)


@emitter("Pow")
def _pow(cx, op, a, ins, out):
    L, x, y = cx.L, a[0], a[1]
    if is_float(out):
        return L.op("arith.powf", [x, emit_cast(L, y, ins[1], out)], out)
    from ....ir.types import f64
    r = L.op("arith.powf", [emit_cast(L, x, ins[0], f64), emit_cast(L, y, ins[1], f64)], f64)
    return emit_cast(L, r, f64, out)
