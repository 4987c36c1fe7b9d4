"""C loops for cpu.elementwise: one fused tree of onnx elementwise ops,
evaluated in a single pass over the output with numpy broadcasting.

Dimensions are collapsed first (neighbouring dims whose broadcast pattern is
the same for every input merge), so a per-channel operand over NCHW becomes
a [N*C][H*W] loop with one scalar load per row, and a same-shape chain one
flat loop. Size-1 constant inputs become C literals. Rows (and, when there are
few rows, chunks of a row) are split across the kernel library's pool."""
from __future__ import annotations

import math
import re

import numpy as np

from tcc.dialects.conversions.loop_to_native.cstyle import F32, CStyleLanguage, RenderError
from tcc.dialects.ir.types import NONE
from tcc.dialects.onnx.dialect import NAN_TO_MIN

from .support import const_value


class CpuCodegenError(RenderError):
    pass


class CpuLanguage(CStyleLanguage):
    """The cpu accelerator's C: what differs from the shared renderer is its
    own f32 exp, tanh and erf (kernels/mathfun.h), which gcc vectorizes where
    libm's calls stay scalar."""

    name = "cpu C"
    error = CpuCodegenError
    intrinsics = {"exp": "tcc_exp_", "tanh": "tcc_tanhf", "erf": "tcc_erff"}


C = CpuLanguage()


def flit(x):
    """The C literal of `x` as a float."""
    return C.float_literal(x)


def _s(kind, *a, predicate=None):
    """The f32 scalar op `kind` (an arith/math op name) over C expressions `a`."""
    return C.scalar(kind, list(a), F32, F32, predicate)


def _gt(a, b):
    return _s("arith.cmpf", a, b, predicate="ogt")


def _select(c, a, b):
    return _s("arith.select", c, a, b)


def _exp_m1(x):
    return _s("arith.subf", _s("math.exp", x), "1.0f")


def _lt(a, b):
    return _s("arith.cmpf", a, b, predicate="olt")


# A C float literal that is not NaN (what flit writes for a finite or infinite number)
_NUMBER = re.compile(r"^\(?-?(INFINITY|[0-9][0-9.e+-]*f)\)?$")


def _maximum(a, b):
    """max(a, b), NaN when either is (onnxruntime's Max and Clip, and the
    host path's llvm.maximum), as compare-selects: fmaxf/fminf are libm
    calls gcc leaves scalar (no -ffinite-math-only), which kept every loop
    with a Max, Min, HardSigmoid or HardSwish scalar, and they return the
    other operand for a NaN. Against a number (a literal) it is one select,
    `b > a ? b : a`, which is vmaxps(b, a): x86's max returns its second
    operand when either is NaN. Otherwise a NaN test of `a` comes first
    (cmpunordps + maxps + blend, still one vector op each)."""
    if _NUMBER.match(a) and not _NUMBER.match(b):
        a, b = b, a
    if _NUMBER.match(b):
        return _select(_gt(b, a), b, a)
    return _select(_s("arith.cmpf", a, a, predicate="uno"), a, _select(_gt(a, b), a, b))


def _minimum(a, b):
    """min(a, b), NaN when either is: see _maximum."""
    if _NUMBER.match(a) and not _NUMBER.match(b):
        a, b = b, a
    if _NUMBER.match(b):
        return _select(_lt(b, a), b, a)
    return _select(_s("arith.cmpf", a, a, predicate="uno"), a, _select(_lt(a, b), a, b))


def _clamp01(x):
    return _minimum(_maximum(x, "0.0f"), "1.0f")


def _attr_or(attr, name, default):
    v = attr(name)
    return flit(default if v is None else v)


def _gelu(x, attr):
    if attr("approximate") == "tanh":
        cube = _s("arith.mulf", _s("arith.mulf", _s("arith.mulf", "0.044715f", x), x), x)
        inner = _s("arith.mulf", "0.7978845608028654f", _s("arith.addf", x, cube))
        return _s("arith.mulf", _s("arith.mulf", "0.5f", x), _s("arith.addf", "1.0f", _s("math.tanh", inner)))
    erf = _s("math.erf", _s("arith.mulf", x, "0.7071067811865476f"))
    return _s("arith.mulf", _s("arith.mulf", "0.5f", x), _s("arith.addf", "1.0f", erf))


