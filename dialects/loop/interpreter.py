"""A reference interpreter for lowered modules: runs `func.func @main_graph`
(input buffers, then output buffers) on numpy arrays, one scalar at a time.

It is the executable spec the native backend is checked against, so every
arith/math op follows MLIR's semantics exactly: integers are held as Python
ints normalised to their type (signless/signed types in the signed range,
unsigned types and i1 in the unsigned range) and each op reinterprets its
operands as signed or unsigned as MLIR says; floats are numpy scalars of their
own precision, so rounding matches the hardware."""
from __future__ import annotations

import math

import numpy as np

from ..ir.attributes import elements_value
from ..ir.errors import TccError
from ..ir.types import FloatType, IndexType, IntegerType, MemRefType, to_numpy_dtype


class InterpreterError(TccError):
    pass


def _width(t):
    return 64 if isinstance(t, IndexType) else t.width


def _norm(v, t):
    """Wraps a Python int into the range its type holds."""
    w = _width(t)
    v &= (1 << w) - 1
    if w > 1 and not (isinstance(t, IntegerType) and t.is_unsigned) and v >> (w - 1):
        v -= 1 << w
    return v


def _s(v, t):
    w = _width(t)
    v &= (1 << w) - 1
    return v - (1 << w) if v >> (w - 1) else v


def _u(v, t):
    return v & ((1 << _width(t)) - 1)


def _fdt(t):
    return to_numpy_dtype(t).type


def _tdiv(a, b):
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def _trem(a, b):
    return a - b * _tdiv(a, b)


_INT_BIN = {
    "addi": lambda a, b, t: a + b, "subi": lambda a, b, t: a - b, "muli": lambda a, b, t: a * b,
    "divsi": lambda a, b, t: _tdiv(_s(a, t), _s(b, t)), "divui": lambda a, b, t: _u(a, t) // _u(b, t),
    "remsi": lambda a, b, t: _trem(_s(a, t), _s(b, t)), "remui": lambda a, b, t: _u(a, t) % _u(b, t),
    "maxsi": lambda a, b, t: max(_s(a, t), _s(b, t)), "minsi": lambda a, b, t: min(_s(a, t), _s(b, t)),
    "maxui": lambda a, b, t: max(_u(a, t), _u(b, t)), "minui": lambda a, b, t: min(_u(a, t), _u(b, t)),
    "andi": lambda a, b, t: a & b, "ori": lambda a, b, t: a | b, "xori": lambda a, b, t: a ^ b,
    # Shifts by >= the width are poison in MLIR; we give 0 (or the sign fill).
    "shli": lambda a, b, t: a << _u(b, t) if _u(b, t) < _width(t) else 0,
    "shrui": lambda a, b, t: _u(a, t) >> _u(b, t) if _u(b, t) < _width(t) else 0,
    "shrsi": lambda a, b, t: _s(a, t) >> min(_u(b, t), _width(t) - 1),
}


def _maximumf(a, b):
    if np.isnan(a) or np.isnan(b):
        return a if np.isnan(a) else b
    if a == b == 0:
        return b if np.signbit(a) else a  # +0 > -0
    return a if a > b else b


def _minimumf(a, b):
    if np.isnan(a) or np.isnan(b):
        return a if np.isnan(a) else b
    if a == b == 0:
        return a if np.signbit(a) else b
    return a if a < b else b


_FLT_BIN = {
    "addf": lambda a, b: a + b, "subf": lambda a, b: a - b, "mulf": lambda a, b: a * b,
    "divf": lambda a, b: a / b, "remf": lambda a, b: np.fmod(a, b), "maximumf": _maximumf,
    "minimumf": _minimumf, "maxnumf": lambda a, b: np.fmax(a, b), "minnumf": lambda a, b: np.fmin(a, b),
    "powf": lambda a, b: _powf(a, b), "copysign": lambda a, b: np.copysign(a, b),
}

def _powf(a, b):
    """C's pow, as the native code calls (np.power takes x**0.5 as sqrt(x),
    which differs at -inf and -0); f32/f16 through f64, then rounded."""
    return np.float64(a) ** np.float64(b)


_CMPF = {
    "oeq": lambda a, b: a == b, "one": lambda a, b: a < b or a > b, "olt": lambda a, b: a < b,
    "ole": lambda a, b: a <= b, "ogt": lambda a, b: a > b, "oge": lambda a, b: a >= b,
    "ord": lambda a, b: True, "false": lambda a, b: False, "true": lambda a, b: True,
}
_CMPF_U = {"ueq": "one", "une": "oeq", "ult": "oge", "ule": "ogt", "ugt": "ole", "uge": "olt"}

