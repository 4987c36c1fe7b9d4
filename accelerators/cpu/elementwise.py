"""C loops for cpu.elementwise: one fused tree of onnx elementwise ops,
evaluated in a single pass over the output with numpy broadcasting.

Dimensions are collapsed first (neighbouring dims whose broadcast pattern is
the same for every input merge), so a per-channel operand over NCHW becomes
a [N*C][H*W] loop with one scalar load per row, and a same-shape chain one
flat loop. Size-1 constant inputs become C literals. Rows (and, when there are
few rows, chunks of a row) are split across the kernel library's pool."""
from __future__ import annotations

import math

import numpy as np

from tcc.dialects.ir.errors import TccError
from tcc.dialects.ir.types import NONE

from .support import const_value


class CpuCodegenError(TccError):
    pass


def _flit(x):
    from .codegen import flit
    return flit(x)


# Pow's exponent as the C literal the constant becomes (codegen.flit) -> products
_POW_BY_MUL = {"1.0f": lambda x: x, "2.0f": lambda x: f"({x} * {x})", "3.0f": lambda x: f"({x} * {x} * {x})",
               "4.0f": lambda x: f"(({x} * {x}) * ({x} * {x}))"}


def _expr(op, a, attr):
    """C expression of one onnx op over operand expressions `a` (None: absent)."""
    n = op.name[5:]
    x = a[0] if a else None
    al = attr("alpha")
    simple = {
        "Add": lambda: f"({a[0]} + {a[1]})", "Sub": lambda: f"({a[0]} - {a[1]})",
        "Mul": lambda: f"({a[0]} * {a[1]})", "Div": lambda: f"({a[0]} / {a[1]})",
        "Pow": lambda: f"powf({a[0]}, {a[1]})", "PRelu": lambda: f"({x} < 0.f ? {x} * {a[1]} : {x})",
        "Relu": lambda: f"({x} > 0.f ? {x} : 0.f)", "Sigmoid": lambda: f"tcc_sigmoidf({x})",
        "Tanh": lambda: f"tcc_tanhf({x})", "Exp": lambda: f"tcc_exp_({x})", "Log": lambda: f"logf({x})",
        "Neg": lambda: f"(-{x})", "Abs": lambda: f"fabsf({x})", "Sqrt": lambda: f"sqrtf({x})",
        "Reciprocal": lambda: f"(1.f / {x})", "Erf": lambda: f"tcc_erff({x})", "Floor": lambda: f"floorf({x})",
        "Ceil": lambda: f"ceilf({x})", "Identity": lambda: x, "Round": lambda: f"nearbyintf({x})",
        "Sin": lambda: f"sinf({x})", "Cos": lambda: f"cosf({x})",
        "Sign": lambda: f"(float)(({x} > 0.f) - ({x} < 0.f))",
        "LeakyRelu": lambda: f"({x} >= 0.f ? {x} : {x} * {_flit(al if al is not None else 0.01)})",
        "ThresholdedRelu": lambda: f"({x} > {_flit(al if al is not None else 1.0)} ? {x} : 0.f)",
        "HardSigmoid": lambda: (f"fminf(1.f, fmaxf(0.f, {_flit(al if al is not None else 0.2)} * {x} + "
                                f"{_flit(attr('beta') if attr('beta') is not None else 0.5)}))"),
        "HardSwish": lambda: f"({x} * fminf(1.f, fmaxf(0.f, {x} * (1.f / 6.f) + 0.5f)))",
        "Elu": lambda: f"({x} > 0.f ? {x} : {_flit(al if al is not None else 1.0)} * (tcc_exp_({x}) - 1.f))",
        "Selu": lambda: (f"({x} > 0.f ? {_flit(attr('gamma') or 1.05070102214813232421875)} * {x} : "
                         f"{_flit(attr('gamma') or 1.05070102214813232421875)} * "
                         f"{_flit(al if al is not None else 1.67326319217681884765625)} * (tcc_exp_({x}) - 1.f))"),
        "Softplus": lambda: f"({x} > 20.f ? {x} : log1pf(tcc_exp_({x})))",
        "Softsign": lambda: f"({x} / (1.f + fabsf({x})))",
    }
    if n == "Pow" and a[1] in _POW_BY_MUL:
        # a constant small integer exponent (GPT-2's GELU: x ** 3) as products:
        # powf is a libm call per element that keeps the loop scalar (6 % of
        # gpt2_lm's samples, perf, AVX2 EPYC); within 2 ulp of powf, negative
        # bases included
        return _POW_BY_MUL[a[1]](x)
    if n in simple:
        return simple[n]()
    if n == "Clip":
        e = x
        if len(a) > 1 and a[1] is not None:
            e = f"fmaxf({e}, {a[1]})"
        if len(a) > 2 and a[2] is not None:
            e = f"fminf({e}, {a[2]})"
        return f"({e})"
    if n == "Gelu":
        if attr("approximate") == "tanh":
            return f"(0.5f * {x} * (1.f + tcc_tanhf(0.7978845608028654f * ({x} + 0.044715f * {x} * {x} * {x}))))"
        return f"(0.5f * {x} * (1.f + tcc_erff({x} * 0.7071067811865476f)))"
    if n in ("Max", "Min"):
        f = "fmaxf" if n == "Max" else "fminf"
        e = a[0]
        for b in a[1:]:
            e = f"{f}({e}, {b})"
        return e
    if n in ("Sum", "Mean"):
        e = "(" + " + ".join(a) + ")"
        return f"({e} * {_flit(1.0 / len(a))})" if n == "Mean" else e
    # support.py claims only ops with an emitter above: reaching here is a bug.
    raise CpuCodegenError(f"cpu accelerator: no C emitter for {op.name} ({op.loc.describe()})")


def _collapse(out_shape, leaf_shapes):
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
            literal[arg] = _flit(c.reshape(-1)[0])
        else:
            leaves.append((arg, v))
    dims, strides = _collapse(out_shape, [tuple(v.type.shape or ()) for _, v in leaves])
    L = dims[-1]
    rows = int(np.prod(dims[:-1], dtype=np.int64)) if len(dims) > 1 else 1
    nc = 1 if rows >= 16 else max(1, min(math.ceil(L / 4096), math.ceil(16 / rows)))
    ch = math.ceil(L / nc)
    tasks = rows * nc
    grain = max(1, 16384 // max(ch, 1))
    lines = [f"static void {fname}(void *ctx_, long tb, long te) {{", "    void **ctx = ctx_;"]
    for i, _ in enumerate(leaves):
        lines.append(f"    const float *in{i} = (const float *)ctx[{i}];")
    lines.append(f"    float *__restrict out = (float *)ctx[{len(leaves)}];")
    lines.append("    for (long t = tb; t < te; t++) {")
    lines.append(f"        long row = t / {nc}, c0 = (t % {nc}) * {ch}, c1 = c0 + {ch} < {L} ? c0 + {ch} : {L};")
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
            lines.append(f"        const float *__restrict p{k} = in{k} + o{k};")
            names[arg] = None
    lines.append(f"        float *__restrict y = out + row * {L};")
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
    lines += ["        }", "    }", "}", ""]
    ctx = ", ".join([f"(void *){ptr(v)}" for _, v in leaves] + [f"(void *){ptr(op.results[0])}"])
    call = f"{{ void *ctx[] = {{{ctx}}}; tcc_cpu_parallel_for({tasks}, {grain}, {fname}, ctx); }}"
    return "\n".join(lines), call