# onnx elementwise op -> its scalar computation, in the loop dialect's scalar
# ops (`_s`), which the shared renderer turns into C: `x` the first operand,
# `a` all of them (None: absent), `attr` the op's attributes.
LOWER = {
    "Add": lambda x, a, attr: _s("arith.addf", a[0], a[1]),
    "Sub": lambda x, a, attr: _s("arith.subf", a[0], a[1]),
    "Mul": lambda x, a, attr: _s("arith.mulf", a[0], a[1]),
    "Div": lambda x, a, attr: _s("arith.divf", a[0], a[1]),
    "Pow": lambda x, a, attr: _s("math.powf", a[0], a[1]),
    "PRelu": lambda x, a, attr: _select(_s("arith.cmpf", x, "0.0f", predicate="olt"), _s("arith.mulf", x, a[1]), x),
    "Relu": lambda x, a, attr: _maximum(x, "0.0f"),  # NaN stays NaN, as onnxruntime's
    "Sigmoid": lambda x, a, attr: _s("arith.divf", "1.0f", _s("arith.addf", "1.0f", _s("math.exp", _s("arith.negf", x)))),
    "Tanh": lambda x, a, attr: _s("math.tanh", x),
    "Exp": lambda x, a, attr: _s("math.exp", x),
    "Log": lambda x, a, attr: _s("math.log", x),
    "Neg": lambda x, a, attr: _s("arith.negf", x),
    "Abs": lambda x, a, attr: _s("math.absf", x),
    "Sqrt": lambda x, a, attr: _s("math.sqrt", x),
    "Reciprocal": lambda x, a, attr: _s("arith.divf", "1.0f", x),
    "Erf": lambda x, a, attr: _s("math.erf", x),
    "Floor": lambda x, a, attr: _s("math.floor", x),
    "Ceil": lambda x, a, attr: _s("math.ceil", x),
    "Round": lambda x, a, attr: _s("math.roundeven", x),
    "Identity": lambda x, a, attr: x,
    "Sin": lambda x, a, attr: _s("math.sin", x),
    "Cos": lambda x, a, attr: _s("math.cos", x),
    # x itself where neither test holds: zero, or NaN (onnxruntime's Sign keeps NaN)
    "Sign": lambda x, a, attr: _select(_gt(x, "0.0f"), "1.0f", _select(_lt(x, "0.0f"), "(-1.0f)", x)),
    "LeakyRelu": lambda x, a, attr: _select(_s("arith.cmpf", x, "0.0f", predicate="oge"), x,
                                            _s("arith.mulf", x, _attr_or(attr, "alpha", 0.01))),
    "ThresholdedRelu": lambda x, a, attr: _select(_gt(x, _attr_or(attr, "alpha", 1.0)), x, "0.0f"),
    "HardSigmoid": lambda x, a, attr: _clamp01(_s("arith.addf", _s("arith.mulf", _attr_or(attr, "alpha", 0.2), x),
                                                  _attr_or(attr, "beta", 0.5))),
    "HardSwish": lambda x, a, attr: _s("arith.mulf", x, _clamp01(_s("arith.addf", _s("arith.mulf", x, flit(1 / 6)),
                                                                    "0.5f"))),
    "Elu": lambda x, a, attr: _select(_gt(x, "0.0f"), x, _s("arith.mulf", _attr_or(attr, "alpha", 1.0), _exp_m1(x))),
    "Selu": lambda x, a, attr: _select(
        _gt(x, "0.0f"), _s("arith.mulf", _attr_or(attr, "gamma", 1.05070102214813232421875), x),
        _s("arith.mulf", _s("arith.mulf", _attr_or(attr, "gamma", 1.05070102214813232421875),
                            _attr_or(attr, "alpha", 1.67326319217681884765625)), _exp_m1(x))),
    "Softplus": lambda x, a, attr: _select(_gt(x, "20.0f"), x, _s("math.log1p", _s("math.exp", x))),
    "Softsign": lambda x, a, attr: _s("arith.divf", x, _s("arith.addf", "1.0f", _s("math.absf", x))),
    "Gelu": lambda x, a, attr: _gelu(x, attr),
}