_CMPI = {
    "eq": lambda a, b, t: a == b, "ne": lambda a, b, t: a != b,
    "slt": lambda a, b, t: _s(a, t) < _s(b, t), "sle": lambda a, b, t: _s(a, t) <= _s(b, t),
    "sgt": lambda a, b, t: _s(a, t) > _s(b, t), "sge": lambda a, b, t: _s(a, t) >= _s(b, t),
    "ult": lambda a, b, t: _u(a, t) < _u(b, t), "ule": lambda a, b, t: _u(a, t) <= _u(b, t),
    "ugt": lambda a, b, t: _u(a, t) > _u(b, t), "uge": lambda a, b, t: _u(a, t) >= _u(b, t),
}


def _cmpf(pred, a, b):
    nan = bool(np.isnan(a) or np.isnan(b))
    if pred == "uno":
        return nan
    if pred in _CMPF_U:  # unordered-or-P is the negation of ordered-and-not-P
        return nan or not bool(_CMPF[_CMPF_U[pred]](a, b))
    if pred == "ord":
        return not nan
    return (not nan) and bool(_CMPF[pred](a, b))


_MATH = {
    "exp": np.exp, "exp2": np.exp2, "expm1": np.expm1, "log": np.log, "log2": np.log2, "log10": np.log10,
    "log1p": np.log1p, "sqrt": np.sqrt, "rsqrt": lambda x: 1 / np.sqrt(x), "tanh": np.tanh,
    "sin": np.sin, "cos": np.cos, "tan": np.tan, "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan,
    "sinh": np.sinh, "cosh": np.cosh, "asinh": np.arcsinh, "acosh": np.arccosh, "atanh": np.arctanh,
    "floor": np.floor, "ceil": np.ceil, "trunc": np.trunc, "roundeven": np.rint, "absf": np.abs,
    # math.round rounds half away from zero.
    "round": lambda x: np.copysign(np.floor(np.abs(x) + 0.5), x) if np.abs(x) < 2.0 ** 52 else x,
}


def _cast(kind, v, it, ot):
    if kind in ("sitofp", "uitofp"):
        x = _s(v, it) if kind == "sitofp" else _u(v, it)
        return _fdt(ot)(x)
    if kind in ("fptosi", "fptoui"):
        if not np.isfinite(v):
            return 0  # poison in MLIR
        return _norm(int(np.trunc(np.float64(v))), ot)
    if kind in ("extf", "truncf"):
        return _fdt(ot)(v)
    if kind in ("extsi", "index_cast"):
        return _norm(_s(v, it), ot)
    if kind in ("extui", "index_castui"):
        return _norm(_u(v, it), ot)
    if kind == "trunci":
        return _norm(v, ot)
    if kind == "bitcast":
        if isinstance(it, FloatType) or isinstance(ot, FloatType):
            if isinstance(it, FloatType):
                src = np.array([v], dtype=to_numpy_dtype(it))
            else:
                src = np.array([_u(v, it)], dtype=f"u{_width(it) // 8}")
            if isinstance(ot, FloatType):
                return src.view(to_numpy_dtype(ot))[0]
            return _norm(int(src.view(f"u{_width(ot) // 8}")[0]), ot)
        return _norm(v, ot)
    raise InterpreterError(f"unknown cast {kind}")


def _exec_block(block, env):
    for op in block.ops:
        _exec_op(op, env)


def _alloc(t):
    dt = to_numpy_dtype(t.element)
    if dt.kind == "f":  # garbage made visible: reading before writing shows up as NaN
        return np.full(t.shape, np.nan, dtype=dt)
    return np.zeros(t.shape, dtype=dt)


def _to_scalar(x, t):
    if isinstance(t, FloatType):
        return x
    return _norm(int(x), t)


