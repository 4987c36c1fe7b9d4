"""The optimizer ops of ai.onnx.preview.training (Adagrad, Adam, Momentum),
as onnx.reference: inputs R (learning rate, scalar), T (update count,
scalar int64), then n tensors of each kind (X..., G..., [V...,] [H...]),
outputs n tensors of each updated kind (X_new..., then V_new/H_new...).
One elementwise nest per optimized tensor. The arithmetic is in f64:
onnx.reference's learning-rate terms are f64 (R / (1 + T * decay) and
friends promote to double), so the X update is computed in double there."""
from __future__ import annotations

from ....ir.types import f64, i1
from ..cast import emit_cast
from ..registry import lowering

# op -> (tensor kinds after R and T, result kinds): the schema's layout
KINDS = {"onnx.preview.training.Adagrad": (("X", "G", "H"), ("X", "H")),
         "onnx.preview.training.Adam": (("X", "G", "V", "H"), ("X", "V", "H")),
         "onnx.preview.training.Momentum": (("X", "G", "V"), ("X", "V"))}


def _update(cx, op, step):
    """Runs `step(vals, r, t) -> {kind: new value}` (f64 scalars; `vals`
    keyed by kind) over every element of each optimized tensor."""
    L = cx.L
    ins, outs = KINDS[op.name]
    data = op.operands[2:]
    if len(op.operands) < 2 + len(ins) or len(data) % len(ins):
        cx.fail(op, f"{op.name} takes R, T and {len(ins)} tensors ({', '.join(ins)}) per optimized input, "
                    f"got {len(op.operands)} inputs")
    n = len(data) // len(ins)
    if len(op.results) != n * len(outs):
        cx.fail(op, f"{op.name} with {n} optimized inputs has {n * len(outs)} outputs, got {len(op.results)}")
    for v in op.operands[:2]:
        if v.type.shape not in ((), (1,)):
            cx.fail(op, f"{op.name}: R and T must be scalars, got shape {v.type.shape}")
    rv, tv = op.operands[:2]
    r = emit_cast(L, L.load(cx.buf(rv), [0] * rv.type.rank), rv.type.element, f64)
    t = emit_cast(L, L.load(cx.buf(tv), [0] * tv.type.rank), tv.type.element, f64)
    for i in range(n):
        tensors = {k: data[j * n + i] for j, k in enumerate(ins)}
        shape = tensors["X"].type.shape
        for k, v in tensors.items():
            if v.type.shape != shape:
                cx.fail(op, f"{op.name}: {k}{i} has shape {v.type.shape}, X{i} has {shape}")
        bufs = {k: cx.buf(v) for k, v in tensors.items()}
        results = {k: op.results[j * n + i] for j, k in enumerate(outs)}
        obufs = {k: cx.out(res) for k, res in results.items()}
        with L.loops(shape) as ivs:
            vals = {k: emit_cast(L, L.load(b, ivs), tensors[k].type.element, f64) for k, b in bufs.items()}
            new = step(vals, r, t)
            for k, b in obufs.items():
                L.store(emit_cast(L, new[k], f64, b.type.element), b, ivs)


class _F:
    """f64 arithmetic on loop IR values, written as formulas."""

    def __init__(self, L):
        self.L = L

    def c(self, x):
        return self.L.c(float(x), f64)

    def __getattr__(self, name):  # add, sub, mul, div, sqrt, pow
        L = self.L
        if name == "sqrt":
            return lambda a: L.op("math.sqrt", [a], f64)
        op = {"add": "addf", "sub": "subf", "mul": "mulf", "div": "divf", "pow": "powf"}[name]
        return lambda a, b: L.op("arith." + op, [self._v(a), self._v(b)], f64)

    def _v(self, a):
        return self.c(a) if isinstance(a, (int, float)) else a

    def positive(self, t):
        return self.L.op("arith.cmpf", [t, self.c(0.0)], i1, predicate="ogt")

    def select(self, cond, a, b):
        return self.L.op("arith.select", [cond, self._v(a), self._v(b)], f64)


def _attr(cx, op, name, default):
    v = cx.attr(op, name)
    return default if v is None else v


@lowering("onnx.preview.training.Adagrad")
def lower_adagrad(cx, op):
    F = _F(cx.L)
    decay, eps, norm = (_attr(cx, op, "decay_factor", 0.0), _attr(cx, op, "epsilon", 0.0),
                        _attr(cx, op, "norm_coefficient", 0.0))

    def step(v, r, t):
        lr = F.div(r, F.add(1.0, F.mul(t, decay)))
        g = F.add(F.mul(norm, v["X"]), v["G"])
        h = F.add(v["H"], F.mul(g, g))
        return {"X": F.sub(v["X"], F.div(F.mul(lr, g), F.add(F.sqrt(h), eps))), "H": h}
    _update(cx, op, step)


@lowering("onnx.preview.training.Adam")
def lower_adam(cx, op):
    F = _F(cx.L)
    alpha, beta, eps = _attr(cx, op, "alpha", 0.9), _attr(cx, op, "beta", 0.999), _attr(cx, op, "epsilon", 0.0)
    norm, post = _attr(cx, op, "norm_coefficient", 0.0), _attr(cx, op, "norm_coefficient_post", 0.0)

    def step(v, r, t):
        g = F.add(F.mul(norm, v["X"]), v["G"])
        m = F.add(F.mul(alpha, v["V"]), F.mul(1.0 - alpha, g))
        h = F.add(F.mul(beta, v["H"]), F.mul(1.0 - beta, F.mul(g, g)))
        # bias correction from the first update on (T > 0)
        corrected = F.div(F.mul(r, F.sqrt(F.sub(1.0, F.pow(F.c(beta), t)))), F.sub(1.0, F.pow(F.c(alpha), t)))
        lr = F.select(F.positive(t), corrected, r)
        x = F.sub(v["X"], F.mul(lr, F.div(m, F.add(F.sqrt(h), eps))))
        return {"X": F.mul(1.0 - post, x), "V": m, "H": h}
    _update(cx, op, step)


@lowering("onnx.preview.training.Momentum")
def lower_momentum(cx, op):
    F = _F(cx.L)
    alpha, beta, norm = (_attr(cx, op, "alpha", None), _attr(cx, op, "beta", None),
                         _attr(cx, op, "norm_coefficient", None))
    if None in (alpha, beta, norm):
        cx.fail(op, f"{op.name} needs the attributes alpha, beta and norm_coefficient")
    mode = _attr(cx, op, "mode", "standard")
    if mode not in ("standard", "nesterov"):
        cx.fail(op, f"{op.name} mode '{mode}' is not 'standard' or 'nesterov'")

    def step(v, r, t):
        g = F.add(F.mul(norm, v["X"]), v["G"])
        b = F.select(F.positive(t), beta, 1.0)  # the gradient's weight is 1 on the first update
        m = F.add(F.mul(alpha, v["V"]), F.mul(b, g))
        d = m if mode == "standard" else F.add(g, F.mul(alpha, m))
        return {"X": F.sub(v["X"], F.mul(r, d)), "V": m}
    _update(cx, op, step)