# Pow's exponent as the C literal the constant becomes (flit) -> products
_POW_BY_MUL = {flit(1.0): lambda x: x, flit(2.0): lambda x: _s("arith.mulf", x, x),
               flit(3.0): lambda x: _s("arith.mulf", _s("arith.mulf", x, x), x),
               flit(4.0): lambda x: (lambda sq: _s("arith.mulf", sq, sq))(_s("arith.mulf", x, x))}


def _expr(op, a, attr):
    """C expression of one onnx op over operand expressions `a` (None: absent)."""
    n = op.name[5:]
    x = a[0] if a else None
    if n == "Pow" and a[1] in _POW_BY_MUL:
        # a constant small integer exponent (GPT-2's GELU: x ** 3) as products:
        # powf is a libm call per element that keeps the loop scalar (6 % of
        # gpt2_lm's samples, perf, AVX2 EPYC); within 2 ulp of powf, negative
        # bases included
        return _POW_BY_MUL[a[1]](x)
    if n in LOWER:
        return LOWER[n](x, a, attr)
    if n == "Clip":
        # max with the lower bound, then min with the upper (the upper wins
        # when they cross, as in onnxruntime): compare-selects, one
        # vmaxps/vminps each against a literal bound, NaN x staying NaN;
        # with qdq's tcc.nan_to_min, NaN x gives the lower bound: `x > lo ? x
        # : lo` (vmaxps(x, lo)) sends it there, and `lo < hi ? lo : hi` keeps it
        e = x
        if len(a) > 1 and a[1] is not None:
            e = _select(_gt(e, a[1]), e, a[1]) if attr(NAN_TO_MIN) else _maximum(e, a[1])
        if len(a) > 2 and a[2] is not None:
            e = _select(_lt(e, a[2]), e, a[2]) if attr(NAN_TO_MIN) and len(a) > 1 and a[1] is not None \
                else _minimum(e, a[2])
        return e
    if n in ("Max", "Min"):
        e = a[0]
        for b in a[1:]:
            e = _maximum(e, b) if n == "Max" else _minimum(e, b)
        return e
    if n in ("Sum", "Mean"):
        e = a[0]
        for b in a[1:]:
            e = _s("arith.addf", e, b)
        return _s("arith.mulf", e, flit(1.0 / len(a))) if n == "Mean" else e
    # support.py claims only ops with an entry above: reaching here is a bug.
    raise CpuCodegenError(f"cpu accelerator: no C emitter for {op.name} ({op.loc.describe()})")


SELECT_CHAINS = {"Max", "Min", "Clip", "HardSigmoid", "HardSwish"}
NO_PRE = '#if defined(__GNUC__) && !defined(__clang__)\n__attribute__((optimize("no-tree-pre")))\n#endif\n'


def collapse_broadcast(out_shape, leaf_shapes):
    """-> (dims, per-leaf strides per dim) after dropping size-1 output dims and
    merging neighbours with equal broadcast patterns."""
    r = len(out_shape)
    aligned = [(1,) * (r - len(s)) + tuple(s) for s in leaf_shapes]
    cstr = []
    for s in aligned:
        st, acc = [0] * r, 1
        for d in range(r - 1, -1, -1):
            st[d] = acc if s[d] != 1 else 0
            acc *= s[d]
        cstr.append(st)
    dims, strides, pattern = [], [[] for _ in aligned], None
    for d in range(r):
        if out_shape[d] == 1:
            continue
        pat = tuple(s[d] != 1 for s in aligned)
        if dims and pat == pattern:
            dims[-1] *= out_shape[d]
            for i in range(len(aligned)):
                strides[i][-1] = cstr[i][d]  # innermost dim of the merged group
        else:
            dims.append(out_shape[d])
            for i in range(len(aligned)):
                strides[i].append(cstr[i][d])
            pattern = pat
    if not dims:
        dims = [1]
        strides = [[0] for _ in aligned]
    return dims, strides