def _exec_op(op, env):
    name = op.name
    args = [env[v] for v in op.operands]
    res = op.results
    if name == "loop.for":
        step = op.get_attr("step", 1)
        body = op.regions[0].blocks[0]
        iv = body.args[0]
        for i in range(args[0], args[1], step):
            env[iv] = i
            _exec_block(body, env)
        return
    if name == "loop.yield":
        return
    if name == "loop.load":
        t = op.operands[0].type
        env[res[0]] = _to_scalar(args[0][tuple(args[1:])], t.element)
        return
    if name == "loop.store":
        args[1][tuple(args[2:])] = args[0]
        return
    if name == "loop.if":
        r = op.regions[0 if args[0] else 1]
        if r.blocks:
            _exec_block(r.blocks[0], env)
        return
    if name == "arith.constant":
        t, v = res[0].type, op.get_attr("value")
        env[res[0]] = _fdt(t)(v) if isinstance(t, FloatType) else _norm(int(v), t)
        return
    if name == "arith.select":
        env[res[0]] = args[1] if args[0] else args[2]
        return
    if name == "loop.alloc":
        env[res[0]] = _alloc(res[0].type if not args else MemRefType(_dyn_shape(res[0].type, args),
                                                                      res[0].type.element))
        return
    if name == "loop.dealloc":
        return
    if name == "loop.global":
        t = res[0].type
        env[res[0]] = np.array(elements_value(op.attributes["value"]), dtype=to_numpy_dtype(t.element)).reshape(t.shape)
        return
    if name == "loop.view":
        t = res[0].type
        shape = _dyn_shape(t, args[1:])
        if not args[0].flags.c_contiguous:
            raise InterpreterError("loop.view of a non-contiguous buffer")
        env[res[0]] = args[0].reshape(shape)
        return
    if name == "loop.dim":
        env[res[0]] = args[0].shape[op.get_attr("axis")]
        return
    if name == "loop.copy":
        args[1].reshape(-1)[...] = args[0].reshape(-1)
        return
    if name == "loop.prefetch":
        return
    if name == "loop.store_block":
        off, n = args[2], args[3]
        if off < 0 or n < 0 or n > args[0].size or off + n > args[1].size:
            raise InterpreterError(f"loop.store_block of {n} elements at {off} is out of bounds "
                                   f"({op.loc.describe()})")
        args[1].reshape(-1)[off:off + n] = args[0].reshape(-1)[:n]
        return
    dialect, _, kind = name.partition(".")
    if dialect == "arith":
        t = res[0].type
        if kind in _INT_BIN:
            env[res[0]] = _norm(_INT_BIN[kind](args[0], args[1], t), t)
        elif kind in _FLT_BIN:
            env[res[0]] = _fdt(t)(_FLT_BIN[kind](args[0], args[1]))
        elif kind == "negf":
            env[res[0]] = -args[0]
        elif kind == "cmpf":
            env[res[0]] = int(_cmpf(op.get_attr("predicate"), args[0], args[1]))
        elif kind == "cmpi":
            env[res[0]] = int(_CMPI[op.get_attr("predicate")](args[0], args[1], op.operands[0].type))
        else:
            env[res[0]] = _cast(kind, args[0], op.operands[0].type, t)
        return
    if dialect == "math":
        t = res[0].type
        if kind == "absi":
            env[res[0]] = _norm(abs(_s(args[0], t)), t)
        elif kind in ("isnan", "isinf"):
            env[res[0]] = int(bool(np.isnan(args[0]) if kind == "isnan" else np.isinf(args[0])))
        elif kind == "erf":
            env[res[0]] = _fdt(t)(math.erf(float(args[0])) if np.isfinite(args[0]) else np.sign(args[0]))
        elif kind == "fma":
            env[res[0]] = _fdt(t)(np.float64(args[0]) * np.float64(args[1]) + np.float64(args[2])) \
                if t.name != "f64" else _fdt(t)(args[0] * args[1] + args[2])
        elif kind == "atan2":
            env[res[0]] = _fdt(t)(np.arctan2(args[0], args[1]))
        else:
            env[res[0]] = _fdt(t)(_MATH[kind](args[0]))
        return
    raise InterpreterError(f"cannot interpret '{name}' ({op.loc.describe()})")


def _dyn_shape(t, dims):
    it = iter(dims)
    return tuple(next(it) if d is None else d for d in t.shape)


def run_loop_module(module, inputs, function="main_graph"):
    """Runs a lowered module; returns the output buffers."""
    func = module.lookup_function(function)
    if func is None:
        raise InterpreterError(f"no function @{function}")
    block = func.regions[0].blocks[0]
    nout = func.get_attr("tcc.num_outputs")
    if nout is None:
        raise InterpreterError("function has no tcc.num_outputs attribute: not a lowered module")
    nin = len(block.args) - nout
    if len(inputs) != nin:
        raise InterpreterError(f"expects {nin} inputs, got {len(inputs)}")
    env = {}
    for a, x in zip(block.args[:nin], inputs):
        t = a.type
        arr = np.array(x, dtype=to_numpy_dtype(t.element), order="C")  # a private copy
        if t.shape is not None and arr.shape != _dyn_shape(t, [arr.shape[i] for i, d in enumerate(t.shape)
                                                                 if d is None]):
            raise InterpreterError(f"input shape {arr.shape} does not match {t}")
        env[a] = arr
    outs = []
    for a in block.args[nin:]:
        env[a] = _alloc(a.type)
        outs.append(env[a])
    with np.errstate(all="ignore"):
        for op in block.ops:
            if op.name == "func.return":
                break
            _exec_op(op, env)
    return outs
