"""Elementwise kernels: numpy ufuncs (broadcasting as ONNX's multidirectional
broadcasting is numpy's), activations, Cast, Where, comparisons and logic."""
from __future__ import annotations

import math

import numpy as np
from onnx import helper

from .toolkit import kernel, ptr, rt_kernels

try:  # scipy's erf where installed (a test dependency): else Erf and Gelu fall back
    from scipy import special as _special
except ImportError:  # pragma: no cover - depends on the environment
    _special = None


def _same(fn):
    return lambda node: fn


for _name, _fn in {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Equal": np.equal, "Less": np.less,
                   "Greater": np.greater, "LessOrEqual": np.less_equal, "GreaterOrEqual": np.greater_equal,
                   "And": np.logical_and, "Or": np.logical_or, "Xor": np.logical_xor, "Not": np.logical_not,
                   "Abs": np.abs, "Neg": np.negative, "Exp": np.exp, "Log": np.log, "Sqrt": np.sqrt,
                   "Sin": np.sin, "Cos": np.cos, "Tan": np.tan, "Tanh": np.tanh, "Asin": np.arcsin,
                   "Acos": np.arccos, "Atan": np.arctan, "Sinh": np.sinh, "Cosh": np.cosh, "Asinh": np.arcsinh,
                   "Acosh": np.arccosh, "Atanh": np.arctanh, "Floor": np.floor, "Ceil": np.ceil,
                   "Round": np.round, "Sign": np.sign, "IsNaN": np.isnan, "Where": np.where,
                   "BitwiseAnd": np.bitwise_and, "BitwiseOr": np.bitwise_or, "BitwiseXor": np.bitwise_xor,
                   "BitwiseNot": np.invert}.items():
    kernel(_name)(_same(_fn))


@kernel("Identity")
def _identity(node):
    return lambda x: x


@kernel("Div")
def _div(node):
    def div(a, b):
        if a.dtype.kind in "iu":  # ONNX integer Div truncates toward zero; numpy's // floors
            q = np.floor_divide(a, b)
            fix = (np.remainder(a, b) != 0) & ((a < 0) != (b < 0))
            return q + fix.astype(q.dtype) if fix.any() else q
        return np.divide(a, b)
    return div


@kernel("Mod")
def _mod(node):
    return np.fmod if node.get("fmod", 0) else np.mod


@kernel("Pow")
def _pow(node):
    e = node.consts[1] if len(node.consts) > 1 else None
    if e is not None and e.size == 1 and float(e.reshape(-1)[0]) in (2.0, 3.0) and e.ndim <= (node.ranks or [0])[0]:
        # a constant square or cube (GELU's tanh form: x^3) as products: np.power
        # with a float exponent took 59 us a step in gpt2_lm; the result within 1 ulp
        cube = float(e.reshape(-1)[0]) == 3.0

        def power(x, y):
            if x.dtype.kind != "f":
                return np.power(x, y).astype(x.dtype, copy=False)
            sq = np.multiply(x, x)
            return np.multiply(sq, x, out=sq) if cube else sq
        return power

    def pow_(x, y):
        if x.dtype.kind == "f":  # the result has the base's type
            return np.power(x, y.astype(x.dtype, copy=False))
        return np.power(x, y).astype(x.dtype, copy=False)
    return pow_


@kernel("Reciprocal")
def _reciprocal(node):
    return lambda x: np.divide(x.dtype.type(1), x)


def _variadic(ufunc, post=None):
    def make(node):
        def fn(*xs):
            out = xs[0]
            for x in xs[1:]:
                out = ufunc(out, x)
            if len(xs) == 1:
                out = np.array(out)
            return post(out, len(xs)) if post else out
        return fn
    return make


kernel("Max")(_variadic(np.maximum))
kernel("Min")(_variadic(np.minimum))
kernel("Sum")(_variadic(np.add))
kernel("Mean")(_variadic(np.add, lambda s, n: (s / s.dtype.type(n)).astype(s.dtype, copy=False)))


@kernel("Relu")
def _relu(node):
    return lambda x: np.maximum(x, x.dtype.type(0))


@kernel("LeakyRelu")
def _leaky(node):
    alpha = float(node.get("alpha", 0.01))
    return lambda x: np.where(x >= 0, x, x * x.dtype.type(alpha))