def generate(fname, op, ptr):
    """-> (C helper definitions, the statement that calls them)."""
    body = op.regions[0].blocks[0]
    out_t = op.results[0].type
    out_shape = tuple(out_t.shape or ())
    leaves, literal = [], {}
    for arg, v in zip(body.args, op.operands):
        c = const_value(v)
        if c is not None and c.size == 1:
            literal[arg] = flit(c.reshape(-1)[0])
        else:
            leaves.append((arg, v))
    dims, strides = collapse_broadcast(out_shape, [tuple(v.type.shape or ()) for _, v in leaves])
    L = dims[-1]
    rows = int(np.prod(dims[:-1], dtype=np.int64)) if len(dims) > 1 else 1
    nc = 1 if rows >= 16 else max(1, min(math.ceil(L / 4096), math.ceil(16 / rows)))
    ch = math.ceil(L / nc)
    tasks = rows * nc
    grain = max(1, 16384 // max(ch, 1))
    params = [(f"in{i}", "float", True, False) for i in range(len(leaves))] + [("out", "float", False, True)]
    lines = []
    lines.append(f"        long row = tid / {nc}, c0 = (tid % {nc}) * {ch}, c1 = c0 + {ch} < {L} ? c0 + {ch} : {L};")
    lines.append("        long rem = row; (void)rem;")
    for i in range(len(leaves)):
        lines.append(f"        long o{i} = 0;")
    for d in range(len(dims) - 2, -1, -1):
        lines.append(f"        {{ long i = rem % {dims[d]}; rem /= {dims[d]};"
                     + "".join(f" o{k} += i * {strides[k][d]};" for k in range(len(leaves)) if strides[k][d])
                     + " }")
    names = {}
    for k, (arg, _) in enumerate(leaves):
        if strides[k][-1] == 0:
            lines.append(f"        const float s{k} = in{k}[o{k}];")
            names[arg] = f"s{k}"
        else:
            lines.append(f"        const float *{C.restrict} p{k} = in{k} + o{k};")
            names[arg] = None
    lines.append(f"        float *{C.restrict} y = out + row * {L};")
    lines.append("#pragma GCC ivdep")
    lines.append("        for (long i = c0; i < c1; i++) {")
    val = {}
    for k, (arg, _) in enumerate(leaves):
        if names[arg] is None:
            lines.append(f"            const float a{k} = p{k}[i{' * ' + str(strides[k][-1]) if strides[k][-1] != 1 else ''}];")
            val[arg] = f"a{k}"
        else:
            val[arg] = names[arg]
    val.update(literal)
    t = 0
    result = None
    for o in body.ops:
        if o.name == "cpu.yield":
            result = val[o.operands[0]]
            break
        if o.name == "onnx.NoValue":
            val[o.results[0]] = None
            continue
        args = [None if v.type is NONE else val[v] for v in o.operands]
        e = _expr(o, args, lambda k, o=o: o.get_attr(k))
        lines.append(f"            const float t{t} = {e};")
        val[o.results[0]] = f"t{t}"
        t += 1
    lines.append(f"            y[i] = {result};")
    lines.append("        }")
    ctx = ", ".join([f"(void *){ptr(v)}" for _, v in leaves] + [f"(void *){ptr(op.results[0])}"])
    call = f"{{ void *ctx[] = {{{ctx}}}; tcc_cpu_parallel_for({tasks}, {grain}, {fname}, ctx); }}"
    # gcc's partial redundancy elimination turns chained compare-selects
    # (the NaN test of a value an earlier clamp selected) back into branches,
    # and the loop no longer vectorizes (gcc 12: Max -> Clip -> HardSigmoid
    # -> Min stayed scalar). Without PRE it is compares and blends in ymm
    # registers; but PRE also hoists the constants' broadcasts out of the
    # loop (the 8-op chain, Relu its only select, ran 3 % slower without),
    # so only loops with the ops below go without it.
    pre = "" if not any(o.name[5:] in SELECT_CHAINS for o in body.ops) else NO_PRE
    return pre + C.render_kernel(fname, params, lines, tasks), call