def sigmoid(x):
    """1 / (1 + exp(-x)) in four in-place passes (exp(-x) = inf gives 0,
    as it should): 1.3-1.9x faster than scipy's expit on float32 here
    (3x7x128: 9.9 against 12.5 us; 1x96x56x56: 0.95 against 1.57 ms), within
    1.2e-7 of it."""
    y = np.negative(x)
    np.exp(y, out=y)
    y += y.dtype.type(1)
    return np.reciprocal(y, out=y)


@kernel("Sigmoid")
def _sigmoid(node):
    return sigmoid


@kernel("HardSigmoid")
def _hard_sigmoid(node):
    a, b = float(node.get("alpha", 0.2)), float(node.get("beta", 0.5))
    return lambda x: np.clip(x * x.dtype.type(a) + x.dtype.type(b), 0, 1).astype(x.dtype, copy=False)


@kernel("Softplus")
def _softplus(node):
    return lambda x: np.logaddexp(x.dtype.type(0), x)


@kernel("Softsign")
def _softsign(node):
    return lambda x: x / (1 + np.abs(x))


@kernel("Elu")
def _elu(node):
    alpha = float(node.get("alpha", 1.0))
    return lambda x: np.where(x > 0, x, (np.expm1(np.minimum(x, 0)) * x.dtype.type(alpha))).astype(x.dtype)


def _float32_native(node, fn, other, *extra):
    """A kernel running float32 through a runtime-library kernel (generic_ops.c:
    one pass, 2-3x scipy's erf, which computes in float64), other dtypes
    through `other` (numpy or scipy) or, where there is none, the op's
    reference implementation; plain `other` where the library is not built."""
    if fn is None:
        return other

    def run(x):
        if x.dtype != np.float32:
            return other(x) if other is not None else node.reference(x)
        x = np.ascontiguousarray(x)
        y = np.empty(x.shape, np.float32)
        if x.size:
            fn(ptr(x), ptr(y), x.size, *extra)
        return y
    return run


@kernel("Erf")
def _erf(node):
    lib = rt_kernels()
    return _float32_native(node, lib and lib.tcc_erf_f32, None if _special is None else _special.erf)


@kernel("Gelu")
def _gelu(node):
    approximate = node.get("approximate", "none") == "tanh"
    lib = None if approximate else rt_kernels()  # the tanh form: numpy (see generic_ops.c)
    return _float32_native(node, lib and lib.tcc_gelu_f32, _gelu_numpy(approximate))


def _gelu_numpy(approximate):
    if approximate:
        c = math.sqrt(2 / math.pi)
        return lambda x: (x * 0.5 * (1 + np.tanh(x.dtype.type(c) * (x + x.dtype.type(0.044715) * x * x * x)))
                          ).astype(x.dtype, copy=False)
    if _special is None:
        return None
    r = 1 / math.sqrt(2)
    return lambda x: (x * 0.5 * (1 + _special.erf(x * x.dtype.type(r)))).astype(x.dtype, copy=False)


@kernel("IsInf")
def _isinf(node):
    pos, neg = node.get("detect_positive", 1), node.get("detect_negative", 1)
    return lambda x: np.isinf(x) & (((x > 0) & bool(pos)) | ((x < 0) & bool(neg)))


@kernel("Clip")
def _clip(node):
    if node.opset < 11:
        lo, hi = node.get("min"), node.get("max")
        return lambda x: np.clip(x, lo, hi).astype(x.dtype, copy=False)

    def clip(x, lo=None, hi=None):
        out = x
        if lo is not None:
            out = np.maximum(out, lo.astype(x.dtype, copy=False))
        if hi is not None:
            out = np.minimum(out, hi.astype(x.dtype, copy=False))
        return out if out is not x else x.copy()
    return clip


_PLAIN = {np.dtype(t) for t in (np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32,
                                np.uint64, np.float16, np.float32, np.float64)}


@kernel("Cast")
def _cast(node):
    to = np.dtype(helper.tensor_dtype_to_np_dtype(node.get("to")))
    if to not in _PLAIN:  # strings, bfloat16, float8, int4...: the reference's rounding and saturation rules
        return None

    def cast(x):
        if x.dtype not in _PLAIN:
            raise TypeError(f"Cast from {x.dtype}")
        return x.astype(to)
    return cast


@kernel("Dropout")
def _dropout(node):
    training = node.consts[2] if len(node.consts) > 2 else None
    if len(node.consts) > 2 and node.present[2] and (training is None or bool(training)):
        return None  # training mode draws random masks: the reference's op

    def dropout(x, ratio=None, training=None):
        return (x, np.ones(x.shape, np.bool_)) if node.n_results > 1 else x
    return dropout
